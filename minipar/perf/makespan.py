"""The makespan of a pipeline schedule, fast: what :func:`minipar.pp.simulation.simulate` computes for the plain
forward/backward schedules the planner times (:func:`minipar.perf.model.pipeline_makespan`), to the last bit.

The order in which ``simulate`` runs a schedule's actions depends on each rank's list and on the inputs, not on
the times: :func:`schedule_order` finds it once per (schedule, p, m, v); :func:`makespan` then walks it with each
layout's stage times. Units: whatever ``f`` and ``b`` are in.
"""

from __future__ import annotations

import functools

from minipar.errors import ConfigError
from minipar.pp.schedules import make_schedule


@functools.lru_cache(maxsize=512)
def schedule_order(name: str, p: int, m: int, v: int) -> tuple | None:
    """The actions of a checked F/B schedule (:func:`minipar.pp.schedules.make_schedule`) in the order
    :func:`minipar.pp.simulation.simulate` runs them (which depends on the order of each rank's actions and on
    their inputs, not on the times), each as (rank, stage, forward?, indices of its inputs in this order): F after
    the previous stage's F; B after its own F and the next stage's B. None if it holds another kind (I, W)."""
    sched = make_schedule(name, p, m, v)
    if any(a.kind not in "FB" for acts in sched for a in acts):
        return None
    S, index, order, pos = p * v, {}, [], [0] * p
    while len(order) < sum(len(x) for x in sched):
        before = len(order)
        for r in range(p):
            while pos[r] < len(sched[r]):
                s, kind, mb = sched[r][pos[r]]
                deps = ((s - 1, "F", mb),) if kind == "F" else ((s, "F", mb), (s + 1, "B", mb))
                deps = [d for d in deps if 0 <= d[0] < S]
                if any(d not in index for d in deps):
                    break
                index[(s, kind, mb)] = len(order)
                order.append((r, s, kind == "F", tuple(index[d] for d in deps)))
                pos[r] += 1
        if len(order) == before:
            raise ConfigError(f"{name} schedule of {p} ranks deadlocks: minipar.pp.simulation.simulate shows where")
    return tuple(order)


def makespan(order: tuple, p: int, f: tuple, b: tuple) -> float:
    """:func:`minipar.pp.simulation.simulate`'s makespan of the schedule :func:`schedule_order` lists (its ``p``
    ranks), forward and backward times ``f[s]``, ``b[s]`` per virtual stage, instant sends: each action starts
    when its rank is free and its inputs are done, and ends ``f[s]`` or ``b[s]`` later. The same additions and
    maxima as ``simulate`` (equal to the last bit, ``tests/test_plan_moe.py``) without its checks, timeline and
    messages: the search's pipelines, several times faster."""
    free, done = [0.0] * p, []
    fs, bs, finish = [float(x) for x in f], [float(x) for x in b], done.append
    for r, s, fwd, deps in order:
        ready = free[r]
        for d in deps:  # max(ready, done[d]) without the call (the search's hottest loop)
            if done[d] > ready:
                ready = done[d]
        ready += fs[s] if fwd else bs[s]
        free[r] = ready
        finish(ready)
    return max(free)
