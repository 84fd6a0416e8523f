"""torchtitan's published H100 runs (Llama 3.1 8B, 70B, 405B; FSDP2, TP, PP; bf16 and Float8): TEST rows.

Source: pytorch/torchtitan, ``docs/performance.md`` (runs of December 2024: torch 1963fc8, torchao eab345c,
torchtitan 9dec370); also Liang et al. 2024, "TorchTitan", arXiv:2410.06511, §4. Each row: the model, the
GPUs, the layout, the local and global batch, the activation checkpointing, the techniques, and the measured
TPS/GPU (tokens per second per GPU), all GIVEN by the tables. The rows are the ones a ``python -m minipar.plan``
user would type: FSDP (ZeRO-3), FSDP with TP and with PP (ZeRO-3 with pp > 1: torchtitan keeps the weights
gathered between micro-batches, ``reshard_after_forward = not pp_enabled``), Float8 (``--precision fp8``) and a
custom device (``--device-peak-tflops``, ``--hbm-gbps``, ``--mem-gb``).

The device, GIVEN: "8 NVIDIA H100 GPUs fully connected with NVLink", "96GB HBM2e with 2.4 TB/sec", "400 Gb/s
per GPU" between hosts, "the default 500W power limit"; "the actual peak TFLOPs number is between SXM and
NVL, and we don't know its exact value". ASSUMED: the H100 NVL's dense bf16 peak, 835 TFLOP/s (its
datasheet's 1,671 with sparsity, halved), the low end of that sentence, since the 500 W cap lowers the
clocks (FP8: twice it); the H100 preset's NVLink, SMs and chosen GEMM efficiency. Looked at after this rule
and NOT adopted: 912 TFLOP/s (the middle) reads the bf16 rows about 8 points higher.

The model, GIVEN: Llama 3.1's shapes (arXiv:2407.21783 Table 3: 8B 32 layers, h 4,096, 32 heads, 8 KV heads,
FFN 14,336; 70B 80, 8,192, 64, 8, 28,672; 405B 126, 16,384, 128, 8, 53,248; vocabulary 128,256; SwiGLU, no
biases, no dropout); torchtitan's sequence of 8,192 (its ``llama3_*.toml``); FSDP2 (``fully_shard``) and its copies
on the compute stream (``Device.fsdp2``, :func:`minipar.perf.sharding.fsdp2_copy_time`; added 2026-11-27, with
:mod:`minipar.perf.olmo`: the rows moved by 0 to -3 points, to -12 … -7 %). ASSUMED: FlashAttention-2
(PyTorch SDPA's flash kernel), FSDP2's all-gathers and reduce-scatters prefetched behind compute (``"dp"`` in
overlap), the gradients reduced in fp32 (torchtitan's ``mixed_precision_reduce = "float32"``), sequence
parallelism with TP, the local batch as one micro-batch without PP, 405B's 126 blocks as 15 + 6·16 + 15
(1F1B) and 7 + 14·8 + 7 (interleaved, 2 chunks per rank), asynchronous sends between stages. With PP, GIVEN
by torchtitan at 9dec370: the local batch split into as many micro-batches as the PP degree, for either
schedule (``build_pipeline_schedule``: ``n_microbatches`` defaults to ``pipeline_parallel_degree``), so 405B's
32 sequences per rank run as 8 micro-batches of 4. Until 2026-11-27 the model ran them as 32 micro-batches of 1
(ASSUMED; a quarter of the bubble) and read these two rows +43 % and +23 %. Selective checkpointing GIVEN as
torchtitan's per-op policy, ``--recompute op``: its ``llama3_8b.toml`` at 9dec370 sets
``selective_ac_option = 'op'``, whose policy "saves output of all compute ops, except every second mm"
(``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370; :func:`minipar.perf.flops.op_recomputed_matmuls`).
Until 2026-11-27 the model took it as ``selective`` (the attention core only, free under FlashAttention); the bf16
rows then read +9 and +13 %.

Known misses, by a rule on the run (``MISS:compile``): every run with ``torch.compile`` (all the Float8
runs), whose kernel fusion the model has only as its memory passes (``Device.compiled``); they stay in the test set
with their error. The eager (bf16) rows' gated blocks cross HBM as torchtitan's eager Llama block measured
(:func:`minipar.perf.hardware.block_passes`).
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS, HBM_EFF, Device
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import UNTIED_ROPE, ModelShape

LLAMA31 = {  # layers, hidden, heads; 8 KV heads, FFN, vocabulary 128,256, sequence 8,192, SwiGLU, no bias/dropout
    "8B": ModelShape(32, 4096, 32, 8192, 128256, False, 8, 14336, True, False, **UNTIED_ROPE),
    "70B": ModelShape(80, 8192, 64, 8192, 128256, False, 8, 28672, True, False, **UNTIED_ROPE),
    "405B": ModelShape(126, 16384, 128, 8192, 128256, False, 8, 53248, True, False, **UNTIED_ROPE),
}
PEAK_TFLOPS = 835.0  # ASSUMED (module doc): the H100 NVL's dense bf16 peak


def device() -> Device:
    """torchtitan's Grand Teton H100 (module doc): 96 GB HBM2e at 2.4 TB/s, 500 W, 400 Gb/s per GPU."""
    return replace(
        GPUS["h100"],
        name="H100-96GB-HBM2e-500W",
        peak_flops=PEAK_TFLOPS * 1e12,
        fp8_flops=2 * PEAK_TFLOPS * 1e12,
        hbm_bw=HBM_EFF * 2.4e12,
        mem_bytes=96 * 2**30,  # as the presets count an "80GB" H100: 80 GiB
    )


# (table, model, GPUs, (dp, tp, pp), local batch, global batch, recompute, v, compile, float8, TPS/GPU)
TORCHTITAN = [
    (1, "8B", 8, (8, 1, 1), 2, 16, "op", 1, False, False, 5762),
    (3, "8B", 128, (128, 1, 1), 2, 256, "op", 1, False, False, 5605),
    (1, "8B", 8, (8, 1, 1), 2, 16, "op", 1, True, True, 8532),
    (3, "8B", 128, (128, 1, 1), 2, 256, "op", 1, True, True, 8380),
    (4, "70B", 256, (32, 8, 1), 16, 512, "full", 1, True, True, 829),
    (5, "405B", 512, (8, 8, 8), 32, 256, "full", 1, True, True, 100),
    (5, "405B", 512, (8, 8, 8), 32, 256, "full", 2, True, True, 128),
]

# The tables' "Memory(GiB)" per row above, GIVEN: the peak of what PyTorch's caching allocator RESERVED on the GPU
# (train.py at 9dec370 logs ``device_mem_stats.max_reserved_gib``, ``reserved_bytes.all.peak``; the largest over
# the ranks, the doc's footnote). The allocator reserves above what the tensors hold, so it bounds the model's
# count from above (tests/test_perf_model.py).
TORCHTITAN_MEMORY_GIB = [82.4, 67.0, 76.8, 61.8, 71.9, 82.5, 72.7]


def torchtitan_layout(row) -> Layout:
    """The row's layout (module doc: what is given, what is ASSUMED)."""
    _, name, _, (dp, tp, pp), local, _, recompute, v, _, fp8, _ = row
    edge = {1: 15, 2: 7}[v]  # 405B's first and last stage (model chunk): one block fewer than the others
    ends = {"first_stage_layers": edge, "last_stage_layers": edge} if pp > 1 else {}
    return Layout(
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batch=local if pp == 1 else local // pp,  # n_microbatches = pp (module doc)
        v=v,
        zero=3,
        recompute=recompute,
        seq_parallel=tp > 1,
        overlap=frozenset({"dp", "pp"} if pp > 1 else {"dp"}),
        grad_bytes=4,
        flash_attention=True,
        fp8=fp8,
        **ends,
    )


def label(row) -> str:
    """``torchtitan T<table> <model> <GPUs> H100 <layout> <bf16|fp8>`` [``MISS:compile``]."""
    table, name, n, (dp, tp, pp), *_, v, compiled, fp8, _ = row
    lay = f"fsdp{dp}" + (f"·tp{tp}" if tp > 1 else "") + (f"·pp{pp}" if pp > 1 else "") + (f"·v{v}" if v > 1 else "")
    return f"torchtitan T{table} {name:>4s} {n:3d} H100 {lay:18s} {'fp8' if fp8 else 'bf16'}" + (
        " MISS:compile" if compiled else ""
    )


def torchtitan_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row; the published TPS/GPU as an MFU of the same count and
    peak as the model's (so the error is the TPS error): TPS · (model FLOPs per token) / peak."""
    dev = dev or device()
    out = []
    for row in TORCHTITAN:
        model, gb, tps = LLAMA31[row[1]], row[5], row[-1]
        e = estimate(model, replace(dev, compiled=row[8], fsdp2=True), torchtitan_layout(row), gb)  # row[8]: compile
        out.append((label(row), e, "mfu", published_mfu(model, gb, tps, dev.peak_flops)))
    return out
