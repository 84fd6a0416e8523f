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
        """Contract: in ``x`` (…, d), replicated on every rank of ``group``; out: the same values, (…, d),
        as a new tensor object (autograd needs one); no communication. ``backward`` needs ``group``.

        Hint: lesson 04, "What you need to build it" (autograd.Function) and "The math" (f's backward).
        """
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Contract: in ``grad`` (…, d), this rank's part dY_r·W_r of dL/dx; out ``(dL/dx, None)``: the sum of
        the parts over the group (one all-reduce, on the group given to forward), (…, d) on every rank.

        Hint: lesson 04, "The math, with shapes" (why f's backward is a sum) and "What you need to build it".
        """
        g = grad.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: leaves the tensor-parallel region. Use as ``ReduceFromTP.apply(x, group)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        """Contract: in ``x`` (…, d), this rank's partial sum; out: the sum over ``group`` (one all-reduce),
        (…, d), the same on every rank. ``x`` itself is left unchanged.

        Hint: lesson 04, "What you need to build it" (all_reduce works in place).
        """
        y = x.contiguous().clone()
        dist.all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Contract: in ``grad`` (…, d), the gradient of the replicated output; out ``(dL/dx, None)``, (…, d),
        no communication.

        Hint: lesson 04, "The math, with shapes" (g's backward).
        """
        return grad, None


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
        """Contract: in the full ``weight`` (out, in) in ``nn.Linear``'s layout and ``bias`` (out,); fills
        ``self.weight`` (out/N, in) and ``self.bias`` (out/N,) with this rank's output features (rank r of
        ``group`` holds block r of N). Keeps no full copy.

        Hint: lesson 04, "The math, with shapes" (column-parallel = rows of W).
        """
        k, r = self.weight.shape[0], tp_rank(self.group)
        self.weight.copy_(weight[r * k : (r + 1) * k])
        self.bias.copy_(bias[r * k : (r + 1) * k])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Contract: in ``x`` (…, in), replicated; out (…, out/N): this rank's output features, no communication
        forward; backward, dL/dx must be the full gradient (f: one all-reduce of (…, in) on ``group``).

        Hint: lesson 04, "The math, with shapes".
        """
        return F.linear(CopyToTP.apply(x, self.group), self.weight, self.bias)


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
        """Contract: in the full ``weight`` (out, in) and ``bias`` (out,); fills ``self.weight`` (out, in/N) with
        this rank's input features (block r of N) and ``self.bias`` (out,) with the whole bias (replicated).

        Hint: lesson 04, "The math, with shapes" (row-parallel = columns of W).
        """
        k, r = self.weight.shape[1], tp_rank(self.group)
        self.weight.copy_(weight[:, r * k : (r + 1) * k])
        self.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Contract: in ``x`` (…, in/N), this rank's slice (a column-parallel output); out (…, out), equal on
        every rank to the one-device ``x_full Wᵀ + b`` (g: one all-reduce of (…, out) on ``group`` forward,
        none backward). The bias counts once.

        Hint: lesson 04, "The math, with shapes" (row-parallel: a sum over ranks).
        """
        return ReduceFromTP.apply(F.linear(x, self.weight), self.group) + self.bias
