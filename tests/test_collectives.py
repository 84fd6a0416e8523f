"""minipar.comm.collectives: ring reduce-scatter / all-gather / all-reduce and the naive all-reduce,
against torch.distributed on real gloo ranks; byte accounting; bad input fails loudly."""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.comm.collectives import chunk_bounds, ring_all_reduce
from tests import _workers_collectives as w

SHAPES = [(0,), (1,), (3,), (7,), (1000,), (4099,), (3, 5, 7)]


def _check_close(results, n):
    """Integer-valued data must match exactly: every fp32 partial sum is an exact integer, so the
    order of the additions cannot matter. ``randn`` data is summed in a different order than
    gloo's: each of the N−1 additions rounds by at most 2⁻²⁴ of a partial sum, and partial sums of
    N standard normals stay below 4.5·N (|x| < 4.5 for these few thousand samples, checked on every
    rank), so two orders differ by at most 2(N−1) · 2⁻²⁴ · 4.5N (1.1e-6 for N=2, 3.0e-5 for N=8), on
    any CPU: the bound depends on the data, not on which kernels summed it."""
    tol = 2 * (n - 1) * 2.0**-24 * 4.5 * n
    for res in results:
        for (shape, op, kind, algo), diff in res.items():
            if kind == "int":
                assert diff == 0.0, (shape, op, algo)
            else:
                assert diff <= tol, (shape, op, algo, diff)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_and_naive_equal_torch_all_reduce(n):
    """SUM and AVG, sizes 0…4099 (most not divisible by n), a 3-D shape."""
    shapes = SHAPES if n < 8 else [(1,), (7,), (1000,), (3, 5, 7)]  # 8 ranks on 2 cores: fewer cases
    _check_close(launch(w.compare_all_reduce, world_size=n, args=(shapes,)), n)


def test_sub_groups():
    """Rings over sub-groups of 4 ranks: [0, 2] and [1, 3] side by side, then [1, 2, 3]."""
    shapes = [(5,), (1000,)]
    out = launch(w.compare_sub_groups, world_size=4, args=(shapes,))
    for rank, res in enumerate(out):
        _check_close([res["pairs"]], 2)
        if rank == 0:
            assert res["triple"] == "not in group"
        else:
            _check_close([res["triple"]], 3)


def test_other_ops():
    """MAX, MIN, PRODUCT on 3 ranks, compared exactly: MAX/MIN are exact in any order, and PRODUCT
    multiplies powers of two (exact in any order)."""
    for res in launch(w.compare_other_ops, world_size=3, args=(10,)):
        assert res == {"MAX": 0.0, "MIN": 0.0, "PRODUCT": 0.0}


def test_reduce_scatter_and_all_gather_equal_torch():
    """Bitwise (integer-valued data); sizes divisible by 4 also against reduce_scatter_single/all_gather_single."""
    for res in launch(w.compare_scatter_gather, world_size=4, args=([1, 2, 3, 10, 12, 4096, 600001],)):
        assert all(ok_rs and ok_ag for ok_rs, ok_ag in res.values()), res


def test_chunk_bounds_cover_the_tensor_with_sizes_differing_by_one():
    for numel in range(0, 30):
        for n in range(1, 9):
            bounds = [chunk_bounds(numel, n, i) for i in range(n)]
            assert bounds[0][0] == 0 and bounds[-1][1] == numel
            assert all(bounds[i][1] == bounds[i + 1][0] for i in range(n - 1))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1
            assert sizes == [len(c) for c in torch.arange(numel).tensor_split(n)]


def test_bytes_recorded_match_the_formulas():
    """Ring: 2(N−1)/N·S sent and received per rank, in 2(N−1) isend + 2(N−1) irecv (S/N < 1 MiB: one
    segment per step); naive: root (N−1)·S, others S; the shape check is recorded under its own label,
    the ring under the caller's."""
    n, numel = 4, 1000
    S = 4 * numel
    for rank, recs in enumerate(launch(w.record_bytes, world_size=n, args=(numel,))):
        ring = [r for r in recs if r[0] == "ring_all_reduce"]
        naive = [r for r in recs if r[0] == "naive_all_reduce"]
        assert len(ring) == len(naive) == 1
        op, nbytes, sent, recv, lab, parts = ring[0]
        assert nbytes == S and sent == recv == 2 * (n - 1) / n * S
        assert lab == "grads"  # the caller's label reaches minipar's record
        assert sorted(p[0] for p in parts) == ["irecv"] * 2 * (n - 1) + ["isend"] * 2 * (n - 1)
        assert {p[1] for p in parts if p[0] == "isend"} == {(rank + 1) % n}
        assert {p[1] for p in parts if p[0] == "irecv"} == {(rank - 1) % n}
        _, _, sent, recv, _, _ = naive[0]
        assert sent == recv == ((n - 1) * S if rank == 0 else S)
        checks = [r for r in recs if r[4] == "shape check"]
        assert checks and all(r[0] in ("isend", "irecv") for r in checks)
        assert [r[0] for r in recs if r[4] != "shape check"] == ["ring_all_reduce", "naive_all_reduce", "all_reduce"]


def test_large_tensor_is_sent_in_segments():
    """A 3 MiB chunk per step travels in 3 segments of SEGMENT_BYTES = 1 MiB; bytes are unchanged."""
    n, numel = 2, 3 * 2**19  # 6 MiB: two chunks of 3 MiB
    recs = launch(w.record_bytes, world_size=n, args=(numel,))[0]
    ring = [r for r in recs if r[0] == "ring_all_reduce"][0]
    assert ring[2] == ring[3] == 4 * numel * 2 * (n - 1) / n
    assert sum(p[0] == "isend" for p in ring[5]) == 2 * (n - 1) * 3


def test_world_of_one_without_process_group():
    """No process group: a world of one, the tensor is its own sum (AVG divides by 1)."""
    t = torch.arange(5.0)
    assert ring_all_reduce(t) is t and torch.equal(t, torch.arange(5.0))


@pytest.mark.parametrize(
    "case, match",
    [
        ("shape", r"same shape and dtype, got rank 0: shape \(4,\) float32; rank 1: shape \(5,\) float32"),
        ("dtype", r"rank 2: shape \(4,\) float64"),
        ("noncontiguous", r"rank 1 has shape \(6, 4\) float32 non-contiguous; pass t.contiguous"),
        ("avg_int", r"AVG needs a floating-point tensor"),
        ("op", r"op=.*BAND.* is not supported"),
    ],
)
def test_bad_input_raises_the_same_clear_error_on_every_rank(case, match):
    out = launch(w.bad_input, world_size=3, args=(case,), timeout=10)
    assert all(o is not None and o[0] == "ConfigError" for o in out), out
    assert len({o[1] for o in out}) == 1  # every rank says the same thing
    import re

    assert re.search(match, out[0][1]), out[0][1]


def test_rank_outside_group_raises():
    out = launch(w.bad_input, world_size=3, args=("outside",), timeout=10)
    assert out[0] is None and out[1] is None  # the group's own ranks are unaffected
    assert out[2][0] == "ConfigError" and "global rank 2 is not in the group of ranks [0, 1]" in out[2][1]


def test_missing_peer_times_out_naming_the_rank():
    """Rank 1 never calls (but stays alive): ranks 0 and 2 raise after the 2 s timeout, not hang."""
    out = launch(w.bad_input, world_size=3, args=("missing_peer",), timeout=2)
    assert out[1] is None
    assert out[2][0] == "RuntimeError" and "rank 2 got no message from rank 1 within 2 s" in out[2][1]
    assert out[0][0] == "RuntimeError" and "within 2 s" in out[0][1]


def test_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        ring_all_reduce([1.0, 2.0])
    with pytest.raises(ConfigError, match="not contiguous"):
        ring_all_reduce(torch.ones(3, 4).t())
