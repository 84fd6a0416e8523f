"""The all-to-all with uneven splits that expert parallelism is built on, differentiable.

    out = all_to_all(x, output_split_sizes, input_split_sizes, group)   # autograd flows through

Every rank of a group of N cuts its input's rows into N blocks, ``input_split_sizes[j]`` rows for
group rank j, and receives block i from rank i, ``output_split_sizes[i]`` rows, stacked in rank
order: ``torch.distributed.all_to_all_single`` with explicit splits (the splits may differ from
rank to rank; rank i's ``input_split_sizes[j]`` must equal rank j's ``output_split_sizes[i]``).
Its backward is the same exchange reversed: the gradient of the output block from rank i goes
back to rank i, so the backward swaps the two split lists. (GShard, Lepikhin et al. 2020,
arXiv:2006.16668, built the expert-parallel MoE layer this way: a dispatch all-to-all, the
experts, a combine all-to-all.) PyTorch's version of this function is
``torch.distributed._functional_collectives.all_to_all_single_autograd`` (2.13 deprecates the older
``torch.distributed.nn.functional.all_to_all_single``); minipar writes it out to show both directions.

Bytes, per rank, of an all-to-all of rows of ``r`` bytes: sent = r · Σ_{j≠me} input_split_sizes[j],
received = r · Σ_{i≠me} output_split_sizes[i] (the block a rank keeps for itself is not sent);
``minipar.comm.comm_log`` counts exactly that for ``all_to_all_single``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.errors import ConfigError


def _exchange(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    n = dist.get_world_size(group)
    if len(out_splits) != n or len(in_splits) != n:
        raise ConfigError(
            f"all_to_all: {len(in_splits)} input and {len(out_splits)} output splits for a group of {n}; "
            "pass one split per rank of the group"
        )
    if sum(in_splits) != x.shape[0]:
        raise ConfigError(
            f"all_to_all: input_split_sizes sum to {sum(in_splits)} but the input has {x.shape[0]} rows; "
            "the splits must cover the input's first dimension"
        )
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        return _exchange(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        return _exchange(grad, in_splits, out_splits, ctx.group), None, None, None  # the reverse exchange


def all_to_all(
    x: torch.Tensor, output_split_sizes: list[int], input_split_sizes: list[int], group=None
) -> torch.Tensor:
    """Differentiable all-to-all over ``group`` with uneven splits along the first dimension.

    Args:
        x: (sum(input_split_sizes), ...) rows, block j going to group rank j.
        output_split_sizes: rows this rank receives from each group rank (N ints).
        input_split_sizes: rows this rank sends to each group rank (N ints).
        group: a process group (default: the world).
    Returns:
        (sum(output_split_sizes), ...): the blocks received, in group-rank order. Backward sends
        the gradient blocks back the same way (splits swapped).
    Raises:
        ConfigError: not one split per rank, or splits that do not cover ``x``'s rows.
    """
    return _AllToAll.apply(x, list(output_split_sizes), list(input_split_sizes), group)
