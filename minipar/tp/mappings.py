"""Tensor parallelism, part 1: the communication operators between a replicated and a split tensor.

Intra-operator parallelism (Megatron-LM: Shoeybi et al. 2019, arXiv:1909.08053, §3): one
layer's weight is split over the N ranks of a *tensor-parallel group*, each rank holds 1/N of it
and computes 1/N of the layer's output. Four tiny autograd functions glue the pieces together;
each is the conjugate of another (what one does forward, the other does backward):

=====================================  ===========================  ===========================
operator (Megatron-LM name)             forward                      backward
=====================================  ===========================  ===========================
``copy_to_tensor_parallel_region``      identity      ("f", §3)      all-reduce
``reduce_from_tensor_parallel_region``  all-reduce    ("g", §3)      identity
``scatter_to_tensor_parallel_region``   keep my slice of last dim    all-gather last dim
``gather_from_tensor_parallel_region``  all-gather last dim          keep my slice
=====================================  ===========================  ===========================

Sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2) shards the regions
*between* the tensor-parallel layers (LayerNorm, dropout, residual adds) along the sequence
dimension (dim 1 of a (B, T, d) tensor) and swaps each all-reduce for a reduce-scatter + an
all-gather of the same total volume:

=============================================  ======================  ======================
``scatter_to_sequence_parallel_region``         keep my T/N slice       all-gather along T
``gather_from_sequence_parallel_region``        all-gather along T      reduce-scatter along T
``reduce_scatter_to_sequence_parallel_region``  reduce-scatter along T  all-gather along T
=============================================  ======================  ======================

Every function takes ``group`` (default: the whole world) and is a no-op on a group of one.
Collectives are torch 2.13's ``all_reduce``, ``all_gather_single`` and ``reduce_scatter_single``
(so ``minipar.comm.comm_log.CommLog`` sees every call). Group set-up and the divisibility checks
that turn bad settings into a :class:`minipar.ConfigError` live here too.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.errors import ConfigError
from minipar.runtime.mesh import divisors

SEQ_DIM = 1  # activations are (B, T, d): the sequence is dim 1


# ----------------------------------------------------------------------------- groups and checks
def tp_size(group=None) -> int:
    """Ranks in the tensor-parallel ``group`` (1 without a process group)."""
    return dist.get_world_size(group) if dist.is_initialized() else 1


def tp_rank(group=None) -> int:
    """This rank's index inside ``group`` (0 without a process group)."""
    return dist.get_rank(group) if dist.is_initialized() else 0


def check_divisible(what: str, value: int, tp: int, valid: int | None = None) -> int:
    """Return ``value // tp``; raise :class:`ConfigError` naming the value and valid ``tp`` choices.

    The choices are the divisors of ``valid`` (default ``value``; pass e.g. gcd of several sizes
    that must all divide) up to ``max(8, 2·tp)``. Example message:
    ``hidden size d_model=30 is not divisible by tp=4; use tp in [1, 2, 3, 5, 6]``.
    """
    if value % tp:
        near = [d for d in divisors(valid or value) if d <= max(8, 2 * tp)]
        raise ConfigError(f"{what}={value} is not divisible by tp={tp}; use tp in {near}")
    return value // tp


def new_tp_group(tp: int):
    """Split the world into ``world_size // tp`` groups of ``tp`` consecutive ranks; return mine.

    Consecutive ranks, because tensor parallelism belongs inside a node (lesson 04, "why TP stays
    inside a node"): on a GPU cluster ranks 0-7 share one node's NVLink. Collective: every rank
    calls it. Groups get minipar's bounded timeout (``minipar.runtime.dist.new_group``). Returns ``None``
    (= the default group) when ``tp`` equals the world size.

    Note: every TP function reads ``group=None`` as *the world* (torch's convention), while
    ``minipar.runtime.mesh`` stores ``None`` for a size-1 dimension. For tp = 1 inside a larger world,
    pass ``new_tp_group(1)`` (real one-rank groups), not ``mesh.tp_group``.

    Raises:
        ConfigError: ``tp`` < 1 or not a divisor of the world size (the message lists the divisors).
    """
    from minipar.runtime import dist as mdist

    world = mdist.world_size()
    if not isinstance(tp, int) or tp < 1 or world % tp:
        raise ConfigError(f"tp={tp} is not a divisor of world_size={world}; use tp in {divisors(world)}")
    if tp == world:
        return None  # the default group is the tensor-parallel group
    mine = None
    for start in range(0, world, tp):
        g = mdist.new_group(list(range(start, start + tp)))  # every rank creates every group
        if start <= mdist.rank() < start + tp:
            mine = g
    return mine


# ----------------------------------------------------------------------------- raw collectives
def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    dist.all_reduce(x, group=group)  # in place, sum
    return x


def _all_gather(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (rank order)."""
    n = tp_size(group)
    if n == 1:
        return x
    x = x.movedim(dim, 0).contiguous()
    out = torch.empty((n * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_single(out, x, group=group)
    return out.movedim(0, dim).contiguous()


def _reduce_scatter(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """Sum ``x`` over ranks and keep my 1/N slice along ``dim``."""
    n = tp_size(group)
    if n == 1:
        return x
    size = check_divisible(f"dimension {dim} of a {tuple(x.shape)} tensor", x.shape[dim], n)
    x = x.movedim(dim, 0).contiguous()
    out = torch.empty((size,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_single(out, x, group=group)
    return out.movedim(0, dim).contiguous()


def _split(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """My 1/N slice of ``x`` along ``dim`` (no communication)."""
    n = tp_size(group)
    if n == 1:
        return x
    size = check_divisible(f"dimension {dim} of a {tuple(x.shape)} tensor", x.shape[dim], n)
    return x.narrow(dim, tp_rank(group) * size, size).contiguous()


# ----------------------------------------------------------------------------- the conjugate pairs
class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.clone(memory_format=torch.contiguous_format), ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x.clone(memory_format=torch.contiguous_format), group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _split(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, ctx.dim, ctx.group), None, None


class _Gather(torch.autograd.Function):
    """All-gather forward; backward keeps my slice (``reduce_grad=False``) or reduce-scatters."""

    @staticmethod
    def forward(ctx, x, dim, group, reduce_grad):
        ctx.dim, ctx.group, ctx.reduce_grad = dim, group, reduce_grad
        return _all_gather(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduce_grad:
            return _reduce_scatter(grad, ctx.dim, ctx.group), None, None, None
        return _split(grad, ctx.dim, ctx.group), None, None, None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _reduce_scatter(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, ctx.dim, ctx.group), None, None


def copy_to_tensor_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """f: identity forward, all-reduce (sum) of the gradient backward. Any shape."""
    return x if tp_size(group) == 1 else _CopyToTP.apply(x, group)


def reduce_from_tensor_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """g: all-reduce (sum) forward, identity backward. Any shape."""
    return x if tp_size(group) == 1 else _ReduceFromTP.apply(x, group)


def scatter_to_tensor_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(..., k) -> (..., k/N), my slice of the last dim; backward all-gathers it."""
    return x if tp_size(group) == 1 else _Scatter.apply(x, -1, group)


def gather_from_tensor_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(..., k/N) -> (..., k), all-gather of the last dim; backward keeps my slice."""
    return x if tp_size(group) == 1 else _Gather.apply(x, -1, group, False)


def scatter_to_sequence_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(B, T, d) -> (B, T/N, d), my slice of the sequence; backward all-gathers along T."""
    return x if tp_size(group) == 1 else _Scatter.apply(x, SEQ_DIM, group)


def gather_from_sequence_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(B, T/N, d) -> (B, T, d), all-gather along T; backward reduce-scatters along T."""
    return x if tp_size(group) == 1 else _Gather.apply(x, SEQ_DIM, group, True)


def reduce_scatter_to_sequence_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(B, T, d) partial sums -> (B, T/N, d) summed slice; backward all-gathers along T."""
    return x if tp_size(group) == 1 else _ReduceScatter.apply(x, SEQ_DIM, group)
