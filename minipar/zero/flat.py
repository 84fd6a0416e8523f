"""ZeRO's building blocks: flat parameter shards and the collectives that move them.

Rajbhandari, Rasley, Ruwase, He 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", arXiv:1910.02054 (§5 the three stages, §7 communication volume).

Layout (as in FSDP): the model is cut into *units* (for the GPT: ``wte``, ``wpe``, each block,
``ln_f``, ``lm_head``; :func:`default_units`). A unit's parameters are flattened into one fp32
buffer, zero-padded to a multiple of N (:class:`FlatUnit`); rank r owns the contiguous slice
``[r·S, (r+1)·S)`` with S = padded size / N. Two collectives move shards:

- :func:`reduce_scatter_mean`: (padded,) gradient on every rank -> this rank's (S,) mean shard;
- :func:`all_gather_flat`: every rank's (S,) shard -> the (padded,) full buffer everywhere.

:class:`ShardOptimizer` is the part stages 1, 2 (:mod:`minipar.zero.stage12`) and 3
(:mod:`minipar.zero.stage3`) share: a real ``torch.optim.AdamW`` over the pieces of the shard
that belong to each original parameter (matrices with weight decay, vectors without, as
:func:`minipar.model.gpt.adamw_groups`), so a step is elementwise the same arithmetic as
single-device AdamW. :func:`zero_bytes_formula` is the paper's bytes per rank for each stage.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.errors import ConfigError
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.runtime import dist as mdist
from minipar.zero.formula import STAGES, zero_bytes_formula  # noqa: F401 (public here: README's API table)


def default_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The units ZeRO flattens and shards: the root's children, ``ModuleList``/``ModuleDict``/``Sequential`` opened.

    GPT: ``wte, wpe, blocks.0 .. blocks.{L-1}, ln_f, lm_head``; a pipeline stage: its own of these.
    Children without parameters are skipped. Raises ConfigError for a parameter held by the root
    itself or shared by two units.
    """
    units = []
    for name, child in model.named_children():
        kids = (
            child.named_children()
            if isinstance(child, (nn.ModuleList, nn.ModuleDict, nn.Sequential))
            else [("", child)]
        )
        for sub, m in kids:
            if any(True for _ in m.parameters()):
                units.append((f"{name}.{sub}" if sub else name, m))
    seen: dict[int, str] = {}
    for uname, m in units:
        for pname, p in m.named_parameters():
            if id(p) in seen:
                raise ConfigError(
                    f"parameter {uname}.{pname} is also in unit {seen[id(p)]} (tied weights); ZeRO "
                    "here shards each parameter once: build the model untied (tie_weights=False)"
                )
            seen[id(p)] = uname
    missing = [n for n, p in model.named_parameters() if id(p) not in seen]
    if missing:
        raise ConfigError(
            f"parameters {missing} belong to no unit (they sit on the root module); "
            "move them into a child module, or pass units=[(name, module), ...]"
        )
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
        """The unit's tensors (e.g. parameters or gradients; None = zeros) -> one (padded,) tensor.

        Its dtype is the tensors' own (fp32 for the lesson's measurements, float64 for its proofs).
        """
        dev = next((t.device for t in tensors if t is not None), None)
        dt = next((t.dtype for t in tensors if t is not None), torch.get_default_dtype())
        parts = [
            torch.zeros(n, device=dev, dtype=dt) if t is None else t.detach().reshape(-1).to(dt)
            for t, n in zip(tensors, self.numels)
        ]
        return torch.cat(parts + [torch.zeros(self.padded - self.numel, device=dev, dtype=dt)])

    def segments(self):
        """Yield ``(i, a, b)``: parameter i's elements at shard positions ``[a, b)`` (may skip params)."""
        for i, (off, n) in enumerate(zip(self.offsets, self.numels)):
            a, b = max(off, self.lo), min(off + n, self.hi)
            if a < b:
                yield i, a - self.lo, b - self.lo


def reduce_scatter_mean(shard_out: torch.Tensor, full: torch.Tensor, group=None, async_op: bool = False):
    """``shard_out`` <- this rank's 1/N slice of the mean of ``full`` over ranks. (padded,) -> (padded/N,).

    Returns ``shard_out``; with ``async_op``, a function to call before reading it (it waits for the
    reduce-scatter, divides by N and returns ``shard_out``), so several can be in flight at once."""
    n = mdist.world_size(group)
    if n == 1:
        shard_out.copy_(full)
        return (lambda: shard_out) if async_op else shard_out
    work = dist.reduce_scatter_single(shard_out, full, group=group, async_op=async_op)
    if not async_op:
        return shard_out.div_(n)

    def finish(full=full) -> torch.Tensor:  # full: kept alive until the reduce-scatter has read it
        work.wait()
        return shard_out.div_(n)

    return finish


def all_gather_flat(full_out: torch.Tensor, shard: torch.Tensor, group=None, async_op: bool = False):
    """``full_out`` (padded,) <- every rank's shard (padded/N,), in rank order. Returns ``full_out``,
    or with ``async_op`` the work to wait on before reading it (None on one rank: copied at once)."""
    if mdist.world_size(group) == 1:
        full_out.copy_(shard)
        return None if async_op else full_out
    work = dist.all_gather_single(full_out, shard, group=group, async_op=async_op)
    return work if async_op else full_out


def all_gather_units(flats: list[torch.Tensor], shards: list[torch.Tensor], group=None) -> None:
    """Every unit's ``flats[j]`` (padded,) <- every rank's ``shards[j]``, all in flight at once: each shard is
    copied first (it lies inside the buffer gathered into), every all-gather is posted, then the last is
    waited for first (on one stream the others are done with it, so no bookkeeping overlaps a transfer)."""
    copies = [shard.clone() for shard in shards]
    works = [all_gather_flat(flat, c, group, async_op=True) for flat, c in zip(flats, copies)]
    for work in reversed(works):
        if work is not None:
            work.wait()


def check_same_start(names: list[str], flats: list[torch.Tensor], group=None) -> None:
    """Raise ConfigError if the ranks do not start from bit-identical parameters.

    Each rank hashes every unit's flat buffer (its bits as int32/int64, weighted by position, summed in int64)
    and the hashes are all-gathered: N·(number of units) int64 values, not Ψ floats.
    """
    n = mdist.world_size(group)
    if n == 1:
        return
    bits = [f.view(torch.int64 if f.element_size() == 8 else torch.int32).long() for f in flats]
    hashes = torch.stack([(b * (torch.arange(b.numel(), device=b.device) % 1000003 + 1)).sum() for b in bits])
    every = hashes.new_empty(n * len(flats))
    dist.all_gather_single(every, hashes, group=group)
    every = every.view(n, len(flats))
    for j, name in enumerate(names):
        bad = [r for r in range(n) if every[r, j] != every[0, j]]
        if bad:
            raise ConfigError(
                f"parameters of unit {name!r} differ between rank 0 and rank(s) {bad} at the start; "
                "every rank must start from the same weights: seed before building the model "
                "(torch.manual_seed) or call minipar.dp.sync.broadcast_parameters(model) first"
            )


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
        groups = [
            g
            for g in ({"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0})
            if g["params"]
        ]
        # a rank whose shards hold only padding still needs an optimizer object
        dummy = [{"params": [torch.zeros(0, device=self.shards[0].device)]}]
        self.optimizer = torch.optim.AdamW(groups or dummy, lr=lr, betas=betas, eps=eps)

    @property
    def param_groups(self):
        """The AdamW param groups (set ``g["lr"]`` here for a schedule, as with any optimizer)."""
        return self.optimizer.param_groups

    def clip_(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Scale the gradient shards so the *global* norm is <= max_norm; returns that global norm.

        Each rank has only its shards, so the squared norms are summed over the group with one
        all_reduce (4 bytes): :func:`minipar.optim.clip_grads.clip_grad_norm_`.
        """
        return clip_grad_norm_(grads, self.max_norm, self.group)

    @torch.no_grad()
    def _adamw_step(self, grads: list[torch.Tensor]) -> None:
        if self.max_norm is not None:
            self.clip_(grads)
        for j, a, b, v in self.pieces:
            v.grad = grads[j][a:b]
        self.optimizer.step()
        for *_, v in self.pieces:
            v.grad = None
