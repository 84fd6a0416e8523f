"""Checkpoints: resume continues the same trajectory, across layouts, and after a killed rank."""

from minipar import launch
from minipar.checkpoint import dcp as ckpt
from minipar.job.config import TrainConfig
from minipar.train import train

SMALL = dict(
    steps=12,
    batch_size=8,
    block_size=32,
    n_layer=2,
    n_head=2,
    d_model=32,
    eval_every=6,
    log_every=1,
    eval_batches=2,
    sample_chars=10,
)
# Bound on fp32 losses (~4.6 nats) over <= 12 AdamW steps: a resumed run repeats the same arithmetic
# (exactly, on one device), and 2 data-parallel ranks only reorder sums (~1e-7 relative per operation,
# < 1e-6 on the loss on any CPU); a lost optimizer state or a wrong step counter moves the loss by
# >= 1e-3. 1e-5 separates the two; the float64 exactness proof of the layouts is in tests/test_3d.py.
TOL = 1e-5


def losses(hist, start=0):
    return {r["step"]: r["loss"] for r in hist if "loss" in r and r["step"] >= start}


def test_resume_equals_uninterrupted(tmp_path):
    """Run 12 steps straight; run 6 steps with a checkpoint, then resume to 12: same losses."""
    full = train(TrainConfig(**SMALL, out=None), progress="none")
    d = str(tmp_path / "ck")
    train(TrainConfig(**{**SMALL, "steps": 12}, out=None, ckpt_dir=d, ckpt_every=6), progress="none")
    # keep only the step-6 checkpoint, as if the job had died at step 9
    import shutil

    shutil.rmtree(ckpt.step_dir(d, 12))
    resumed = train(TrainConfig(**SMALL, out=None, ckpt_dir=d, resume=True), progress="none")
    a, b = losses(full, 6), losses(resumed)
    assert sorted(b) == list(range(6, 12))
    assert max(abs(a[k] - b[k]) for k in b) < TOL


def test_saved_on_two_ranks_resumed_on_one(tmp_path):
    """Layout change: a checkpoint written by 2 data-parallel ranks loads on one device."""
    d = str(tmp_path / "ck")
    two = launch(train, world_size=2, args=(TrainConfig(**SMALL, out=None, ckpt_dir=d, ckpt_every=6), "none"))[0]
    import shutil

    shutil.rmtree(ckpt.step_dir(d, 12))
    one = train(TrainConfig(**SMALL, out=None, ckpt_dir=d, resume=True), progress="none")
    a, b = losses(two, 6), losses(one)
    assert max(abs(a[k] - b[k]) for k in b) < TOL


def test_partial_checkpoint_is_never_loaded(tmp_path):
    d = tmp_path / "ck"
    (d / "step_00000099.partial").mkdir(parents=True)
    (d / "step_00000098").mkdir()  # no .metadata: incomplete
    assert ckpt.latest(str(d)) is None


# torchrun restart after a SIGKILLed rank and the two-node launch: tests/test_3d.py (3D layouts).
