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

    Args:
        flat_param: (numel,) the full parameters, identical on every rank (updated in place).
        flat_grad: (numel,) this rank's gradient (of its share of the batch).
        state: this rank's optimizer state, a dict kept between calls (empty at the first call). Keep
            ``state["step"]`` (int) and ``state["exp_avg"]``, ``state["exp_avg_sq"]`` of the shard's
            shape ``(padded / N,)`` only: that is the point of ZeRO-1 (8Ψ/N bytes of moments, not 8Ψ).
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW``.

    Afterwards ``flat_param`` equals one device's AdamW step with the *mean* gradient over the ranks.

    Communication (what the checker watches): one reduce-scatter of the padded gradient and one
    all-gather of the updated shards, nothing else — no full-size all-reduce. Given:
    :func:`shard_range` (padding and this rank's slice), :func:`adamw_update` (AdamW on a shard).

    Hint: lesson 03, "Build it: stages 1 and 2" (``minipar/zero/stage12.py``, ``ZeroOptimizer.step``).
    With N = 1 the collectives are plain copies (they work on a group of one too).
    """
    raise NotImplementedError("not implemented yet: zero1_step")
