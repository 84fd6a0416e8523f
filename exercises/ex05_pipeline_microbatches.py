"""Lesson 05 · pipeline parallelism with micro-batches: the GPipe schedule as data, and its bubble.

Exercises (run ``make check LESSON=05``):

1. :func:`gpipe` — the GPipe schedule (Huang et al. 2019, arXiv:1811.06965) as a list of actions per rank.
2. :func:`bubble_fraction` — the idle fraction of a GPipe step, measured by the simulator.

An action is ``minipar.pp.schedules.Action(stage, kind, mb)`` (``"1F3"``: stage 1, forward,
micro-batch 3), one stage per rank here (stage r on rank r). The checker validates every schedule
with ``minipar.pp.schedules.simulate`` (which catches deadlocks and missing actions) for
p = 1, 3, 4 ranks and m = 1, 2, 4, 8 micro-batches (m < p included).
"""

from __future__ import annotations

from minipar.pp.schedules import Action


def gpipe(p: int, m: int) -> list[list[Action]]:
    """GPipe on ``p`` ranks with ``m`` micro-batches: ``schedule[r]`` is rank r's list of actions.

    Rank r runs the forwards of micro-batches 0 .. m−1 of stage r, then their backwards (any order
    is valid; reverse order is what autograd does over one big batch).

    Returns:
        ``[[Action(r, "F", 0), ..., Action(r, "F", m−1), Action(r, "B", m−1), ..., Action(r, "B", 0)], ...]``.

    Hint: lesson 05, "Build it (2): a schedule is data" (``minipar.pp.schedules``).
    """
    raise NotImplementedError("not implemented yet: gpipe")


def bubble_fraction(p: int, m: int) -> float:
    """Idle fraction of a GPipe step when a backward takes twice a forward: ``(p − 1)/(m + p − 1)``.

    Invariant: 0 for p = 1; falls towards 0 as m grows; (p − 1)/p for m = 1.

    Hint: lesson 05, "The idea" and "Back-of-envelope rule" (Narayanan et al. 2021, arXiv:2104.04473 §2.2.1:
    the bubble is β = (p − 1)/m of the ideal compute time; as a fraction of the whole step, β/(1 + β)).
    """
    raise NotImplementedError("not implemented yet: bubble_fraction")
