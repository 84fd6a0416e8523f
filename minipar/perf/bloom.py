"""BigScience's BLOOM-176B run on 384 A100s with Megatron-DeepSpeed (3-D parallelism): a TEST row.

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

ASSUMED: DeepSpeed's pipeline engine as Megatron's non-interleaved 1F1B, sending 1/t of each activation across nodes
(its activations partitioned over the TP group, like Megatron's scatter/gather); gradients reduced in fp32 (the
optimizer accumulates them in fp32), nothing overlapped; no FlashAttention (2022); ALiBi's bias and the embedding
LayerNorm uncounted; the A100 preset otherwise.
"""

from __future__ import annotations

from minipar.perf.flops import model_flops
from minipar.perf.hardware import GPUS, with_links
from minipar.perf.layout import Estimate, Layout, ModelShape
from minipar.perf.model import estimate

BLOOM_176B = ModelShape(70, 14336, 112, 2048, 250880, True, None, 4 * 14336, False, True)
STEP_S, GLOBAL_BATCH, GPUS_USED = 104.70, 2048, 384  # README "Important checkpoints": iteration 85376


def bloom_layout() -> Layout:
    """The run's layout (module doc): dp 8 · tp 4 · pp 12, micro-batch 2, first and last stages 5 blocks."""
    return Layout(
        dp=8, tp=4, pp=12, micro_batch=2, zero=1, recompute="full", grad_bytes=4,
        first_stage_layers=5, last_stage_layers=5,
    )  # fmt: skip


def bloom_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)``: the published step time as an MFU of this model's FLOP count."""
    dev = with_links(GPUS["a100"], inter_gbps=4 * 100 / 8)  # 4 Omni-Path 100 Gb/s links per node of 8
    e = estimate(BLOOM_176B, dev, bloom_layout(), GLOBAL_BATCH)
    pub = model_flops(BLOOM_176B, GLOBAL_BATCH, "none") / (STEP_S * GPUS_USED * dev.peak_flops)
    return [("BLOOM 176B 384 A100 dp8·tp4·pp12·b2 first5·last5 full-rc", e, "mfu", pub)]
