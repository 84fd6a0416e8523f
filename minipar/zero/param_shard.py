"""Per-parameter sharding: each parameter cut along dim 0 over N ranks, and the buffers that move it.

FSDP2's layout (Zhao et al. 2023, arXiv:2304.11277, describe FSDP1's flat parameters; PyTorch's
FSDP2 ``fully_shard`` moved to one ``DTensor`` per parameter, ``Shard(0)``). A parameter of shape
(d0, *rest) is cut like ``torch.chunk(p, N, dim=0)``: chunk = ⌈d0/N⌉ rows, rank r keeps rows
``[r·chunk, min((r+1)·chunk, d0))`` — the last ranks may keep fewer rows, or none, when d0 is not a
multiple of N (a (3,) bias on 4 ranks: 1, 1, 1, 0 rows). The shard *is* the ``nn.Parameter`` the
optimizer sees, under the parameter's own name, so the optimizer state is exactly Ψ/N-ish and holds
no padding. Padding exists only inside the communication buffers:

    all-gather input on rank r (S,):    [ p0 rows of r, padded to chunk0·inner0 | p1 rows of r, padded | ... ]
    all-gather output (N, S):           row r = rank r's input; parameter i = columns [o_i, o_i + chunk_i·inner_i)
    reduce-scatter input (N, S):        the same layout, built from the full gradients

so one ``all_gather_single`` and one ``reduce_scatter_single`` move every parameter of a module
(FSDP2's "copy-in / copy-out"). :class:`MixedPrecisionPolicy` is FSDP2's: gather and compute in
``param_dtype``, reduce gradients in ``reduce_dtype``; the fp32 shards stay the master copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.optim.clip_grads import clip_grad_norm_ as _clip
from minipar.runtime import dist as mdist


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Dtypes for a sharded module, as ``torch.distributed.fsdp.MixedPrecisionPolicy``.

    Attributes:
        param_dtype: dtype of the all-gathered weights and of the forward/backward compute (None: the
            shard's own). bf16 halves the all-gather bytes (2 instead of 4 per element).
        reduce_dtype: dtype in which the gradients are reduce-scattered (None: ``param_dtype``).
        cast_forward_inputs: cast floating-point forward inputs to ``param_dtype``.
    """

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True


@dataclass(frozen=True)
class ShardSpec:
    """How one parameter is sharded (kept on the shard as ``param.shard_spec``, Megatron-style).

    Attributes:
        full_shape: the parameter's shape on one device; chunk: rows per rank, ⌈d0/N⌉;
        rows: rows this rank keeps (chunk, fewer, or 0); rank, world: this rank and N in ``group``.
    """

    full_shape: torch.Size
    chunk: int
    rows: int
    rank: int
    world: int
    group: object = None

    @property
    def inner(self) -> int:
        """Elements per row (the product of the shape after dim 0)."""
        return math.prod(self.full_shape[1:])

    @property
    def padded_numel(self) -> int:
        """Elements this parameter takes in one rank's slot of a communication buffer: chunk · inner."""
        return self.chunk * self.inner


def shard_rows(d0: int, world: int, rank: int) -> int:
    """Rows of a dim-0 length ``d0`` that ``rank`` keeps: ``torch.chunk(·, world)[rank]``'s (0 past the end)."""
    chunk = math.ceil(d0 / world)
    return max(0, min(chunk, d0 - rank * chunk))


def padded_elements(shape, world: int) -> int:
    """Elements one parameter of ``shape`` takes in a (N, S) gather or reduce-scatter buffer: N·⌈d0/N⌉·inner."""
    return world * math.ceil(shape[0] / world) * math.prod(shape[1:])


def make_spec(full_shape: torch.Size, group=None) -> ShardSpec:
    """The :class:`ShardSpec` of a parameter of ``full_shape`` (at least 1-d) on this rank of ``group``."""
    n, r = mdist.world_size(group), mdist.rank(group)
    return ShardSpec(torch.Size(full_shape), math.ceil(full_shape[0] / n), shard_rows(full_shape[0], n, r), r, n, group)


def local_rows(full: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """This rank's rows of ``full`` (a copy): shape (spec.rows, *rest)."""
    lo = spec.rank * spec.chunk
    return full.detach()[lo : lo + spec.rows].clone()


def gather_input(shards: list[torch.Tensor], specs: list[ShardSpec], dtype) -> torch.Tensor:
    """Copy-in: this rank's shards, cast to ``dtype``, each padded to its slot -> (S,)."""
    parts = []
    for s, sp in zip(shards, specs):
        flat = s.detach().reshape(-1).to(dtype)
        pad = sp.padded_numel - flat.numel()
        parts += [flat, flat.new_zeros(pad)] if pad else [flat]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=dtype, device=mdist.device())


def copy_out(gathered: torch.Tensor, fulls: list[torch.Tensor], specs: list[ShardSpec]) -> None:
    """Copy-out: the all-gather output (N·S,) -> each full parameter (in place, autograd-version kept)."""
    n = specs[0].world
    g = gathered.view(n, -1)
    off = 0
    with torch.no_grad():
        for full, sp in zip(fulls, specs):
            cols = g[:, off : off + sp.padded_numel]
            off += sp.padded_numel
            with torch.autograd._unsafe_preserve_version_counter(full):
                if sp.chunk * n == sp.full_shape[0]:
                    full.view(n, -1).copy_(cols)
                else:  # drop the padding rows at the end
                    full.copy_(cols.reshape(n * sp.chunk, *sp.full_shape[1:])[: sp.full_shape[0]])


def all_gather_params(shards, specs, dtype, group=None, async_op: bool = False):
    """All-gather every rank's shards in one collective: (S,) in -> (N·S,) out, ``dtype`` elements.

    Returns ``(out, work)``; ``work`` is None unless ``async_op`` (then ``work.wait()`` before reading).
    """
    send = gather_input(shards, specs, dtype)
    n = mdist.world_size(group)
    if n == 1:
        return send, None
    out = send.new_empty(n * send.numel())
    work = dist.all_gather_single(out, send, group=group, async_op=async_op)
    return out, work


def reduce_scatter_grads(grads, specs, dtype, group=None, device=None) -> list[torch.Tensor]:
    """Mean over ranks of the full gradients, this rank's rows of each: (d0, *rest) -> (rows, *rest).

    ``grads`` (None = zeros) are cast to ``dtype`` (the reduce dtype), padded and laid out as (N, S);
    one ``reduce_scatter_single`` sums them and this rank keeps its (S,) slot, divided by N. The
    returned gradients are in ``dtype``.
    """
    n = specs[0].world
    cols = []
    for gr, sp in zip(grads, specs):
        if gr is None:
            gr = torch.zeros(sp.full_shape, dtype=dtype, device=device or mdist.device())
        gr = gr.to(dtype)
        pad = n * sp.chunk - sp.full_shape[0]
        if pad:
            gr = torch.cat([gr, gr.new_zeros(pad, *sp.full_shape[1:])])
        cols.append(gr.reshape(n, sp.padded_numel))
    send = torch.cat(cols, dim=1).reshape(-1)
    if n == 1:
        mine = send
    else:
        mine = send.new_empty(send.numel() // n)
        dist.reduce_scatter_single(mine, send, group=group)
        mine.div_(n)
    out, off = [], 0
    for sp in specs:
        out.append(mine[off : off + sp.rows * sp.inner].view(sp.rows, *sp.full_shape[1:]))
        off += sp.padded_numel
    return out


def check_same_start_params(params: list[torch.Tensor], group=None) -> None:
    """Raise ConfigError unless every rank holds bit-identical ``params`` (one hash each, all-gathered)."""
    if mdist.world_size(group) == 1 or not params:
        return
    from minipar.zero.flat import check_same_start

    check_same_start(["the sharded module"], [torch.cat([p.detach().reshape(-1) for p in params])], group)


@torch.no_grad()
def gather_full(t: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """A tensor shaped like a shard (the parameter, its ``.grad`` or an optimizer moment) -> the full one,
    on every rank of ``spec.group`` (one all-gather)."""
    full = torch.empty(spec.full_shape, dtype=t.dtype, device=t.device)
    copy_out(all_gather_params([t], [spec], t.dtype, spec.group)[0], [full], [spec])
    return full


@torch.no_grad()
def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{name: full tensor}`` under the original names (a collective: every rank calls it, gets all)."""
    return {
        name: gather_full(p.detach(), p.shard_spec) if hasattr(p, "shard_spec") else p.detach().clone()
        for name, p in model.named_parameters()
    }


def clip_grad_norm_(model: nn.Module, max_norm: float, group=None) -> torch.Tensor:
    """Clip the sharded model's gradients by the global norm (shards summed over ``group``, replicated
    parameters counted on rank 0 only); returns the norm, the same on every rank.
    See :mod:`minipar.optim.clip_grads`."""
    params = [p for p in model.parameters() if p.grad is not None]
    count = [hasattr(p, "shard_spec") or mdist.rank(group) == 0 for p in params]
    return _clip([p.grad for p in params], max_norm, group, count=count)
