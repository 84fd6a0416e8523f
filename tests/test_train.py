"""minipar.train: the main job learns, writes its outputs, and gives the same losses on 1 and 2 ranks."""

import json

import pytest

from minipar import launch
from minipar.job.config import TrainConfig
from minipar.train import main, train
from tests import _workers_train as wt

LOSS_BOUND = 1e-5  # float64 runs; derived in test_two_data_parallel_ranks_equal_one_device

SMALL = dict(
    steps=30,
    batch_size=8,
    block_size=32,
    n_layer=2,
    n_head=2,
    d_model=32,
    eval_every=15,
    log_every=5,
    eval_batches=2,
    sample_chars=40,
)


def test_learns_and_writes_outputs(tmp_path):
    hist = train(TrainConfig(**SMALL, out=str(tmp_path)), progress="none")
    val = [r["val_loss"] for r in hist if "val_loss" in r]
    assert val[-1] < val[0] - 0.5
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 0 and {"loss", "val_loss", "lr", "tokens_per_s"} <= set(lines[0])
    assert (tmp_path / "loss.png").stat().st_size > 1000
    assert len((tmp_path / "sample.txt").read_text()) >= 40


def test_two_data_parallel_ranks_equal_one_device():
    """Same global batch and seed: the 2-rank loss curve equals the 1-device one.

    Runs in float64 (``_workers_train``), so the bound is derived, not fitted to one CPU: the two
    runs add the same numbers in another order (each rank averages 4 sequences, then the all-reduce
    averages the two), which moves a float64 gradient by δ ≲ 1e-13; AdamW (eps 1e-8, lr ≤ 3e-3)
    turns that into at most lr·δ/eps ≈ 3e-8 per weight per step, ≤ 1e-6 after 30 steps even for
    near-zero gradients, and a loss of ~2-4 moves far less than LOSS_BOUND = 1e-5. A real bug (a
    missing average, a dropped micro-batch or rank) moves the losses by > 1e-3 within a few steps.
    """
    cfg = TrainConfig(**SMALL, out=None)
    one = wt.train_float64(cfg)
    two = launch(wt.train_float64, world_size=2, args=(cfg,))
    drop = lambda h: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in h]  # noqa: E731
    assert drop(two[0]) == drop(two[1])  # every rank logs the same all-reduced loss
    for a, b in zip(one, two[0]):
        for key in ("loss", "val_loss"):
            if key in a:
                assert abs(a[key] - b[key]) < LOSS_BOUND, (a, b)


def test_microbatches_equal_one_big_batch():
    """4 micro-batches (gradient accumulation) = one batch of 4x the size, in float64 (bound as above)."""
    a = wt.train_float64(TrainConfig(**SMALL, out=None))
    b = wt.train_float64(TrainConfig(**SMALL, microbatches=4, out=None))
    assert abs(a[-1]["val_loss"] - b[-1]["val_loss"]) < LOSS_BOUND


@pytest.mark.parametrize(
    "args, text",
    [
        (["--batch-size", "0"], "--batch-size 0"),
        (["--data", "/no/such/file.txt"], "no such file"),
        (["--steps", "-3"], "--steps -3"),
        (["--nproc", "0"], "--nproc 0"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, args, text):
    assert main(args + ["--out", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and text in err and "\n" not in err
