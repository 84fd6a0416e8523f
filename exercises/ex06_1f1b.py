"""Lesson 06 · 1F1B: start a backward as soon as one is possible.

Exercises (run ``make check LESSON=06``):

1. :func:`one_f_one_b` — PipeDream-Flush / 1F1B (Narayanan et al. 2019, PipeDream, SOSP; and
   arXiv:2104.04473 §2.2.1) as a list of actions per rank.
2. :func:`interleaved_1f1b` — stretch goal: Megatron-LM's interleaved schedule with ``v`` model
   chunks per rank (arXiv:2104.04473 §2.2.2).

Same :class:`~minipar.pp.schedules.Action` format as ``minipar.pp.schedules``. The checker
simulates every schedule (deadlock, missing or misplaced actions), checks the memory bound (at
most p − r micro-batches in flight on rank r) and compares with the reference order, for
p = 1, 3, 4 and m = 1, 2, 4, 8 (m < p included).
"""

from __future__ import annotations

from minipar.pp.schedules import Action


def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    """1F1B on ``p`` ranks (stage r on rank r) with ``m`` micro-batches.

    Rank r runs ``w = min(p − r − 1, m)`` warm-up forwards, then alternates one forward and one
    backward (``F(w+i), B(i)`` for i = 0 .. m−w−1), then the remaining backwards (cool-down), in
    micro-batch order. The last rank has no warm-up: F0 B0 F1 B1 ...

    Invariant: rank r never holds more than ``p − r`` micro-batches' activations (GPipe: m).

    Hint: lesson 06, "Build it: the schedules are a few lines of data". With m < p the warm-up
    already covers every micro-batch (``min``!).
    """
    raise NotImplementedError("not implemented yet: one_f_one_b")


def interleaved_1f1b(p: int, m: int, v: int = 2) -> list[list[Action]]:
    """Stretch goal. Interleaved 1F1B: rank r holds stages r, r + p, ..., r + (v − 1)·p; m a multiple of p.

    The k-th forward of a rank (k = 0 .. m·v − 1) is on chunk ``(k mod p·v) // p`` and micro-batch
    ``(k // (p·v))·p + k mod p``; the k-th backward visits the chunks in reverse
    (chunk ``v − 1 − (k mod p·v) // p``, same micro-batch rule). Rank r runs
    ``w = min((p − r − 1)·2 + (v − 1)·p, m·v)`` warm-up forwards, then one forward / one backward,
    then the cool-down backwards. Stage of chunk c on rank r: ``c·p + r``.

    Hint: lesson 06, "Build it" (Megatron-LM's ``forward_backward_pipelining_with_interleaving``).
    """
    raise NotImplementedError("not implemented yet: interleaved_1f1b")
