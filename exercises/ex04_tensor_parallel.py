"""Lesson 04 · tensor parallelism: Megatron's f and g, then the column- and row-parallel linear layers.

Exercises (run ``make check LESSON=04``):

1. :class:`CopyToTP` (Megatron's **f**): identity forward, all-reduce of the gradient backward;
   :class:`ReduceFromTP` (**g**): all-reduce forward, identity backward (Shoeybi et al. 2019,
   arXiv:1909.08053, §3, Fig. 3).
2. :class:`ColumnParallelLinear` and :class:`RowParallelLinear`: ``load_full_`` (keep my slice of the
   full weight) and ``forward``.

The checker runs an MLP ``Row(gelu(Column(x)))`` on N = 1, 3, 4 ranks and on two sub-groups of 2,
in float64, against one device: output, input gradient and every weight gradient.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def tp_size(group=None) -> int:
    return dist.get_world_size(group)


def tp_rank(group=None) -> int:
    return dist.get_rank(group)


class CopyToTP(torch.autograd.Function):
    """Megatron's f: enters the tensor-parallel region. Use as ``CopyToTP.apply(x, group)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        """Identity: every rank keeps the whole (…, d) input. Remember ``group`` on ``ctx`` for backward.

        Hint: lesson 04, "Build it: four operators, three layers". Return a new tensor object
        (``x.view_as(x)``), not ``x`` itself.
        """
        raise NotImplementedError("not implemented yet: CopyToTP.forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Each rank's gradient w.r.t. x is only its part of the sum: all-reduce (sum) it over the group.

        Returns ``(grad_x, None)``: one gradient per forward input (``group`` gets ``None``).

        Hint: lesson 04, "Build it". ``dist.all_reduce`` works in place: all-reduce a contiguous copy.
        """
        raise NotImplementedError("not implemented yet: CopyToTP.backward")


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: leaves the tensor-parallel region. Use as ``ReduceFromTP.apply(x, group)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        """Sum the ranks' partial results: all-reduce a copy of ``x`` over ``group`` and return it.

        Hint: lesson 04, "Build it". Do not all-reduce ``x`` in place (autograd may need it).
        """
        raise NotImplementedError("not implemented yet: ReduceFromTP.forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Identity: the output is replicated, so each rank's gradient already is the whole gradient.

        Hint: lesson 04, "Build it". Returns ``(grad, None)``.
        """
        raise NotImplementedError("not implemented yet: ReduceFromTP.backward")


class ColumnParallelLinear(nn.Module):
    """``y = x Wᵀ + b`` with the rows of W (the output features) split over ``group``.

    Given: ``weight`` (out/N, in) and ``bias`` (out/N,) of this rank. Shapes: x (…, in) -> (…, out/N).
    """

    def __init__(self, in_features: int, out_features: int, group=None):
        super().__init__()
        self.group, n = group, tp_size(group)
        assert out_features % n == 0, f"out_features={out_features} must divide by the group size {n}"
        self.weight = nn.Parameter(torch.empty(out_features // n, in_features, dtype=torch.float64))
        self.bias = nn.Parameter(torch.empty(out_features // n, dtype=torch.float64))

    @torch.no_grad()
    def load_full_(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Copy this rank's rows ``[r·out/N, (r+1)·out/N)`` of the full (out, in) ``weight`` and (out,) ``bias``.

        Hint: lesson 04, "Build it" (Megatron's ``_initialize_affine_weight_cpu``).
        """
        raise NotImplementedError("not implemented yet: ColumnParallelLinear.load_full_")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(…, in) -> (…, out/N): f on the input, then the local linear layer.

        Hint: lesson 04, "Build it". Without f, the input gradient of the layers before would be
        only this rank's part.
        """
        raise NotImplementedError("not implemented yet: ColumnParallelLinear.forward")


class RowParallelLinear(nn.Module):
    """``y = x Wᵀ + b`` with the columns of W (the input features) split over ``group``.

    Given: ``weight`` (out, in/N) of this rank and the full ``bias`` (out,), replicated.
    Shapes: x (…, in/N) (a column-parallel output) -> (…, out), the same on every rank.
    """

    def __init__(self, in_features: int, out_features: int, group=None):
        super().__init__()
        self.group, n = group, tp_size(group)
        assert in_features % n == 0, f"in_features={in_features} must divide by the group size {n}"
        self.weight = nn.Parameter(torch.empty(out_features, in_features // n, dtype=torch.float64))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=torch.float64))

    @torch.no_grad()
    def load_full_(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Copy this rank's columns ``[r·in/N, (r+1)·in/N)`` of the full (out, in) ``weight``; the whole ``bias``.

        Hint: lesson 04, "Build it".
        """
        raise NotImplementedError("not implemented yet: RowParallelLinear.load_full_")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(…, in/N) -> (…, out): the local product is a partial sum; g sums it; then add the bias once.

        Hint: lesson 04, "Build it". Adding the bias before g would add it N times.
        """
        raise NotImplementedError("not implemented yet: RowParallelLinear.forward")
