"""Data parallelism, simplest form: every rank holds the whole model, sees 1/N of the batch, and
averages gradients with one all-reduce per parameter after backward.

(Lesson 02 builds the bucketed, overlapped version on top of this.)
"""
from __future__ import annotations

import torch.distributed as dist
import torch.nn as nn


def all_reduce_gradients(model: nn.Module, group=None) -> None:
    """Average ``p.grad`` over the ranks of ``group`` (in place), one ``all_reduce`` per parameter.

    After it every rank holds the gradient of the mean loss over the *global* batch, provided
    each rank's loss is the mean over its equal share. Bytes sent per rank (ring algorithm):
    2(N−1)/N · 4Ψ for Ψ fp32 parameters. A no-op for a world of one.
    """
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank of ``group`` (start in sync)."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=src, group=group)
