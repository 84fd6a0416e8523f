"""Lesson 03 · ZeRO: the stage-1 optimizer step over a flat, sharded parameter.

Exercise (run ``make check LESSON=03``): :func:`zero1_step` — reduce-scatter the gradient,
AdamW on this rank's 1/N shard only, all-gather the updated weights (Rajbhandari et al. 2020,
arXiv:1910.02054, §5.1 P_os). The checker runs N = 1, 3 and 4 ranks on flat parameters whose size
does not divide by N (padding), including fewer elements than ranks, and compares 3 steps with
``torch.optim.AdamW`` on one device using the mean gradient, in float64.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


def shard_range(numel: int, world_size: int, rank: int) -> tuple[int, int, int]:
    """``(padded, lo, hi)``: the flat buffer padded to a multiple of N; rank's slice ``[lo, hi)``.

    Given (not an exercise): every shard has ``padded / N`` elements, as FSDP's flat parameters.
    """
    padded = math.ceil(numel / world_size) * world_size
    size = padded // world_size
    return padded, rank * size, (rank + 1) * size


@torch.no_grad()
def adamw_update(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay) -> None:
    """AdamW on one tensor, in place (given: the arithmetic of lesson 00's exercise / torch.optim.AdamW)."""
    b1, b2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - b2**step)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - b1**step))


@torch.no_grad()
def zero1_step(
    flat_param: torch.Tensor,
    flat_grad: torch.Tensor,
    state: dict,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    group=None,
) -> None:
    """One ZeRO-1 AdamW step of the replicated ``flat_param``, in place, on every rank of ``group``.

    Contract (N = ranks of ``group``, numel = ``flat_param.numel()``, ``padded, lo, hi = shard_range(numel, N, rank)``):

    Inputs:
        flat_param: (numel,) the full parameters, identical on every rank; updated in place.
        flat_grad: (numel,) this rank's gradient (of its share of the batch), same dtype as ``flat_param``.
        state: this rank's optimizer state, a dict kept between calls (empty at the first call):
            ``state["step"]`` (int), ``state["exp_avg"]`` and ``state["exp_avg_sq"]`` of shape
            ``(padded / N,)`` only — the moments of this rank's shard ``[lo, hi)`` (8Ψ/N bytes, not 8Ψ).
            Nothing else anywhere (globals, attributes, default arguments): the checker walks them.
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW``.
        group: the data-parallel process group (None: every rank).

    Output: none; afterwards ``flat_param`` on every rank equals one device's AdamW step with the
    *mean* of the N gradients.

    Communication on ``group``, per call, nothing else (the checker watches):
        one ``dist.reduce_scatter_single``: input (padded,) = the gradient padded with zeros,
            output (padded / N,) = this rank's shard of the summed gradient;
        one ``dist.all_gather_single``: input (padded / N,) = this rank's updated parameter shard,
            output (padded,) = every rank's shard in rank order.
    Given: :func:`shard_range` (padding and this rank's slice), :func:`adamw_update` (AdamW on a shard).
    With N = 1 both collectives are copies: the same code runs.

    Hint: lesson 03, "The math, with shapes" (one ZeRO-1 step, row by row) and "What you need to build it" (the
    two collectives on a padded toy; together they are one all-reduce).
    """
    raise NotImplementedError("not implemented yet: zero1_step")
