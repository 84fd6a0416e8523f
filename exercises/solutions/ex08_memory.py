"""Lesson 08 · when memory runs short: recomputation and dynamic loss scaling, written by hand.

Exercises (run ``make check LESSON=08``):

1. :class:`Checkpoint` — full activation recomputation as an autograd Function: forward keeps only
   the inputs (and the RNG state), backward re-runs the forward with grad and back-propagates
   through it (Chen et al. 2016, arXiv:1604.06174; Korthikanti et al. 2022, arXiv:2205.05198, §4.3).
2. :func:`loss_scale_step` — one step of dynamic loss scaling (Micikevicius et al. 2018,
   arXiv:1710.03740, §3.2): unscale, or skip and halve on overflow; grow after clean steps.

Both are checked in one process: the first against a plain transformer block in float64, with
dropout on (same outputs and gradients, and only the inputs kept), the second against
``minipar.optim.amp.DynamicLossScaler`` on a sequence of clean and overflowing steps.
"""

from __future__ import annotations

import torch


class Checkpoint(torch.autograd.Function):
    """``Checkpoint.apply(fn, *inputs)`` = ``fn(*inputs)``, keeping only ``inputs`` for backward."""

    @staticmethod
    def forward(ctx, fn, *inputs):
        """Run ``fn(*inputs)`` under ``torch.no_grad()``; keep the inputs and the CPU RNG state.

        Shapes: whatever ``fn`` takes and returns (tensors; one output tensor here).

        Invariant: nothing but ``inputs`` is saved for backward (``ctx.save_for_backward``), so a
        block of L operators keeps 1 tensor instead of L.

        Hint: lesson 08, "What you need to build it": keep on ``ctx`` what backward needs to
        run ``fn`` again and draw the same random numbers (``torch.get_rng_state``).
        """
        ctx.fn = fn
        ctx.rng = torch.get_rng_state()
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, grad_out):
        """Re-run ``fn`` with grad from the saved RNG state, back-propagate ``grad_out`` through it.

        Returns ``(None, grad of each input)`` (None for ``fn``, and for inputs without grad).

        Invariant: dropout inside ``fn`` draws the *same* masks as in forward, and the caller's
        RNG stream is left as it was (``torch.random.fork_rng``).

        Hint: lesson 08, "What you need to build it" (the second toy cell): backward runs with grad disabled, and the
        saved inputs are not part of a graph yet; the tools are ``torch.random.fork_rng``,
        ``torch.set_rng_state``, ``torch.enable_grad`` and ``torch.autograd.backward``. Parameters used in
        ``fn`` get their ``.grad`` on the way.
        """
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        with torch.random.fork_rng():
            torch.set_rng_state(ctx.rng)
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad_out)
        return (None, *[x.grad if x.requires_grad else None for x in inputs])


def checkpoint(fn, *inputs):
    """``fn(*inputs)`` with full recomputation (given: calls your :class:`Checkpoint`)."""
    return Checkpoint.apply(fn, *inputs)


def loss_scale_step(
    grads: list[torch.Tensor],
    scale: float,
    clean: int,
    growth_interval: int = 2000,
    growth: float = 2.0,
    backoff: float = 0.5,
) -> tuple[bool, float, int]:
    """One step of dynamic loss scaling, after ``(loss · scale).backward()`` filled ``grads``.

    Args:
        grads: the fp32 gradients of the scaled loss (any shapes); divided in place by ``scale``
            when every one is finite, left untouched otherwise.
        scale: the current loss scale S. clean: how many clean steps since the scale last changed.
    Returns:
        ``(step, new_scale, new_clean)``: ``step`` False if any gradient holds inf or nan (skip the
        optimizer step, S ← S · backoff, clean ← 0); otherwise True, clean + 1, and when that
        reaches ``growth_interval``, S ← S · growth and clean ← 0.

    Invariant: the same scales as ``torch.amp.GradScaler`` / ``minipar.optim.amp.DynamicLossScaler``.

    Hint: lesson 08, "Dynamic loss scaling" (under "What you need to build it"). ``torch.isfinite(g).all()`` for every g
    first; only then unscale (never unscale a skipped step: the caller zeroes those gradients).
    """
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return False, scale * backoff, 0
    for g in grads:
        g.div_(scale)
    clean += 1
    if clean == growth_interval:
        return True, scale * growth, 0
    return True, scale, clean
