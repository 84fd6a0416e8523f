"""How many tokens an expert takes, and which MoE settings cannot work: arithmetic only, no torch, so the planner
(:mod:`minipar.perf.moe`) checks ``--moe-experts/--moe-top-k/--ep`` without importing PyTorch.

Capacity (Switch Transformer, Fedus et al. 2021, arXiv:2101.03961, §2.2, eq. 3): an expert takes at most
``C = ceil(capacity_factor · T · k / E)`` of a batch's T·k choices; :mod:`minipar.model.moe.dispatch` drops the rest.
"""

from __future__ import annotations

import math

from minipar.errors import ConfigError


def expert_capacity(n_tokens: int, n_experts: int, top_k: int, capacity_factor: float | None) -> int | None:
    """``ceil(capacity_factor · n_tokens · top_k / n_experts)``, or None (drop-free) when the factor is None.

    Raises:
        ConfigError: a factor <= 0.
    """
    if capacity_factor is None:
        return None
    if not capacity_factor > 0:
        raise ConfigError(f"moe capacity_factor={capacity_factor} must be > 0 (or None for drop-free routing)")
    return math.ceil(capacity_factor * n_tokens * top_k / n_experts)


def check_moe(n_experts: int, top_k: int, capacity_factor: float | None, ep: int = 1) -> None:
    """Raise :class:`ConfigError` for a MoE setting that cannot work (one line, with the fix)."""
    if n_experts < 1:
        raise ConfigError(f"moe_experts={n_experts} must be >= 1")
    if not 1 <= top_k <= n_experts:
        raise ConfigError(f"moe_top_k={top_k} must be between 1 and moe_experts={n_experts}")
    expert_capacity(1, n_experts, top_k, capacity_factor)
    if ep < 1 or n_experts % ep:
        raise ConfigError(f"ep={ep} must divide moe_experts={n_experts}: each EP rank holds E/ep whole experts")
