"""Achieved GEMM throughput per device and matrix shape: the compute term of :mod:`minipar.perf.model`.

A GEMM (m×k)@(k×n) makes 2·m·n·k FLOPs. Its achieved rate (FLOP/s) on a GPU is modelled as

    rate(m, n, k) = min(peak · eff_large · waves(m, n),  intensity(m, n, k) · hbm_bw)

- ``eff_large`` (:attr:`~minipar.perf.hardware.Device.gemm_efficiency`): the fraction of the dense
  peak a training step's large GEMMs reach, **per device**, CHOSEN on that device's declared fit set
  (:mod:`minipar.perf.published`): A100 on Narayanan et al. 2021 Table 1, H100 on llm-foundry's
  single-node H100 rows, there together with what a PyTorch stack adds around its GEMMs (its memory-bound
  operators' HBM passes, ``Device.mem_passes``, and what hiding FSDP's collectives still costs,
  ``Device.overlap_cost``): A100 0.68, H100 0.64 (Megatron-Core's H100: 0.60, on NeMo's table). Measured on an H100 SXM
  (``examples/gemm_rate.py``, README): isolated bf16 GEMMs reach 0.75 of the peak on 8192³ and 0.55-0.75 at a 70B
  block's TP-8 shapes; the H100's grid stops at that 0.75. With one efficiency and nothing around it (until 2026-11-27)
  the H100's came out at 0.46, below every isolated GEMM: it absorbed the rest. The attention core is not in it (below).
- ``waves``: tile and wave quantisation. cuBLAS splits C into TILE×TILE output tiles (ASSUMED 128×128,
  one of the tile sizes NVIDIA's "Matrix Multiplication Background" guide lists; its "Tile" and "Wave
  quantization" sections are this model) run on
  the device's SMs (A100 108, H100 SXM 132, H200 132, B200 148: datasheets / whitepapers); a
  partial tile or a last partial wave costs a whole one: waves = (m·n / TILE²) / (SMs · ⌈tiles/SMs⌉)
  with tiles = ⌈m/TILE⌉·⌈n/TILE⌉. 1 for large GEMMs; small at the small, TP-sliced sizes.
- the roofline (Williams et al. 2009): ``intensity`` = 2mnk / (bytes·(mk + kn + mn)) FLOP per byte of
  HBM traffic (each operand read once, C written once), times the achievable HBM bandwidth
  (:attr:`~minipar.perf.hardware.Device.hbm_bw`, 0.85 of the datasheet, ASSUMED). Memory-bound GEMMs
  (a thin m, as in decoding or a tiny micro-batch) run at it.

The attention core (FlashAttention) has its own efficiency, not fitted (:func:`attention_efficiency`):
on the H100 and H200 MEASURED per kernel and size on an H100 SXM (:data:`ATTN_EFF_H100`), elsewhere from
the FlashAttention papers (:data:`ATTN_EFF`); FlashAttention in Triton (llm-foundry's) at the FlashAttention-2
paper's ratio to FlashAttention-2 (:data:`TRITON_VS_FA2`). A device without ``sms`` (this CPU, measured) keeps one
efficiency for every GEMM: its ``peak_flops`` is already a measured matmul rate. Units: FLOP/s, bytes, FLOPs.
"""

from __future__ import annotations

import math

from minipar.perf.flops import op_recomputed_matmuls

TILE = 128  # cuBLAS's output tile edge for bf16 GEMMs, ASSUMED (NVIDIA's GEMM performance guide)
SMS = {"A100": 108, "H100": 132, "H200": 132, "B200": 148}  # SMs per device: NVIDIA datasheets / whitepapers

# The attention core (FlashAttention-2 forward + backward, causal) as a fraction of the dense bf16 peak, on devices
# without a measured table (the H100 and H200 have :data:`ATTN_EFF_H100`). A100: 0.60, ASSUMED in FlashAttention-2's
# measured range, "50-73 % of the theoretical maximum FLOPs/s on A100" (Dao 2023, arXiv:2307.08691, abstract). B200:
# "only 35 %" on an H100 (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, abstract), ASSUMED (no B200 figure).
ATTN_EFF = {"A100": 0.60, "B200": 0.35}

# The attention core on an H100, MEASURED (``examples/attention_rate.py``, 2026-11-27, one H100 SXM 80GB, PyTorch
# 2.11 + CUDA 13.0): causal ``scaled_dot_product_attention``, bf16, head dim 128, forward + backward, FLOPs
# 3.5 · 2·b·a·s²·d (the causal half; backward 2.5× the forward, as Dao 2023 §4.1 counts), as a fraction of 989 TFLOP/s.
# Rows: b·a, the sequences × heads one kernel runs (8, 32, 64, 128); columns: s (1K ... 32K). Kernels: "flash",
# PyTorch's FlashAttention-2 backend (what the PyTorch stacks ran; fwd alone reaches 0.33 at 16K, the FA3 paper's
# "35 %"); "cudnn", cuDNN's fused flash attention (PyTorch 2.11's default on the H100; Transformer Engine's
# FusedAttention on Hopper, ASSUMED for Megatron-Core). Small kernels fill few SMs and the causal diagonal's
# short tiles dominate: 0.02 at (8, 1K), 0.30 / 0.50 at (128, 8K). Four cells were not run (b·a·s > 2²⁰) and
# take the row above's value (marked *). A second run (probe3.jsonl) agreed within 5 % from 2K tokens and 32
# sequences × heads up; below, the tiny kernels are launch-bound (up to 40 % apart), one cuDNN cell read 78 % low.
# The table is probe2.jsonl (examples/h100_2026-11-27/). Between cells: linear in log2(b·a) and log2(s), clamped.
# "cudnn" at 16K-128K tokens is checked by Megatron-MoE-ModelZoo's long-context runs (+3 to +5 %: minipar.perf.moe_zoo).
ATTN_BA = (8, 32, 64, 128)
ATTN_SEQ = (1024, 2048, 4096, 8192, 16384, 32768)
ATTN_EFF_H100 = {
    "flash": (
        (0.024, 0.080, 0.155, 0.230, 0.297, 0.324),
        (0.081, 0.161, 0.230, 0.281, 0.320, 0.328),
        (0.103, 0.187, 0.250, 0.290, 0.323, 0.328),  # 32K *
        (0.136, 0.205, 0.260, 0.302, 0.323, 0.328),  # 16K *, 32K *
    ),
    "cudnn": (
        (0.022, 0.085, 0.248, 0.433, 0.564, 0.550),
        (0.079, 0.237, 0.399, 0.519, 0.530, 0.569),
        (0.131, 0.287, 0.436, 0.497, 0.540, 0.569),  # 32K *
        (0.168, 0.335, 0.461, 0.499, 0.540, 0.569),  # 16K *, 32K *
    ),
}
ATTN_KERNEL = {"pytorch": "flash", "megatron": "cudnn"}  # Device.framework -> the kernel its runs use
# "triton": FlashAttention written in Triton (Tri Dao's ``flash_attn_triton.py``; llm-foundry's ``attn_impl:
# triton``, what its published benchmark tables ran). FlashAttention-2 outruns it "1.3-1.5x" forward and "2x"
# backward (Dao 2023, arXiv:2307.08691, §4.1, on A100s): at 1.4x and 2x, with the backward 2.5 forwards of work,
# the Triton kernel runs TRITON_VS_FA2 = 3.5 / (1.4 + 2.5 · 2) = 0.547 of FlashAttention-2's rate. ASSUMED: the same
# ratio on the H100 (both kernels Ampere-era code there) and one rate at every size, FA2's largest (A100: its
# ATTN_EFF; H100: the "flash" table's largest cell), as on every device without a measured table of the kernel.
# Checked after the choice on llm-foundry's long-sequence rows, where the core is half the FLOPs or more
# (:mod:`minipar.perf.foundry`: A100 and H100 tables, s >= 8192).
ATTN_KERNELS = ("flash", "cudnn", "triton")
TRITON_VS_FA2 = 3.5 / (1.4 + 2.5 * 2)
FA2_LARGEST_H100 = max(map(max, ATTN_EFF_H100["flash"]))  # FlashAttention-2's largest measured cell on the H100

# An FP8 GEMM's efficiency as a fraction of the bf16 one's on the same shape: both measured on an H100 SXM
# (``examples/gemm_rate.py``, 2026-11-26: ``torch._scaled_mm`` e4m3 vs bf16 on a square 8192³ GEMM and a Llama 3
# 70B block's four TP-8 weight GEMMs, 4,096 tokens): FP8 reached 0.38-0.67 of its 1,979 TFLOP/s peak where bf16
# reached 0.55-0.75 of its 989, 0.69-0.89 of bf16's fraction per shape; 0.79 is the middle of that range,
# ASSUMED for every device with FP8 tensor cores (one device measured). A recipe's per-tensor scaling and
# casts around the GEMM are not in it.
FP8_VS_BF16 = 0.79


def family(name: str) -> str | None:
    """The key of :data:`SMS` a device name starts with ("H100-SXM5-80GB" → "H100")."""
    return next((k for k in SMS if name.upper().startswith(k)), None)


def wave_efficiency(m: float, n: float, sms: int) -> float:
    """Fraction of the SMs' tile slots a GEMM with an m×n output fills (tile and wave quantisation);
    1 when ``sms`` is 0 (no wave model)."""
    if not sms:
        return 1.0
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE)
    return (m * n / TILE**2) / (sms * math.ceil(tiles / sms))


def gemm_rate_shape(peak: float, eff: float, hbm_bw: float | None, sms: int, m, n, k, bytes_per_value=2) -> float:
    """Achieved FLOP/s of one (m×k)@(k×n) GEMM: min(peak·eff·waves, intensity·hbm_bw) (module doc).
    ``hbm_bw`` None or ``sms`` 0: peak·eff (no roofline, no waves: this CPU)."""
    rate = peak * eff * wave_efficiency(m, n, sms)
    if hbm_bw and sms:
        intensity = 2 * m * n * k / (bytes_per_value * (m * k + k * n + m * n))
        rate = min(rate, intensity * hbm_bw)
    return rate


def attention_gemms(model, tokens: float, t: int, sp: bool = False) -> list[tuple[float, float, float]]:
    """The (m, n, k) of one block's attention weight GEMMs, forward, on one TP rank for ``tokens`` = b·s rows: QKV
    (n = (q + 2·h_kv)/t, q the queries' width, h unless ``kv_channels``) and the output projection (k = q/t)
    (Megatron-LM's column/row split, Shoeybi et al. 2019, §3). With MLA (Megatron-Core's ``MLASelfAttention``): Q's
    and K/V's down projections (to r_q, and r_kv + d_rope), whole on each rank (``duplicated``) over its own tokens
    (÷t with sequence parallelism, all of them without), their up projections split over TP, the output's."""
    h, a = model.hidden, model.heads
    if not model.mla:
        q = model.q_width
        return [(tokens, (q + 2 * model.kv_width) / t, h), (tokens, h, q / t)]
    own, rq, rkv = tokens / (t if sp else 1), model.q_lora_rank, model.kv_lora_rank
    q_up, kv_up = mla_up_gemms(model, tokens, t)
    q = [(own, rq, h), q_up] if rq else [q_up]
    return q + [(own, rkv + model.qk_pos_emb_head_dim, h), kv_up, (tokens, h, a * model.v_dim / t)]


def mla_up_gemms(model, tokens: float, t: int) -> list[tuple[float, float, float]]:
    """MLA's up projections (m, n, k) on one TP rank for ``tokens`` rows, split over TP: Q's from its latent (from h
    without ``q_lora_rank``) to a·d_qk, K/V's from theirs to a·(d_nope + d_v); what ``mla_up_proj`` recomputes."""
    a = model.heads
    return [
        (tokens, a * model.qk_dim / t, model.q_lora_rank or model.hidden),
        (tokens, a * (model.qk_head_dim + model.v_dim) / t, model.kv_lora_rank),
    ]


def block_gemms(model, tokens: float, t: int, sp: bool = False) -> list[tuple[float, float, float]]:
    """The (m, n, k) of one block's forward weight GEMMs on one TP rank for ``tokens`` = b·s rows: the attention's
    (:func:`attention_gemms`), then MLP up (n = f/t, ×2 gated: gate and up) and down (k = f/t), the last two always.
    Their FLOPs sum to :func:`~minipar.perf.flops.layer_gemm_flops` / t (with MLA and sequence parallelism too)."""
    h, f = model.hidden, model.f
    up = (2 if model.gated else 1) * f
    return attention_gemms(model, tokens, t, sp) + [(tokens, up / t, h), (tokens, h, f / t)]


def op_recompute_gemms(model, tokens: float, t: int) -> list[tuple[float, float, float]]:
    """The (m, n, k) on one TP rank of the weight matmuls ``--recompute op`` runs again
    (:func:`minipar.perf.flops.op_recomputed_matmuls`): a column-parallel weight splits n, a row-parallel one k."""
    return [(tokens, o / t, i) if col else (tokens, o, i / t) for i, o, col in op_recomputed_matmuls(model)]


def block_gemm_time(
    dev, model, tokens: float, t: int, fp8: bool = False, backward: bool = False, sp: bool = False
) -> float:
    """Seconds of one block's weight GEMMs on one TP rank, forward (sum over :func:`block_gemms` of
    2mnk / rate) or ``backward``: per weight the data gradient (m, k, n) and the weight gradient (k, n, m),
    each at its own shape (the same FLOPs as the forward, other waves). ``fp8``: at the dense FP8 peak with
    1-byte operands and :data:`FP8_VS_BF16` of the bf16 efficiency (measured); ``dev.compute_share`` scales the peak."""
    return gemms_time(dev, block_gemms(model, tokens, t, sp), fp8, backward)


def gemms_time(dev, shapes, fp8: bool = False, backward: bool = False) -> float:
    """Seconds of the forward GEMMs (m, n, k) in ``shapes`` one after another, each at its own rate
    (:func:`gemm_rate_shape`), or of their ``backward`` (data and weight gradients): :func:`block_gemm_time`'s
    arithmetic for any list (the experts' GEMMs, :mod:`minipar.perf.moe`); FP8 as there."""
    peak = (dev.fp8_flops * FP8_VS_BF16 if fp8 else dev.peak_flops) * dev.compute_share
    bpv = 1 if fp8 else dev.bytes_per_value
    total = 0.0
    for m, n, k in shapes:
        for mm, nn, kk in [(m, k, n), (k, n, m)] if backward else [(m, n, k)]:
            rate = gemm_rate_shape(peak, dev.gemm_efficiency, dev.hbm_bw, dev.sms, mm, nn, kk, bpv)
            total += 2 * mm * nn * kk / rate
    return total


def _log_interp(xs: tuple, x: float) -> tuple[int, float]:
    """(i, w): ``x`` lies between xs[i] and xs[i + 1] at weight w in log2, clamped to the ends of ``xs``."""
    x = min(max(x, xs[0]), xs[-1])
    i = min(max(j for j in range(len(xs)) if xs[j] <= x), len(xs) - 2)
    return i, math.log2(x / xs[i]) / math.log2(xs[i + 1] / xs[i])


def attention_efficiency(kernel: str, ba: float, s: float) -> float:
    """Fraction of an H100's dense bf16 peak the causal attention core reaches, forward + backward, for one kernel
    over ``ba`` = micro-batch × heads on the rank and ``s`` tokens per sequence: :data:`ATTN_EFF_H100`'s measured
    grid, bilinear in log2(ba), log2(s), clamped. Raises KeyError for a kernel not in the table."""
    rows, (i, wi), (j, wj) = ATTN_EFF_H100[kernel], _log_interp(ATTN_BA, ba), _log_interp(ATTN_SEQ, s)
    along_s = lambda r: (1 - wj) * rows[r][j] + wj * rows[r][j + 1]  # noqa: E731
    return (1 - wi) * along_s(i) + wi * along_s(i + 1)


def attention_kernel(dev) -> str:
    """The FlashAttention kernel ``dev`` runs: ``Device.attention``, or its framework's (:data:`ATTN_KERNEL`)."""
    return dev.attention or ATTN_KERNEL[dev.framework]


def attention_rate(dev, flash: bool, ba: float, s: float) -> float:
    """FLOP/s of the attention core of a kernel over ``ba`` sequences × heads on the rank, ``s`` tokens each.
    FlashAttention: the kernel is ``Device.attention``, or the framework's (:data:`ATTN_KERNEL`); its efficiency the
    device's :data:`ATTN_EFF` or on the H100 / H200 (the same kernels on the same SMs) :func:`attention_efficiency`
    at that size; "triton" at :data:`TRITON_VS_FA2` of FlashAttention-2's largest rate on the device. Without
    FlashAttention (Megatron-LM's unfused QKᵀ and attention·V batched GEMMs, the softmax's HBM traffic counted
    apart) at the large-GEMM efficiency. Devices not in the tables (this CPU): the GEMM efficiency."""
    fam, kernel = family(dev.name), attention_kernel(dev)
    if not (flash and fam and dev.sms):
        eff = dev.gemm_efficiency
    elif kernel == "triton":
        eff = TRITON_VS_FA2 * ATTN_EFF.get(fam, FA2_LARGEST_H100)
    elif fam in ATTN_EFF:
        eff = ATTN_EFF[fam]
    else:
        eff = attention_efficiency(kernel, ba, s)
    return dev.peak_flops * eff * dev.compute_share
