"""Capacity, token dropping and the index bookkeeping of dispatch and combine.

    plan = make_plan(expert, gate, n_experts, capacity)   # who goes where, who is dropped
    xs = dispatch(x, plan)                                 # (M, d): kept rows, sorted by expert
    y = combine(experts(xs), plan, n_tokens)               # (T, d): gate-weighted sum back per token

Capacity (Switch Transformer, Fedus et al. 2021, arXiv:2101.03961, §2.2, eq. 3; the number:
:func:`minipar.model.moe.capacity.expert_capacity`): an expert
takes at most ``C = ceil(capacity_factor · T · k / E)`` of a batch's T·k choices; the rest are
*dropped*: that choice contributes nothing and the token rides the residual connection. Which
ones are kept: first choices before second choices, and within a choice earlier tokens first
(GShard's order, Lepikhin et al. 2020, arXiv:2006.16668, Algorithm 1). ``capacity=None`` is the
drop-free variant (every choice kept, experts get uneven numbers of tokens: what dropless MoE,
Gale et al. 2022 "MegaBlocks", arXiv:2211.15841, and Megatron-LM's default do).

The bookkeeping, for T tokens and k choices each: choice ``s = j·T + t`` (token t, its j-th
expert). Its position in its expert's queue is the number of earlier choices for that expert;
kept iff position < C. The kept choices are sorted by expert (stable), so expert e's rows are a
contiguous block of ``plan.tokens_per_expert[e]`` rows, and for expert parallelism the blocks of
the experts one rank owns are contiguous too (experts are dealt out in blocks of E/ep).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Plan:
    """Where each kept choice goes. M = kept choices; rows are sorted by expert.

    Attributes:
        token: (M,) int64, the token each row comes from.
        gate: (M,) the router's weight of that choice (differentiable).
        tokens_per_expert: (E,) int64 rows per expert after dropping (sums to M).
        routed: (E,) int64 choices per expert before dropping.
        dropped: choices dropped (T·k − M).
    """

    token: torch.Tensor
    gate: torch.Tensor
    tokens_per_expert: torch.Tensor
    routed: torch.Tensor
    dropped: int


def make_plan(expert: torch.Tensor, gate: torch.Tensor, n_experts: int, capacity: int | None = None) -> Plan:
    """Sort the (T, k) choices by expert, dropping those past ``capacity`` (see the module doc).

    Args:
        expert: (T, k) int64 chosen experts; gate: (T, k) their weights.
        n_experts: E. capacity: rows per expert at most, or None (keep all).
    Returns:
        A :class:`Plan`.
    """
    T, k = expert.shape
    flat = expert.t().reshape(-1)  # choice s = j·T + t: every first choice before any second one
    onehot = F.one_hot(flat, n_experts)
    routed = onehot.sum(0)
    keep = torch.ones_like(flat, dtype=torch.bool)
    if capacity is not None:
        position = (onehot.cumsum(0) - 1).gather(1, flat[:, None]).squeeze(1)  # place in its expert's queue
        keep = position < capacity
    kept = keep.nonzero().squeeze(1)
    order = kept[torch.argsort(flat[kept], stable=True)]
    return Plan(
        token=order % T,
        gate=gate.t().reshape(-1)[order],
        tokens_per_expert=torch.bincount(flat[order], minlength=n_experts),
        routed=routed,
        dropped=int(T * k - order.numel()),
    )


def dispatch(x: torch.Tensor, plan: Plan) -> torch.Tensor:
    """(T, d) tokens -> (M, d) rows, one per kept choice, grouped by expert."""
    return x.index_select(0, plan.token)


def combine(y: torch.Tensor, plan: Plan, n_tokens: int) -> torch.Tensor:
    """(M, d) expert outputs -> (T, d): ``out[t] = Σ gate · y`` over token t's kept choices (0 if none)."""
    out = y.new_zeros((n_tokens, y.shape[-1]))
    return out.index_add(0, plan.token, y * plan.gate[:, None].to(y.dtype))
