"""A simulated timeline (a MODEL, not a run) of communication overlapped with computation: two streams, n pieces.

An emulator: it computes when each piece *would* start and end on one compute and one
communication stream, from given durations; nothing is sent or computed. The real overlapped
operator is :mod:`minipar.tp.overlap` (lesson 09 draws this model beside its measured traces).

Three overlaps in this course have the same shape — a chain of n pieces, each needing a
transfer (time ``t_comm``) before (or after) its compute (``t_compute``):

- TP all-gather + GEMM (:mod:`minipar.tp.overlap`): chunk k's GEMM needs chunk k's all-gather step;
- ZeRO-3/FSDP prefetch: layer k's forward needs layer k's all-gathered weights;
- DDP buckets (lesson 02): bucket k's all-reduce needs bucket k's gradients (compute first).

One compute stream and one communication stream, each doing one thing at a time. Without
overlap every transfer waits for the previous compute: T = n·(t_comm + t_compute). With
prefetch of one piece ahead, transfer k+1 runs during compute k:
T = t_comm + (n − 1)·max(t_comm, t_compute) + t_compute — the longer stream hides the shorter.
The α–β costs come from lesson 01 (t_comm = α + bytes/β). Units: seconds. Source: MegaScale,
Jiang et al. 2024, arXiv:2402.15627 §3.3; Wang et al. 2023, "Overlap Communication with Dependent
Computation via Decomposition in Large Deep Learning Models", ASPLOS '23.
"""

from __future__ import annotations

from typing import NamedTuple

from minipar.errors import ConfigError


class Span(NamedTuple):
    stream: str  # "comm" or "compute"
    index: int  # piece k
    start: float  # seconds
    end: float


def two_stream_timeline(
    n: int, t_comm: float, t_compute: float, overlap: bool = True, comm_first: bool = True
) -> list[Span]:
    """Simulated spans of n pieces on a compute and a comm stream (seconds). A model, not a measurement.

    Args:
        n: pieces (chunks, layers or buckets), >= 1.
        t_comm, t_compute: seconds per piece (>= 0).
        overlap: transfer of piece k+1 may run during compute of piece k (prefetch depth 1).
        comm_first: piece k's compute needs its transfer (all-gather, prefetch); False: the
            transfer needs the compute (DDP: a bucket is all-reduced after its gradients exist).
    Raises:
        ConfigError: n < 1 or a negative time.
    """
    if n < 1 or t_comm < 0 or t_compute < 0:
        raise ConfigError(
            f"two_stream_timeline(n={n}, t_comm={t_comm}, t_compute={t_compute}): need n >= 1 and times >= 0"
        )
    spans, comm_free, comp_free, prev_comp_start, prev_comp_end = [], 0.0, 0.0, 0.0, 0.0
    for k in range(n):
        if comm_first:  # prefetch depth 1: piece k is fetched while piece k−1 computes, not earlier
            c0 = max(comm_free, prev_comp_start) if overlap else max(comm_free, prev_comp_end)
            c1 = c0 + t_comm
            f0 = max(comp_free, c1)
            f1 = f0 + t_compute
        else:
            f0 = comp_free if overlap else max(comp_free, comm_free)
            f1 = f0 + t_compute
            c0 = max(comm_free, f1)
            c1 = c0 + t_comm
        spans += [Span("comm", k, c0, c1), Span("compute", k, f0, f1)]
        comm_free, comp_free, prev_comp_start, prev_comp_end = c1, f1, f0, f1
    return spans


def makespan(spans: list[Span]) -> float:
    """End of the last span (seconds)."""
    return max(s.end for s in spans)


def overlap_formula(n: int, t_comm: float, t_compute: float, overlap: bool = True) -> float:
    """Closed form of :func:`two_stream_timeline`'s makespan (comm first): see the module docstring."""
    if not overlap:
        return n * (t_comm + t_compute)
    return t_comm + (n - 1) * max(t_comm, t_compute) + t_compute
