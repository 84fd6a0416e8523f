"""Megatron-Core's selective recomputation by module in the performance model (a MODEL, :mod:`minipar.perf.model`).

``--recompute-granularity selective --recompute-modules …`` (Megatron-LM, ``TransformerConfig.recompute_modules``,
``megatron/core/transformer/transformer_config.py``) names the parts of a block whose activations are dropped after
the forward and recomputed in the backward; the default is ``core_attn``, which is this model's ``"selective"``
(Korthikanti et al. 2022, arXiv:2205.05198, §5). ``Layout.recompute_modules`` (``--recompute-modules``) takes these:

- ``core_attn``: the attention core (its s² scores; free under FlashAttention, which keeps none): as ``"selective"``.
- ``layernorm``: the two norms before attention and before the MLP ("output-discarding" checkpointing): their
  outputs, the QKV GEMM's and the MLP's (or the router's) input, are not kept; the backward runs the norms again,
  memory-bound, 2 reads and writes of s·b·h each.
- ``moe_act``: the experts' activation function (output-discarding): its output, the down projection's input, k·s·b·f/t
  values, is not kept; the backward runs the activation again over the k routed copies, memory-bound.
- ``moe``: the whole MoE layer ("normal" checkpointing, ``MoELayer.forward``: route, dispatch, experts, combine under
  ``tensor_parallel.checkpoint``): the layer keeps only its input; the backward runs the router, the local experts'
  forward GEMMs, the activation and both all-to-alls (dispatch and combine) again.

GIVEN: which tensors each module frees and what it re-runs (the source above: ``transformer_layer.py``,
``moe/moe_layer.py``, ``moe/experts.py``). ASSUMED: under FP8 a freed GEMM input is freed at the byte count the model
keeps it in (:func:`~minipar.perf.flops.fp8_saved_bytes`, :func:`~minipar.perf.moe.moe_fp8_saved_bytes`); the
recomputed all-to-alls cost what the forward's do and overlap as they do (``"ep"``); the one block being recomputed
holds its freed activations again while its backward runs, as under full recomputation. Units: bytes, seconds, FLOPs.
"""

from __future__ import annotations

from minipar.errors import ConfigError
from minipar.perf.gemm import attention_gemms, gemms_time
from minipar.perf.layout import Layout
from minipar.perf.moe import moe_gemm_shapes
from minipar.perf.shape import ModelShape

MODULES = ("core_attn", "layernorm", "moe_act", "moe")  # Megatron-Core's names, the ones modelled
EXPERT_MODULES = ("moe_act", "moe")


def modules(layout: Layout) -> tuple[str, ...]:
    """The modules recomputed: ``layout.recompute_modules`` under ``"selective"`` (None: Megatron-Core's default,
    ``("core_attn",)``); () under any other recompute mode."""
    if layout.recompute != "selective":
        return ()
    return ("core_attn",) if layout.recompute_modules is None else tuple(layout.recompute_modules)


def base_recompute(layout: Layout) -> str:
    """The recompute mode the rest of the model counts: ``"none"`` for a selective layout whose modules leave out
    ``core_attn`` (the scores kept), else ``layout.recompute``."""
    return "none" if layout.recompute == "selective" and "core_attn" not in modules(layout) else layout.recompute


def check_modules(model: ModelShape, layout: Layout, counts: str) -> None:
    """Raises ConfigError (one line, the value and the fix) for modules with a recompute mode other than
    ``"selective"``, none, an unknown one, ``moe``/``moe_act`` without experts, or minipar's CPU counts."""
    mods = layout.recompute_modules
    if mods is None:
        return
    text = ",".join(mods)
    if layout.recompute != "selective":
        raise ConfigError(
            f"recompute_modules={text} with recompute={layout.recompute!r}: modules are Megatron-Core's selective "
            "recomputation; use recompute='selective' (--recompute selective)"
        )
    bad = [m for m in mods if m not in MODULES]
    if bad or not mods:
        raise ConfigError(f"recompute_modules={text}: use one or more of {', '.join(MODULES)}")
    if not model.experts and set(mods) & set(EXPERT_MODULES):
        raise ConfigError(f"recompute_modules={text}: moe and moe_act recompute experts; the model has none")
    if counts != "megatron":
        raise ConfigError(f"recompute_modules={text}: Megatron-Core's modules are modelled on GPUs only")


def freed_bytes(model: ModelShape, b: float, t: int, sp: bool, bpv: int, cp: int, fp8_inputs: bool, mods) -> float:
    """Bytes per block and micro-batch that ``layernorm``, ``moe_act`` and ``moe`` free beyond the count of
    :func:`~minipar.perf.flops.activation_bytes_per_layer` / :func:`~minipar.perf.moe.moe_activation_bytes`
    (``core_attn`` is in that count's ``"selective"``). ``fp8_inputs``: GEMM inputs kept in 1 byte (module doc)."""
    tok, h, k, f = model.seq // cp * b, model.hidden, model.top_k, model.f
    rep = tok * h / (t if sp else 1)  # one s·b·h tensor on this rank: replicated unless sequence parallelism
    gemm_in = 1 if fp8_inputs else bpv
    out = 0.0
    if "layernorm" in mods:  # the QKV input, and the MLP's (dense: a GEMM input; MoE: the router's, kept in bf16)
        out += rep * (gemm_in + (bpv if model.experts else gemm_in))
    if "moe" in mods and model.experts:  # the MLP's k copies (dense count + k − 1), the shared one, k dispatched rows
        widths = k * f + (model.shared_ffn or 0)
        mlp = 2 * widths * (3 if model.gated else 2) * tok / t
        out += (mlp + 2 * k * tok * h) * bpv / 2 - ((k * tok * h + widths * tok / t) if fp8_inputs else 0.0)
    elif "moe_act" in mods and model.experts:  # the activation's output: the down projection's input
        out += k * tok * f / t * gemm_in
    return out


def extra_seconds(model: ModelShape, dev, layout: Layout, tokens: float) -> tuple[float, int]:
    """(seconds one block's backward spends re-running ``layernorm``, ``moe_act`` and ``moe`` for one micro-batch of
    ``tokens`` = b·s rows, the all-to-alls it runs again: 2 with ``moe``, else 0). Norms and the activation at HBM
    bandwidth (a read and a write per value, the gated activation reading two); the router and the local experts'
    forward GEMMs at their shapes (:func:`~minipar.perf.gemm.gemms_time`)."""
    mods, t, sp, bpv = modules(layout), layout.tp, layout.seq_parallel, dev.bytes_per_value
    hbm = dev.hbm_bw or float("inf")
    sec = 0.0
    if "layernorm" in mods:
        sec += 2 * 2 * tokens * model.hidden / (t if sp else 1) * bpv / hbm
    if model.experts and set(mods) & set(EXPERT_MODULES):
        widths = model.top_k * model.f + ((model.shared_ffn or 0) if "moe" in mods else 0)  # moe: the shared MLP too
        sec += ((3 if model.gated else 2) * tokens * widths / t) * bpv / hbm
        if "moe" in mods:
            dense, expert = moe_gemm_shapes(model, tokens, t, layout.ep, sp, layout.etp)
            local, outside = model.experts // layout.ep, dense[len(attention_gemms(model, tokens, t, sp)) :]
            sec += gemms_time(dev, outside, layout.fp8) + local * gemms_time(dev, expert, layout.fp8)
            return sec, 2
    return sec, 0


def extra_flops(model: ModelShape, global_batch: int, layout: Layout) -> float:
    """Executed FLOPs of one step that ``moe`` adds (the TFLOP/s count, not the MFU's): every block's router, k
    experts' and shared MLP's (width f_s) forward again, 2·B·s·((3 if gated else 2)·h·(k·f + f_s) + E·h) per block."""
    if "moe" not in modules(layout) or not model.experts:
        return 0.0
    out = 0.0
    for view, n in model.block_kinds():  # the blocks with experts (not the first dense_layers)
        if view.experts:
            widths, h = view.top_k * view.f + (view.shared_ffn or 0), view.hidden
            out += n * 2 * global_batch * view.seq * ((3 if view.gated else 2) * h * widths + view.experts * h)
    return out
