"""Lesson 12: the main job with experts (``--moe-experts 4 --ep 2``) equals one device and trains on text.

Bound (float64, as tests/test_train.py derives it): EP and DP add the same numbers in another order
(an expert's rows arrive grouped by source rank; gradients are averaged over ranks instead of over
one batch), which moves a float64 gradient by δ ≲ 1e-13; AdamW (eps 1e-8, lr 3e-3) turns that into
at most lr·δ/eps ≈ 3e-8 per weight per step, and the losses of ~3-4 nats move far less than 1e-5
over these few steps. A real bug (an expert gradient divided by dp/ep instead of dp, the aux loss
balanced per rank instead of over the batch, a router not averaged) moves them by > 1e-4.
Routing is a discrete choice: a weight difference of 1e-8 could flip a token whose two best
experts tie within 1e-8; the seeded runs here have no such token (a flip would fail the bound).
"""

import pytest

from minipar import ConfigError, launch
from minipar.config import TrainConfig
from minipar.train import main
from tests import _workers_train as wt

LOSS_BOUND = 1e-5
MOE = dict(
    steps=6,
    batch_size=8,
    block_size=16,
    n_layer=2,
    n_head=2,
    d_model=16,
    eval_every=3,
    log_every=1,
    eval_batches=1,
    sample_chars=0,
    moe_experts=4,
    moe_top_k=2,
)


def _losses(h):
    return [(r["step"], k, r[k]) for r in h for k in ("loss", "val_loss") if k in r]


@pytest.mark.parametrize("world,ep", [(2, 2), (4, 2)])
def test_expert_parallel_job_equals_one_device(world, ep):
    one = wt.train_float64(TrainConfig(**MOE, out=None))
    many = launch(wt.train_float64, world_size=world, args=(TrainConfig(**MOE, dp=world, ep=ep, out=None),))
    assert _losses(many[0]) == _losses(many[-1])  # every rank logs the same all-reduced loss
    for (s, k, a), (s2, k2, b) in zip(_losses(one), _losses(many[0]), strict=True):
        assert (s, k) == (s2, k2) and abs(a - b) < LOSS_BOUND, (s, k, a, b)


def test_cli_trains_on_text(tmp_path, capsys):
    flags = ["--moe-experts", "4", "--moe-top-k", "2", "--ep", "2", "--dp", "2", "--steps", "20"]
    flags += ["--batch-size", "8", "--block-size", "32", "--n-layer", "2", "--d-model", "32", "--n-head", "2"]
    flags += ["--eval-every", "10", "--eval-batches", "2", "--sample-chars", "20", "--out", str(tmp_path)]
    assert main(flags) == 0
    first, last = capsys.readouterr().out.split("val loss ")[1].split(" -> ")
    assert float(last.split()[0]) < float(first.split()[0]) - 0.3
    assert len((tmp_path / "sample.txt").read_text()) >= 20


@pytest.mark.parametrize(
    "kw, text",
    [
        (dict(moe_experts=0, ep=2), "--ep 2 needs experts"),
        (dict(moe_experts=3, ep=2, dp=2), "must divide moe_experts=3"),
        (dict(moe_experts=4, ep=2, dp=3), "--ep 2 must divide --dp 3"),
        (dict(moe_experts=4, moe_top_k=5), "moe_top_k=5"),
        (dict(moe_experts=4, tp=2), "drop --tp"),
        (dict(moe_experts=4, cp=2), "drop --cp"),
    ],
)
def test_bad_moe_settings_are_one_line(kw, text):
    with pytest.raises(ConfigError, match=text):
        TrainConfig(**{**MOE, **kw}).validate()


def test_ep_must_divide_the_ranks_left_to_dp(capsys):
    assert main(["--moe-experts", "4", "--ep", "2", "--nproc", "3", "--steps", "1", "--out", ""]) == 2
    assert "--ep 2 must divide the 3 data-parallel ranks" in capsys.readouterr().err
