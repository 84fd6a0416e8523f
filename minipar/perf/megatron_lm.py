"""Megatron-LM's own H100 weak-scaling table (GPT 1.7B-462B on 48-6,144 H100s, Megatron-Core r0.8.0): TEST rows.

Source: github.com/NVIDIA/Megatron-LM, ``README.md`` "Training Speed and Scalability" and its ``images/model_table.png``
(commit 06d70a1, 2024-07-15; the legend of ``images/strong_scaling.png`` names "Megatron-Core r0.8.0"). GIVEN by the
README and the table: GPT models, "a vocabulary size of 131,072 and a sequence length of 4096"; per row the attention
heads, hidden size, layers, TP, PP, DP (48 in every row), GPUs, batch, per-GPU TFLOP/s and MFU; "fine-grained
overlapping of data-parallel (``--overlap-grad-reduce --overlap-param-gather``), tensor-parallel
(``--tp-comm-overlap``) and pipeline-parallel communication (enabled by default)"; throughput "measured for end-to-end
training". GIVEN by Megatron-LM at ``core_v0.8.0`` (``megatron/training/arguments.py``): ``--overlap-param-gather``
asserts the distributed optimizer (ZeRO-1), and bf16 forces ``accumulate_allreduce_grads_in_fp32`` (gradients reduced
in fp32); its defaults: a GELU MLP of 4h, biases, dropout 0.1; its FLOP count (``num_floating_point_operations``,
``megatron/training/training.py``: 72·B·s·l·h²(1 + s/6h) + 6·B·s·h·V for these shapes, no recomputation) is this
model's, so the published TFLOP/s over the dense bf16 peak is the published MFU (408.8 / 989 = 41 %, the table's).
The parameter counts (1.75B for "1.7B" ...) say the embedding and the output layer are untied.

ASSUMED (the README does not say): micro-batch 1 (each batch is 4·PP·DP sequences: 4·PP micro-batches of one per
pipeline), no interleaving (v = 1, Megatron-LM's default), no recomputation, sequence parallelism with TP > 1,
Transformer Engine's fused attention (``--framework megatron``'s cuDNN kernel), the H100 preset's NDR links. (The
untied output layer, which the sizes give, is in the model's memory and DP traffic since 2026-11-28,
``ModelShape.tied_embeddings``: the 16B row moved from -8 to -9 %, the 32B row from -25 to -26 %, the others not.)

Known miss, labelled after its error was seen (``MISS:seen``): the 32B row (TP 8, PP 1) reads -26 % (-20 % when it was
labelled): with micro-batch 1 its fp32 gradient reduce-scatter over 48 nodes (one GPU of each) hides only behind the
last micro-batch's backward (Megatron-LM reduces once, in the last one); with micro-batch 2 it reads -11 % (the TP < 8
rows +7 to +11 %).
The model's loss term (:data:`minipar.perf.hardware.LOSS_BYTES`) was added after the 1.7B row (TP 1, a 131,072-token
vocabulary) was seen at +18 %: +7 % with it; the H100's fitted constants did not move. The pipeline rows read -6 to
-13 % with v = 1, -7 to +6 % with v = 2 to 6 where it divides their layers (a smaller bubble; computed 2026-11-28).
"""

from __future__ import annotations

from minipar.perf.hardware import GPUS, Device, for_framework
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import ModelShape

VOCAB, SEQ, DP = 131072, 4096, 48
# (size, heads, hidden, layers, TP, PP, GPUs, batch, per-GPU TFLOP/s): the README's model table, row by row
TABLE = [
    ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    ("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    ("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    ("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    ("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    ("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    ("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
]
SEEN = {"32B"}  # MISS:seen (module doc)


def gpt_shape(row) -> ModelShape:
    """A row's GPT: the table's layers, hidden size and heads; V 131,072, s 4,096; GELU 4h, biases, dropout; the output
    layer untied, the positions a learned table (the table's sizes, module doc)."""
    _, heads, hidden, layers, *_ = row
    return ModelShape(layers, hidden, heads, SEQ, VOCAB, True, None, None, False, True, tied_embeddings=False)


def megatron_lm_layout(row) -> Layout:
    """A row's layout: the table's TP, PP, DP, the README's overlaps, ZeRO-1 and fp32 gradients (given); the rest
    ASSUMED (module doc)."""
    _, _, _, _, tp, pp, gpus, *_ = row
    return Layout(
        dp=gpus // (tp * pp), tp=tp, pp=pp, micro_batch=1, zero=1, recompute="none", seq_parallel=tp > 1,
        overlap=frozenset({"dp", "tp", "pp"}), grad_bytes=4, flash_attention=True,
    )  # fmt: skip


def megatron_lm_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row: the published TFLOP/s per GPU (Megatron-LM's count, this
    model's) over the dense bf16 peak; on the H100 preset under ``--framework megatron`` unless ``dev``."""
    dev = dev or for_framework(GPUS["h100"], "megatron")
    out = []
    for row in TABLE:
        size, _, _, _, tp, pp, gpus, batch, tflops = row
        miss = " MISS:seen" if size in SEEN else ""
        lab = f"Megatron-LM {size:>4s} {gpus:4d} H100 dp{DP}·tp{tp}·pp{pp} bf16{miss}"
        e = estimate(gpt_shape(row), dev, megatron_lm_layout(row), batch)
        out.append((lab, e, "mfu", tflops * 1e12 / dev.peak_flops))
    return out
