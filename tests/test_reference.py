"""The main job on one device, and on several ranks, equals the plainest PyTorch training loop.

This is the anchor of every equivalence claim: ``minipar.train`` runs even a 1×1×1 layout through
its parallel machinery (pipeline executor with one stage, TP model with tp = 1), so it is checked
here against ``minipar.reference.train_single_device``, a plain forward/backward/AdamW loop.
Tolerance 1e-5 on losses ~4.6: the same arithmetic in a different order (micro-batch sums,
flat gradient buffers) differs only by fp32 rounding over a few steps.
"""
from minipar import launch
from minipar.reference import train_single_device
from minipar.train import TrainConfig, train

CFG = dict(steps=5, batch_size=8, block_size=16, n_layer=2, n_head=2, d_model=32, eval_every=5, log_every=1,
           eval_batches=1, microbatches=2, out=None)


def _losses(hist):
    return {r["step"]: r["loss"] for r in hist if "loss" in r}


def test_main_job_on_one_device_equals_plain_loop():
    ref = _losses(train_single_device(TrainConfig(**CFG)))
    got = _losses(train(TrainConfig(**CFG), progress="none"))
    assert sorted(got) == sorted(ref) == list(range(5))
    assert max(abs(got[k] - ref[k]) for k in ref) < 1e-5


def test_main_job_on_dp2_tp2_equals_plain_loop():
    ref = _losses(train_single_device(TrainConfig(**CFG)))
    got = _losses(launch(train, world_size=4, args=(TrainConfig(**CFG, dp=2, tp=2), "none"))[0])
    assert max(abs(got[k] - ref[k]) for k in ref) < 1e-5
