"""The counts a mixture-of-experts model needs before its layout can be planned (``python -m minipar.plan
--moe-experts``): parameters, FLOPs per token, all-to-all bytes; :mod:`minipar.perf.flops` computes them."""

from __future__ import annotations

from minipar.perf.flops import all_to_all_bytes, moe_flops_per_token, moe_params
from minipar.perf.layout import ModelShape


def moe_summary(name: str, model: ModelShape, experts: int, top_k: int, ep: int, gpus: int, global_batch: int) -> str:
    """Four lines: total vs active parameters, training FLOPs per token, and the all-to-all bytes per GPU of
    one step for ``experts`` experts per MLP, ``top_k`` per token, expert parallelism ``ep`` over ``gpus``
    GPUs and ``global_batch`` sequences per step (bf16, balanced routing); the layout search models dense
    models only. Raises ConfigError (:func:`minipar.model.moe.dispatch.check_moe`) for impossible counts."""
    from minipar.model.moe.dispatch import check_moe  # imports torch: only this path needs it

    E, k = experts, top_k
    check_moe(E, k, None, ep)
    total, active = moe_params(model, E, k)
    tokens = global_batch * model.seq / gpus  # per GPU per step, data and expert parallel ranks alike
    a2a = all_to_all_bytes(tokens, model.hidden, k, ep)
    dense = 6 * (model.params - model.seq * model.hidden) + 12 * model.layers * model.hidden * model.seq
    return "\n".join(
        (
            f"{name} with {E} experts, top-{k}: {total / 1e9:.1f}B parameters, {active / 1e9:.1f}B active per token",
            f"training FLOPs per token: {moe_flops_per_token(model, E, k) / 1e9:.1f} GFLOP (the dense model's: "
            f"{dense / 1e9:.1f})",
            f"expert parallelism ep={ep}, {tokens:,.0f} tokens per GPU per step: {a2a / 1e9:.2f} GB per all-to-all, "
            f"4 per layer per step = {4 * model.layers * a2a / 1e9:.1f} GB per GPU per step (bf16, balanced routing)",
            "(a MODEL: the layout search does not model experts yet; these are the counts it would need)",
        )
    )
