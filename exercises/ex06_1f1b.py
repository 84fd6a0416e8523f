"""Lesson 06 · 1F1B: start a backward as soon as one is possible.

Exercises (run ``make check LESSON=06``):

1. :func:`one_f_one_b` — PipeDream-Flush / 1F1B (Narayanan et al. 2021, arXiv:2006.09503; and
   arXiv:2104.04473 §2.2.1) as a list of actions per rank.
2. :func:`interleaved_1f1b` — stretch goal: Megatron-LM's interleaved schedule with ``v`` model
   chunks per rank (arXiv:2104.04473 §2.2.2).
3. :func:`linear_backward_input` and :func:`linear_backward_weight` — stretch goal: the backward of a
   linear layer split into I (input gradient, now) and W (weight gradient, later), the split that
   zero-bubble schedules move around (Qi et al. 2024, arXiv:2401.10241 §2).

Same :class:`~minipar.pp.schedules.Action` format as ``minipar.pp.schedules``. The checker
simulates every schedule (deadlock, missing or misplaced actions), checks the memory bound (at
most p − r micro-batches in flight on rank r) and compares with the reference order, for
p = 1, 3, 4 and m = 1, 2, 4, 8 (m < p included).
"""

from __future__ import annotations

import torch

from minipar.pp.schedules import Action


def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    """1F1B on ``p`` ranks (stage r on rank r) with ``m`` micro-batches.

    Rank r runs ``w = min(p − r − 1, m)`` warm-up forwards, then alternates one forward and one
    backward (``F(w+i), B(i)`` for i = 0 .. m−w−1), then the remaining backwards (cool-down), in
    micro-batch order. The last rank has no warm-up: F0 B0 F1 B1 ...

    Invariant: rank r never holds more than ``p − r`` micro-batches' activations (GPipe: m).

    Hint: lesson 06, "The idea" (warm-up p − r − 1, then 1F1B, then cool-down) and "Predict". With m < p the warm-up
    covers every micro-batch on the first ranks (``min``!).
    """
    raise NotImplementedError("not implemented yet: one_f_one_b")


def interleaved_1f1b(p: int, m: int, v: int = 2) -> list[list[Action]]:
    """Stretch goal. Interleaved 1F1B: rank r holds stages r, r + p, ..., r + (v − 1)·p; m a multiple of p.

    The k-th forward of a rank (k = 0 .. m·v − 1) is on chunk ``(k mod p·v) // p`` and micro-batch
    ``(k // (p·v))·p + k mod p``; the k-th backward visits the chunks in reverse
    (chunk ``v − 1 − (k mod p·v) // p``, same micro-batch rule). Rank r runs
    ``w = min((p − r − 1)·2 + (v − 1)·p, m·v)`` warm-up forwards, then one forward / one backward,
    then the cool-down backwards. Stage of chunk c on rank r: ``c·p + r``.

    Hint: lesson 06, "The idea" and the formula above (Megatron-LM's ``forward_backward_pipelining_with_interleaving``).
    """
    raise NotImplementedError("not implemented yet: interleaved_1f1b")


def linear_backward_input(x: torch.Tensor, weight: torch.Tensor, grad_y: torch.Tensor, stash: list) -> torch.Tensor:
    """Stretch goal. I, the half of ``y = x·Wᵀ + b``'s backward that the previous stage waits for.

    ``x`` (..., in), ``weight`` (out, in), ``grad_y`` = dL/dy (..., out). Returns dL/dx (..., in)
    and appends what W will need to ``stash`` (a list used as a queue: one entry per call). Compute
    no weight gradient here, and do not call autograd: that is the point of the split.

    Hint: y = x·Wᵀ, so dL/dx = dL/dy · W. W needs x and dL/dy: keep references (no copies).
    """
    raise NotImplementedError("not implemented yet: linear_backward_input")


def linear_backward_weight(stash: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Stretch goal. W, the deferred half: take the OLDEST entry of ``stash`` (first in, first out:
    micro-batches run W in the order they ran I) and return ``(dL/dW (out, in), dL/db (out,))``,
    summed over every leading dimension of x (batch, sequence, ...).

    Hint: flatten x to (N, in) and dL/dy to (N, out); dL/dW = (dL/dy)ᵀ · x, dL/db = Σ_rows dL/dy.
    """
    raise NotImplementedError("not implemented yet: linear_backward_weight")
