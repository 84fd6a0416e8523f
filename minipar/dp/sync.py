"""Keeping data-parallel replicas equal, one tensor at a time: naive data parallelism (lesson 02).

Every rank holds the whole model and sees 1/N of the global batch. Naive DP, the first version
of lesson 02: :func:`broadcast_parameters` once, then after every backward
:func:`all_reduce_gradients`: one blocking ``all_reduce`` per parameter, after backward has
finished. Simple and correct; communication never overlaps computation, and hundreds of small
messages each pay the network latency (:mod:`minipar.dp.ddp` fixes both).

:func:`sync_parameters` is the start of every data-parallel job, naive or not: same shapes
on every rank (checked), then rank 0's values (copied in, or proven equal).

Bytes per step (ring all-reduce, Patarasuk & Yuan 2009): every rank sends and receives
2(N−1)/N · 4Ψ bytes for Ψ fp32 parameters.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.errors import ConfigError


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


def _src(group) -> int:
    return 0 if group is None else dist.get_process_group_ranks(group)[0]


@torch.no_grad()
def sync_parameters(module: nn.Module, group=None, init_sync: bool = True) -> list[str]:
    """Make every rank start from rank 0's parameters, or prove they already do.

    1. Shapes: ``all_gather_object`` of every parameter's shape; a mismatch would make the
       broadcast fail or mix tensors, so it raises.
    2. Values: rank 0's parameters are broadcast into scratch copies and compared.
       ``init_sync=True`` (PyTorch's default) then copies them in (buffers too);
       ``init_sync=False`` raises if any parameter differs.

    Returns:
        the names of the parameters that differed from rank 0's on this group (before the copy).
    Raises:
        ConfigError: different parameter names/shapes across ranks; with ``init_sync=False``,
            different values (message: first parameter, its largest difference, and the fix).
    """
    named = list(module.named_parameters())
    n = dist.get_world_size(group) if dist.is_initialized() else 1
    if n == 1:
        return []
    shapes = [(name, tuple(p.shape)) for name, p in named]
    every = [None] * n
    dist.all_gather_object(every, shapes, group=group)
    for r, theirs in enumerate(every):
        if theirs != shapes:
            bad = next(((a, b) for a, b in zip(shapes, theirs) if a != b), None)
            what = (
                f"parameter {bad[0][0]!r} has shape {bad[0][1]} here but {bad[1][0]!r} {bad[1][1]} on rank {r}"
                if bad
                else f"{len(shapes)} parameters here but {len(theirs)} on rank {r}"
            )
            raise ConfigError(
                f"the model differs across ranks: {what}; build the same model (same config and "
                "vocabulary) on every rank before wrapping it in DistributedDataParallel"
            )
    diff = torch.zeros(len(named), dtype=torch.float64, device=named[0][1].device if named else None)
    rank0 = []
    for i, (_, p) in enumerate(named):
        t = p.detach().clone()
        dist.broadcast(t, src=_src(group), group=group)
        diff[i] = (t - p).abs().max().double() if p.numel() else 0.0
        rank0.append(t)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX, group=group)
    differ = [named[i][0] for i in range(len(named)) if diff[i] > 0]
    if differ and not init_sync:
        i = int(diff.argmax())
        raise ConfigError(
            f"parameters differ across ranks at start: {named[i][0]!r} by up to {diff[i].item():.3g} from rank 0's"
            f"{f', and {len(differ) - 1} more' if len(differ) > 1 else ''}; seed every rank the same "
            "(torch.manual_seed(seed) before building the model) or pass init_sync=True to copy rank 0's parameters"
        )
    for (_, p), t in zip(named, rank0):
        p.copy_(t)
    for b in module.buffers():
        dist.broadcast(b, src=_src(group), group=group)
    return differ
