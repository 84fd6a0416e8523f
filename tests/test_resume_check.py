"""What ``--resume`` loads (issues #27, #36: nothing lost, nothing mixed, nothing silent): a checkpoint records
the model shape, vocabulary, layout, what decides the trajectory (seed, batch, the text's SHA-256), its run id
and its files' checksums; one of another model or run is refused in one line naming the flag and both values
(the tensors are checked too); a damaged newest checkpoint (also a shard replaced by another of the same size,
or without ``minipar.json``) is named by file and the newest good one used; a fresh run is refused a folder
holding another run's checkpoints; after a non-finite loss the checkpoint that gave it is moved aside.

Before: with ``minipar.json`` missing, ``--resume --n-layer 1`` on a 2-layer checkpoint printed
"resumed" and loaded half of it; a truncated shard, an empty ``.metadata`` or a garbage
``minipar.json`` gave a traceback.
"""

import json
import shutil

import pytest

from minipar.checkpoint import dcp as ckpt
from minipar.data import load_text
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
    assert (meta["seed"], meta["batch_size"], len(meta["data_sha256"]), len(meta["run_id"])) == (0, 4, 64, 12)
    assert set(meta["files"]) == {".metadata", "__0_0.distcp"}
    assert meta["run_id"] == ckpt.read_meta(ckpt.step_dir(str(saved), 2))["run_id"]


def _edit_meta(folder, **changes):
    path = folder / ckpt.META
    meta = {k: v for k, v in json.loads(path.read_text()).items() if k not in changes or changes[k] is not None}
    path.write_text(json.dumps({**meta, **{k: v for k, v in changes.items() if v is not None}}))


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
def test_without_the_shape_in_minipar_json_the_tensors_are_checked(ck, tmp_path, capsys, args, text):
    for step in (2, 4):
        _edit_meta(ck / f"step_0000000{step}", n_layer=None, d_model=None, block_size=None, vocab=None)
    other = tmp_path / "other.txt"
    other.write_text("abc\n" * 2000)
    assert _resume(ck, *[str(other) if a == "OTHER" else a for a in args]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("error: --resume: ") and text in err and "step_00000004" in err
    assert "resumed" not in cap.out


def test_without_the_shape_in_minipar_json_the_same_model_resumes(ck, capsys):
    _edit_meta(ck / "step_00000004", n_layer=None, d_model=None, block_size=None, vocab=None)
    assert _resume(ck) == 0
    assert "resumed from step_00000004 (step 4)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, text",
    [
        (["--seed", "1"], "was saved with --seed 0, this run has --seed 1; resume with --seed 0"),
        (
            ["--batch-size", "8"],
            "was saved with --batch-size 4, this run has --batch-size 8; resume with --batch-size 4",
        ),
        (["--n-head", "1"], "was saved with --n-head 2, this run has --n-head 1; resume with --n-head 2"),
        (["--moe-experts", "2"], "was saved with --moe-experts 0, this run has --moe-experts 2"),
        (["--data", "REVERSED"], "was trained on other text (a --data file whose contents have SHA-256"),
    ],
)
def test_a_change_of_what_decides_the_run_is_refused(ck, tmp_path, capsys, args, text):
    """Issue #36 item 5: the same characters in another order, another seed or batch, --n-head (which the
    tensors cannot tell) or experts: refused in one line naming the flag and both values."""
    reversed_text = tmp_path / "reversed.txt"
    reversed_text.write_text(load_text(None)[::-1])  # the same character set, other text
    assert _resume(ck, *[str(reversed_text) if a == "REVERSED" else a for a in args]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("error: --resume: checkpoint ") and text in err, err
    assert "step_00000004" in err and "resumed" not in cap.out


def test_a_checkpoint_that_does_not_record_the_seed_is_refused(ck, capsys):
    for step in (2, 4):
        _edit_meta(ck / f"step_0000000{step}", seed=None)
    assert _resume(ck) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not record its --seed" in err and "another --ckpt-dir" in err


def test_a_fresh_run_over_another_runs_checkpoints_is_refused(ck, capsys):
    """Issue #36 item 2: a fresh run saving checkpoints where another run's lie is refused before anything is
    touched, naming them and the fix; the old checkpoints stay byte-identical."""
    before = {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()}
    argv = TINY + ["--steps", "2", "--ckpt-every", "2", "--seed", "1", "--ckpt-dir", str(ck), "--out", ""]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--ckpt-dir {ck} already holds another run's checkpoints" in err
    assert "step_00000002, step_00000004" in err and "add --resume" in err and "another --ckpt-dir" in err
    assert {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()} == before


def test_resume_refuses_a_folder_holding_two_runs(ck, capsys):
    _edit_meta(ck / "step_00000002", run_id="0123456789ab")
    assert _resume(ck) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds checkpoints of 2 different runs" in err and "0123456789ab" in err


def test_after_a_non_finite_loss_the_checkpoint_that_gave_it_is_moved_aside(tmp_path, capsys):
    """Issue #36 item 4: the checkpoint saved after the update that made the loss non-finite is moved aside
    (not loaded, not deleted); the message names the newest one kept, and resuming from it with a sane
    --lr trains on with finite losses."""
    out = tmp_path / "nan"
    argv = TINY + ["--ckpt-every", "1", "--warmup", "2", "--out", str(out)]
    assert main(argv + ["--steps", "2"]) == 0
    capsys.readouterr()
    assert main(argv + ["--steps", "5", "--resume", "--lr", "1e30"]) != 0
    err = capsys.readouterr().err.strip()
    ck = out / "ckpt"
    assert "\n" not in err and "the training loss is nan" in err
    assert f"kept: {ck / 'step_00000002'}, the newest checkpoint with a finite loss" in err
    assert "(step_00000003, which gave this loss, was moved aside to step_00000003.nonfinite)" in err
    assert (ck / "step_00000003.nonfinite" / ".metadata").exists() and ckpt.latest(str(ck)) == str(ck / "step_00000002")
    assert main(argv + ["--steps", "5", "--resume", "--lr", "3e-3"]) == 0
    assert "resumed from step_00000002 (step 2)" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["loss"] == r["loss"] and abs(r["loss"]) < 100 for r in rows if "loss" in r)


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


def _foreign_shard(folder):
    shard = folder / "__0_0.distcp"
    shard.write_bytes(bytes(len(shard.read_bytes())))  # the same size: another run's shard
    return "__0_0.distcp does not match its checksum"


def _random_bytes_inside(folder):
    shard = folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[100:4196] = bytes(range(256)) * 16
    shard.write_bytes(bytes(data))
    return "__0_0.distcp does not match its checksum"


def _no_minipar_json(folder):
    (folder / ckpt.META).unlink()
    return "minipar.json is missing"


DAMAGE = {
    "another run's shard of the same size": _foreign_shard,
    "4 KB changed inside a shard": _random_bytes_inside,
    "no minipar.json": _no_minipar_json,
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


def test_a_change_of_experts_per_token_is_refused(tmp_path, capsys):
    """Issue #36 item 5: --moe-top-k was not recorded; now it is, and a change is named."""
    argv = TINY + ["--moe-experts", "4", "--ckpt-dir", str(tmp_path / "ck"), "--out", ""]
    assert main(argv + ["--steps", "2", "--ckpt-every", "2"]) == 0
    capsys.readouterr()
    assert main(argv + ["--steps", "4", "--resume", "--moe-top-k", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err and "was saved with --moe-top-k 1, this run has --moe-top-k 2; resume with --moe-top-k 1" in err
    )
    assert main(argv + ["--steps", "4", "--resume", "--moe-experts", "2"]) == 2
    assert "was saved with --moe-experts 4, this run has --moe-experts 2" in capsys.readouterr().err
