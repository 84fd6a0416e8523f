"""Tensor parallelism, part 2: the parallel layers (Megatron-LM: Shoeybi et al. 2019, arXiv:1909.08053).

A ``torch.nn.Linear`` computes ``y = x Wᵀ + b`` with ``W`` of shape (out, in). Two ways to split it
over the N ranks of a tensor-parallel group (§3, Fig. 3 of the paper, which writes ``Y = X A``):

- :class:`ColumnParallelLinear` — rank r holds ``out/N`` *rows* of ``W`` (= columns of ``A``) and
  computes ``out/N`` of the output features from the whole input. Input: ``f`` (identity forward,
  all-reduce of the input gradient backward).
- :class:`RowParallelLinear` — rank r holds ``in/N`` *columns* of ``W`` (= rows of ``A``), takes
  its ``in/N`` input features and produces a partial sum of the whole output; ``g`` all-reduces it.

Column then row (the MLP, attention's qkv then proj) needs no communication in between: one
all-reduce forward and one backward per pair. The vocabulary is split the same way:
:class:`VocabParallelEmbedding` (rows of the table) and :func:`vocab_parallel_cross_entropy`
(the loss on vocabulary-split logits, never gathering them), with the vocabulary padded to a
multiple of N and the padding masked.

Each layer marks the parameters it creates with how they are split
(:func:`minipar.tp.partition.set_tensor_model_parallel_attributes`, as Megatron-LM's layers do) and
loads its pieces from the single-device weight through those marks (``load_full_``: the same thing
Megatron's ``_initialize_affine_weight_cpu`` does); everything downstream reads the marks too.
Replicated parameters that see only T/N positions under sequence parallelism carry
``param.sequence_parallel = True`` (their gradients need a TP all-reduce).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.runtime import dist as mdist
from minipar.tp.mappings import (
    SEQ_DIM,
    _all_gather,
    _all_reduce,
    _reduce_scatter,
    check_divisible,
    copy_to_tensor_parallel_region,
    gather_from_tensor_parallel_region,
    reduce_from_tensor_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_tensor_parallel_region,
    tp_rank,
    tp_size,
)
from minipar.tp.partition import param_is_tensor_parallel, set_tensor_model_parallel_attributes, shard_of


class _SequenceParallelLinear(torch.autograd.Function):
    """``y = all_gather_T(x) Wᵀ + b`` saving only the local (B, T/N, in) input.

    Backward all-gathers ``x`` again to form the weight gradient instead of keeping the full
    (B, T, in) tensor alive (Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2), and
    reduce-scatters the input gradient back to the sequence shards.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, group):
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.has_bias = group, bias is not None
        return F.linear(_all_gather(x, SEQ_DIM, group), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        total = _all_gather(x, SEQ_DIM, ctx.group)  # the recomputed all-gather
        grad_x = _reduce_scatter(grad @ weight, SEQ_DIM, ctx.group)
        g2 = grad.reshape(-1, grad.shape[-1])
        grad_w = g2.t() @ total.reshape(-1, total.shape[-1])
        return grad_x, grad_w, (g2.sum(0) if ctx.has_bias else None), None


def _mark_sequence_parallel(*params) -> None:
    """Tag replicated parameters that see only T/N positions: their grads need a TP all-reduce."""
    for p in params:
        if p is not None:
            p.sequence_parallel = True


class _ParallelLayer(nn.Module):
    """What the three layers share: loading their pieces from the single-device weight."""

    @torch.no_grad()
    def load_full_(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Keep my piece of the single-device ``weight`` (and ``bias``): :func:`shard_of` for a split
        parameter, a copy for a replicated one."""
        for p, full in ((self.weight, weight), (getattr(self, "bias", None), bias)):
            if p is not None:
                p.copy_(shard_of(p, full, self.group) if param_is_tensor_parallel(p) else full)


class ColumnParallelLinear(_ParallelLayer):
    """``y = x Wᵀ + b`` with the rows of ``W`` (output features) split over the group.

    Args:
        in_features, out_features: the *full* layer's sizes; ``out_features`` must divide by N.
        bias: a bias of ``out_features/N`` per rank (split like the rows).
        gather_output: all-gather the output to (..., out_features); default keep (..., out/N).
        group: the tensor-parallel group (default: the world).
        device: where the weight lives (default ``minipar.runtime.dist.device()``: ``cuda:LOCAL_RANK`` under NCCL).
        sequence_parallel: the input is (B, T/N, in), sharded along the sequence; it is
            all-gathered along T (backward: reduce-scatter) instead of passing through ``f``.
        stride: the full weight is ``stride`` stacked blocks (e.g. 3 for a fused ``[q; k; v]``);
            rank r takes rows r of every block (Megatron's ``stride``).
        padded_out_features: split this many rows (default ``out_features``); the rows past
            ``out_features`` are zero padding (a vocabulary padded to a multiple of N).
    Shapes:
        x: (B, T, in) [or (B, T/N, in) with sequence_parallel] -> (B, T, out/N) [or (B, T, out)].
    Raises:
        ConfigError: ``out_features`` not divisible by N·stride.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        gather_output: bool = False,
        group=None,
        sequence_parallel: bool = False,
        stride: int = 1,
        what: str = "output features",
        device: torch.device | None = None,
        padded_out_features: int | None = None,
    ):
        super().__init__()
        self.group, self.gather_output, self.sequence_parallel, self.stride = (
            group,
            gather_output,
            sequence_parallel,
            stride,
        )
        self.in_features, self.out_features = in_features, out_features
        rows = padded_out_features or out_features
        n = tp_size(group)
        check_divisible(what, rows // stride, n)
        dev = mdist.device() if device is None else device  # cuda:LOCAL_RANK under NCCL, as Megatron-LM
        self.weight = nn.Parameter(torch.empty(rows // n, in_features, device=dev))
        self.bias = nn.Parameter(torch.zeros(rows // n, device=dev)) if bias else None
        for p in (self.weight, self.bias):
            if p is not None:
                set_tensor_model_parallel_attributes(p, True, 0, stride, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_parallel and tp_size(self.group) > 1:
            y = _SequenceParallelLinear.apply(x, self.weight, self.bias, self.group)
        else:
            y = F.linear(copy_to_tensor_parallel_region(x, self.group), self.weight, self.bias)
        return gather_from_tensor_parallel_region(y, self.group) if self.gather_output else y


class RowParallelLinear(_ParallelLayer):
    """``y = x Wᵀ + b`` with the columns of ``W`` (input features) split over the group.

    Args:
        in_features, out_features: the full layer's sizes; ``in_features`` must divide by N.
        bias: a full (out,) bias, replicated, added once after the reduction.
        input_is_parallel: the input already is (..., in/N) (e.g. a column-parallel output);
            otherwise it is (..., in) and each rank takes its slice (Megatron's default: False).
        group: the tensor-parallel group (default: the world).
        device: where the weight lives (default ``minipar.runtime.dist.device()``).
        sequence_parallel: reduce-scatter the output along T to (B, T/N, out) instead of
            all-reducing it; the bias then sees T/N positions, so its gradient is tagged for
            :func:`minipar.tp.gpt.allreduce_sequence_parallel_grads`.
    Shapes:
        x: (B, T, in/N) -> (B, T, out) [or (B, T/N, out) with sequence_parallel].
    Raises:
        ConfigError: ``in_features`` not divisible by N.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        input_is_parallel: bool = False,
        group=None,
        sequence_parallel: bool = False,
        what: str = "input features",
        device: torch.device | None = None,
    ):
        super().__init__()
        self.group, self.input_is_parallel, self.sequence_parallel = group, input_is_parallel, sequence_parallel
        self.in_features, self.out_features = in_features, out_features
        n = tp_size(group)
        dev = mdist.device() if device is None else device
        self.weight = nn.Parameter(torch.empty(out_features, check_divisible(what, in_features, n), device=dev))
        self.bias = nn.Parameter(torch.zeros(out_features, device=dev)) if bias else None
        set_tensor_model_parallel_attributes(self.weight, True, 1, 1, in_features)
        if sequence_parallel:
            _mark_sequence_parallel(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = scatter_to_tensor_parallel_region(x, self.group)
        y = F.linear(x, self.weight)  # a partial sum
        if self.sequence_parallel:
            y = reduce_scatter_to_sequence_parallel_region(y, self.group)
        else:
            y = reduce_from_tensor_parallel_region(y, self.group)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(_ParallelLayer):
    """A token embedding whose rows (the vocabulary) are split over the group.

    The vocabulary is padded to ``ceil(V/N)·N`` rows; rank r holds rows ``[r·V'/N, (r+1)·V'/N)``,
    looks up the ids that fall in its range, writes zeros for the others and the all-reduce
    (``g``) sums the one non-zero answer per position (Shoeybi et al. 2019, §3, "input embedding").

    Shapes: idx (B, T) int64 -> (B, T, embedding_dim), the same on every rank.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, group=None, device: torch.device | None = None):
        super().__init__()
        self.group, self.num_embeddings = group, num_embeddings
        n = tp_size(group)
        self.padded = -(-num_embeddings // n) * n
        self.per_rank = self.padded // n
        self.start = tp_rank(group) * self.per_rank
        self.weight = nn.Parameter(
            torch.zeros(self.per_rank, embedding_dim, device=mdist.device() if device is None else device)
        )
        set_tensor_model_parallel_attributes(self.weight, True, 0, 1, num_embeddings)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        outside = (idx < self.start) | (idx >= self.start + self.per_rank)
        out = F.embedding((idx - self.start).masked_fill(outside, 0), self.weight)
        return reduce_from_tensor_parallel_region(out.masked_fill(outside.unsqueeze(-1), 0.0), self.group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, vocab_size, group):
        per = logits.shape[-1]
        start = tp_rank(group) * per
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 at least; float64 stays
        logits = logits.masked_fill(
            torch.arange(start, start + per, device=logits.device) >= vocab_size, float("-inf")
        )  # padding never wins
        m = logits.max(dim=-1).values
        if tp_size(group) > 1:
            torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX, group=group)
        logits = logits - m.unsqueeze(-1)
        outside = (targets < start) | (targets >= start + per)
        local_t = (targets - start).masked_fill(outside, 0)
        picked = logits.gather(-1, local_t.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = logits.exp()
        sum_exp = exp.sum(dim=-1)
        if tp_size(group) > 1:
            _all_reduce(picked, group)
            _all_reduce(sum_exp, group)
        loss = sum_exp.log() - picked  # per position
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local_t, outside)
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local_t, outside = ctx.saved_tensors
        g = softmax.clone()  # d loss / d logits
        g.scatter_add_(-1, local_t.unsqueeze(-1), -(~outside).to(g.dtype).unsqueeze(-1))
        return g.mul_(grad / local_t.numel()), None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, group=None
) -> torch.Tensor:
    """Mean cross-entropy over B·T positions from vocabulary-split logits, without gathering them.

    Three all-reduces of (B, T) numbers — the max (for a stable softmax), the target's logit, the
    sum of exponentials — instead of an all-gather of (B, T, V) logits (Shoeybi et al. 2019, §3,
    "output embedding"; Megatron-LM's ``vocab_parallel_cross_entropy``).

    Args:
        logits: (B, T, V'/N) this rank's slice of the padded vocabulary (columns ``r·V'/N ...``).
        targets: (B, T) int64 in ``[0, vocab_size)``.
        vocab_size: the true V; columns ``>= V`` are padding and are masked out.
    Returns:
        a scalar (float32), the same on every rank.
    """
    return _VocabParallelCrossEntropy.apply(logits, targets, vocab_size, group)
