"""ZeRO stages 1 and 2: shard the optimizer state (and the gradients) over the data-parallel ranks.

Rajbhandari, Rasley, Ruwase, He 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", arXiv:1910.02054 (§5 the three stages, §7 communication volume).

Plain data parallelism keeps a full copy of everything on every rank: for Ψ parameters trained
with fp32 AdamW that is 4Ψ (weights) + 4Ψ (gradients) + 8Ψ (two moments) = 16Ψ bytes per rank
(mixed precision: 2Ψ + 2Ψ + KΨ with K = 12). But each rank only *needs* to update 1/N of the
parameters if the others send it the result. So, with N ranks:

- stage 1 (P_os): rank r keeps the AdamW moments of its 1/N shard only. After backward, a
  ``reduce_scatter`` sums the gradients and leaves each rank the sum for its own shard; each rank
  steps its shard; an ``all_gather`` rebuilds the full, updated weights everywhere.
  fp32: 4Ψ + 4Ψ + 8Ψ/N bytes (mixed precision 2Ψ + 2Ψ + KΨ/N).
- stage 2 (P_os+g): the same, but each unit's full gradient is reduce-scattered *during*
  backward, as soon as it is complete, and then dropped: only the 1/N gradient shard is kept.
  fp32: 4Ψ + 12Ψ/N (mixed precision 2Ψ + 14Ψ/N).
- stage 3 (P_os+g+p, :mod:`minipar.zero.stage3`): the weights are sharded too.

Both need the same bytes on the wire as data parallelism's all-reduce, 2Ψ elements per rank
(§7.2.1: a ring all-reduce *is* a reduce-scatter followed by an all-gather).

**Overlapped weight all-gather** (``overlap_param_gather=True``; Megatron-LM's
``--overlap-param-gather``; MegaScale, Jiang et al. 2024, arXiv:2402.15627, §3.2): ``step()`` does not
wait for the all-gather of the updated weights. It issues the first unit's gather asynchronously
(it travels while the next batch is loaded); each unit's forward then issues the next unit's gather
and waits only for its own, so unit k+1's weights travel while unit k computes. Same bytes, same
numbers (bit for bit); only the first gather is left exposed.

The flat shards, their collectives and the sharded AdamW live in :mod:`minipar.zero.flat`.

    opt = ZeroOptimizer(model, stage=2, lr=3e-3, weight_decay=0.1)    # like torch.optim.AdamW(...)
    loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.errors import ConfigError
from minipar.model.memory import state_bytes
from minipar.runtime import dist as mdist
from minipar.zero.flat import (
    FlatUnit,
    ShardOptimizer,
    all_gather_flat,
    all_gather_units,
    check_same_start,
    default_units,
    reduce_scatter_mean,
)


class ZeroOptimizer(ShardOptimizer):
    """ZeRO stage 1 or 2 around an unsharded model: an AdamW replacement (``step``, ``zero_grad``).

    Args:
        model: every rank's full model, identical at start (checked: ConfigError if not).
        stage: 1 (shard optimizer state) or 2 (also shard gradients, reduce-scattered in backward).
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW``; weight decay on matrices only.
        max_norm: clip the global gradient norm to this (None: no clipping).
        group: the data-parallel process group (default: the world).
        units: ``[(name, module), ...]`` (default :func:`default_units`), in forward order.
        overlap_param_gather: after ``step()``, gather each unit's updated weights asynchronously,
            one unit ahead of the forward (module docstring). Read the weights other than through
            a forward (a state dict, a checkpoint) after :meth:`wait_params`.
    Raises:
        ConfigError: a bad stage, ``max_norm`` <= 0, tied/uncovered parameters, ranks that start
        from different weights.
    """

    def __init__(
        self,
        model: nn.Module,
        stage: int = 1,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_norm: float | None = None,
        group=None,
        units=None,
        overlap_param_gather: bool = False,
    ):
        if stage not in (1, 2):
            raise ConfigError(
                f"ZeroOptimizer(stage={stage!r}): use stage 1 or 2 here; stage 3 shards the "
                "parameters too: minipar.zero.zero(model, stage=3) or minipar.zero.stage3.Zero3"
            )
        self.model, self.stage, self.group = model, stage, group
        rank, n = mdist.rank(group), mdist.world_size(group)
        units = units or default_units(model)
        self.units = [FlatUnit(name, m, rank, n) for name, m in units]
        self.params = [list(m.parameters()) for _, m in units]
        self.flats = [u.flatten(ps) for u, ps in zip(self.units, self.params)]
        check_same_start([u.name for u in self.units], self.flats, group)
        for u, ps, flat in zip(self.units, self.params, self.flats):  # the weights become views of the flat buffer
            for p, off, k, shape in zip(ps, u.offsets, u.numels, u.shapes):
                p.data = flat[off : off + k].view(shape)
        self.shards = [flat[u.lo : u.hi] for u, flat in zip(self.units, self.flats)]
        self._build_adamw(lr, betas, eps, weight_decay, max_norm)
        self.grad_shards: list[torch.Tensor | None] = [None] * len(self.units)
        self._ready = [0] * len(self.units)
        self._hooks = []
        self.overlap_param_gather = overlap_param_gather
        self._gathers: list = [None] * len(self.units)  # (work, shard copy) in flight, per unit
        self._issued = len(self.units)  # units whose gather of this step has been issued
        if overlap_param_gather:
            for j, (_, m) in enumerate(units):
                self._hooks.append(m.register_forward_pre_hook(lambda mod, args, j=j: self._before_forward(j)))
        if stage == 2:
            for j, ps in enumerate(self.params):
                for p in ps:
                    self._hooks.append(p.register_post_accumulate_grad_hook(lambda p, j=j: self._on_grad(j)))

    # stage 2: reduce-scatter a unit's gradient the moment backward has finished it, then drop it
    def _on_grad(self, j: int) -> None:
        self._ready[j] += 1
        if self._ready[j] == len(self.params[j]):
            self._reduce_scatter_unit(j)

    @torch.no_grad()
    def _reduce_scatter_unit(self, j: int) -> None:
        u, ps = self.units[j], self.params[j]
        full = u.flatten([p.grad for p in ps])  # (padded,) this rank's gradient
        shard = reduce_scatter_mean(full.new_empty(u.shard_size), full, self.group)  # (S,) mean over ranks
        self.grad_shards[j] = shard if self.grad_shards[j] is None else self.grad_shards[j].add_(shard)
        self._ready[j] = 0
        if self.stage == 2:
            for p in ps:
                p.grad = None  # the full gradient is gone

    @torch.no_grad()
    def _grad_shards(self) -> list[torch.Tensor]:
        if self.stage == 1:  # every unit's reduce-scatter is posted before the first wait: their latencies overlap
            fulls = [u.flatten([p.grad for p in ps]) for u, ps in zip(self.units, self.params)]
            posted = [
                reduce_scatter_mean(f.new_empty(u.shard_size), f, self.group, True) for u, f in zip(self.units, fulls)
            ]
            self.grad_shards = [finish() for finish in posted]  # (S,) means over ranks
        for j in range(len(self.units)):
            if self._ready[j]:  # stage 2 units with unused parameters
                self._reduce_scatter_unit(j)
        return [g if g is not None else torch.zeros_like(s) for g, s in zip(self.grad_shards, self.shards)]

    # overlap_param_gather: gathers issued one unit ahead of the forward, each waited just before its unit
    def _issue_gather(self, j: int) -> None:
        shard = self.shards[j].clone()
        self._gathers[j] = (all_gather_flat(self.flats[j], shard, self.group, async_op=True), shard)

    def _before_forward(self, j: int) -> None:
        while self._issued < min(j + 2, len(self.units)):  # this unit's gather (if late) and the next one's
            self._issue_gather(self._issued)
            self._issued += 1
        for k in range(j + 1):
            if self._gathers[k] is not None:
                self._gathers[k][0].wait()
                self._gathers[k] = None

    def wait_params(self) -> None:
        """Finish every weight all-gather still pending (``overlap_param_gather``): the full weights are current."""
        self._before_forward(len(self.units) - 1)

    @torch.no_grad()
    def step(self) -> None:
        """Reduce-scatter gradients (stage 1), AdamW on this rank's shard, all-gather the weights."""
        self.wait_params()  # overlap_param_gather (lesson 09): gathers no forward has waited for yet
        self._adamw_step(self._grad_shards())
        if self.overlap_param_gather and mdist.world_size(self.group) > 1:  # lesson 09: the next forward waits
            self._issued = 1
            self._issue_gather(0)
        else:
            all_gather_units(self.flats, self.shards, self.group)  # every unit's all-gather in flight at once
        if self.stage == 1:
            self.grad_shards = [None] * len(self.units)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients: full ``p.grad`` (stage 1) and the gradient shards."""
        for ps in self.params:
            for p in ps:
                p.grad = None
        self.grad_shards = [None] * len(self.units)
        self._ready = [0] * len(self.units)

    def held_bytes(self) -> dict:
        """Bytes of model state this rank holds now: ``{"params", "grads", "optimizer", "total"}``.

        Counted from the tensors that exist (:func:`minipar.model.memory.state_bytes`) plus the gradient
        shards; compare with :func:`zero_bytes_formula`.
        """
        self.wait_params()
        d = state_bytes(self.model, self.optimizer)
        d["params"] = sum(f.numel() * f.element_size() for f in self.flats)  # includes the few padding bytes
        d["grads"] += sum(g.numel() * g.element_size() for g in self.grad_shards if g is not None)
        d["total"] = d["params"] + d["grads"] + d["optimizer"]
        return d
