"""The router: which k experts each token goes to, with what weight, and the load-balancing loss.

    probs, expert, gate = route(logits, k)     # (T, E), (T, k) int64, (T, k)
    aux = load_balancing_loss(probs, tokens_per_expert)

Gating (Shazeer et al. 2017, arXiv:1701.06538; Switch Transformer, Fedus, Zoph & Shazeer 2021,
arXiv:2101.03961, §2.1): p(x) = softmax(W_r x) over the E experts; a token goes to the k experts
of largest p. With k = 1 (Switch) its output is p_i(x) · E_i(x), so the router learns through
the gate. With k > 1 the k gates are renormalised to sum to 1 (GShard's top-2 gating, Lepikhin
et al. 2020, arXiv:2006.16668, Algorithm 1; Mixtral's softmax over the top-k logits, Jiang et al.
2024, arXiv:2401.04088, §2.1, is the same number).

Load-balancing loss (Switch Transformer §2.2, eqs. 4-6, after GShard's auxiliary loss): over a
batch of T tokens,

    loss = α · E · Σ_i f_i · P_i,   f_i = (tokens routed to expert i) / (T·k),   P_i = (1/T) Σ_x p_i(x)

f is a count (no gradient), P is differentiable, so the loss pushes probability away from the
experts that got more than their share. Perfect balance (f_i = P_i = 1/E) gives α; all tokens
on one expert with probability 1 gives α·E. Switch uses α = 0.01. For k > 1 f counts every one
of the k choices (so Σ f_i = 1), as Megatron-LM's and Hugging Face's implementations do.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.errors import ConfigError


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax over experts, then the top-k.

    Args:
        logits: (T, E) router logits.
        top_k: experts per token, 1 <= top_k <= E.
    Returns:
        ``(probs (T, E), expert (T, k) int64, gate (T, k))``: ``expert[t, j]`` is token t's j-th
        choice (largest probability first); ``gate`` its weight (renormalised over the k when k > 1).
    Raises:
        ConfigError: top_k outside 1..E.
    """
    E = logits.shape[-1]
    if not 1 <= top_k <= E:
        raise ConfigError(f"moe top_k={top_k} must be between 1 and the number of experts {E}")
    probs = logits.softmax(dim=-1)
    gate, expert = probs.topk(top_k, dim=-1)
    if top_k > 1:
        gate = gate / gate.sum(dim=-1, keepdim=True)
    return probs, expert, gate


def tokens_per_expert(expert: torch.Tensor, n_experts: int) -> torch.Tensor:
    """(E,) int64: how many of the (T, k) choices in ``expert`` picked each expert (before any dropping)."""
    return torch.bincount(expert.reshape(-1), minlength=n_experts)


def load_balancing_loss(probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's auxiliary loss without α: ``E · Σ_i f_i · P_i`` (see the module doc).

    Args:
        probs: (T, E) router probabilities of this batch (P_i = their mean over T).
        counts: (E,) routed choices per expert (f_i = counts_i / Σ counts); pass counts summed over
            a larger batch (an all-reduce over data-parallel ranks) to balance over that batch.
    Returns:
        A scalar tensor; 1 at perfect balance, E when every token sits on one expert with p = 1.
    """
    f = counts.to(probs.dtype) / counts.sum().clamp(min=1)
    return probs.shape[-1] * (f * probs.mean(dim=0)).sum()


class Router(nn.Module):
    """``W_r``: (E, d_model), no bias. ``forward(x (T, d)) -> (probs, expert, gate)`` as :func:`route`."""

    def __init__(self, d_model: int, n_experts: int, top_k: int = 1):
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ConfigError(f"moe top_k={top_k} must be between 1 and moe_experts={n_experts}")
        self.top_k = top_k
        w = torch.empty(n_experts, d_model)  # device-ok: built on CPU, moved with the model
        self.weight = nn.Parameter(w.normal_(0.0, 0.02))

    def forward(self, x: torch.Tensor):
        return route(x @ self.weight.t(), self.top_k)
