"""The main job on one device, and on several ranks, equals the plainest PyTorch training loop.

This is the anchor of every equivalence claim: ``minipar.train`` runs even a 1×1×1 layout through
its parallel machinery (pipeline executor with one stage, TP model with tp = 1), so it is checked
here against ``minipar.job.reference.train_single_device``, a plain forward/backward/AdamW loop.
Both sides run in float64 (``tests/_workers_train``), so the bound is derived, not fitted to one
CPU: the same arithmetic in another order (micro-batch sums, flat gradient buffers, the ranks'
all-reduce, another CPU's kernels) moves a float64 gradient by δ ≲ 1e-13, AdamW (eps 1e-8,
lr 3e-3) a weight by at most lr·δ/eps ≈ 3e-8 per step, and the losses ~4.6 by far less than
1e-5 over 5 steps; a real bug (a lost micro-batch, a wrong 1/m or 1/dp) moves them by > 1e-3.
(``minipar.tp``'s vocab-parallel loss is a float32 scalar, so the dp2·tp2 losses carry fp32
rounding of a number ~4.6: a few ulps, ~1e-7 measured, still two orders below the bound.)
"""

from minipar import launch
from minipar.job.config import TrainConfig
from tests import _workers_train as wt

CFG = dict(
    steps=5,
    batch_size=8,
    block_size=16,
    n_layer=2,
    n_head=2,
    d_model=32,
    eval_every=5,
    log_every=1,
    eval_batches=1,
    microbatches=2,
    out=None,
)


def _losses(hist):
    return {r["step"]: r["loss"] for r in hist if "loss" in r}


def test_main_job_on_one_device_equals_plain_loop():
    ref = _losses(wt.reference_float64(TrainConfig(**CFG)))
    got = _losses(wt.train_float64(TrainConfig(**CFG)))
    assert sorted(got) == sorted(ref) == list(range(5))
    assert max(abs(got[k] - ref[k]) for k in ref) < 1e-5


def test_main_job_on_dp2_tp2_equals_plain_loop():
    ref = _losses(wt.reference_float64(TrainConfig(**CFG)))
    got = _losses(launch(wt.train_float64, world_size=4, args=(TrainConfig(**CFG, dp=2, tp=2),))[0])
    assert max(abs(got[k] - ref[k]) for k in ref) < 1e-5
