"""No code from a checkpoint folder runs when minipar reads it (issue #36, item 3): a crafted ``.metadata``
is refused by name, a crafted non-tensor item is read with ``weights_only=True``, a real checkpoint loads;
DCP's failure is a :class:`~minipar.errors.CheckpointError` (an ``Exception``: item 17), one line per rank."""

from __future__ import annotations

import os
import pickle
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from minipar.checkpoint import dcp as ckpt
from minipar.checkpoint.reader import read_metadata_file
from minipar.checkpoint.resume import damage
from minipar.errors import CheckpointError


class _RunsCode:
    """Unpickling this calls ``os.system``-like code: here it writes a marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _real_checkpoint(folder) -> dict:
    state = {"model.w": torch.randn(3, 4), "progress": torch.tensor([5, 0])}
    ckpt.save(str(folder.parent), ckpt.step_of(str(folder)), state)  # DCP's files and minipar.json (checksums)
    return state


def test_a_real_checkpoint_still_loads(tmp_path):
    state = _real_checkpoint(tmp_path / "step_00000005")
    got = {k: torch.zeros_like(v) for k, v in state.items()}
    ckpt.load(str(tmp_path / "step_00000005"), got)
    assert all(torch.equal(got[k], state[k]) for k in state)
    assert damage(str(tmp_path / "step_00000005")) is None


def test_a_crafted_metadata_is_damaged_and_runs_nothing(tmp_path):
    folder = tmp_path / "step_00000005"
    _real_checkpoint(folder)
    marker = tmp_path / "ran"
    (folder / ".metadata").write_bytes(pickle.dumps(_RunsCode(str(marker))))
    why = damage(str(folder))
    assert why is not None and "open is not part of a DCP checkpoint's metadata (refused)" in why
    with pytest.raises(CheckpointError, match=r"could not read checkpoint .*step_00000005: rank 0: .*refused"):
        ckpt.load(str(folder), {"model.w": torch.zeros(3, 4)})
    assert not marker.exists()


def test_a_crafted_item_is_read_as_weights_only(tmp_path):
    """A checkpoint whose item is a pickled object (DCP's bytes item): weights_only refuses its globals."""
    folder = tmp_path / "step_00000005"
    marker = tmp_path / "ran"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"extra": _RunsCode(str(marker))}, checkpoint_id=str(folder), no_dist=True)
    assert not marker.exists()
    read_metadata_file(os.path.join(folder, ".metadata"))  # the metadata itself is plain DCP
    with pytest.raises(CheckpointError, match="could not read checkpoint .*UnpicklingError: Weights only load failed"):
        ckpt.load(str(folder), {"extra": None})
    assert not marker.exists()
