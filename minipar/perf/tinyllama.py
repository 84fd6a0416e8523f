"""TinyLlama-1.1B's pretraining on 16 A100-40GB GPUs with Lightning Fabric's FSDP: a TEST row.

Source: jzhang38/TinyLlama (Zhang, Zeng, Wang and Lu; the paper is arXiv:2401.02385). ``README.md``, "Training
Details" and "Blazingly Fast": "we achieve a throughput of 24k tokens per second per A100-40G GPU, which translates
to 56% model flops utilization without activation checkpointing"; its GPU-hour table says the same (3,456 A100
hours for 300B tokens: 24,113 tokens/s/GPU). GIVEN by the README: 16 A100-40G GPUs, 22 layers, h 2,048, 32 heads,
4 query groups (GQA), SwiGLU FFN 5,632, s = 2,048, batch "2 million tokens (2048 * 1024)", a per-GPU batch of
"16k tokens" (micro-batch 8), no activation checkpointing, FlashAttention-2, and fused LayerNorm (RMSNorm), SwiGLU,
rotary embedding and cross-entropy kernels. GIVEN by ``pretrain/tinyllama.py``: ``FSDPStrategy`` with its default
full sharding (ZeRO-3), ``auto_wrap_policy={Block}``, ``micro_batch_size = 8``, ``FusedCrossEntropyLoss``
(:data:`minipar.perf.hardware.FUSED_LOSS_BYTES`); Llama 2's vocabulary (32,000).

ASSUMED: the fused kernels as the model's fused elementwise operators (``Device.compiled``: a gated block's memory
passes as the fit set's MPT block, :func:`minipar.perf.hardware.block_passes`); two nodes of 8 on the A100-40GB
preset's HDR links (the README names no network; FSDP's traffic hides behind compute: the row moves by 1 point with
a tenth of that bandwidth); gradients reduced in bf16 (Lightning's ``bf16-mixed``: ``reduce_dtype`` bf16).
The README's 56 % counts the FLOPs its own way; the row turns the 24k tokens/s into an MFU of this model's count.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS, with_fused_loss
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import UNTIED_ROPE, ModelShape

TINYLLAMA = ModelShape(22, 2048, 32, 2048, 32000, False, 4, 5632, True, False, **UNTIED_ROPE)
GPUS_USED, MICRO_BATCH, GLOBAL_BATCH, TOKENS_PER_S = 16, 8, 1024, 24000  # README: 16 GPUs, 2048 × 1024, 24k


def tinyllama_layout() -> Layout:
    """The run's layout (module doc): FSDP full sharding over 16 GPUs, micro-batch 8, no recomputation."""
    return Layout(
        dp=GPUS_USED, tp=1, pp=1, micro_batch=MICRO_BATCH, zero=3, recompute="none", flash_attention=True,
        overlap=frozenset({"dp"}), grad_bytes=2,
    )  # fmt: skip


def tinyllama_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)``: the published tokens/s/GPU as an MFU of this model's count."""
    dev = with_fused_loss(replace(GPUS["a100-40gb"], compiled=True))  # its fused kernels and loss
    e = estimate(TINYLLAMA, dev, tinyllama_layout(), GLOBAL_BATCH)
    pub = published_mfu(TINYLLAMA, GLOBAL_BATCH, TOKENS_PER_S, dev.peak_flops)
    return [("TinyLlama 1.1B 16 A100-40GB fsdp16·b8 fused", e, "mfu", pub)]
