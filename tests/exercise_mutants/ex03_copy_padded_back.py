"""ZeRO-1 that copies the whole padded all-gather buffer back into the unpadded parameter."""

import torch
import torch.distributed as dist

from exercises.solutions.ex03_zero import *  # noqa: F401,F403
from exercises.solutions.ex03_zero import adamw_update, shard_range


@torch.no_grad()
def zero1_step(flat_param, flat_grad, state, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    numel = flat_param.numel()
    padded, lo, hi = shard_range(numel, n, r)
    full_grad = torch.zeros(padded, dtype=flat_grad.dtype)
    full_grad[:numel] = flat_grad
    grad_shard = torch.empty(hi - lo, dtype=flat_grad.dtype)
    dist.reduce_scatter_single(grad_shard, full_grad, group=group)
    grad_shard /= n
    full = torch.zeros(padded, dtype=flat_param.dtype)
    full[:numel] = flat_param
    shard = full[lo:hi].clone()
    if not state:
        state.update(step=0, exp_avg=torch.zeros_like(shard), exp_avg_sq=torch.zeros_like(shard))
    state["step"] += 1
    adamw_update(shard, grad_shard, state["exp_avg"], state["exp_avg_sq"], state["step"], lr, betas, eps, weight_decay)
    dist.all_gather_single(full, shard, group=group)
    flat_param.copy_(full)  # the mistake: padded elements, not numel
