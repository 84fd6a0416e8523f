"""Timing across ranks on the cluster clock (lessons 07, 09): a run lasts as long as its slowest rank, and
the fastest of several runs is kept (the others met a busy machine).

    (seconds,) = slowest(clk.now)                                  # every rank gets the slowest rank's value
    seconds, timeline = fastest_on_clock(lambda: piece.step(x, x, 1e-3), link, runs=3)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from minipar.clock import ClusterClock
from minipar.comm.links import Link
from minipar.runtime import dist as md


def slowest(*values: float) -> list[float]:
    """Each of ``values``, its largest over the default process group's ranks (one all_reduce MAX in float64).
    Every rank calls it with the same number of values."""
    t = torch.tensor(values, dtype=torch.float64, device=md.device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def fastest_on_clock(fn: Callable[[], object], link: Link, runs: int, warmup: int = 1) -> tuple[float, list]:
    """``fn()`` under ``ClusterClock(link, link)``, ``warmup`` runs not kept, then ``runs`` runs; a run's
    virtual seconds are its slowest rank's. Returns the fastest run's seconds and this rank's timeline of it
    (the clock's Spans)."""
    best: tuple[float, list] = (float("inf"), [])
    for i in range(warmup + runs):
        with ClusterClock(link, link) as clk:
            fn()
        (seconds,) = slowest(clk.now)
        if i >= warmup and seconds < best[0]:
            best = (seconds, list(clk.timeline))
    return best
