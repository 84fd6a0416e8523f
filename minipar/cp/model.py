"""Context parallelism in the main job (``--cp N``): what a model piece needs to run on its tokens only.

    ranges = set_context_parallel(stage, T, mesh)        # every attention -> ring attention over mesh.cp_group
    x, y = shard_batch(x, y, ranges, mesh.cp_rank)        # (B, T) -> (B, L_r): this cp rank's positions
    loss = stage.loss(logits, y) * loss_weight(ranges, mesh.cp_rank, mesh.cp_size)

Everything outside attention (embeddings, LayerNorm, MLP, head, loss) works token by token, so on
its L_r tokens a cp rank computes exactly the single device's rows; only attention needs the other
ranks' keys and values (:mod:`minipar.cp.ring`). Two things change besides attention:

- positions: the position embedding must read each token's *global* position
  (:func:`minipar.cp.split.positions`), set as ``module.positions`` (``GPT.embed`` reads it);
- the loss: a rank's mean over its L_r tokens is weighted by ``cp · L_r / T``, so that averaging
  over the dp × cp ranks (the gradient all-reduce over ``mesh.dp_cp_group``, as Megatron-LM averages
  over its data-parallel group with context parallelism) gives the mean over all T tokens exactly,
  also when T does not split evenly.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from minipar.cp.ring import ring_attention
from minipar.cp.split import Ranges, length, load_balanced_ranges, positions, shard


def set_context_parallel(module: nn.Module, T: int, mesh) -> list[Ranges]:
    """Make every attention of ``module`` ring attention over ``mesh.cp_group`` for sequences of T
    tokens (load-balanced split), and set ``module.positions``. Returns every cp rank's ranges."""
    ranges = load_balanced_ranges(T, mesh.cp_size)
    for m in module.modules():
        if hasattr(m, "context_parallel"):
            m.context_parallel = functools.partial(ring_attention, ranges=ranges, group=mesh.cp_group)
    module.positions = positions(ranges[mesh.cp_rank])
    return ranges


def shard_batch(x: torch.Tensor, y: torch.Tensor, ranges: list[Ranges], cp_rank: int):
    """This cp rank's tokens of a (B, T) batch: (B, L_r) ids and targets."""
    return shard(x, ranges[cp_rank], dim=1), shard(y, ranges[cp_rank], dim=1)


def loss_weight(ranges: list[Ranges], cp_rank: int, cp: int) -> float:
    """``cp · L_r / T``: the factor that makes the average over cp ranks of the weighted local means the
    mean over all T tokens."""
    T = sum(length(rr) for rr in ranges)
    return cp * length(ranges[cp_rank]) / T


def enter_batch(module: nn.Module, x: torch.Tensor, y: torch.Tensor, mesh):
    """Before a step on the (B, T) batch ``x``, ``y``: :func:`set_context_parallel`, the loss weight
    (``module.cp_weight``, read by :func:`weighted_loss`), and this rank's (B, L_r) share. No-op at cp = 1."""
    if mesh.cp_size == 1:
        return x, y
    ranges = set_context_parallel(module, x.shape[1], mesh)
    module.cp_weight = loss_weight(ranges, mesh.cp_rank, mesh.cp_size)
    return shard_batch(x, y, ranges, mesh.cp_rank)


def weighted_loss(module: nn.Module, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``module.loss(logits, targets)`` times ``module.cp_weight`` (1 without context parallelism)."""
    return module.loss(logits, targets) * getattr(module, "cp_weight", 1.0)
