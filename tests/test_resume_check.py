"""What ``--resume`` loads (issue #27: nothing lost, nothing silent): a checkpoint records the model
shape, vocabulary and layout it was written with; one of another model is refused in one line, also
without its ``minipar.json``; a damaged newest checkpoint is named by file and the newest good one used.

Before: with ``minipar.json`` missing, ``--resume --n-layer 1`` on a 2-layer checkpoint printed
"resumed" and loaded half of it; a truncated shard, an empty ``.metadata`` or a garbage
``minipar.json`` gave a traceback.
"""

import shutil

import pytest

from minipar.checkpoint import dcp as ckpt
from minipar.train import main

TINY = ["--batch-size", "4", "--block-size", "16", "--n-layer", "2", "--n-head", "2", "--d-model", "16"]
TINY += ["--eval-every", "100", "--eval-batches", "1", "--sample-chars", "5", "--log-every", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Checkpoints at steps 2 and 4 of a 2-layer model (one process)."""
    d = tmp_path_factory.mktemp("saved")
    assert main(TINY + ["--steps", "4", "--ckpt-every", "2", "--out", str(d)]) == 0
    return d / "ckpt"


@pytest.fixture
def ck(saved, tmp_path):
    """A copy of ``saved`` to damage."""
    return shutil.copytree(saved, tmp_path / "ck")


def _resume(ck, *args):
    return main(TINY + ["--steps", "6", "--resume", "--ckpt-dir", str(ck), "--out", ""] + list(args))


def test_the_checkpoint_records_shape_vocabulary_and_layout(saved):
    meta = ckpt.read_meta(ckpt.step_dir(str(saved), 4))
    assert (meta["n_layer"], meta["d_model"], meta["layout"]) == (2, 16, "pp1·dp1·tp1")
    assert len(meta["vocab"]) > 50


@pytest.mark.parametrize(
    "args, text",
    [
        (["--n-layer", "1"], "are of a model with --n-layer 2, this run has --n-layer 1; resume with --n-layer 2"),
        (["--n-layer", "3"], "are of a model with --n-layer 2, this run has --n-layer 3"),
        (["--d-model", "32"], "are of a model with --d-model 16, this run has --d-model 32"),
        (["--block-size", "8"], "are of a model with --block-size 16, this run has --block-size 8"),
        (["--data", "OTHER"], "was trained on a corpus of"),
    ],
)
def test_without_minipar_json_the_tensors_are_checked(ck, tmp_path, capsys, args, text):
    for step in (2, 4):
        (ck / f"step_0000000{step}" / ckpt.META).unlink()
    other = tmp_path / "other.txt"
    other.write_text("abc\n" * 2000)
    assert _resume(ck, *[str(other) if a == "OTHER" else a for a in args]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("error: --resume: ") and text in err and "step_00000004" in err
    assert "resumed" not in cap.out


def test_without_minipar_json_the_same_model_resumes(ck, capsys):
    (ck / "step_00000004" / ckpt.META).unlink()
    assert _resume(ck) == 0
    assert "resumed from step_00000004 (step 4)" in capsys.readouterr().out


def _truncate(folder):
    shard = folder / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:1000])
    return "__0_0.distcp is truncated (1000 of"


def _empty_metadata(folder):
    (folder / ".metadata").write_bytes(b"")
    return ".metadata is unreadable"


def _garbage_meta(folder):
    (folder / ckpt.META).write_text("{not json")
    return "minipar.json is not a JSON object"


def _missing_shard(folder):
    (folder / "__0_0.distcp").unlink()
    return "__0_0.distcp is missing"


DAMAGE = {
    "truncated shard": _truncate,
    "empty .metadata": _empty_metadata,
    "garbage minipar.json": _garbage_meta,
    "missing shard": _missing_shard,
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_named_and_the_newest_good_one_used(ck, capsys, kind):
    text = DAMAGE[kind](ck / "step_00000004")
    assert _resume(ck) == 0
    cap = capsys.readouterr()
    warning = [line for line in cap.err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"step_00000004/{text}" in warning[0], cap.err
    assert "using the newest good one, step_00000002" in warning[0]
    assert "resumed from step_00000002 (step 2)" in cap.out


def test_every_checkpoint_damaged_is_one_line(ck, capsys):
    for step in (2, 4):
        _truncate(ck / f"step_0000000{step}")
    assert _resume(ck) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--resume: no undamaged checkpoint in {ck}" in err
    assert "step_00000004/__0_0.distcp is truncated" in err and "step_00000002/__0_0.distcp is truncated" in err
