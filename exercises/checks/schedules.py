"""What the pipeline checks of lessons 05 and 06 share: the cases and the simulator's verdict."""

from __future__ import annotations

from exercises.checks.common import CheckFailed
from exercises.checks.watch import Refuse
from minipar.errors import ConfigError

SCHEDULE = "this exercise is the schedule: write it yourself"
RULES = Refuse(
    {
        "minipar.pp": SCHEDULE + ", not minipar's",
        "minipar.perf": SCHEDULE + ", not minipar's planner",
        "torch.distributed.pipelining": SCHEDULE + ", not torch.distributed.pipelining's",
    },
    allow=["minipar.pp.schedules:Action"],
)

CASES = [(1, 1), (1, 4), (3, 1), (3, 2), (3, 4), (4, 2), (4, 4), (4, 8)]  # (p, m), m < p included


def validate(what, sched, p, m, v=1):
    """Shape, Action type, then ``simulate``: every action once, on its rank, no deadlock. Returns the Simulation."""
    from minipar.pp.schedules import Action, simulate

    if not isinstance(sched, list) or len(sched) != p:
        raise CheckFailed(
            f"{what}: expected a list of {p} lists (one per rank), got "
            f"{type(sched).__name__} of length {len(sched) if hasattr(sched, '__len__') else '?'}"
        )
    for r, acts in enumerate(sched):
        bad = [a for a in acts if not isinstance(a, Action)]
        if bad:
            raise CheckFailed(f"{what}: rank {r} holds {bad[0]!r}, not an Action(stage, kind, mb)")
    n_actions = sum(len(a) for a in sched)
    if n_actions != 2 * p * v * m:
        raise CheckFailed(
            f"{what}: {n_actions} actions in all, expected 2·p·v·m = {2 * p * v * m} (F and B of every "
            "micro-batch on every stage)"
        )
    try:
        return simulate(sched, t_f=1.0, t_b=2.0)
    except ConfigError as exc:
        raise CheckFailed(f"{what}: the simulator rejects it: {exc}") from None


def first_difference(got, want):
    """``(rank, index, got action or None, wanted action or None)`` of the first difference, or None."""
    for r, (g, w) in enumerate(zip(got, want)):
        for i in range(max(len(g), len(w))):
            a = g[i] if i < len(g) else None
            b = w[i] if i < len(w) else None
            if a != b:
                return r, i, a, b
    return None
