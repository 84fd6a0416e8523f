"""minipar.dp.ddp: N-rank data parallelism equals one device; buckets, bytes, overlap; bad input."""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.course.verify import max_abs_diff
from minipar.data import CharWindows, check_dataset, make_loader
from minipar.dp.buckets import make_buckets
from minipar.dp.ddp import DistributedDataParallel
from tests import _workers_dp as w

torch.set_num_threads(1)  # as every rank: with 2 threads a loaded 2-core machine runs ~20x slower


@pytest.fixture(scope="module")
def reference():
    return w.train("single", steps=4)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_n_ranks_equal_one_device(reference, n):
    """N-rank training (minipar DDP with and without overlap and gradient accumulation, naive DP,
    PyTorch DDP) for 4 AdamW steps equals one device on the same global batch of 8 sequences.

    Runs in float64 (``w.train``'s default), so the bound is derived, not fitted to one CPU:
    N ranks (or another CPU's kernels) sum the same numbers in another order, which moves a float64
    gradient by δ ≲ 1e-13; AdamW's update lr·m̂/(√v̂ + eps) then moves by at most lr·δ/eps per step
    (eps = 1e-8), ≤ 4 · 3e-3 · 1e-13 / 1e-8 = 1.2e-7 after 4 steps even for a near-zero gradient.
    Bound: ``w.PARAM_BOUND`` = ``w.LOSS_BOUND`` = 1e-6, while any real bug (a missing or doubled
    average, a dropped micro-batch) moves weights by ~lr = 3e-3 per step. The replicas themselves
    must stay bit-identical, and one rank must equal one device bit for bit.
    """
    out = launch(w.train_variants, world_size=n)
    for name, res in out[0].items():
        assert max_abs_diff(res["losses"], reference["losses"]) < w.LOSS_BOUND, name
        assert max_abs_diff(res["params"], reference["params"]) < w.PARAM_BOUND, name
        for other in out[1:]:
            assert max_abs_diff(res["params"], other[name]["params"]) == 0.0, name
    if n == 1 and out[0]["ddp"]["device"] == "cpu":  # one rank: dividing by 1, summing over 1 change nothing
        assert max_abs_diff(out[0]["ddp"]["params"], reference["params"]) == 0.0
    # minipar DDP and PyTorch DDP (same buckets, same accumulation) agree to float64 rounding
    assert max_abs_diff(out[0]["ddp_accum"]["params"], out[0]["torch"]["params"]) < w.PARAM_BOUND


def test_equivalence_bound_catches_a_bug(reference):
    """The bound is tight enough to matter: dropping half of each global batch (what a lost
    micro-batch or rank does) breaks it by orders of magnitude, in float64 on one device."""
    wrong = w.train("single", steps=4, global_batch=4)
    assert max_abs_diff(wrong["params"], reference["params"]) > 100 * w.PARAM_BOUND


def test_buckets_reverse_order_and_cap():
    model, _ = w.build()
    named = list(model.named_parameters())[::-1]
    buckets = make_buckets(named, bucket_cap_mb=0.02)  # 20 KiB
    flat = [n for b in buckets for n in b.names]
    assert flat == [n for n, _ in named]  # every parameter once, last layer first
    assert buckets[0].names[0] == "lm_head.weight"
    cap = 0.02 * 2**20
    for b in buckets:
        assert b.nbytes <= cap or len(b.params) == 1  # only a lone big parameter exceeds the cap
    assert len(make_buckets(named, bucket_cap_mb=1000)) == 1


@pytest.mark.parametrize("n", [2, 4])
def test_bytes_per_step_and_overlap(n):
    """One step sends 2(N-1)/N * 4 * Psi bytes per rank, one all_reduce per bucket, labelled by bucket;
    with overlap the first bucket is launched before backward ends, without it none is."""
    for overlap in (True, False):
        out = launch(w.one_step_trace, world_size=n, kwargs=dict(overlap=overlap))[0]
        recs = out["records"]
        assert [r[0] for r in recs] == ["all_reduce"] * len(out["buckets"])
        assert [r[3] for r in recs] == [f"bucket {i}" for i in range(len(out["buckets"]))]
        assert sum(r[2] for r in recs) == pytest.approx(2 * (n - 1) / n * 4 * out["numel"])
        first_launch = out["step"][0]["launch"]
        assert (first_launch < out["times"]["backward_end"]) == overlap
        assert all(s["launch"] <= s["done"] <= out["times"]["sync_end"] for s in out["step"])


def test_parameter_without_gradient_does_not_hang():
    """Rank r feeds inputs r+1, so the averaged weight gradient is the mean over ranks (1.5 per row)."""
    out = launch(w.unused_parameter, world_size=2)
    for r in out:
        assert torch.allclose(r["grad"], torch.full((4, 4), 2 * 1.5)) and r["unused_grad"] is None


def test_gradients_are_views_of_the_averaged_buckets_and_accumulate_as_on_one_device():
    """p.grad is the bucket's slot (no copy back); a second backward without zero_grad accumulates into it,
    and a parameter that gets no gradient in that backward keeps the first one's, as on one device."""
    for r in launch(w.grads_as_bucket_views, world_size=2):
        assert r["is_view"]
        for step in r["steps"]:
            for name, (ddp_grad, plain_grad) in step.items():
                assert torch.allclose(ddp_grad, plain_grad, atol=1e-12, rtol=0), name


def test_uneven_dataset_drops_the_same_tail_on_every_layout():
    """37 windows, global batch 8: 4 steps per epoch and 5 windows dropped, on 1, 2 and 4 ranks;
    at every step the N ranks' local batches together are exactly the one-device batch."""
    ds = CharWindows(torch.arange(37 * 4 + 1), block_size=4)
    assert len(ds) == 37
    assert check_dataset(len(ds), 8, 4) == {"local_batch": 2, "steps_per_epoch": 4, "dropped": 5}
    rows = lambda x: sorted(map(tuple, x.tolist()))  # noqa: E731
    single = make_loader(ds, 8)
    one = [rows(next(single)[0]) for _ in range(4)]
    assert len({r for b in one for r in b}) == 32
    for n in (2, 4):
        loaders = [make_loader(ds, 8, r, n) for r in range(n)]
        for step in range(4):
            union = sorted(r for ld in loaders for r in rows(next(ld)[0]))
            assert union == one[step]


def test_dataset_smaller_than_world_size():
    with pytest.raises(ConfigError, match=r"3 samples but world_size=4.*at most 3 ranks"):
        check_dataset(3, 4, 4)
    with pytest.raises(ConfigError, match="not divisible by world_size=4; use 8 or 12"):
        check_dataset(100, 10, 4)


@pytest.mark.parametrize("cap", [0, -1.5, "25", None])
def test_bad_bucket_size(cap):
    with pytest.raises(ConfigError, match=f"bucket_cap_mb={cap!r} must be a number of MiB > 0"):
        DistributedDataParallel(torch.nn.Linear(2, 2), bucket_cap_mb=cap)


def test_parameters_that_differ_across_ranks():
    with pytest.raises(
        ConfigError,
        match=r"parameters differ across ranks at start: '.*' by up to .*"
        r"torch.manual_seed",
    ):
        launch(w.start_unequal, world_size=2, args=(False,))
    out = launch(w.start_unequal, world_size=2, args=(True,))  # default: rank 0's weights are copied
    assert "wte.weight" in out[1]["differed"] and out[1]["equal_now"]


@pytest.mark.parametrize("outside", [False, True])
def test_step_inside_no_sync(outside):
    where = "after no_sync" if outside else "inside DistributedDataParallel.no_sync"
    with pytest.raises(ConfigError, match=rf"optimizer.step\(\) was called {where}.*1 backward pass"):
        launch(w.step_inside_no_sync, world_size=2, args=(outside,))


def test_step_check_belongs_to_its_ddp():
    """One global step pre-hook per DDP: removed by remove_hooks() and when the DDP is collected."""
    assert launch(w.step_hook_lifetime, world_size=2) == [[2, 1, 0, 1, 0]] * 2
