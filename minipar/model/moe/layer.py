"""``MoE``: a mixture-of-experts feed-forward layer on one device (the reference EP must equal).

    moe = MoE(d_model=64, n_experts=4, top_k=2)              # drop-free
    y = moe(x)                                               # (..., d) -> (..., d)
    moe.aux_loss, moe.stats                                  # this forward's balancing loss, its counts

One forward: router -> plan (capacity, dropping) -> dispatch -> experts -> combine
(:mod:`minipar.model.moe.router`, :mod:`minipar.model.moe.dispatch`, :mod:`minipar.model.moe.experts`). Each token
runs through k of the E experts, so the layer holds E MLPs' parameters but computes k per token:
"total" vs "active" parameters (Mixtral 8x7B: 47B total, 13B active per token; Jiang et al. 2024,
arXiv:2401.04088, §2.1).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.model.moe.capacity import check_moe, expert_capacity
from minipar.model.moe.dispatch import combine, dispatch, make_plan
from minipar.model.moe.experts import Experts
from minipar.model.moe.router import Router, load_balancing_loss


class MoE(nn.Module):
    """Top-k routed experts in place of one MLP.

    Args:
        d_model: d. n_experts: E. top_k: k. d_ff: each expert's hidden size (default 4·d, the
            dense MLP's). capacity_factor: None = drop-free, else C = ceil(cf·T·k/E) per forward
            of T tokens. aux_loss_coef: α of the load-balancing loss (Switch: 0.01).
            proj_std, bias: as :class:`~minipar.model.moe.experts.Experts`.
    Shapes:
        x (..., d) -> (..., d); T = x.numel() / d tokens.
    Attributes set by forward:
        aux_loss: α · E · Σ f_i P_i (scalar tensor, in the graph).
        stats: ``dict(routed=(E,), kept=(E,), dropped=int, capacity=int|None, tokens=T)``.
    Raises:
        ConfigError: k outside 1..E, a capacity factor <= 0.
    """

    def __init__(
        self,
        d_model: int,
        n_experts: int,
        top_k: int = 1,
        d_ff: int | None = None,
        capacity_factor: float | None = None,
        aux_loss_coef: float = 0.01,
        proj_std: float = 0.02,
        bias: bool = True,
    ):
        super().__init__()
        check_moe(n_experts, top_k, capacity_factor)
        self.n_experts, self.top_k = n_experts, top_k
        self.capacity_factor, self.aux_loss_coef = capacity_factor, aux_loss_coef
        self.router = Router(d_model, n_experts, top_k)
        self.experts = Experts(n_experts, d_model, d_ff or 4 * d_model, proj_std, bias)
        self.aux_loss: torch.Tensor | None = None
        self.stats: dict = {}

    def route(self, x: torch.Tensor, balance_counts=None):
        """Router, plan and aux loss for (T, d) tokens; ``balance_counts(routed) -> routed`` may sum
        the counts over more ranks (global-batch balancing). Returns the plan; sets aux_loss, stats."""
        probs, expert, gate = self.router(x)
        cap = expert_capacity(x.shape[0], self.n_experts, self.top_k, self.capacity_factor)
        plan = make_plan(expert, gate, self.n_experts, cap)
        counts = plan.routed if balance_counts is None else balance_counts(plan.routed)
        self.aux_loss = self.aux_loss_coef * load_balancing_loss(probs, counts)
        kept = plan.tokens_per_expert
        self.stats = dict(routed=plan.routed, kept=kept, dropped=plan.dropped, capacity=cap, tokens=x.shape[0])
        return plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        plan = self.route(x)
        y = self.experts(dispatch(x, plan), plan.tokens_per_expert.tolist())
        return combine(y, plan, x.shape[0]).view(shape)

    def active_params(self) -> int:
        """Parameters one token uses: the router and k of the E experts."""
        per_expert = sum(p[0].numel() for p in self.experts.parameters())
        return self.router.weight.numel() + self.top_k * per_expert
