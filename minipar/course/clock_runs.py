"""Steps on the cluster clock, compared mode against mode: each mode's fastest step (lessons 02, 06).

    best = fastest_on_clock(lambda overlap, clk: step(overlap), (False, True), rounds=5, links=(intra, inter))
    virtual_s, clk = best[True]      # the least virtual time (the last rank to finish) and that step's clock

The modes alternate step by step, so a slow moment of a shared machine hits each of them alike; the
first ``warmup`` rounds (buffers, AdamW's state, first messages) are not counted.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from minipar.clock import ClusterClock
from minipar.runtime import dist as mdist


def slowest_rank(seconds: float, group=None) -> float:
    """The largest of every rank's ``seconds`` (``all_reduce`` MAX): a step ends when its slowest rank ends."""
    t = torch.tensor([seconds], dtype=torch.float64, device=mdist.device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def fastest_on_clock(step: Callable, modes, rounds: int, links: tuple = (), warmup: int = 1, **clock_kw) -> dict:
    """Call ``step(mode, clk)`` for every mode in turn, each on a fresh ``ClusterClock(*links, **clock_kw)``,
    for ``warmup + rounds`` rounds. Returns ``{mode: (virtual seconds, clock)}``: the counted step with the
    least virtual time (the slowest rank's) and its :class:`~minipar.clock.ClusterClock` (timeline, events...).
    Every rank calls it with the same modes and rounds."""
    best: dict = {}
    for i in range(warmup + rounds):
        for mode in modes:
            with ClusterClock(*links, **clock_kw) as clk:
                step(mode, clk)
            virtual = slowest_rank(clk.now)
            if i >= warmup and virtual < best.get(mode, (float("inf"),))[0]:
                best[mode] = (virtual, clk)
    return best
