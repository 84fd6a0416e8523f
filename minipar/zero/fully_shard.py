"""ZeRO-3 per parameter, the way FSDP2 (``torch.distributed.fsdp.fully_shard``) does it.

    for block in model.blocks:
        fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    fully_shard(model)                                    # the root takes every parameter left over
    opt = torch.optim.SGD(model.parameters(), lr=0.1)     # any optimizer: it steps the shards
    loss = model(x, y)[1]; loss.backward(); opt.step(); opt.zero_grad()

Rajbhandari et al. 2020, arXiv:1910.02054, §5.3 (stage 3, P_os+g+p) and §7.2.2 (3Ψ); Zhao et al.
2023, arXiv:2304.11277 (PyTorch FSDP). :mod:`minipar.zero.stage3` is the same algorithm on FSDP1's
*flat* units: one 1-D parameter per unit, the module tree replaced, AdamW built in. Here, as in
FSDP2, every parameter of a wrapped module is replaced **in place, under its own name,** by its dim-0
shard (:mod:`minipar.zero.param_shard`): ``model.named_modules()`` still finds each ``nn.Linear``,
its ``weight`` is an ``nn.Parameter`` of ⌈d0/N⌉ rows or fewer, and any ``torch.optim`` optimizer
steps the shards. PyTorch moved from flat to per-parameter sharding for exactly this: a flat buffer
hides names, shapes and per-parameter optimizer groups, and cannot freeze one parameter of a unit.

One :class:`FSDPState` per ``fully_shard`` call manages the parameters of its module that no inner
call took. What happens to them, top to bottom of a step:

1. **pre-forward hook**: one ``all_gather_single`` of the module's shards (in ``param_dtype``) fills
   fresh full tensors; ``_Unshard`` (an autograd Function) returns them, so their gradients come back
   to it; they are swapped into the module's ``_parameters`` and the forward runs on them;
2. **post-forward hook**: the shards are swapped back, the full tensors' *storage* is freed
   (``untyped_storage().resize_(0)``, FSDP2's trick: autograd keeps the tensor objects, not the
   bytes), and ``_PreBackward`` is put on the module's outputs;
3. **pre-backward** (``_PreBackward.backward``, reached before any of the module's own backward): the
   storage is re-allocated and all-gathered again — just in time;
4. **post-backward** (``_Unshard.backward``, once every full gradient of the module is complete): one
   ``reduce_scatter_single`` in ``reduce_dtype`` averages them over the ranks; autograd accumulates
   this rank's rows into each shard's ``.grad``; the full weights are freed again.

Bytes per rank and step: all-gather Ψ (forward) + all-gather Ψ (backward) + reduce-scatter Ψ, as
in stage 3 (§7.2.2), each × (N−1)/N × the element size of its dtype. **Prefetch** (after the first
step, which records the order): a module's pre-forward also issues the *next* module's all-gather
(``async_op=True``); its pre-backward issues the previous one's. Parameters passed as
``replicate_params`` stay whole on every rank and are all-reduced (mean) after backward, as in DDP.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils._pytree import tree_leaves, tree_map

from minipar.errors import ConfigError
from minipar.runtime import dist as mdist
from minipar.zero.param_shard import (
    MixedPrecisionPolicy,
    all_gather_params,
    check_same_start_params,
    clip_grad_norm_,
    copy_out,
    full_state_dict,
    local_rows,
    make_spec,
    reduce_scatter_grads,
)

__all__ = ["MixedPrecisionPolicy", "FSDPState", "fully_shard", "full_state_dict", "clip_grad_norm_"]


class _Unshard(torch.autograd.Function):
    """Forward: the shards -> full tensors (copy-out of a gathered buffer). Backward: reduce-scatter."""

    @staticmethod
    def forward(ctx, state, gathered, *shards):
        fulls = state.new_fulls()
        copy_out(gathered, fulls, state.specs)
        ctx.mark_non_differentiable(*[f for f, p in zip(fulls, state.params) if not p.requires_grad])
        ctx.state, ctx.fulls = state, [weakref.ref(f) for f in fulls]  # weak: no tensor -> graph -> tensor cycle
        return tuple(fulls)

    @staticmethod
    def backward(ctx, *grads):
        st = ctx.state
        train = [i for i, p in enumerate(st.params) if p.requires_grad]
        out = [None] * len(st.params)
        if train:
            red = st.reduce_dtype or grads[train[0]].dtype
            mine = reduce_scatter_grads(
                [grads[i] for i in train], [st.specs[i] for i in train], red, st.group, st.params[0].device
            )
            for i, g in zip(train, mine):
                out[i] = g.to(st.params[i].dtype)
        st.free([f for r in ctx.fulls if (f := r()) is not None])
        st.after_backward()
        return (None, None, *out)


class _PreBackward(torch.autograd.Function):
    """Identity on a module's outputs; its backward re-gathers the module's weights first."""

    @staticmethod
    def forward(ctx, state, fulls, *outs):
        ctx.state, ctx.fulls = state, [weakref.ref(f) for f in fulls]
        outs = tuple(o.view_as(o) for o in outs)
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.state.refill(ctx.fulls)
        return (None, None, *grads)


class _Context:
    """Shared by every state of one model (made by the root's first forward): the forward order."""

    def __init__(self):
        self.order: list[FSDPState] = []
        self.recording = True


class FSDPState:
    """The parameters one ``fully_shard`` call manages, and its hooks. Made by :func:`fully_shard`.

    Attributes:
        module: the wrapped module. names: ``[(owner module, attribute), ...]`` per parameter (more
        than one when a weight is tied inside the module). params: the shard ``nn.Parameter``s.
        specs: their :class:`~minipar.zero.param_shard.ShardSpec`. replicated: parameters kept whole.
    """

    def __init__(self, module: nn.Module, group, mp_policy, reshard_after_forward: bool, prefetch: bool):
        self.module, self.group = module, group
        mp = mp_policy or MixedPrecisionPolicy()
        self.mp = mp
        self.reduce_dtype = mp.reduce_dtype or mp.param_dtype
        self.reshard_after_forward, self.prefetch = reshard_after_forward, prefetch
        self.names: list[list[tuple[nn.Module, str]]] = []
        self.params: list[nn.Parameter] = []
        self.specs = []
        self.replicated: list[nn.Parameter] = []
        self.ctx: _Context | None = None
        self._prefetched = None  # (gathered buffer, work, shard versions) of an all-gather in flight
        self._pending: list = []  # the full tensors of the call between pre- and post-forward
        self._last_refs: list = []  # weakrefs to the last forward's full weights
        self.original_ids: set[int] = set()  # ids of the parameters before sharding (to find tied ones)

    @property
    def param_dtype(self) -> torch.dtype:
        return self.mp.param_dtype or self.params[0].dtype

    # -- the full weights --------------------------------------------------------------------
    def new_fulls(self) -> list[torch.Tensor]:
        dev = self.params[0].device
        return [torch.empty(s.full_shape, dtype=self.param_dtype, device=dev) for s in self.specs]

    def gather(self) -> torch.Tensor:
        """The all-gathered (N·S,) buffer: the prefetched one if it is still current, else gathered now."""
        if self._prefetched is not None:
            buf, work, versions = self._prefetched
            self._prefetched = None
            if work is not None:
                work.wait()
            if versions == [p._version for p in self.params]:  # no optimizer step since it was issued
                return buf
        return all_gather_params(self.params, self.specs, self.param_dtype, self.group)[0]

    def needs_backward_gather(self) -> bool:
        """Whether the last forward's full weights are still held by autograd (and freed): an embedding's
        weight is not (its gradient needs only the indices), so its backward gathers nothing."""
        alive = [r() for r in self._last_refs]
        return any(f is not None and f.untyped_storage().nbytes() == 0 for f in alive)

    def issue_prefetch(self) -> None:
        if self._prefetched is None and self.params:
            buf, work = all_gather_params(self.params, self.specs, self.param_dtype, self.group, async_op=True)
            self._prefetched = (buf, work, [p._version for p in self.params])

    def free(self, fulls) -> None:
        """Free the full weights' bytes (the tensor objects autograd holds stay)."""
        for f in fulls:
            f.untyped_storage().resize_(0)

    def refill(self, refs) -> None:
        """Pre-backward: re-allocate freed full weights and all-gather them again (and prefetch the previous)."""
        self._neighbour(-1)
        fulls = [r() for r in refs]
        if any(f is not None and f.untyped_storage().nbytes() == 0 for f in fulls):
            # a weight nobody saved for backward (an embedding's) is dead: gather it into a stand-in
            fulls = [f if f is not None else g for f, g in zip(fulls, self.new_fulls())]
            for f in fulls:
                if f.untyped_storage().nbytes() == 0:
                    f.untyped_storage().resize_(f.numel() * f.element_size())
            copy_out(self.gather(), fulls, self.specs)

    def _neighbour(self, step: int) -> None:
        ctx = self.ctx
        if self.prefetch and ctx is not None and not ctx.recording and self in ctx.order:
            k = ctx.order.index(self) + step
            if 0 < k < len(ctx.order):  # never the root (index 0): it stays gathered through backward
                nxt = ctx.order[k]
                if step > 0 or nxt.needs_backward_gather():
                    nxt.issue_prefetch()

    # -- hooks ----------------------------------------------------------------------------------
    def pre_forward(self, module, args, kwargs):
        if self.ctx is None:  # the first state to run a forward is the root: it links the others
            self.ctx = _Context()
            for m in module.modules():
                st = getattr(m, "_fsdp_state", None)
                if st is not None:
                    st.ctx = self.ctx
        ctx = self.ctx
        if ctx.recording:  # the first step records the order of the forwards; the next one uses it
            if ctx.order and self is ctx.order[0]:
                ctx.recording = False
            elif self not in ctx.order:
                ctx.order.append(self)
        if self.params:
            fulls = _Unshard.apply(self, self.gather(), *self.params)
            self._swap(fulls)
            self._pending.append(list(fulls))
        self._neighbour(+1)
        if self.mp.param_dtype is not None and self.mp.cast_forward_inputs:
            cast = lambda t: t.to(self.mp.param_dtype) if torch.is_tensor(t) and t.is_floating_point() else t
            args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
        return args, kwargs

    def post_forward(self, module, args, output):
        fulls = self._pending.pop() if self.params else []
        self._last_refs = [weakref.ref(f) for f in fulls]
        self._swap(self.params)
        if fulls and self.reshard_after_forward:
            self.free(fulls)
        if not torch.is_grad_enabled() or not fulls:
            return output
        tensors = [t for t in tree_leaves(output) if torch.is_tensor(t) and t.requires_grad]
        if not tensors:
            return output
        wrapped = _PreBackward.apply(self, fulls, *tensors)
        wrapped = list(wrapped) if isinstance(wrapped, tuple) else [wrapped]
        swap = {id(t): w for t, w in zip(tensors, wrapped)}
        return tree_map(lambda t: swap.get(id(t), t) if torch.is_tensor(t) else t, output)

    def after_backward(self) -> None:
        """After the root's reduce-scatter (the last of a backward): drop any prefetch no module used."""
        if self.ctx is not None and self.ctx.order and self is self.ctx.order[0]:
            for st in self.ctx.order:
                if st._prefetched is not None and st._prefetched[1] is not None:
                    st._prefetched[1].wait()
                st._prefetched = None

    def all_reduce_replicated(self, p: torch.Tensor) -> None:
        """A replicated parameter's gradient, once complete in this backward: mean over the group (as DDP).
        Under gradient accumulation the earlier part is already equal on every rank, so its mean is itself."""
        n = mdist.world_size(self.group)
        if n > 1 and p.grad is not None:
            dist.all_reduce(p.grad, group=self.group)
            p.grad.div_(n)

    def _swap(self, tensors) -> None:
        """Shards (``nn.Parameter``) go into ``_parameters``; full weights (outputs of ``_Unshard``, not leaves)
        into the module's ``__dict__``, where ``m.weight`` finds them first, with the ``_parameters`` slot
        set to None meanwhile (order kept): during forward ``parameters()`` lists no non-leaf tensor."""
        for owners, t in zip(self.names, tensors):
            for m, attr in owners:
                if isinstance(t, nn.Parameter):
                    m.__dict__.pop(attr, None)
                    m._parameters[attr] = t
                else:
                    m._parameters[attr] = None
                    m.__dict__[attr] = t


def fully_shard(
    module: nn.Module,
    group=None,
    *,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool = True,
    prefetch: bool = True,
    replicate_params=(),
) -> nn.Module:
    """Shard every parameter of ``module`` that no inner ``fully_shard`` took, along dim 0, in place.

    Call it on inner modules first (each transformer block), then on the root, as FSDP2. Returns
    ``module`` (the same object: names and module tree unchanged). Collective over ``group`` (default:
    the world): every rank must call it on the same model, built from the same seed.

    Args:
        mp_policy: :class:`MixedPrecisionPolicy` (default: gather, compute and reduce in the shards' dtype).
        reshard_after_forward: free the full weights after forward and gather them again for backward
            (ZeRO-3); False keeps them from forward to backward (ZeRO-2's memory for this module).
        prefetch: issue the next module's all-gather in forward, the previous one's in backward.
        replicate_params: parameters kept whole on every rank; their gradients are all-reduced (mean).
    Raises:
        ConfigError: ``module`` already sharded; a parameter shared with a module another call manages;
            ranks that start from different weights.
    """
    if getattr(module, "_fsdp_state", None) is not None:
        raise ConfigError(f"{type(module).__name__} is already sharded: call fully_shard once per module")
    state = FSDPState(module, group, mp_policy, reshard_after_forward, prefetch)
    keep = {id(p) for p in replicate_params}
    owners: dict[int, list] = {}
    by_id: dict[int, nn.Parameter] = {}
    inner = [m._fsdp_state for m in module.modules() if m is not module and getattr(m, "_fsdp_state", None)]
    taken = {i for st in inner for i in st.original_ids}
    for mname, m in _unmanaged_modules(module):
        for attr, p in list(m._parameters.items()):
            if p is None or id(p) in taken:
                if p is not None:
                    raise ConfigError(
                        f"parameter {mname}.{attr} is shared with a module an inner fully_shard "
                        "manages; shard a common ancestor instead (FSDP2 needs the same)"
                    )
                continue
            owners.setdefault(id(p), []).append((m, attr))
            by_id[id(p)] = p
    check_same_start_params(list(by_id.values()), group)
    for pid, p in by_id.items():
        if pid in keep or p.dim() == 0:
            state.replicated.append(p)
            continue
        spec = make_spec(p.shape, group)
        shard = nn.Parameter(local_rows(p, spec), requires_grad=p.requires_grad)
        shard.__dict__.update(vars(p))  # the parameter's own marks (e.g. Megatron's TP attributes) carry over
        shard.shard_spec = spec
        state.names.append(owners[pid])
        state.params.append(shard)
        state.specs.append(spec)
    state.original_ids = set(by_id)
    for p in state.replicated:
        p.register_post_accumulate_grad_hook(state.all_reduce_replicated)
    state._swap(state.params)
    module._fsdp_state = state
    module.register_forward_pre_hook(state.pre_forward, with_kwargs=True)
    module.register_forward_hook(state.post_forward)
    return module


def _unmanaged_modules(module: nn.Module):
    """``(name, submodule)`` of ``module``'s tree, not entering submodules an inner call manages."""
    stack = [("", module)]
    while stack:
        name, m = stack.pop()
        yield name, m
        for cname, c in m.named_children():
            if getattr(c, "_fsdp_state", None) is None:
                stack.append((f"{name}.{cname}" if name else cname, c))
