"""Hugging Face's nanotron benchmarks behind the Ultra-Scale Playbook: the best layout found for four Llama-like models
on 1 to 64 nodes of 8 H100s, and its MFU (TEST rows, added 2026-11-28).

Source: github.com/huggingface/nanotron, ``docs/benchmark_summary.svg`` (commit c252843, 2025-03-10, "add benchs"; the
README's "Benchmarks": "the best configurations we discovered for each model size and node count in nanotron v0.5,
highlighting optimal MFU ... and memory usage"; the runs are in the dataset nanotron/ultrascale-playbook-data). The
figure is matplotlib's SVG, which keeps every label's text as a comment: per cell the MFU (%), the memory (GB), DP, TP,
PP, the gradient-accumulation steps (GAS), the micro-batch (MBS) and the ZeRO stage (0 or 1). GIVEN by
``scripts/scaling_benchmarks.py`` at that commit (its ``model_configs``, where only 3B is left uncommented: the others
are the commented lines above it): the shapes (layers, hidden, heads, FFN) 1B (16, 2,048, 32, 8,192), 3B (28, 3,072, 32,
8,192), 8B (32, 4,096, 32, 14,336) and 70B (80, 8,192, 64, 28,672), whose parameter counts at its vocabulary of 131,072
are the figure's 1.34, 3.57, 8.86 and 80.0B (a test checks them); no GQA (``NUM_KEY_VALUE_HEADS = None``), the embedding
tied below an FFN of 10,000 (1B, 3B), a sequence of 4,096; ``tp_mode`` REDUCE_SCATTER (sequence parallelism). GIVEN by
nanotron's Llama (``models/llama.py``): SwiGLU (``GLUActivation`` of the config's ``silu``), no biases. Every cell's
dp·GAS·MBS is 256 sequences (1M tokens). GIVEN by the benchmark's base config
(``examples/config_tiny_llama_bench.yaml``, branch nouamane/bench2, 67c5ebb6): the 1F1B engine, no recomputation, DDP
buckets of 25 MiB, synthetic data, ``accumulate_grad_in_fp32`` (the gradients accumulated and reduced in fp32),
``tp_recompute_allgather`` at its default (the backward gathers a column linear's input again). GIVEN by nanotron at
c252843: FlashAttention-2 (``flash_attn_varlen_func``), a Triton RMSNorm and flash-attn's rotary kernel (fused), the
SwiGLU's product in eager PyTorch, the loss in fp32 (a ``cast_to_fp32`` block, then ``sharded_cross_entropy``); the DP
reduction per DDP bucket (``ddp_bucket_cap_mb`` 25, ``bucket_mb``) during the last micro-batch's backward (a hook that
reduces the fp32 accumulators of the bucket's parameters; ZeRO-1: a reduce-scatter), the ZeRO-1 weights all-gathered
after the optimizer step, exposed (``overlap`` ``"grad_reduce"``, :attr:`~minipar.perf.layout.Layout.hides`); the
pipeline split by compute cost (``models/base.py``: blocks in order, a stage closed once its cumulative cost passes its
share, a block 4h² + 3fh, the logit layer V·h; :func:`nanotron_split`); its MFU by its own count (``get_flops``: 3 × the
forward's matmuls, the attention's s² uncausal, the logit layer), timed at the third step (``NANOTRON_BENCHMARK``,
``trainer.py``).

ASSUMED: the dense bf16 peak the figure divides by, 989.5 TFLOP/s (the H100 SXM datasheet's); the H100 preset's links
(the figure names no network); the block's memory-bound operators as the fit set's fused ones (``Device.compiled``: its
norm and rotary are fused kernels; its eager SwiGLU product is of the kind of the fit set's eager GELU); TP's
collectives exposed (the model hides them all or none; in nanotron's forward the asynchronous column linear overlaps its
all-gather with only the local 1/t of the GEMM and the row linear's reduce-scatter waits, while in the backward the
column linear's gather and reduce-scatter run beside its gradient GEMMs: ``parallel/tensor_parallel/functional.py``);
the DP reduction hidden as the model hides it. The published MFU becomes tokens/s per GPU by nanotron's count, then an
MFU of this model's count (:func:`minipar.perf.flops.published_mfu`). The two settings that move the rows most were
computed both ways before the choice, which follows the code, not the errors: read as eager PyTorch (torchtitan's
measured block, 3.8 passes more) the 13 cells up to 8 nodes (80B on 4 aside) read -34 … +16 %, 12 of them low, and the 8
cells on 16 and 32 nodes -16 … +8 %; with TP hidden the cells with TP read up to 71 points higher.

What the rows show (printed by ``tests/test_perf_model.py``), labelled after their errors were seen: 17 of the 26 within
15 % (-13 … +10 %); five more within 30 % (``MISS:seen``: 1.34B on one node -16 %, 1.34B and 3.57B on 32 nodes and 1.34B
on 16, +18 … +25 %, 80B with pp 16 on 8 nodes +27 %); four far above (``MISS:step``, +60 … +168 %): three 64-node rows,
whose published step outgrows every term here (1.34B: 0.38 s published, 0.16 s modelled), and 80B on 4 nodes (dp 1, tp
8, pp 4), 14.8 % MFU with 66 of 80 GB in use. Until the model charged DDP's buckets (``bucket_mb``, added with these
rows: on 64 nodes 1.34B's busiest stage reduces its gradients in 40 collectives over 128 ranks, not Megatron-Core's 4)
the 64-node rows read +56 … +231 % and 8.86B's among them was a miss; now -10 % (-7 % before the model gave it the
script's own output layer, untied). Charging the ZeRO-1 all-gather after the step (``"grad_reduce"``, added after these
rows: until then the model hid it behind the first forward, as Megatron-LM's ``--overlap-param-gather``) lowered the
ZeRO-1 rows by 0.1 to 32 points: the 64-node ones most (1.34B +167 → +142 %, 3.57B +117 → +84 %, 80B +71 → +60 %; with
the embeddings as the script builds them, tied below an FFN of 10,000 and rotary: +145, +86, +60 %), the rest by at most
3 points; no label changed. The alternatives above were computed with it hidden. The figure's memory per GPU
(:data:`MEMORY_GB`; nanotron logs ``max_memory_allocated`` and ``max_memory_reserved`` over 1024³, the figure does not
say which) is above the model's in every cell, by 11 to 71 %: the model counts the model states and Korthikanti's
activations, not nanotron's fp32 gradient-accumulation buffers beside DDP's bf16 buckets, the fp32 logits, or temporary
buffers.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS, Device
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import ModelShape

VOCAB, SEQ, PEAK = 131072, 4096, 989.5e12  # scaling_benchmarks.py; the peak ASSUMED (module doc)
SHAPES = {  # the figure's size: (layers, hidden, heads, FFN); tied embedding below an FFN of 10,000
    "1.34B": (16, 2048, 32, 8192),
    "3.57B": (28, 3072, 32, 8192),
    "8.86B": (32, 4096, 32, 14336),
    "80.0B": (80, 8192, 64, 28672),
}
# nodes: per size in SHAPES' order, (dp, tp, pp, GAS, MBS, ZeRO, MFU %, memory GiB per GPU) as the figure prints them
FIGURE = {
    64: [(128, 2, 2, 1, 2, 1, 5.25, 8.40), (128, 4, 1, 1, 2, 1, 10.49, 16.42),
        (128, 4, 1, 1, 2, 0, 18.69, 57.76), (32, 16, 1, 4, 2, 1, 17.79, 53.46)],
    32: [(64, 4, 1, 1, 4, 0, 23.20, 19.57), (64, 4, 1, 1, 4, 0, 26.77, 38.98),
        (32, 8, 1, 1, 8, 0, 32.71, 63.39), (4, 4, 16, 64, 1, 1, 30.75, 64.21)],
    16: [(64, 2, 1, 1, 4, 0, 29.46, 38.84), (32, 4, 1, 1, 8, 0, 34.59, 66.20),
        (16, 8, 1, 2, 8, 0, 36.33, 66.88), (1, 4, 32, 256, 1, 0, 34.29, 61.18)],
    8: [(32, 1, 2, 8, 1, 1, 32.47, 16.27), (32, 1, 2, 8, 1, 1, 35.53, 36.73),
        (32, 1, 2, 8, 1, 1, 39.50, 59.09), (1, 4, 16, 256, 1, 0, 30.65, 63.07)],
    4: [(16, 1, 2, 16, 1, 1, 38.38, 16.39), (16, 1, 2, 8, 2, 1, 40.39, 53.33),
        (16, 1, 2, 16, 1, 1, 43.31, 61.10), (1, 8, 4, 256, 1, 0, 14.76, 65.97)],
    2: [(8, 1, 2, 32, 1, 1, 41.59, 19.45), (8, 1, 2, 16, 2, 1, 43.77, 54.31),
        (4, 4, 1, 16, 4, 1, 43.94, 58.34)],
    1: [(4, 1, 2, 16, 4, 1, 44.32, 41.76), (4, 1, 2, 32, 2, 1, 46.68, 56.87),
        (2, 1, 4, 128, 1, 1, 45.22, 63.07)],
}  # fmt: skip
MEMORY_GB = {n: [cell[7] for cell in cells] for n, cells in FIGURE.items()}  # the figure's memory, GiB
MISS = {  # (nodes, size): the label's reason, given after the error was seen (module doc)
    **dict.fromkeys([(32, "1.34B"), (32, "3.57B"), (16, "1.34B"), (8, "80.0B"), (1, "1.34B")], "seen"),
    **dict.fromkeys([(64, "1.34B"), (64, "3.57B"), (64, "80.0B"), (4, "80.0B")], "step"),
}


def shape(size: str) -> ModelShape:
    """A size's shape (module doc): MHA, SwiGLU, no biases or dropout, V 131,072, s 4,096."""
    layers, hidden, heads, ffn = SHAPES[size]
    tied = ffn < 10_000  # scaling_benchmarks.py: tie_word_embeddings below an FFN of 10,000; rotary positions
    return ModelShape(
        layers, hidden, heads, SEQ, VOCAB, False, None, ffn, True, False, tied_embeddings=tied, learned_positions=False
    )


def params(size: str) -> int:
    """The size's parameters as ``scaling_benchmarks.estimate_num_params`` counts them (no norms): the figure's size."""
    layers, h, _, f = SHAPES[size]
    return (1 if f < 10_000 else 2) * VOCAB * h + layers * (3 * h * f + 4 * h * h)


def nanotron_split(size: str, pp: int) -> tuple[int, ...]:
    """Blocks per pipeline stage as nanotron places them (``models/base.py``, ``get_block_compute_costs``): costs 4h² +
    3fh a block and V·h the logit layer, in order; a block goes to the current stage, which closes once the cumulative
    cost passes (pp_rank + 1)/pp of the total."""
    layers, h, _, f = SHAPES[size]
    cum = list(accumulate([4 * h * h + 3 * f * h] * layers + [VOCAB * h]))
    rank, per = 0, [0] * pp
    for c in cum[:layers]:
        per[rank] += 1
        if c > cum[-1] * (rank + 1) / pp:
            rank += 1
    return tuple(per)


def nanotron_flops_per_token(size: str) -> float:
    """nanotron's ``get_flops`` (llama.py at c252843) per token: 3 × (QKV, QKᵀ and AV over all s², output, the gated
    MLP, the logit layer)."""
    layers, h, heads, f = SHAPES[size]
    block = 2 * h * 3 * h + 2 * 2 * SEQ * h + 2 * h * h + 2 * 3 * h * f
    return 3 * (layers * block + 2 * h * VOCAB)


def nanotron_layout(size: str, cell: tuple) -> Layout:
    """A cell's layout: the figure's dp, tp, pp, MBS and ZeRO; the rest GIVEN or ASSUMED (module doc)."""
    dp, tp, pp, _, mbs, zero, *_ = cell
    return Layout(
        dp=dp, tp=tp, pp=pp, micro_batch=mbs, zero=zero, recompute="none", seq_parallel=tp > 1,
        overlap=frozenset({"grad_reduce"}), grad_bytes=4, flash_attention=True, bucket_mb=25,
        stage_split=nanotron_split(size, pp) if pp > 1 else None,
    )  # fmt: skip


def device() -> Device:
    """The H100 preset under the PyTorch stack, its block's operators fused (module doc)."""
    return replace(GPUS["h100"], compiled=True)


def nanotron_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per cell: the figure's MFU as tokens/s per GPU by nanotron's count, then
    an MFU of this model's count over ``dev``'s peak (the error is the tokens/s error)."""
    dev = dev or device()
    out = []
    for nodes, cells in FIGURE.items():
        for size, cell in zip(SHAPES, cells):
            model, (dp, tp, pp, gas, mbs, zero, mfu, _) = shape(size), cell
            batch = dp * gas * mbs
            e = estimate(model, dev, nanotron_layout(size, cell), batch)
            tokens_per_s = mfu / 100 * PEAK / nanotron_flops_per_token(size)
            pub = published_mfu(model, batch, tokens_per_s, dev.peak_flops)
            miss = f" MISS:{MISS[nodes, size]}" if (nodes, size) in MISS else ""
            lab = f"nanotron {size:>5s} {nodes * 8:3d} H100 dp{dp}·tp{tp}·pp{pp}·b{mbs}·z{zero} bf16{miss}"
            out.append((lab, e, "mfu", pub))
    return out
