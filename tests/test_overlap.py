"""Overlapped all-gather + GEMM (minipar.tp.overlap) and the simulated two-stream timeline (minipar.perf.timeline)."""

import pytest

from minipar import ConfigError, launch
from minipar.perf.timeline import makespan, overlap_formula, two_stream_timeline
from tests._workers_comm import overlap_matmul, overlap_reducescatter


@pytest.mark.parametrize("n", [1, 2, 3])
def test_overlapped_matmul_equals_gather_then_matmul(n):
    """float64; the same row dot products either way: < 1e-12."""
    for a, b, ref, spans in launch(overlap_matmul, world_size=n):
        assert (a - ref).abs().max() < 1e-12 and (b - ref).abs().max() < 1e-12
        assert {s for s, _ in spans} == ({"compute", "comm"} if n > 1 else {"compute", "comm"})


@pytest.mark.parametrize("n", [1, 2, 3])
def test_overlapped_reducescatter_equals_matmul_then_reduce_scatter(n):
    """float64: the same partial sums added in another order (< 1e-12); the ring sends a ring
    reduce-scatter's (N−1)·(B·T/N·d_out) elements per rank, nothing more."""
    for a, b, ref, sent, formula in launch(overlap_reducescatter, world_size=n):
        assert (a - ref).abs().max() < 1e-12 and (b - ref).abs().max() < 1e-12
        assert sent == formula


@pytest.mark.parametrize("n,tc,tf", [(1, 1.0, 2.0), (4, 1.0, 2.0), (4, 3.0, 1.0), (6, 0.5, 0.5)])
def test_model_matches_its_formula(n, tc, tf):
    for ov in (False, True):
        assert makespan(two_stream_timeline(n, tc, tf, overlap=ov)) == pytest.approx(overlap_formula(n, tc, tf, ov))
    assert makespan(two_stream_timeline(n, tc, tf, comm_first=False)) == pytest.approx(overlap_formula(n, tc, tf))


def test_model_rejects_nonsense():
    with pytest.raises(ConfigError):
        two_stream_timeline(0, 1, 1)
