"""ZeRO's model-state bytes per rank, by stage (Rajbhandari et al. 2020, arXiv:1910.02054, §5, Fig. 1): arithmetic
only, no torch, so the planner (:mod:`minipar.perf.memory`) imports it without PyTorch. Public as
``minipar.zero.flat.zero_bytes_formula`` too (the API table of the README), where lesson 03 meets it beside the
flat shards it describes."""

from __future__ import annotations

from minipar.errors import ConfigError

STAGES = {1: "optimizer state", 2: "optimizer state + gradients", 3: "optimizer state + gradients + parameters"}


def zero_bytes_formula(num_params: int, stage: int, world_size: int, mixed_precision: bool = False) -> dict:
    """Model-state bytes per rank for ZeRO ``stage`` (0 = plain data parallelism), ZeRO §5 / Fig. 1.

    fp32 AdamW: params 4Ψ, grads 4Ψ, optimizer 8Ψ; mixed precision: 2Ψ, 2Ψ, 12Ψ (K = 12). Stage 1
    divides the optimizer term by N, stage 2 also the gradients, stage 3 also the parameters.
    Returns ``{"params", "grads", "optimizer", "total"}`` in bytes (floats: Ψ/N need not be whole).
    """
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"stage={stage!r}: use 0 (data parallel), 1, 2 or 3")
    p, g, k = (2, 2, 12) if mixed_precision else (4, 4, 8)
    n = world_size
    d = dict(
        params=p * num_params / (n if stage >= 3 else 1),
        grads=g * num_params / (n if stage >= 2 else 1),
        optimizer=k * num_params / (n if stage >= 1 else 1),
    )
    d["total"] = d["params"] + d["grads"] + d["optimizer"]
    return d
