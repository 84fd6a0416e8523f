"""MosaicML llm-foundry's published MPT training throughput (H100 and A100): the H100 FIT set and more TEST rows.

Source: mosaicml/llm-foundry, ``scripts/train/benchmarking/README.md`` (the "MPT Training Benchmarks"
tables: "H100 80GB BF16 (Large Scale, >= 128 GPUs)", "H100 80GB BF16", "A100 80GB with 1600 Gbps
node-node interconnect (RoCE)"). Every row: model, sequence, GPUs, MFU (%), micro-batch, gradient
accumulation, global batch (sequences), FSDP sharding strategy, activation checkpointing, FSDP mixed
precision mode, all GIVEN by the table. MFU as the README defines it: (6·N·s + 12·l·h·s²) per sequence
(attention as the full square) over the dense bf16 peak, the model's ``mfu`` count.

Given: the MPT shapes' d_model, n_layers and n_heads (``scripts/train/yamls/pretrain/mpt-*.yaml``),
the vocabulary (50,368) and each row's parameter count, which matches 12·l·h² + V·h + s·h (an MLP of 4h,
a learned position table, a tied embedding); data parallelism only (FSDP: FULL_SHARD = ZeRO-3,
SHARD_GRAD_OP = ZeRO-2, ``pp = tp = 1``); FlashAttention in Triton (``attn_impl: triton``: the yamls and
``submit_benchmarks.py``'s default; :data:`minipar.perf.gemm.TRITON_VS_FA2`); the fused cross-entropy loss
(``loss_fn: fused_crossentropy``, the MPT model's default: :data:`minipar.perf.hardware.FUSED_LOSS_BYTES`).
ASSUMED: no biases and no dropout (MPT's ``no_bias``, zero dropout rates), FSDP's prefetch overlapping its
all-gathers and reduce-scatters with compute (``"dp"`` in overlap); gradients reduced in fp32 under
Composer's DEFAULT mixed precision, bf16 under PURE; the H100 cluster's network the NDR preset
(400 Gb/s per GPU; the table does not say); the A100 80GB rows' 1600 Gb/s per node = 200 Gb/s per GPU
(given: HDR preset).

Declared split, by a rule fixed before any error was looked at:
- **H100 fit set** (:data:`H100_FIT`): the "H100 80GB BF16" table's single-node (8 GPUs) rows with
  s = 2048 or 4096: the H100's large-GEMM efficiency is chosen on them
  (:func:`minipar.perf.published.fit_gemm_efficiency`, device ``"h100"``).
- **H100 test set** (:data:`H100_TEST`): the same table's multi-node rows (16–64 GPUs), its single-node
  rows at s ≥ 8192, and every row of the Large Scale table (128–512 GPUs); with Llama 3's Table 4
  (:mod:`minipar.perf.runs`).
- **A100 test rows** (:data:`A100_TEST`): the A100 80GB table's s = 2048 rows, and its rows at s ≥ 8192.

The long rows (s ≥ 8192; before 2026-11-27 seven H100 rows, the rest added then): where the attention core is
half the FLOPs or more they test its kernel. With FlashAttention-2's rate (what the rows were modelled with until
2026-11-27) they read +10 … +65 % on both devices; at the Triton kernel's (:data:`minipar.perf.gemm.TRITON_VS_FA2`,
from the FlashAttention-2 paper, not chosen on them) the A100's non-checkpointed long rows read within 7 %.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.hardware import GPUS, Device, with_fused_loss
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import ModelShape
from minipar.perf.sharding import dp_time

# MPT shapes (layers, d_model, heads): the llm-foundry yamls.
MPT = {
    "125m": (12, 768, 12),
    "350m": (24, 1024, 16),
    "760m": (24, 1536, 12),
    "1b": (24, 2048, 16),
    "3b": (32, 2560, 20),
    "7b": (32, 4096, 32),
    "13b": (40, 5120, 40),
    "30b": (48, 7168, 64),
    "70b": (80, 8192, 64),
}

# (model, seq, GPUs, MFU %, micro-batch, grad accumulation, global batch, sharding, act. ckpt, mixed precision)
H100_FIT = [
    ("30b", 4096, 8, 35.86, 1, 21, 168, "FULL_SHARD", True, "DEFAULT"),
    ("30b", 2048, 8, 38.11, 3, 21, 504, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 4096, 8, 41.6, 10, 3, 240, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 2048, 8, 39.79, 2, 1, 16, "FULL_SHARD", False, "DEFAULT"),
    ("7b", 4096, 8, 40.42, 16, 2, 256, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 2048, 8, 46.44, 6, 1, 48, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 4096, 8, 42.31, 5, 6, 240, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 4096, 8, 40.26, 7, 4, 224, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 2048, 8, 41.82, 14, 1, 112, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 4096, 8, 35.83, 12, 2, 192, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 2048, 8, 34.9, 24, 2, 384, "FULL_SHARD", False, "DEFAULT"),
]
H100_TEST = [  # "H100 80GB BF16": multi-node, then single-node at s >= 8192
    ("70b", 2048, 64, 42.57, 8, 4, 2048, "FULL_SHARD", True, "DEFAULT"),
    ("70b", 2048, 32, 36.15, 2, 16, 1024, "FULL_SHARD", True, "DEFAULT"),
    ("30b", 2048, 32, 43.92, 14, 3, 1344, "FULL_SHARD", True, "DEFAULT"),
    ("30b", 2048, 16, 43.07, 10, 3, 480, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 2048, 64, 39.86, 2, 1, 128, "FULL_SHARD", False, "DEFAULT"),
    ("13b", 2048, 32, 39.95, 2, 1, 64, "FULL_SHARD", False, "DEFAULT"),
    ("13b", 2048, 16, 39.58, 2, 1, 32, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 2048, 64, 40.8, 6, 3, 1152, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 2048, 32, 41.7, 6, 3, 576, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 2048, 16, 43.73, 10, 3, 480, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 2048, 64, 40.85, 20, 1, 1280, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 2048, 32, 41.52, 20, 1, 640, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 2048, 16, 42.36, 20, 1, 320, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 2048, 32, 37.57, 24, 1, 768, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 2048, 16, 37.89, 24, 1, 384, "FULL_SHARD", False, "DEFAULT"),
    ("30b", 8192, 8, 29.92, 1, 21, 168, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 32768, 8, 31.68, 1, 3, 24, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 16384, 8, 35.55, 3, 3, 72, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 65536, 8, 28.59, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 32768, 8, 30.94, 2, 2, 32, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 8192, 8, 37.14, 8, 2, 128, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 65536, 8, 26.81, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 32768, 8, 28.84, 3, 6, 144, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 16384, 8, 36.34, 1, 6, 48, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 8192, 8, 40.31, 3, 6, 144, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 65536, 8, 26.34, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("1b", 32768, 8, 33.54, 1, 4, 32, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 16384, 8, 35.22, 2, 4, 64, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 8192, 8, 37.73, 3, 4, 96, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 32768, 8, 31.84, 1, 2, 16, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 16384, 8, 33.57, 3, 2, 48, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 8192, 8, 34.84, 6, 2, 96, "FULL_SHARD", False, "DEFAULT"),
]
H100_LARGE = [  # "H100 80GB BF16 (Large Scale, >= 128 GPUs)"
    (m, 2048, n, mfu, mb, 1, gb, shard, ckpt, "DEFAULT")
    for m, n, mfu, mb, gb, shard, ckpt in [
        ("70b", 512, 41.25, 8, 4096, "FULL_SHARD", True),
        ("70b", 256, 42.42, 8, 2048, "FULL_SHARD", True),
        ("70b", 128, 43.36, 8, 1024, "FULL_SHARD", True),
        ("30b", 512, 40.27, 8, 4096, "FULL_SHARD", True),
        ("30b", 256, 40.89, 8, 2048, "FULL_SHARD", True),
        ("30b", 128, 41.85, 8, 1024, "FULL_SHARD", True),
        ("13b", 512, 41.12, 16, 8192, "FULL_SHARD", True),
        ("13b", 256, 41.42, 16, 4096, "FULL_SHARD", True),
        ("13b", 128, 42.18, 16, 2048, "FULL_SHARD", True),
        ("7b", 512, 42.2, 6, 3072, "FULL_SHARD", False),
        ("7b", 256, 44.15, 6, 1536, "FULL_SHARD", False),
        ("7b", 128, 45.71, 6, 768, "FULL_SHARD", False),
        ("3b", 512, 39.24, 8, 4096, "SHARD_GRAD_OP", False),
        ("3b", 256, 41.25, 8, 2048, "SHARD_GRAD_OP", False),
        ("3b", 128, 42.43, 8, 1024, "SHARD_GRAD_OP", False),
        ("1b", 512, 36.65, 12, 6144, "SHARD_GRAD_OP", False),
        ("1b", 256, 39.15, 12, 3072, "SHARD_GRAD_OP", False),
        ("1b", 128, 40.6, 12, 1536, "SHARD_GRAD_OP", False),
    ]
]
A100_TEST = [  # "A100 80GB with 1600 Gbps node-node interconnect (RoCE)", s = 2048
    ("70b", 2048, 64, 53.33, 8, 4, 2048, "FULL_SHARD", True, "PURE"),
    ("70b", 2048, 32, 48.56, 2, 16, 1024, "FULL_SHARD", True, "PURE"),
    ("30b", 2048, 8, 55.3, 3, 21, 504, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 2048, 8, 59.57, 2, 3, 48, "FULL_SHARD", False, "DEFAULT"),
    ("7b", 2048, 8, 64.23, 6, 2, 96, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 2048, 8, 62.11, 10, 2, 160, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 2048, 8, 59.86, 14, 4, 448, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 2048, 8, 56.85, 24, 2, 384, "FULL_SHARD", False, "DEFAULT"),
    # s >= 8192
    ("30b", 8192, 8, 39.38, 1, 21, 168, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 32768, 8, 51.69, 1, 3, 24, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 16384, 8, 54.07, 3, 3, 72, "FULL_SHARD", True, "DEFAULT"),
    ("13b", 8192, 8, 56.07, 5, 3, 120, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 65536, 8, 46.97, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 32768, 8, 49.46, 2, 2, 32, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 16384, 8, 51.96, 4, 2, 64, "FULL_SHARD", True, "DEFAULT"),
    ("7b", 8192, 8, 54.47, 8, 2, 128, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 65536, 8, 46.05, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 32768, 8, 47.18, 3, 6, 144, "FULL_SHARD", True, "DEFAULT"),
    ("3b", 16384, 8, 57.13, 1, 6, 48, "FULL_SHARD", False, "DEFAULT"),
    ("3b", 8192, 8, 59.34, 3, 6, 144, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 65536, 8, 46.18, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("1b", 32768, 8, 55.52, 1, 4, 32, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 16384, 8, 56.6, 2, 4, 64, "FULL_SHARD", False, "DEFAULT"),
    ("1b", 8192, 8, 56.69, 3, 4, 96, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 65536, 8, 45.34, 1, 2, 16, "FULL_SHARD", True, "DEFAULT"),
    ("760m", 32768, 8, 54.57, 1, 2, 16, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 16384, 8, 54.64, 3, 2, 48, "FULL_SHARD", False, "DEFAULT"),
    ("760m", 8192, 8, 55.31, 6, 2, 96, "FULL_SHARD", False, "DEFAULT"),
    ("350m", 65536, 8, 52.7, 1, 2, 16, "FULL_SHARD", False, "DEFAULT"),
    ("350m", 32768, 8, 52.46, 2, 2, 32, "FULL_SHARD", False, "DEFAULT"),
    ("350m", 16384, 8, 53.28, 4, 2, 64, "FULL_SHARD", False, "DEFAULT"),
    ("350m", 8192, 8, 53.8, 8, 2, 128, "FULL_SHARD", False, "DEFAULT"),
    ("125m", 65536, 8, 54.13, 1, 2, 16, "FULL_SHARD", False, "DEFAULT"),
    ("125m", 32768, 8, 52.71, 2, 2, 32, "FULL_SHARD", False, "DEFAULT"),
    ("125m", 16384, 8, 50.61, 4, 2, 64, "FULL_SHARD", False, "DEFAULT"),
    ("125m", 8192, 8, 48.85, 8, 2, 128, "FULL_SHARD", False, "DEFAULT"),
]


def mpt_shape(name: str, seq: int) -> ModelShape:
    """An MPT model of llm-foundry's yamls at sequence ``seq``: GELU MLP 4h, MHA, V 50,368, no biases, no dropout."""
    l, h, a = MPT[name]
    return ModelShape(l, h, a, seq, 50368, bias=False, dropout=False)


def foundry_row(row, dev: Device) -> Estimate:
    """The model's estimate for one llm-foundry row on ``dev`` (module doc: what is given, what ASSUMED)."""
    name, seq, n, _, mb, ga, gb, shard, ckpt, mp = row
    lay = Layout(
        dp=n,
        tp=1,
        pp=1,
        micro_batch=mb,
        zero=3 if shard == "FULL_SHARD" else 2,
        recompute="full" if ckpt else "none",
        flash_attention=True,
        overlap=frozenset({"dp"}),
        grad_bytes=2 if mp == "PURE" else 4,
    )
    assert mb * ga * n == gb, row
    return estimate(mpt_shape(name, seq), with_fused_loss(replace(dev, attention="triton")), lay, gb)


SEEN = {("30b", 8192), ("13b", 8192)}  # the rows labelled MISS:seen (miss_reason): (model, s)


def miss_reason(row) -> str | None:
    """Why the model is known to miss a row, or None. ``"seen"``: a label written AFTER the row's error was seen
    (2026-11-27, when the long rows were added; :data:`SEEN`): 30b at s = 8192 reads +21 % on both devices, where
    30b at s <= 4096 reads -13 … +2 %: its published MFU falls 17 % (H100) and 23 % (A100) from s = 4096 to 8192, the
    model's 1 %, and no term of the model (memory: 79 % of the device) says why; the A100's 13b at s = 8192 reads
    -16 %, the low end of the A100's checkpointed long rows (-4 … -16 %). No rule on the layout marks them.
    Until 2026-11-27 ``"attn"``: s/(6h) > 0.5, the attention core a third of the FLOPs or more, +10 … +33 % while the
    rows were modelled with FlashAttention-2's rate; they ran FlashAttention in Triton (module doc). Also until then
    ``"ckpt"``, activation checkpointing (-8 … -25 %, the published HFU of those rows, 55-58 %, above every other
    row's, <= 46 %): not the recomputation. Read with the model's FSDP collectives exposed
    (:func:`compute_only_hfu`), each H100 model size's checkpointed and other rows reach the same utilisation,
    rising with the model, while on A100s the same reading passes 0.8 of the peak. These FSDP runs did not hide
    their collectives on H100s; the model charges that (:data:`minipar.perf.hardware.OVERLAP_COST`, chosen with the
    memory passes and efficiency on the fit set). (Until 2026-11-26 also ``"comm"``: FULL_SHARD across nodes with
    <= 2 sequences per micro-batch read 36-63 % low while the model ran a group's inter-node collectives on one
    NIC; with every rail of the node, :func:`minipar.perf.sharding.group_link`, those rows read -10 … +6 %; 0 … +15 %
    now.)"""
    return "seen" if tuple(row[:2]) in SEEN else None


def compute_only_hfu(row, dev: Device) -> float:
    """An llm-foundry row's published hardware FLOPs utilisation (its README's HFU: MFU, × 4/3 with activation
    checkpointing) as if its FSDP collectives had been EXPOSED: HFU · T / (T − c), T the published step time
    (the model's FLOPs over the published MFU) and c the model's communication for the row's layout with
    nothing hidden (:func:`minipar.perf.sharding.dp_time` without ``"dp"`` in overlap: per micro-batch two
    all-gathers and a reduce-scatter under FULL_SHARD). A reading of the published rows, not a prediction:
    if a model size's checkpointed and non-checkpointed rows agree on it, their gap is communication the
    runs did not hide, not recomputation (:func:`miss_reason`). Fraction of the dense bf16 peak."""
    e = foundry_row(row, dev)
    hfu = row[3] / 100 * (4 / 3 if row[8] else 1.0)
    step = e.time["total"] * e.mfu / (row[3] / 100)  # the published step time, seconds
    comm = dp_time(mpt_shape(row[0], row[1]), dev, replace(e.layout, overlap=frozenset()), e.m, 0.0, 0.0)
    return hfu * step / (step - comm)


def label(row, gpu: str) -> str:
    """``llm-foundry <model> s=<seq> <GPUs> <device> b<micro-batch> z3|z2`` [``MISS:<why>``, :func:`miss_reason`]."""
    name, seq, n, _, mb, *_ = row
    why = miss_reason(row)
    z = "z3" if row[7] == "FULL_SHARD" else "z2"
    return f"llm-foundry {name:>4s} s={seq:5d} {n:3d} {gpu} b{mb:<2d} {z}" + (f" MISS:{why}" if why else "")


def foundry_rows(rows, device: str, eff: float | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published MFU)`` for llm-foundry rows on the preset ``device``
    (``eff``: another large-GEMM efficiency, for the fit)."""
    dev = GPUS[device] if eff is None else replace(GPUS[device], gemm_efficiency=eff)
    return [(label(r, device.upper()), foundry_row(r, dev), "mfu", r[3] / 100) for r in rows]
