"""IBM's fms-fsdp Llama 2 7B runs with hybrid sharding (HSDP) on 128 A100s and 96 H100s: TEST rows.

Source: foundation-model-stack/fms-fsdp, ``README.md`` "Training throughput benchmarks" (as at commit ed74fd5,
2024-05-09, "update numbers with compile"; unchanged at 5a296af, 2025-07-10): "7b | HSDP | Y (compile) | No AC
| 2 | 4550 | 9600" (tokens/s/GPU on "A100 80G 128 GPUs with 400Gbps" and "H100 96 GPUs with 800 Gbps"); its
MFU table gives 0.68 (A100) and 0.46 (H100) for the same runs (this model's count reads 0.672 and 0.447 from
the tokens/s: a check). GIVEN: the shape (``fms_fsdp/utils/config_utils.py``: variant "7b" = fms
``LLaMAConfig()``, Llama 2 7B: 32 layers, h 4,096, 32 heads, FFN 11,008, V 32,000; ``seq_length`` 4,096 in
``fms_fsdp/config/training.py``), HSDP = PyTorch FSDP ``HYBRID_SHARD``, sharding "within a node and DP across
nodes" (``docs/configurations.md``: ``hsdp`` = 8 GPUs per node), 2 sequences per GPU, no activation
checkpointing, bf16 mixed precision with bf16 gradient reduction (``bfSixteen``: ``reduce_dtype=bfloat16``),
SDPA's FlashAttention-2, FSDP overlapping communication with compute (README, "Model").

ASSUMED: one micro-batch per step (global batch 2·GPUs); the network rates per node (400 and 800 Gb/s over 8
GPUs: 50 and 100 Gb/s per GPU; per GPU instead the rows move by < 0.2 points: HSDP's cross-node traffic is one
shard all-reduce per step); the A100 and H100 presets otherwise.

Known misses, by a rule on the run (``MISS:compile``, as :mod:`minipar.perf.torchtitan`): both rows ran with
``torch.compile``, whose kernel fusion the model has only as its memory passes (``Device.compiled``: a gated
block's as MPT's, :func:`minipar.perf.hardware.block_passes`); they stay in the test set with their error.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS, with_links
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import UNTIED_ROPE, ModelShape

LLAMA2_7B = ModelShape(32, 4096, 32, 4096, 32000, False, None, 11008, True, False, **UNTIED_ROPE)
# (device, GPUs, GPUs per shard group, sequences per GPU, network Gb/s per node, tokens/s/GPU)
FMS = [("a100", 128, 8, 2, 400, 4550), ("h100", 96, 8, 2, 800, 9600)]


def fms_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)``: the published tokens/s/GPU as an MFU of this model's count."""
    out = []
    for gpu, n, shard, b, gbps, tps in FMS:
        dev = replace(with_links(GPUS[gpu], inter_gbps=gbps / 8), compiled=True)  # the runs' torch.compile
        lay = Layout(
            dp=n,
            tp=1,
            pp=1,
            micro_batch=b,
            zero=3,
            hsdp=shard,
            recompute="none",
            flash_attention=True,
            overlap=frozenset({"dp"}),
            grad_bytes=2,
        )
        lab = f"fms-fsdp 7b {n:3d} {gpu.upper()} hsdp{shard}·b{b} bf16 MISS:compile"
        pub = published_mfu(LLAMA2_7B, b * n, tps, dev.peak_flops)
        out.append((lab, estimate(LLAMA2_7B, dev, lay, b * n), "mfu", pub))
    return out
