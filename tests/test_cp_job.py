"""Lesson 11 in the main job: ``--cp N`` on the (pp, dp, cp, tp) mesh equals one device, and its
checkpoints resume across cp.

Bounds, derived as in tests/test_3d.py: **float64 gradients** (one forward + backward of the global
batch, before any optimizer) agree with one device to 1e-12 — ring attention merges at most 2N − 1
blocks and every other operator is the same per token, so a gradient moves by ~n·ε·Σ|terms| < 1e-13,
while a wrong position, mask or loss weight moves it by ≥ 1e-3. **The whole trainer in fp32**
(4 AdamW steps, real text): losses within ``gpu_check.TOL`` = 1e-5 of one device's (reordered fp32
sums, ~1e-7 relative per operation), as the 3D tests.
"""

import pytest

from minipar import launch
from minipar.course import gpu_check
from minipar.course.verify import check_close
from minipar.job.config import TrainConfig
from minipar.train import train
from tests import _workers_cp as w
from tests._workers_3d import one_device_grads_float64

TINY = {**gpu_check.TINY, "out": None}
CFG = dict(vocab_size=64, n_layer=2, n_head=4, d_model=32)


def _losses(hist, start=0):
    return {r["step"]: r["loss"] for r in hist if "loss" in r and r["step"] >= start}


def _close(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(abs(a[k] - b[k]) for k in a)


LAYOUTS = [(1, 1, 2, 2), (1, 2, 2, 1), (2, 1, 2, 1)]  # (pp, dp, cp, tp): cp2·tp2, dp2·cp2, pp2·cp2


def test_cp_gradients_equal_one_device_float64():
    """T = 13 (not a multiple of 2·cp): the dp × cp-averaged gradients equal one device's to 1e-12, for
    cp2·tp2, dp2·cp2 and pp2·cp2 (one launch of 4 ranks); every rank held 6 or 7 tokens and rang its ring."""
    res = launch(w.job_grads_layouts, world_size=4, args=(CFG, 4, LAYOUTS, 13))
    want = one_device_grads_float64({**CFG, "block_size": 13}, 4)
    for i, layout in enumerate(LAYOUTS):
        assert all(r[i][1] in (6, 7) and r[i][2] > 0 for r in res), layout
        got = res[0][i][0]
        check_close(f"{layout} gradients vs one device", {k: got[k] for k in want}, want, 1e-12, "float64", show=False)


@pytest.fixture(scope="module")
def one_device():
    return train(TrainConfig(**TINY), progress="none")


def test_cp2_tp2_trains_like_one_device_and_resumes_across_cp(tmp_path, one_device):
    """python -m minipar.train --cp 2 --tp 2 on real text: the losses of one device; saved at step 2,
    resumed by --cp 2 --tp 2 and by --dp 2 --tp 2: steps 2-3 equal the uninterrupted run's."""
    out = launch(w.train_cp, world_size=4, args=(TINY, str(tmp_path / "ck")))[0]
    assert _close(_losses(out["cp2tp2"]), _losses(one_device)) < gpu_check.TOL
    ref = _losses(out["cp2tp2"], 2)
    assert _close(_losses(out["same"]), ref) < gpu_check.TOL
    assert _close(_losses(out["other"]), ref) < gpu_check.TOL
