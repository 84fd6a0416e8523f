"""Published runs the performance model is checked against, and the model shapes they used.

Narayanan et al. 2021 (Megatron-LM, arXiv:2104.04473) Table 1 and MegaScale (Jiang et al. 2024,
arXiv:2402.15627) Table 2; ``tests/test_perf_model.py`` holds the model within 15 % of every row,
lesson 07 prints the comparison.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.hardware import GPUS, Device
from minipar.perf.layout import Estimate, Layout, ModelShape
from minipar.perf.model import estimate

MODELS = {  # Narayanan et al. 2021 Table 1 shapes; 175B = GPT-3; 70b = Llama-2-70B's width/depth, MHA, vocab 32000
    "1.7b": ModelShape(24, 2304, 24),
    "3.6b": ModelShape(30, 3072, 32),
    "7.5b": ModelShape(36, 4096, 32),
    "18b": ModelShape(40, 6144, 48),
    "39b": ModelShape(48, 8192, 64),
    "76b": ModelShape(60, 10240, 80),
    "145b": ModelShape(80, 12288, 96),
    "175b": ModelShape(96, 12288, 96),
    "310b": ModelShape(96, 16384, 128),
    "530b": ModelShape(105, 20480, 128),
    "1t": ModelShape(128, 25600, 160),
    "7b": ModelShape(32, 4096, 32, 4096, 32000),
    "13b": ModelShape(40, 5120, 40, 4096, 32000),
    "70b": ModelShape(80, 8192, 64, 4096, 32000),
}

# Narayanan et al. 2021, arXiv:2104.04473, Table 1 (weak scaling on Selene, A100-80GB, s = 2048,
# V = 51200, mixed precision, full activation recomputation): params (B), heads, hidden, layers,
# TP t, PP p, GPUs n, batch B, achieved TFLOP/s per GPU (their eq. 3 FLOPs).
NARAYANAN_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def narayanan_row(row, dev: Device | None = None) -> tuple[Estimate, float]:
    """The model's estimate for one Table 1 row and the published TFLOP/s per GPU.

    Assumptions the table does not state: micro-batch size 1, the non-interleaved 1F1B schedule,
    no ZeRO, no sequence parallelism (2021), fp32 gradient all-reduce not overlapped with compute.
    """
    _, a, h, l, t, p, n, B, pub = row
    model = ModelShape(l, h, a)
    lay = Layout(dp=n // (t * p), tp=t, pp=p, micro_batch=1, recompute="full")
    return estimate(model, dev or GPUS["a100"], lay, B), pub


# MegaScale (Jiang et al. 2024, arXiv:2402.15627), Table 2: 175B (GPT-3 shape), s = 2048, batch
# 6144, A100 GPUs, 12,288 GPUs: MFU 55.2 % for MegaScale and 41.2 % for Megatron-LM (the abstract's
# "1.34× compared to Megatron-LM"). Layout: tp 8, pp 8, dp 192, micro-batch 1 (m = 32 per pipeline).
# The paper does not give the interleaving factor: the model uses plain 1F1B (v = 1); with v = 6 it
# predicts 47 % / 66 % instead (+13 % / +19 %), a sensitivity the lesson shows.
MEGASCALE_175B = {"gpus": 12288, "batch": 6144, "megascale_mfu": 0.552, "megatron_mfu": 0.412}


def megascale_estimates(dev: Device | None = None, v: int = 1) -> dict[str, Estimate]:
    """Megatron-LM as MegaScale ran it (selective recomputation, sequence parallelism, distributed
    optimizer = ZeRO-1, bf16 gradients, 1F1B with v = ``v``, no overlap) and MegaScale (the same,
    with DP, PP and TP communication overlapped with compute, §3.2). MegaScale's other gains
    (parallel transformer block, fused operators, §3.1/§3.4) are not modelled.
    Returns ``{"megatron": e, "megascale": e}``."""
    dev = dev or GPUS["a100"]
    model = MODELS["175b"]
    base = Layout(
        dp=192, tp=8, pp=8, micro_batch=1, v=v, zero=1, recompute="selective", seq_parallel=True, grad_bytes=2
    )
    B = MEGASCALE_175B["batch"]
    return {
        "megatron": estimate(model, dev, base, B),
        "megascale": estimate(model, dev, replace(base, overlap=frozenset({"dp", "pp", "tp"})), B),
    }
