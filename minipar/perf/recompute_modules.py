"""Megatron-Core's selective recomputation by module in the performance model (a MODEL, :mod:`minipar.perf.model`).

``--recompute-granularity selective --recompute-modules …`` (Megatron-LM, ``TransformerConfig.recompute_modules``,
``megatron/core/transformer/transformer_config.py``) names the parts of a block whose activations are dropped after
the forward and recomputed in the backward; the default is ``core_attn``, which is this model's ``"selective"``
(Korthikanti et al. 2022, arXiv:2205.05198, §5). ``Layout.recompute_modules`` (``--recompute-modules``) takes these:

- ``core_attn``: the attention core (its s² scores): as ``"selective"``. Under FlashAttention, which keeps no scores,
  it saves nothing, yet Megatron-Core re-runs the core's forward in the backward all the same
  (``megatron/core/transformer/attention.py`` at core_v0.15.0: ``checkpoint_core_attention`` is set by the module
  whatever the attention backend), charged under ``--framework megatron`` (read 2026-11-29); Megatron-LM's legacy
  attention skipped it under ``--use-flash-attn``, and so does this model under the PyTorch stacks.
- ``layernorm``: the two norms before attention and before the MLP ("output-discarding" checkpointing): their
  outputs, the QKV GEMM's and the MLP's (or the router's) input, are not kept; the backward runs the norms again,
  memory-bound, 2 reads and writes of s·b·h each.
- ``moe_act``: the experts' activation function (output-discarding): its output, the down projection's input, k·s·b·f/t
  values, is not kept; the backward runs the activation again over the k routed copies, memory-bound.
- ``moe``: the whole MoE layer ("normal" checkpointing, ``MoELayer.forward``: route, dispatch, experts, combine under
  ``tensor_parallel.checkpoint``): the layer keeps only its input; the backward runs the router, the local experts'
  forward GEMMs, the activation and both all-to-alls (dispatch and combine) again.
- ``mla_up_proj`` (MLA only): MLA's up projections and RoPE (output-discarding, ``multi_latent_attention.py``:
  ``qkv_up_checkpoint``, discarded once the attention core has its output): Q, K and V, a·(2·d_qk + d_v) values per
  token ÷ t, are not kept; the backward runs both up projections (:func:`~minipar.perf.gemm.mla_up_gemms`) and the
  RoPE and concatenation copies (a read and a write of Q, K, V) again. DeepSeek-V3's recipe sets it with ``mlp``.
- ``mlp``: the dense MLP of a block without experts ("normal" checkpointing; ``transformer_layer.py``: only where the
  block is not a MoE layer): its input kept (in bf16, where Transformer Engine's FP8 ``Linear`` would keep an FP8
  copy), its inner tensors (up/gate outputs, the activation's output: (2 if gated else 1)·f + f values ÷ t) not; the
  backward runs its two GEMMs, the activation and its TP collective again.
- ``shared_experts``: the shared experts' MLP of a MoE block ("normal" checkpointing, ``moe/shared_experts.py``), as
  ``mlp`` for width f_s; inside ``moe`` already.

GIVEN: which tensors each module frees and what it re-runs (the source above: ``transformer_layer.py``,
``moe/moe_layer.py``, ``moe/experts.py``). ASSUMED: under FP8 a freed GEMM input is freed at the byte count the model
keeps it in (:func:`~minipar.perf.flops.fp8_saved_bytes`, :func:`~minipar.perf.moe.moe_fp8_saved_bytes`); the
recomputed all-to-alls and TP collectives cost what the forward's do and overlap as they do (``"ep"``, ``"tp"``); the
one block being recomputed holds its freed activations again while its backward runs, as under full recomputation.
Units: bytes, seconds, FLOPs.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.errors import ConfigError
from minipar.perf.gemm import attention_gemms, block_gemms, gemms_time, mla_up_gemms
from minipar.perf.layout import Layout
from minipar.perf.moe import dispatched_rows, moe_gemm_shapes
from minipar.perf.shape import ModelShape

MODULES = ("core_attn", "layernorm", "moe_act", "moe", "mla_up_proj", "mlp", "shared_experts")  # Megatron-Core's names
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
    ``"selective"``, none, an unknown one, ``moe``/``moe_act`` without experts, ``mla_up_proj`` without MLA, ``mlp``
    where every block has experts, ``shared_experts`` without a shared expert, or minipar's CPU counts."""
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
    if "mla_up_proj" in mods and not model.mla:
        raise ConfigError(f"recompute_modules={text}: mla_up_proj recomputes MLA's up projections; give --kv-lora-rank")
    if "mlp" in mods and model.experts and not model.dense_layers:
        raise ConfigError(f"recompute_modules={text}: mlp recomputes a dense MLP; every block has experts (drop mlp)")
    if "shared_experts" in mods and not model.shared_ffn:
        raise ConfigError(
            f"recompute_modules={text}: shared_experts needs a shared expert (--moe-shared-expert-intermediate-size)"
        )
    if counts != "megatron":
        raise ConfigError(f"recompute_modules={text}: Megatron-Core's modules are modelled on GPUs only")


def freed_bytes(
    model: ModelShape, b: float, t: int, sp: bool, bpv: int, cp: int, fp8_inputs: bool, mods, etp: int | None = None
) -> float:
    """Bytes per block and micro-batch that ``layernorm``, ``moe_act``, ``moe``, ``mla_up_proj``, ``mlp`` and
    ``shared_experts`` free (module doc) beyond the count of
    :func:`~minipar.perf.flops.activation_bytes_per_layer` / :func:`~minipar.perf.moe.moe_activation_bytes`
    (``core_attn`` is in that count's ``"selective"``). ``fp8_inputs``: GEMM inputs kept in 1 byte (module doc); ``etp``
    the experts' TP degree (None: t; the dispatched rows, :func:`~minipar.perf.moe.dispatched_rows`)."""
    tok, h, k, f = model.seq // cp * b, model.hidden, model.top_k, model.f
    rep = tok * h / (t if sp else 1)  # one s·b·h tensor on this rank: replicated unless sequence parallelism
    gemm_in = 1 if fp8_inputs else bpv
    out = 0.0
    if "layernorm" in mods:  # the QKV input, and the MLP's (dense: a GEMM input; MoE: the router's, kept in bf16)
        out += rep * (gemm_in + (bpv if model.experts else gemm_in))
    if "moe" in mods and model.experts:  # the MLP's k copies (dense count + k − 1), the shared one, k dispatched rows
        widths, rows = k * f + (model.shared_ffn or 0), dispatched_rows(model, b, t, cp, etp)
        mlp = 2 * widths * (3 if model.gated else 2) * tok / t
        out += (mlp + 2 * rows * h) * bpv / 2 - ((rows * h + widths * tok / t) if fp8_inputs else 0.0)
    elif "moe_act" in mods and model.experts:  # the activation's output: the down projection's input
        out += k * tok * f / t * gemm_in
    if "mla_up_proj" in mods and model.mla:  # Q, K, V (bf16: the attention core's inputs)
        out += model.heads * (2 * model.qk_dim + model.v_dim) * tok / t * bpv
    width = _mlp_recomputed(model, mods)
    if width:  # the MLP's inner tensors; its input kept in bf16 where FP8 kept an FP8 copy (dense: layernorm frees it)
        out += ((2 if model.gated else 1) * bpv + gemm_in) * width * tok / t
        if fp8_inputs and not model.experts and "layernorm" not in mods:
            out -= rep * (bpv - gemm_in)
    return out


def _mlp_recomputed(model: ModelShape, mods) -> int:
    """The width of the MLP ``mlp`` (a block without experts: f) or ``shared_experts`` (a MoE block's shared MLP, unless
    ``moe`` re-runs the layer: f_s) recomputes in a block of ``model``; 0 for none."""
    if not model.experts:
        return model.f if "mlp" in mods else 0
    return (model.shared_ffn or 0) if "shared_experts" in mods and "moe" not in mods else 0


def extra_seconds(model: ModelShape, dev, layout: Layout, tokens: float) -> tuple[float, int, int]:
    """(seconds one block's backward spends re-running ``layernorm``, ``moe_act``, ``moe``, ``mla_up_proj``, ``mlp`` and
    ``shared_experts`` for one micro-batch of ``tokens`` = b·s rows; the all-to-alls it runs again: 2 with ``moe``, else
    0; the MLP TP collectives it runs again, each one b·s·h all-reduce's worth: 1 for ``mlp``, ``shared_experts`` or
    ``moe`` with a shared expert at tp > 1, else 0). Norms, RoPE's copies and activations at HBM bandwidth (a read and a
    write per value, the gated activation reading two); GEMMs at their shapes
    (:func:`~minipar.perf.gemm.gemms_time`)."""
    mods, t, sp, bpv, fp8 = modules(layout), layout.tp, layout.seq_parallel, dev.bytes_per_value, layout.fp8
    hbm = dev.hbm_bw or float("inf")
    sec, a2a, tp_runs = 0.0, 0, 0
    if "layernorm" in mods:
        sec += 2 * 2 * tokens * model.hidden / (t if sp else 1) * bpv / hbm
    if "mla_up_proj" in mods and model.mla:
        sec += gemms_time(dev, mla_up_gemms(model, tokens, t), fp8)
        sec += 2 * tokens * model.heads * (2 * model.qk_dim + model.v_dim) / t * bpv / hbm
    width = _mlp_recomputed(model, mods)
    if width:
        sec += gemms_time(dev, block_gemms(replace(model, ffn=width), tokens, t)[-2:], fp8)
        sec += (3 if model.gated else 2) * tokens * width / t * bpv / hbm
        tp_runs = 1 if t > 1 else 0
    if model.experts and set(mods) & set(EXPERT_MODULES):
        widths = model.top_k * model.f + ((model.shared_ffn or 0) if "moe" in mods else 0)  # moe: the shared MLP too
        sec += ((3 if model.gated else 2) * tokens * widths / t) * bpv / hbm
        if "moe" in mods:
            dense, expert = moe_gemm_shapes(model, tokens, t, layout.ep, sp, layout.etp)
            local, outside = model.experts // layout.ep, dense[len(attention_gemms(model, tokens, t, sp)) :]
            sec += gemms_time(dev, outside, fp8) + local * gemms_time(dev, expert, fp8)
            a2a, tp_runs = 2, (1 if t > 1 and model.shared_ffn else 0)  # the shared MLP's all-reduce again too
    return sec, a2a, tp_runs


def extra_flops(model: ModelShape, global_batch: int, layout: Layout) -> float:
    """Executed FLOPs of one step that the modules' GEMMs add (the TFLOP/s count, not the MFU's), per block of their
    kind: ``moe`` the router, k experts' and shared MLP's (width f_s) forward again, 2·B·s·((3 if gated else 2)·h·(k·f
    + f_s) + E·h); ``mla_up_proj`` the two up projections; ``mlp`` / ``shared_experts`` the MLP of width f / f_s,
    2·B·s·(3 if gated else 2)·h·f. (The MTP blocks' re-runs are left out, as in the MFU's count.)"""
    mods, out = modules(layout), 0.0
    for view, n in model.block_kinds():  # each kind of block: dense (the first dense_layers) or with experts
        rows, h, gated = 2 * global_batch * view.seq, view.hidden, 3 if view.gated else 2
        if "moe" in mods and view.experts:
            out += n * rows * (gated * h * (view.top_k * view.f + (view.shared_ffn or 0)) + view.experts * h)
        if "mla_up_proj" in mods and view.mla:
            out += n * rows * sum(m_n * k for _, m_n, k in mla_up_gemms(view, 1, 1))
        out += n * rows * gated * h * _mlp_recomputed(view, mods)
    return out
