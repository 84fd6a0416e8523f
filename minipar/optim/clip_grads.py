"""Gradient clipping by the global norm: the one implementation every optimizer of the course uses.

    norm = clip_grad_norm_(grads, max_norm, group=None, count=None, replicas=1)

The rule is ``torch.nn.utils.clip_grad_norm_``'s (Pascanu et al. 2013, arXiv:1211.5063, §3.2):
multiply every gradient by ``min(1, max_norm / (‖g‖ + 1e-6))``, where ‖g‖ is the norm of the
*whole model's* gradient. When the gradient is spread over ranks, each rank sums the squares of
what it holds, one all-reduce of 4 bytes adds the sums, and every rank gets the same ‖g‖
(Megatron-LM's ``clip_grad_norm_fp32``):

- ZeRO shards (:mod:`minipar.zero`): every element lives on one dp rank: sum over the dp group;
- the 3D job (:func:`minipar.job.piece.clip_global_`): TP pieces and pipeline stages hold different elements,
  but a TP-replicated tensor (LayerNorm, row-parallel bias, position embedding) is on every tp
  rank: it is counted on tp rank 0 only (``count``, from
  :func:`minipar.tp.partition.param_is_not_tensor_parallel_duplicate`); after a dp all-reduce the dp
  replicas hold equal gradients, so the world sum counts every element ``dp`` times (``replicas``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.runtime import dist as mdist


@torch.no_grad()
def clip_grad_norm_(
    grads: list[torch.Tensor],
    max_norm: float,
    group=None,
    count: list | None = None,
    replicas: int = 1,
) -> torch.Tensor:
    """Scale ``grads`` in place so the global norm is at most ``max_norm``; return that norm (0-d tensor).

    Args:
        grads: the gradient tensors this rank holds (any shapes); every one is scaled.
        max_norm: the bound (> 0).
        group: the ranks whose sums make up the whole model (default: the world). Collective over it:
            one all-reduce of one number.
        count: per tensor, what this rank adds to the squared norm: ``True`` all of it, ``False``
            nothing (another rank counts it), or a 0/1 tensor shaped like the gradient (those
            elements). Default: all of every tensor.
        replicas: how many times the group's sum counts every element (e.g. dp when the dp replicas
            hold equal gradients); the squared norm is divided by it.
    Returns:
        ‖g‖, the same on every rank of ``group``.
    """
    count = [True] * len(grads) if count is None else count
    terms = [
        (g.pow(2) * c.to(g.device)).sum() if isinstance(c, torch.Tensor) else g.pow(2).sum()
        for g, c in zip(grads, count)
        if isinstance(c, torch.Tensor) or c
    ]
    sq = torch.stack(terms).sum() if terms else torch.zeros((), device=mdist.device())
    if mdist.world_size(group) > 1:
        dist.all_reduce(sq, group=group)
    norm = (sq / replicas).sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return norm
