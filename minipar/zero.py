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
- stage 3 (P_os+g+p, :mod:`minipar.zero3`): the weights are sharded too.

Both need the same bytes on the wire as data parallelism's all-reduce, 2Ψ elements per rank
(§7.2.1: a ring all-reduce *is* a reduce-scatter followed by an all-gather).

Layout (as in FSDP): the model is cut into *units* (for the GPT: ``wte``, ``wpe``, each block,
``ln_f``, ``lm_head``). A unit's parameters are flattened into one fp32 buffer, zero-padded to a
multiple of N; rank r owns the contiguous slice ``[r·S, (r+1)·S)`` with S = padded size / N.
The optimizer is a real ``torch.optim.AdamW`` over the pieces of the shard that belong to each
original parameter (matrices with weight decay, vectors without, as in :func:`adamw_groups`),
so a step is elementwise the same arithmetic as single-device AdamW.

    opt = zero(model, stage=2, lr=3e-3, weight_decay=0.1)    # like torch.optim.AdamW(...)
    loss.backward(); opt.step(); opt.zero_grad()
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn

from . import dist as mdist
from .errors import ConfigError
from .memory import state_bytes

STAGES = {1: "optimizer state", 2: "optimizer state + gradients", 3: "optimizer state + gradients + parameters"}


def zero_bytes_formula(num_params: int, stage: int, world_size: int, mixed_precision: bool = False) -> dict:
    """Model-state bytes per rank for ZeRO ``stage`` (0 = plain data parallelism), ZeRO §5 / Fig. 1.

    fp32 AdamW: params 4Ψ, grads 4Ψ, optimizer 8Ψ; mixed precision: 2Ψ, 2Ψ, 12Ψ (K = 12). Stage 1
    divides the optimizer term by N, stage 2 also the gradients, stage 3 also the parameters.
    Returns ``{"params", "grads", "optimizer", "total"}`` in bytes (floats: Ψ/N need not be whole).
    """
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"stage={stage!r}: use 0 (data parallel), 1, 2 or 3")
    p, g, k = (2, 2, 12) if mixed_precision else (4, 4, 8)
    n = world_size
    d = dict(params=p * num_params / (n if stage >= 3 else 1), grads=g * num_params / (n if stage >= 2 else 1),
             optimizer=k * num_params / (n if stage >= 1 else 1))
    d["total"] = d["params"] + d["grads"] + d["optimizer"]
    return d


def adamw_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups as in GPT-2: decay matrices (dim >= 2), not vectors (biases, LayerNorm).

    The one definition every optimizer in the course uses (``minipar.train.build``, the 3D job,
    :func:`zero`), so their updates match exactly.
    """
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]


def default_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The units ZeRO flattens and shards: the root's children, ``ModuleList``/``Sequential`` opened.

    GPT: ``wte, wpe, blocks.0 .. blocks.{L-1}, ln_f, lm_head``. Children without parameters are
    skipped. Raises ConfigError for a parameter held by the root itself or shared by two units.
    """
    units = []
    for name, child in model.named_children():
        kids = child.named_children() if isinstance(child, (nn.ModuleList, nn.Sequential)) else [("", child)]
        for sub, m in kids:
            if any(True for _ in m.parameters()):
                units.append((f"{name}.{sub}" if sub else name, m))
    seen: dict[int, str] = {}
    for uname, m in units:
        for pname, p in m.named_parameters():
            if id(p) in seen:
                raise ConfigError(f"parameter {uname}.{pname} is also in unit {seen[id(p)]} (tied weights); ZeRO "
                                  "here shards each parameter once: build the model untied (tie_weights=False)")
            seen[id(p)] = uname
    missing = [n for n, p in model.named_parameters() if id(p) not in seen]
    if missing:
        raise ConfigError(f"parameters {missing} belong to no unit (they sit on the root module); "
                          "move them into a child module, or pass units=[(name, module), ...]")
    return units


class FlatUnit:
    """One unit's parameters laid out in one flat buffer of ``padded`` elements, sharded over N ranks.

    Attributes:
        names, shapes, numels, offsets: the original parameters, in ``named_parameters`` order.
        numel: Ψ_unit; padded: Ψ_unit rounded up to a multiple of N; shard_size: padded / N.
        lo, hi: this rank's slice ``[lo, hi)`` of the flat buffer.
    """

    def __init__(self, name: str, module: nn.Module, rank: int, world: int):
        self.name = name
        named = list(module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.offsets = [sum(self.numels[:i]) for i in range(len(named))]
        self.numel = sum(self.numels)
        self.padded = math.ceil(self.numel / world) * world
        self.shard_size = self.padded // world
        self.lo, self.hi = rank * self.shard_size, (rank + 1) * self.shard_size

    def flatten(self, tensors) -> torch.Tensor:
        """The unit's tensors (e.g. parameters or gradients; None = zeros) -> one (padded,) fp32 tensor."""
        dev = next((t.device for t in tensors if t is not None), None)
        parts = [torch.zeros(n, device=dev) if t is None else t.detach().reshape(-1).float()
                 for t, n in zip(tensors, self.numels)]
        return torch.cat(parts + [torch.zeros(self.padded - self.numel, device=dev)])

    def segments(self):
        """Yield ``(i, a, b)``: parameter i's elements at shard positions ``[a, b)`` (may skip params)."""
        for i, (off, n) in enumerate(zip(self.offsets, self.numels)):
            a, b = max(off, self.lo), min(off + n, self.hi)
            if a < b:
                yield i, a - self.lo, b - self.lo


def reduce_scatter_mean(shard_out: torch.Tensor, full: torch.Tensor, group=None) -> torch.Tensor:
    """``shard_out`` <- this rank's 1/N slice of the mean of ``full`` over ranks. (padded,) -> (padded/N,)."""
    n = mdist.world_size(group)
    if n == 1:
        return shard_out.copy_(full)
    dist.reduce_scatter_single(shard_out, full, group=group)
    return shard_out.div_(n)


def all_gather_flat(full_out: torch.Tensor, shard: torch.Tensor, group=None) -> torch.Tensor:
    """``full_out`` (padded,) <- every rank's shard (padded/N,), in rank order."""
    if mdist.world_size(group) == 1:
        return full_out.copy_(shard)
    dist.all_gather_single(full_out, shard, group=group)
    return full_out


def check_same_start(units: list[FlatUnit], flats: list[torch.Tensor], group=None) -> None:
    """Raise ConfigError if the ranks do not start from bit-identical parameters.

    Each rank hashes every unit's flat buffer (its fp32 bits, weighted by position, summed in int64)
    and the hashes are all-gathered: N·(number of units) int64 values, not Ψ floats.
    """
    n = mdist.world_size(group)
    if n == 1:
        return
    hashes = torch.stack([(f.view(torch.int32).long() * (torch.arange(f.numel(), device=f.device) % 1000003 + 1)).sum()
                          for f in flats])
    every = hashes.new_empty(n * len(flats))
    dist.all_gather_single(every, hashes, group=group)
    every = every.view(n, len(flats))
    for j, u in enumerate(units):
        bad = [r for r in range(n) if every[r, j] != every[0, j]]
        if bad:
            raise ConfigError(f"parameters of unit {u.name!r} differ between rank 0 and rank(s) {bad} at the start; "
                              "every rank must start from the same weights: seed before building the model "
                              "(torch.manual_seed) or call minipar.data_parallel.broadcast_parameters(model) first")


class ShardOptimizer:
    """AdamW over this rank's shards; the part stages 1, 2 and 3 share.

    Subclasses provide ``self.units`` (FlatUnit), ``self.shards`` (one (S,) tensor per unit, the
    weights this rank updates) and ``_grad_shards()`` (one (S,) mean gradient per unit).
    """

    stage = 0

    def _build_adamw(self, lr, betas, eps, weight_decay, max_norm):
        if max_norm is not None and not max_norm > 0:
            raise ConfigError(f"max_norm={max_norm!r} must be > 0 (or None for no clipping), e.g. max_norm=1.0")
        self.max_norm = max_norm
        self.pieces = []  # (unit index, a, b, view of the shard): one AdamW "parameter" each
        decay, no_decay = [], []
        for j, (u, shard) in enumerate(zip(self.units, self.shards)):
            for i, a, b in u.segments():
                v = shard.detach()[a:b]
                self.pieces.append((j, a, b, v))
                (decay if len(u.shapes[i]) >= 2 else no_decay).append(v)
        groups = [g for g in ({"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        # a rank whose shards hold only padding still needs an optimizer object
        dummy = [{"params": [torch.zeros(0, device=self.shards[0].device)]}]
        self.optimizer = torch.optim.AdamW(groups or dummy, lr=lr, betas=betas, eps=eps)

    @property
    def param_groups(self):
        """The AdamW param groups (set ``g["lr"]`` here for a schedule, as with any optimizer)."""
        return self.optimizer.param_groups

    def clip_(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Scale the gradient shards so the *global* norm is <= max_norm; returns that global norm.

        Each rank has only its shards, so the squared norms are summed with one all_reduce (4 bytes).
        Same rule as ``torch.nn.utils.clip_grad_norm_``: multiply by min(1, max_norm / (norm + 1e-6)).
        """
        sq = torch.stack([g.pow(2).sum() for g in grads]).sum()
        if mdist.world_size(self.group) > 1:
            dist.all_reduce(sq, group=self.group)
        norm = sq.sqrt()
        coef = torch.clamp(self.max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
        return norm

    @torch.no_grad()
    def _adamw_step(self, grads: list[torch.Tensor]) -> None:
        if self.max_norm is not None:
            self.clip_(grads)
        for j, a, b, v in self.pieces:
            v.grad = grads[j][a:b]
        self.optimizer.step()
        for *_, v in self.pieces:
            v.grad = None


class ZeroOptimizer(ShardOptimizer):
    """ZeRO stage 1 or 2 around an unsharded model: an AdamW replacement (``step``, ``zero_grad``).

    Args:
        model: every rank's full model, identical at start (checked: ConfigError if not).
        stage: 1 (shard optimizer state) or 2 (also shard gradients, reduce-scattered in backward).
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW``; weight decay on matrices only.
        max_norm: clip the global gradient norm to this (None: no clipping).
        group: the data-parallel process group (default: the world).
        units: ``[(name, module), ...]`` (default :func:`default_units`).
    Raises:
        ConfigError: a bad stage, ``max_norm`` <= 0, tied/uncovered parameters, ranks that start
        from different weights.
    """

    def __init__(self, model: nn.Module, stage: int = 1, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_norm: float | None = None, group=None, units=None):
        if stage not in (1, 2):
            raise ConfigError(f"ZeroOptimizer(stage={stage!r}): use stage 1 or 2 here; stage 3 shards the "
                              "parameters too: minipar.zero.zero(model, stage=3) or minipar.zero3.Zero3")
        self.model, self.stage, self.group = model, stage, group
        rank, n = mdist.rank(group), mdist.world_size(group)
        units = units or default_units(model)
        self.units = [FlatUnit(name, m, rank, n) for name, m in units]
        self.params = [list(m.parameters()) for _, m in units]
        self.flats = [u.flatten(ps) for u, ps in zip(self.units, self.params)]
        check_same_start(self.units, self.flats, group)
        for u, ps, flat in zip(self.units, self.params, self.flats):  # the weights become views of the flat buffer
            for p, off, k, shape in zip(ps, u.offsets, u.numels, u.shapes):
                p.data = flat[off:off + k].view(shape)
        self.shards = [flat[u.lo:u.hi] for u, flat in zip(self.units, self.flats)]
        self._build_adamw(lr, betas, eps, weight_decay, max_norm)
        self.grad_shards: list[torch.Tensor | None] = [None] * len(self.units)
        self._ready = [0] * len(self.units)
        self._hooks = []
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
        full = u.flatten([p.grad for p in ps])                      # (padded,) this rank's gradient
        shard = reduce_scatter_mean(full.new_empty(u.shard_size), full, self.group)  # (S,) mean over ranks
        self.grad_shards[j] = shard if self.grad_shards[j] is None else self.grad_shards[j].add_(shard)
        self._ready[j] = 0
        if self.stage == 2:
            for p in ps:
                p.grad = None                                       # the full gradient is gone

    def _grad_shards(self) -> list[torch.Tensor]:
        for j in range(len(self.units)):
            if self.stage == 1 or self._ready[j]:   # stage 1; or stage 2 units with unused parameters
                self._reduce_scatter_unit(j)
        return [g if g is not None else torch.zeros_like(s) for g, s in zip(self.grad_shards, self.shards)]

    @torch.no_grad()
    def step(self) -> None:
        """Reduce-scatter gradients (stage 1), AdamW on this rank's shard, all-gather the weights."""
        self._adamw_step(self._grad_shards())
        for u, flat, shard in zip(self.units, self.flats, self.shards):
            all_gather_flat(flat, shard.clone(), self.group)
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

        Counted from the tensors that exist (:func:`minipar.memory.state_bytes`) plus the gradient
        shards; compare with :func:`zero_bytes_formula`.
        """
        d = state_bytes(self.model, self.optimizer)
        d["params"] = sum(f.numel() * f.element_size() for f in self.flats)   # includes the few padding bytes
        d["grads"] += sum(g.numel() * g.element_size() for g in self.grad_shards if g is not None)
        d["total"] = d["params"] + d["grads"] + d["optimizer"]
        return d


def zero(model: nn.Module, stage: int, **kwargs):
    """ZeRO optimizer for ``stage`` 1, 2 (:class:`ZeroOptimizer`) or 3 (:class:`minipar.zero3.Zero3`,
    which replaces the model's units in place by sharded ones). ``kwargs`` as :class:`ZeroOptimizer`.

    Raises:
        ConfigError: ``stage`` not in 1, 2, 3.
    """
    if stage in (1, 2):
        return ZeroOptimizer(model, stage=stage, **kwargs)
    if stage == 3:
        from .zero3 import Zero3
        return Zero3(model, **kwargs)
    raise ConfigError(f"ZeRO stage={stage!r} does not exist; use 1 ({STAGES[1]}), 2 ({STAGES[2]}) or 3 ({STAGES[3]})")
