"""Seconds of one transformer block for one micro-batch on one rank, megatron counts (a MODEL: :mod:`~.model`).

:func:`block_terms`: forward, backward (recomputed or not), the exposed TP, CP and EP collectives and the host's floor
of one block; :mod:`minipar.perf.model` adds them up over each model chunk's blocks (of each kind,
:meth:`~minipar.perf.layout.Layout.chunk_kinds`), the logit layer and the schedule. :func:`gemm_rate` (the weight
GEMMs' FLOP/s when large, FP8 included) and :func:`cp_block_bytes` (one ring-attention message). Sources: the terms'
in :mod:`minipar.perf.model`'s docstring. Units: seconds, bytes, FLOP/s.
"""

from __future__ import annotations

from minipar.comm.cost import all_reduce_time, p2p_time
from minipar.errors import ConfigError
from minipar.perf.flops import activation_bytes_per_layer, attention_core_flops, layer_gemm_flops
from minipar.perf.gemm import FP8_VS_BF16, attention_rate, block_gemm_time, gemms_time, op_recompute_gemms
from minipar.perf.hardware import Device, block_passes
from minipar.perf.layout import Layout
from minipar.perf.moe import EP_OVERLAP_HIDES, host_floor, moe_activation_bytes, moe_block_times
from minipar.perf.recompute_modules import extra_seconds, modules
from minipar.perf.shape import ModelShape
from minipar.perf.sharding import links


def cp_block_bytes(model: ModelShape, b: int, s: int, t: int, bpv: float) -> float:
    """Bytes of one ring-attention message of a rank holding ``s`` tokens: its K and V, 2·b·s·(kv heads
    on this TP rank)·d_head·bpv. Ring attention sends c − 1 of them forward and 2c − 1 backward (the dK/dV
    accumulators make one more hop home): :func:`minipar.cp.ring.ring_attention_bytes`, lesson 11."""
    if model.mla:  # every head its own K (d_qk wide) and V (d_v)
        return b * s * model.heads * (model.qk_dim + model.v_dim) / t * bpv
    return 2 * b * s * model.kv_width / min(t, model.kv) * bpv


def gemm_rate(dev: Device, layout: Layout) -> float:
    """FLOP/s of the blocks' weight GEMMs (QKV, output projection, MLP) when they are large (the estimate itself
    takes each GEMM at its shape on a GPU, :func:`minipar.perf.gemm.block_gemm_time`): ``gemm_efficiency`` × the
    dense bf16 peak; with ``layout.fp8`` :data:`minipar.perf.gemm.FP8_VS_BF16` (0.79, measured on an H100) of that
    fraction of the dense FP8 peak ``Device.fp8_flops`` (H100 SXM: 1,979 TFLOP/s). The rest stays bf16, as
    Transformer Engine's and torchtitan's Float8 recipes keep it: the attention core (FlashAttention), the norms
    and other memory-bound operators, the embedding and the logit layer (torchtitan's float8 converter swaps the
    blocks' ``nn.Linear`` and skips ``output``; Megatron-LM's output layer is no TE layer). Memory and communication:
    bf16 mixed precision's (the recipes keep bf16/fp32 master weights and cast to FP8 per GEMM; TE's FP8 copies of
    saved GEMM inputs, which would lower the activations, are not modelled). MFU stays a fraction of the bf16 peak.

    Raises:
        ConfigError: fp8 on a device without an FP8 peak (A100), or with minipar's CPU counts.
    """
    if not layout.fp8:
        return dev.peak_flops * dev.gemm_efficiency * dev.compute_share
    if dev.fp8_flops is None or dev.counts != "megatron":
        raise ConfigError(f"fp8 on {dev.name}: it has no FP8 tensor cores (Device.fp8_flops); use bf16 or an H100")
    return dev.fp8_flops * dev.gemm_efficiency * FP8_VS_BF16 * dev.compute_share


def block_terms(model: ModelShape, dev: Device, layout: Layout) -> dict:
    """One block of ``model`` (every block alike: a kind of :meth:`~minipar.perf.shape.ModelShape.block_kinds`) for
    one micro-batch on one rank, in seconds: ``f`` its forward, ``b`` its backward when recomputed (the forward again
    under full recomputation, Megatron-Core's modules' re-runs) and ``b0`` when not; the exposed collectives ``tp_f``,
    ``tp_b``, ``tp_b0`` (TP), ``cp_f``, ``cp_b`` (ring attention's steps, or the all-gathers), ``ep_f``, ``ep_b``,
    ``ep_b0`` (the experts' all-to-alls); ``pad`` the host's floor under a MoE block beyond its GPU time
    (:func:`minipar.perf.moe.host_floor`), split ``pad_f``, ``pad_b``; ``moe``: it has experts."""
    t, b, c, L = layout.tp, layout.micro_batch, layout.cp, links(dev, layout)
    bpv, sp, flash, share = dev.bytes_per_value, layout.seq_parallel, layout.flash_attention, dev.compute_share
    s = model.seq // c  # this rank's tokens of each sequence
    eff = dev.peak_flops * dev.gemm_efficiency * share
    a_rate = attention_rate(dev, flash, b * model.heads / t, s)  # FlashAttention: measured per size (perf.gemm)
    core = attention_core_flops(model, b, s, model.seq, flash) / t / a_rate * (0.5 if flash else 1.0)  # causal half
    if model.experts:
        act = moe_activation_bytes(model, b, t, "none", sp, bpv, flash, c, layout.expert_tp)
    else:
        act = activation_bytes_per_layer(model, b, t, "none", sp, bpv, flash, c)
    mem_t = block_passes(dev, model.gated) * act / dev.hbm_bw if dev.hbm_bw else 0.0  # memory-bound operators
    moe = moe_block_times(model, dev, layout, b * s, L) if model.experts else None
    if moe:  # attention, router and the E/ep local experts at their own shapes
        gemm_t, gemm_b = moe["f"], moe["b"]
    elif dev.sms:  # the blocks' weight GEMMs at their own shapes: waves and roofline (fp8: at the FP8 peak)
        gemm_t = block_gemm_time(dev, model, b * s, t, layout.fp8, sp=sp)
        gemm_b = block_gemm_time(dev, model, b * s, t, layout.fp8, backward=True, sp=sp)  # data and weight gradients
    else:
        gemm_t = layer_gemm_flops(model, b, s) / t / (gemm_rate(dev, layout) if layout.fp8 else eff)
        gemm_b = 2 * gemm_t
    rest = core + (mem_t + dev.layer_overhead / 3) / share  # a backward: twice a forward's
    f_l = gemm_t + rest
    mod_s, mod_a2a, mod_tp = extra_seconds(model, dev, layout, b * s)  # Megatron-Core's modules (0 unless selective)
    if layout.recompute == "op":  # every second weight matmul, the memory-bound operators: flops.op_recomputed_matmuls
        extra = (
            gemms_time(dev, op_recompute_gemms(model, b * s, t), layout.fp8) + (mem_t + dev.layer_overhead / 3) / share
        )
    else:  # selective: the attention core if core_attn is a module, and the other modules' re-runs. Under flash the
        # core keeps no scores: Megatron-Core still re-runs it (attention.py: checkpoint_core_attention, whatever the
        # backend), Megatron-LM's legacy path and the PyTorch stacks do not (recompute_modules module doc)
        again = "core_attn" in modules(layout) and (not flash or dev.framework == "megatron")
        sel = (core if again else 0.0) + mod_s
        extra = {"none": 0.0, "full": f_l, "selective": sel}[layout.recompute]
    b_l = gemm_b + 2 * rest + extra + (core / 2 if flash else 0.0)  # flash's backward recomputes QKᵀ
    ar = all_reduce_time(t, b * s * model.hidden * bpv, L["tp"])
    full = layout.recompute == "full"
    ar2 = ar + moe["tp_mlp"] if moe else 2 * ar  # experts: the MLP's all-reduce carries k·b·s·h values
    tp_f, tp_b = ar2, ar2 + (ar2 if full else 0.0) + mod_tp * ar  # full: the forward's again; modules: their MLP's
    b_0, tp_b0 = (b_l - extra, ar2) if full else (b_l, tp_b)  # a block not recomputed
    a2a = 2 * moe["a2a"] if moe else 0.0  # dispatch + combine, forward; backward their mirrors
    ep_f, ep_b0, ep_b = a2a, a2a, a2a + (a2a if full else 0.0)
    if mod_a2a:  # the moe module re-runs dispatch and combine in every block's backward
        ep_b0 = ep_b = ep_b + a2a
    if "tp" in layout.overlap:
        tp_f, tp_b, tp_b0 = max(0.0, tp_f - f_l), max(0.0, tp_b - b_l), max(0.0, tp_b0 - b_0)
    if "ep" in layout.overlap:  # hidden behind another micro-batch's block, as TP's behind this one's
        h = EP_OVERLAP_HIDES  # of what an ideal overlap would hide (minipar.perf.moe: chosen on one published pair)
        ep_f, ep_b, ep_b0 = ep_f - h * min(ep_f, f_l), ep_b - h * min(ep_b, b_l), ep_b0 - h * min(ep_b0, b_0)
    step = p2p_time(cp_block_bytes(model, b, s, t, bpv), L["cp"]) if c > 1 else 0.0  # one K/V block
    if layout.cp_allgather:  # all-gather K, V before attention; backward: again, and reduce-scatter dK, dV
        cp_f, cp_b = (c - 1) * step, 2 * (c - 1) * step
    else:  # ring attention: each step's transfer hides behind one chunk's attention
        cp_f, cp_b = (c - 1) * max(0.0, step - core / c), (c - 1) * max(0.0, 2 * step - 2 * core / c) + step
    # the host's floor under a MoE block (minipar.perf.moe.MOE_HOST_S): the GPU waits for the CPU's launches
    gpu = f_l + b_0 + tp_f + tp_b0 + cp_f + cp_b + ep_f + ep_b0
    pad = max(0.0, host_floor(dev, layout) - gpu) if moe else 0.0
    pad_f, pad_b = pad * f_l / (f_l + b_0), pad * b_0 / (f_l + b_0)
    return {
        "f": f_l, "b": b_l, "b0": b_0, "tp_f": tp_f, "tp_b": tp_b, "tp_b0": tp_b0, "cp_f": cp_f, "cp_b": cp_b,
        "ep_f": ep_f, "ep_b": ep_b, "ep_b0": ep_b0, "pad": pad, "pad_f": pad_f, "pad_b": pad_b, "moe": bool(moe),
    }  # fmt: skip
