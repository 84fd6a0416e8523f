"""BigScience's BLOOM-176B run on 384 A100s with Megatron-DeepSpeed (3-D parallelism) and its layout trials: TEST rows.

Source: github.com/bigscience-workshop/bigscience, ``train/tr11-176B-ml/`` (the run's own notes and launch script;
BLOOM paper: BigScience Workshop 2022, arXiv:2211.05100, §3.4). GIVEN by ``tr11-176B-ml.slurm`` and ``README.md``:
48 nodes of 8 A100 80GB (NVLink inside a node, "4 OmniPath links" per node: 4 × 100 Gb/s over 8 GPUs, 50 Gb/s per
GPU), TP 4, PP 12, DP 8, micro-batch 2, global batch 2,048, s = 2,048; 70 layers, h 14,336, 112 heads, FFN 4h (GeLU),
biases, dropout 0.1 (Megatron-LM's defaults "inherited"), vocabulary padded to 250,880; bf16; full activation
recomputation (``--checkpoint-activations``); DeepSpeed's ``BF16_Optimizer``, "its own ZeRO stage 1"; the pipeline
partitioned ``type:transformer|embedding``: "pp rank 0: [embed | 5 transformer blocks]", 6 blocks on each of ranks
1-10, "pp rank 11: [5 transformer blocks | embed]" (``first_stage_layers`` = ``last_stage_layers`` = 5).

Published: one logged step at the full batch, "iteration 85376 ... elapsed time per iteration (s): 104.70 ... global
batch size: 2048 ... TFLOPs: 149.77" (README, "Important checkpoints"). The run counts ``8 × parameters`` FLOPs per
token (recomputation included); the row turns the step time into an MFU of this model's own count.

The same run's topology trials, ``chronicles-prequel.md`` (at 053adaf), section "Rebalancing layers" (2022-02-28),
every row with a step time (:data:`PREQUEL`; the OOM rows have none): the run's own software from that day on, the BF16
optimizer accumulating gradients in fp32 and ``--pp-partition-method 'type:transformer|embedding'`` ("giving each
embedding layer its own slot on par with transformer layers": (layers + 2)/PP slots per stage, the first and the last
stage one block fewer). GIVEN per row: NHIDDEN, NLAYERS, NHEADS, DP, TP, PP, MBS, GBS 2,048 on 48 nodes, and "Sec/it"
(the 2nd iteration's, "the data isn't exact and can fluctuate a bit"); its TFLOPs column is eq. 3 of that step time
(a test checks every row). ASSUMED as for the run: full recomputation, ZeRO-1, s 2,048, V 250,880, dropout, the links.
Labelled after their errors were seen (``MISS:seen``): the rows whose step the model cannot tell from a sibling's: TP 8
with MBS 2 (+20 %, +27 %; published 19-20 s slower than the same model at MBS 4 or at TP 4 · DP 8, where every TP 4
pair of MBS 2 and 4 is within 4 s) and 104 heads (+25 %; 15-19 s slower than 128 or 64 heads; the authors note that
108 heads "breaks constraints for invoking optimized fused softmax kernel").

ASSUMED: DeepSpeed's pipeline engine as Megatron's non-interleaved 1F1B, sending 1/t of each activation across nodes
(its activations partitioned over the TP group, like Megatron's scatter/gather); gradients reduced in fp32 (the
optimizer accumulates them in fp32), nothing overlapped; no FlashAttention (2022); ALiBi's bias and the embedding
LayerNorm uncounted; the A100 preset otherwise.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import model_flops
from minipar.perf.hardware import GPUS, with_links
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import ModelShape

BLOOM_176B = ModelShape(
    70, 14336, 112, 2048, 250880, True, None, 4 * 14336, False, True, learned_positions=False
)  # ALiBi
STEP_S, GLOBAL_BATCH, GPUS_USED = 104.70, 2048, 384  # README "Important checkpoints": iteration 85376


# chronicles-prequel.md, "Rebalancing layers": (NHIDDEN, NLAYERS, NHEADS, DP, TP, PP, MBS, Sec/it), 48 nodes, GBS 2,048
PREQUEL = [
    (12288, 106, 64, 8, 4, 12, 2, 116.54),
    (12288, 106, 96, 8, 4, 12, 2, 118.79),
    (12288, 106, 128, 8, 4, 12, 2, 121.42),
    (12288, 106, 96, 8, 4, 12, 4, 120.34),
    (12288, 100, 64, 8, 8, 6, 2, 139.72),
    (12288, 100, 64, 8, 8, 6, 4, 120.96),
    (13312, 82, 64, 4, 8, 12, 4, 111.79),
    (13312, 82, 64, 8, 4, 12, 2, 104.45),
    (13312, 82, 104, 8, 4, 12, 2, 123.71),
    (13312, 82, 128, 8, 4, 12, 2, 108.78),
    (13312, 82, 64, 8, 4, 12, 4, 104.82),
    (13312, 94, 128, 8, 4, 12, 2, 124.10),
    (14336, 70, 64, 4, 8, 12, 2, 121.63),
    (14336, 70, 64, 8, 4, 12, 2, 102.03),
    (14336, 70, 112, 8, 4, 12, 2, 104.50),
    (14336, 70, 128, 8, 4, 12, 2, 105.89),
    (14336, 70, 64, 8, 4, 12, 4, 102.27),
]


def prequel_shape(row) -> ModelShape:
    """A trial's GPT: its hidden size, layers and heads; otherwise BLOOM-176B's (s 2,048, V 250,880, FFN 4h, biases)."""
    h, layers, heads, *_ = row
    return replace(BLOOM_176B, layers=layers, hidden=h, heads=heads, ffn=4 * h)


def prequel_layout(row) -> Layout:
    """A trial's layout: its DP, TP, PP, MBS; the embeddings in their own pipeline slots (module doc)."""
    _, layers, _, dp, tp, pp, mb, _ = row
    ends = (layers + 2) // pp - 1  # type:transformer|embedding: (layers + 2)/PP slots, the embedding one of them
    return replace(bloom_layout(), dp=dp, tp=tp, pp=pp, micro_batch=mb, first_stage_layers=ends, last_stage_layers=ends)


def bloom_layout() -> Layout:
    """The run's layout (module doc): dp 8 · tp 4 · pp 12, micro-batch 2, first and last stages 5 blocks."""
    return Layout(
        dp=8, tp=4, pp=12, micro_batch=2, zero=1, recompute="full", grad_bytes=4,
        first_stage_layers=5, last_stage_layers=5,
    )  # fmt: skip


def bloom_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)``: the run's logged step, then the trials of :data:`PREQUEL`, each
    published step time as an MFU of this model's FLOP count."""
    dev = with_links(GPUS["a100"], inter_gbps=4 * 100 / 8)  # 4 Omni-Path 100 Gb/s links per node of 8
    runs = [("BLOOM 176B 384 A100 dp8·tp4·pp12·b2 first5·last5 full-rc", BLOOM_176B, bloom_layout(), STEP_S)]
    for row in PREQUEL:
        model, lay = prequel_shape(row), prequel_layout(row)
        seen = " MISS:seen" if (lay.tp == 8 and lay.micro_batch == 2) or model.heads == 104 else ""
        lab = f"BLOOM prequel h{model.hidden} l{model.layers} a{model.heads} "
        runs.append((lab + f"dp{lay.dp}·tp{lay.tp}·pp{lay.pp}·b{lay.micro_batch}" + seen, model, lay, row[-1]))
    return [
        (
            lab,
            estimate(model, dev, lay, GLOBAL_BATCH),
            "mfu",
            model_flops(model, GLOBAL_BATCH, "none") / (step * GPUS_USED * dev.peak_flops),
        )
        for lab, model, lay, step in runs
    ]
