"""Lesson 10 · NCCL in practice: your own ``all_reduce_perf``.

Exercises (run ``make check LESSON=10``):

1. :func:`bus_bandwidth` — the two bandwidths ``all_reduce_perf`` prints for one all-reduce:
   algbw = S/t and busbw = algbw · 2(N − 1)/N (NVIDIA/nccl-tests, ``doc/PERFORMANCE.md``).
2. :func:`all_reduce_perf` — measure them on real ranks the way nccl-tests does: warm-up calls,
   then a barrier, then a timed loop; the time of one call averaged over the ranks (nccl-tests'
   default ``-a 1``), and a check of the result (its ``#wrong`` column).

The checker runs yours on 1, 2 and 3 ranks and on a sub-group, and grades what it calls, in which order and on
how many bytes. While your code runs, ``time.perf_counter`` is the checker's clock, which moves only when an
all-reduce runs (1 ms per call on rank 0, 2 ms on rank 1, ...) or a barrier (the wait for the last rank), so
time with ``time.perf_counter``: the answer is then the same on every machine.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def bus_bandwidth(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """``(algbw, busbw)`` of one all-reduce of ``size_bytes`` bytes that took ``seconds`` on ``world_size``
    ranks, in GB/s (1 GB = 1e9 bytes), as ``all_reduce_perf`` prints them.

    algbw = S / t: how fast *your* tensor is all-reduced. busbw = algbw · 2(N − 1)/N: the bytes per
    second every rank's link carries in a ring (each rank sends and receives 2(N − 1)/N · S), which does
    not depend on N, so it compares with the hardware. On one rank nothing moves: busbw = 0.

    Raises:
        ValueError: ``size_bytes`` < 0, ``seconds`` not a finite number > 0, or ``world_size`` < 1.

    Hint: lesson 10, "Measure it: reading all_reduce_perf" (the two formulas, and the factor for N = 1).
    """
    raise NotImplementedError("not implemented yet: bus_bandwidth")


def all_reduce_perf(sizes: list[int], warmup: int = 2, iters: int = 5, group=None) -> list[dict]:
    """nccl-tests' ``all_reduce_perf`` on the ranks of ``group`` (None: the world); call it on every rank.

    For each size S in ``sizes`` (bytes, a multiple of 4): a float32 buffer of S/4 elements, every
    element ``rank + 1`` (the rank in ``group``), on the group's device (this rank's GPU under NCCL, else the CPU);

    1. ``warmup`` all-reduces (sum), not timed (the first calls set up connections and buffers);
    2. one ``dist.barrier(group)``, so that every rank starts the clock together;
    3. ``iters`` all-reduces, timed together with ``time.perf_counter`` (on a GPU, synchronise before
       reading the clock); t = elapsed / iters, the time of one call on this rank;
    4. t averaged over the ranks: one all-reduce of it, divided by N (nccl-tests' default ``-a 1``), so
       that every rank returns the same row;
    5. the check: refill the buffer with ``rank + 1``, all-reduce it once more, count the elements that
       are not N(N + 1)/2 and sum that count over the ranks (``#wrong``: 0 on a healthy machine).

    Returns:
        One dict per size, in order, identical on every rank: ``{"size": S, "count": S // 4,
        "time_us": t · 1e6, "algbw": GB/s, "busbw": GB/s, "wrong": int}``
        (the bandwidths by :func:`bus_bandwidth`).

    Communication per size: warmup + iters + 1 all-reduces of S/4 float32 elements, one barrier after the
    warm-up and before the timed loop, and one or two all-reduces of at most 2 elements (the time, the count).

    Hint: lesson 10, "Measure it: reading all_reduce_perf". ``dist.get_rank(group)`` and
    ``dist.get_world_size(group)``; time the loop, not each call.
    """
    raise NotImplementedError("not implemented yet: all_reduce_perf")
