"""Context parallelism in the main job (``--cp N``): what a model piece needs to run on its tokens only,
installed once.

    cp = ContextParallel(T, mesh)        # the load-balanced split of T tokens over mesh.cp_group
    cp.apply(stage)                      # once (minipar.job.parallelize): ring attention, global positions
    x, y = cp.shard(x, y)                # every batch: (B, T) -> (B, L_r), this cp rank's tokens
    loss = stage.loss(logits, y) * cp.loss_weight

Everything outside attention (embeddings, LayerNorm, MLP, head, loss) works token by token, so on
its L_r tokens a cp rank computes exactly the single device's rows; only attention needs the other
ranks' keys and values (:mod:`minipar.cp.ring`). Two things change besides attention:

- positions: the position embedding must read each token's *global* position
  (:func:`minipar.cp.split.positions`): a forward pre-hook on ``wpe`` (owned by :meth:`ContextParallel.apply`)
  replaces the local ``arange`` that ``GPT.embed`` passes it;
- the loss: a rank's mean over its L_r tokens is weighted by ``cp · L_r / T`` (:attr:`ContextParallel.loss_weight`),
  so that averaging over the dp × cp ranks (the gradient all-reduce over ``mesh.dp_cp_group``, as
  Megatron-LM averages over its data-parallel group with context parallelism) gives the mean over all
  T tokens exactly, also when T does not split evenly.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from minipar.cp.ring import ring_attention
from minipar.cp.split import length, load_balanced_ranges, positions, shard


class ContextParallel:
    """Sequences of ``T`` tokens split over ``mesh.cp_group`` (the load-balanced split: every cp rank two
    chunks, :func:`minipar.cp.split.load_balanced_ranges`).

    Attributes:
        ranges: every cp rank's ranges; ``mine``: this rank's (``mesh.cp_rank``'s).
        loss_weight: ``cp · L_r / T``, the factor that makes the average over cp ranks of the weighted
            local means the mean over all T tokens.
    """

    def __init__(self, T: int, mesh):
        self.T, self.group = T, mesh.cp_group
        self.ranges = load_balanced_ranges(T, mesh.cp_size)
        self.mine = self.ranges[mesh.cp_rank]
        self.loss_weight = mesh.cp_size * length(self.mine) / T

    def apply(self, module: nn.Module) -> nn.Module:
        """Once, on a model or pipeline stage: every attention core becomes ring attention over the cp group
        (``CausalSelfAttention.context_parallel``), and the position embedding (if ``module`` has one) reads
        this rank's global positions (a forward pre-hook). Returns ``module``."""
        ring = functools.partial(ring_attention, ranges=self.ranges, group=self.group)
        for m in module.modules():
            if hasattr(m, "context_parallel"):
                m.context_parallel = ring
        if getattr(module, "wpe", None) is not None:
            module.wpe.register_forward_pre_hook(functools.partial(_global_positions, positions(self.mine)))
        return module

    def shard(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This cp rank's tokens of a (B, T) batch: (B, L_r) ids and targets."""
        return shard(x, self.mine, dim=1), shard(y, self.mine, dim=1)


def _global_positions(pos: torch.Tensor, module: nn.Module, args: tuple) -> tuple:
    """``wpe``'s forward pre-hook: the (L_r,) global positions in place of ``GPT.embed``'s local ``arange``."""
    return (pos.to(args[0].device),)
