"""ZeRO stage 3: the parameters are sharded too, gathered just in time for each unit, freed after.

Rajbhandari et al. 2020, arXiv:1910.02054, §5.3 (P_os+g+p) and §7.2.2 (communication: 3Ψ).
PyTorch's FSDP (Zhao et al. 2023, arXiv:2304.11277) is the same algorithm; FSDP2 is
``torch.distributed.fsdp.fully_shard``.

Each unit (see :func:`minipar.zero.flat.default_units`) is replaced in its parent by a
:class:`ShardedUnit` that keeps only this rank's 1/N flat shard as its one ``nn.Parameter``.
Its forward, top to bottom:

1. ``full = _GatherShard.apply(shard)``: an ``all_gather`` rebuilds the unit's flat weights
   (Ψ_unit elements received, (N-1)/N of them from the other ranks);
2. the flat buffer is split into views shaped like the original parameters, and the original
   module runs on them (``torch.func.functional_call``);
3. autograd wants to keep some of those weights for backward (a linear layer keeps W to compute
   dL/dx = dL/dy · W). A ``saved_tensors_hooks`` pair stores a *note* (offset, shape, stride)
   instead of the tensor, so nothing holds ``full`` and it is freed when the forward returns;
4. in backward, the first time a note is unpacked the unit all-gathers its weights again (kept
   until the unit's backward ends). Units whose backward needs no weight — an embedding's
   gradient needs only the indices — never gather in backward;
5. ``_GatherShard.backward`` receives the unit's full gradient (padded,), ``reduce_scatter``s it
   and returns the mean gradient of this rank's shard, which autograd accumulates in
   ``shard.grad``. The re-gathered weights are dropped.

Per rank and step that is all-gather Ψ (forward) + all-gather Ψ (backward) + reduce-scatter Ψ
= 3Ψ elements, 1.5× data parallelism's 2Ψ, for model states of 16Ψ/N bytes (fp32 AdamW).

**Prefetch** (``Zero3(..., prefetch=True)``; FSDP's ``forward_prefetch``): when unit k's forward
gathers its weights, it also *issues* the all-gather of unit k+1 (``async_op=True``) before it
computes, so that gather runs while unit k computes; unit k+1 then only waits for it. Same bytes,
same values, one more unit's weights alive at a time. Lesson 09 draws the real timeline
(``timeline=[]`` collects ``(row, unit, t_start, t_end)`` in seconds of ``time.perf_counter``).
Backward gathers stay just in time (no backward prefetch here).
"""

from __future__ import annotations

import time
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.func import functional_call

from minipar.runtime import dist as mdist
from minipar.zero.flat import (
    FlatUnit,
    ShardOptimizer,
    all_gather_flat,
    check_same_start,
    default_units,
    reduce_scatter_mean,
)


class _GatherShard(torch.autograd.Function):
    """Forward: shard (S,) -> all-gathered flat weights (N·S,). Backward: full grad -> mean grad shard."""

    @staticmethod
    def forward(ctx, shard, unit):
        ctx.unit = unit
        return unit.gather("forward")

    @staticmethod
    def backward(ctx, grad_full):
        unit = ctx.unit
        grad_shard = reduce_scatter_mean(grad_full.new_empty(unit.flat.shard_size), grad_full.contiguous(), unit.group)
        unit.release_backward()
        return grad_shard, None


class ShardedUnit(nn.Module):
    """A module whose parameters live as one flat shard (``self.shard``, (S,) fp32) on this rank.

    Args:
        name: the unit's name (e.g. ``"blocks.0"``), used in traces and errors.
        module: the original module; its parameters are moved into the shard and removed.
        group: the data-parallel process group (default: the world).
        trace: a list to append ``(event, unit name, live gathered bytes after it)`` to, or None.
    """

    def __init__(self, name: str, module: nn.Module, group=None, trace: list | None = None):
        super().__init__()
        self.name, self.group, self.trace = name, group, trace
        self.next: ShardedUnit | None = None  # the unit to prefetch during this one's forward (Zero3)
        self.timeline: list | None = None  # (row, unit, t0, t1) records, set by Zero3(timeline=...)
        self._prefetched = None  # (buffer, work) of an all-gather in flight
        self.flat = FlatUnit(name, module, mdist.rank(group), mdist.world_size(group))
        full = self.flat.flatten([p for p in module.parameters()])
        self.start_flat = full  # only until Zero3 has checked that every rank starts the same
        self.shard = nn.Parameter(full[self.flat.lo : self.flat.hi].clone())
        for pname in self.flat.names:  # the module keeps empty placeholders, filled in each forward
            owner = module.get_submodule(pname.rpartition(".")[0])
            attr = pname.rpartition(".")[2]
            del owner._parameters[attr]
            owner.register_buffer(attr, self.shard.new_empty(0).detach(), persistent=False)
        self.module = module
        self._bwd_full: torch.Tensor | None = None

    # -- the gathered weights: who holds them, and for how long -------------------------------
    live_bytes = 0  # gathered bytes alive in this process, over all units (for the trace)

    def _log(self, event: str, delta: int) -> None:
        ShardedUnit.live_bytes += delta
        if self.trace is not None:
            self.trace.append((event, self.name, ShardedUnit.live_bytes))

    def gather(self, why: str) -> torch.Tensor:
        """All-gather this unit's flat weights, (padded,) fp32. The trace notes when it is freed."""
        if why == "forward":
            full = self.take_prefetched()
            if full is not None:
                return full
        t0 = time.perf_counter()
        full = all_gather_flat(self.shard.new_empty(self.flat.padded), self.shard.detach(), self.group)
        nbytes = full.numel() * full.element_size()
        if self.timeline is not None:
            self.timeline.append(
                ("all-gather", self.name + ("" if why == "forward" else " (bwd)"), t0, time.perf_counter())
            )
        self._log(f"gather ({why})", nbytes)
        weakref.finalize(full, self._log, f"free ({why})", -nbytes)
        return full

    def release_backward(self) -> None:
        self._bwd_full = None

    def prefetch(self) -> None:
        """Issue this unit's forward all-gather now, without waiting (its forward waits for it)."""
        if self._prefetched is not None or mdist.world_size(self.group) == 1:
            return
        buf = self.shard.new_empty(self.flat.padded)
        t0 = time.perf_counter()
        work = dist.all_gather_single(buf, self.shard.detach(), group=self.group, async_op=True)
        if self.timeline is not None:  # the comm row ends when gloo/NCCL completes the gather
            tl, name = self.timeline, self.name
            work.get_future().then(lambda _: tl.append(("all-gather", name, t0, time.perf_counter())))
        self._prefetched = (buf, work)

    def take_prefetched(self) -> torch.Tensor | None:
        """Wait for a prefetched gather (if any) and hand its buffer over, logged as a gather."""
        if self._prefetched is None:
            return None
        full, work = self._prefetched
        self._prefetched = None
        work.wait()
        nbytes = full.numel() * full.element_size()
        self._log("gather (forward, prefetched)", nbytes)
        weakref.finalize(full, self._log, "free (forward, prefetched)", -nbytes)
        return full

    def forward(self, *args):
        f = self.flat
        ptr = {}

        def pack(t: torch.Tensor):
            if t.untyped_storage().data_ptr() == ptr["full"]:  # a view of the gathered weights:
                return ("weights", t.storage_offset(), t.size(), t.stride())  # keep a note, not the tensor
            return t

        def unpack(x):
            if isinstance(x, tuple) and x and x[0] == "weights":
                if self._bwd_full is None:
                    self._bwd_full = self.gather("backward")  # just in time for this unit's backward
                return self._bwd_full.as_strided(x[2], x[3], x[1])
            return x

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            full = _GatherShard.apply(self.shard, self)
            if self.next is not None:
                self.next.prefetch()  # k+1's gather runs while k computes
            ptr["full"] = full.untyped_storage().data_ptr()
            pieces = full.split(f.numels + [f.padded - f.numel])
            weights = {n: piece.view(s) for n, piece, s in zip(f.names, pieces, f.shapes)}
            t0 = time.perf_counter()
            out = functional_call(self.module, weights, args)
            if self.timeline is not None:
                self.timeline.append(("compute", self.name, t0, time.perf_counter()))
            return out

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """All-gather and return ``{name: full weight}`` (a collective: every rank must call it)."""
        full = all_gather_flat(self.shard.new_empty(self.flat.padded), self.shard.detach(), self.group)
        return {
            n: full[o : o + k].view(s).clone()
            for n, o, k, s in zip(self.flat.names, self.flat.offsets, self.flat.numels, self.flat.shapes)
        }


class Zero3(ShardOptimizer):
    """ZeRO stage 3: replaces ``model``'s units by :class:`ShardedUnit` (in place) and steps the shards.

    Args, raises: as :class:`minipar.zero.stage12.ZeroOptimizer`, plus ``trace`` (a list that collects the
    gather/free events of every unit, for the lesson's memory timeline), ``prefetch`` (issue unit k+1's
    forward all-gather during unit k's forward, in the order of ``units``) and ``timeline`` (a list that
    collects ``(row, unit, t0, t1)``, row ``"compute"`` or ``"all-gather"``, seconds).
    Usage is an optimizer's: ``loss.backward(); opt.step(); opt.zero_grad()``.
    """

    stage = 3

    def __init__(
        self,
        model: nn.Module,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_norm: float | None = None,
        group=None,
        units=None,
        trace: list | None = None,
        prefetch: bool = False,
        timeline: list | None = None,
    ):
        self.model, self.group = model, group
        units = units or default_units(model)
        self.sharded = []
        for name, m in units:
            su = ShardedUnit(name, m, group, trace)
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, su)
            self.sharded.append(su)
        self.units = [su.flat for su in self.sharded]
        for su, nxt in zip(self.sharded, self.sharded[1:] + [None]):
            su.next = nxt if prefetch else None
            su.timeline = timeline
        check_same_start([u.name for u in self.units], [su.start_flat for su in self.sharded], group)
        for su in self.sharded:
            del su.start_flat  # the full weights are gone: only the shard stays
        self.shards = [su.shard for su in self.sharded]
        self._build_adamw(lr, betas, eps, weight_decay, max_norm)

    @torch.no_grad()
    def step(self) -> None:
        """AdamW on this rank's shards (gradients were reduce-scattered during backward). No all-gather:
        the next forward gathers each unit when it needs it."""
        for su in self.sharded:  # a prefetch no forward consumed would hold old weights
            su.take_prefetched()
        self._adamw_step([s.grad if s.grad is not None else torch.zeros_like(s) for s in self.shards])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for s in self.shards:
            s.grad = None

    def held_bytes(self) -> dict:
        """Bytes this rank holds now: the shards, their gradients, AdamW state, plus any gathered weights."""
        from minipar.model.memory import state_bytes

        d = state_bytes(self.model, self.optimizer)
        d["params"] += ShardedUnit.live_bytes
        d["total"] = d["params"] + d["grads"] + d["optimizer"]
        return d

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """``{original parameter name: full tensor}`` on every rank (all-gathers every unit)."""
        out = {}
        for name, su in zip([u.name for u in self.units], self.sharded):
            out.update({f"{name}.{k}": v for k, v in su.full_parameters().items()})
        return out
