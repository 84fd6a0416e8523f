"""AI2's OLMo-core training scripts on 8 H100s (OLMo 2 1B, 7B, 13B and Llama 3 8B; FSDP2; bf16 and Float8): TEST rows.

Source: allenai/OLMo-core, ``README.md`` "Official training scripts" at commit 3a40345 (2025-01-09; the same numbers
since 2024-11-05): "Throughput numbers from these scripts ... measured on a cluster with NVIDIA H100 GPUs", in
"tokens per second per device" (TPS), each row with its training script and its command-line override (none, or
``--train_module.float8_config.enabled=true``: "most matrix multiplications are computed in float8, everything
else is in bfloat16"). Rows added 2026-11-27; no constant of the model was chosen on them.

GIVEN by the scripts and the library at that commit (``src/scripts/train/OLMo2-*.py``, ``Llama3-8B.py``;
``olmo_core/nn/transformer/config.py``; ``olmo_core/internal/common.py``):
- the launch: ``num_nodes=1, num_gpus=8`` (the README's commands override neither), so 8 GPUs of one node;
- the shapes (``llama_like``: no biases, SwiGLU FFN ``int(8h/3)`` rounded up to 256, Llama 3's ``1.3×`` rounded up
  to 1,024): OLMo 2 1B 18 layers, h 2,048, 16 heads, FFN 5,632; 7B 32, 4,096, 32, 11,008; 13B 40, 5,120, 40,
  13,824; Llama 3 8B 32, 4,096, 32 heads with 8 KV heads, 14,336; the dolma2 vocabulary 100,278 padded to 100,352;
  sequence 4,096;
- the batch: ``rank_microbatch_size`` 8, 2, 1 and 2 sequences (1B, 7B, 13B, 8B), ``global_batch_size`` 1,024
  sequences (13B: 2,048), so 16 to 256 micro-batches per step;
- FSDP2 (``DataParallelType.hsdp``: one node, so every parameter sharded over the 8 GPUs: ZeRO-3), one unit per
  block, weights gathered in bf16, gradients reduced in fp32 (``reduce_dtype=DType.float32``) in every micro-batch
  (the train module skips the reduction only under DDP), ``reshard_after_forward`` True;
- ``compile_model=True`` and ``compile_loss=True``; no activation checkpointing (none configured);
- Float8: torchao's dynamic per-tensor scaling of the block linears (``olmo_core/float8.py``).
- FSDP2 (``fully_shard``, ``olmo_core/nn/transformer/model.py``): its copies on the compute stream, per micro-batch
  two gathered units copied out and one gradient copied in, cast to fp32 (``Device.fsdp2``,
  :func:`minipar.perf.sharding.fsdp2_copy_time`).

ASSUMED: the H100 preset (SXM, 80 GB, the dense bf16 peak OLMo-core's ``SpeedMonitorCallback`` also takes, 989
TFLOP/s); PyTorch SDPA's FlashAttention-2 kernel; the compiled blocks' memory passes (``Device.compiled``, as
:mod:`minipar.perf.torchtitan`) and the compiled loss as a fused one (:func:`minipar.perf.hardware.with_fused_loss`);
OLMo 2's QK-norm (two more RMSNorms per block) not counted; Float8's FSDP all-gather in fp8 (``enable_fsdp_float8_
all_gather``, on by default) not modelled: the model gathers bf16 weights, what the FP8 rows would gain from it
is not in them.

Known misses, by the rule of :mod:`minipar.perf.torchtitan` set before these rows were added (``MISS:compile``: every
run with ``torch.compile``): all eight rows, which read -10 … +6 % (-9 … +7 % before the model gave them OLMo-core's own
output layer, untied, on 2026-11-28). 13B is the row whose FSDP traffic weighs most against its compute: one sequence
per micro-batch carries a 13.7B-parameter all-gather twice and an fp32 reduce-scatter (0.27 s of NVLink per 0.71 s of
compute, where 7B has 0.14 s per 0.78 s), and FP8 shortens the compute that hides it: +0.3 % (bf16) and +6 % (FP8).
Before the model charged FSDP2's copies (added 2026-11-27, after these rows were first read: 14 bytes of HBM traffic per
parameter per micro-batch, from PyTorch's code, at the rates measured on an H100,
:data:`minipar.perf.sharding.FSDP2_COPY_SLOWDOWN`; 0.10 s on 13B against 0.79 s for the rest of its micro-batch) the
rows read -6 … +24 %, the 13B row +13 % and +24 %. The model hides the collectives at
:data:`minipar.perf.hardware.OVERLAP_COST` (0.25 on the H100: a quarter of the hidden time stays on the step); Lee, Oh,
Kim, Go, Park and Mahajan 2025 (arXiv:2507.03114, abstract) measured an average compute slowdown of 18.9 % and at most
40 % under overlapped communication on A100, H100, MI250 and MI210. Looked at after the rows' errors were seen and NOT
adopted: the H100 fit's second-best triple, (3 passes, overlap cost 0.75, GEMM efficiency 0.70), fit median 2.2 % (the
chosen 2.1 %), read the rows without the copies -7 … +6 %: the fit set, 8-GPU rows with little FSDP traffic per
micro-batch, hardly separates the overlap costs 0.25 to 0.75.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS, with_fused_loss
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import UNTIED_ROPE, ModelShape

VOCAB, SEQ, GPUS_USED = 100352, 4096, 8  # dolma2's 100,278 padded to a multiple of 128; the scripts' 4,096; one node
OLMO_CORE = {  # name -> (shape, sequences per micro-batch, global batch in sequences)
    "OLMo2-1B": (ModelShape(18, 2048, 16, SEQ, VOCAB, False, None, 5632, True, False, **UNTIED_ROPE), 8, 1024),
    "OLMo2-7B": (ModelShape(32, 4096, 32, SEQ, VOCAB, False, None, 11008, True, False, **UNTIED_ROPE), 2, 1024),
    "Llama3-8B": (ModelShape(32, 4096, 32, SEQ, VOCAB, False, 8, 14336, True, False, **UNTIED_ROPE), 2, 1024),
    "OLMo2-13B": (ModelShape(40, 5120, 40, SEQ, VOCAB, False, None, 13824, True, False, **UNTIED_ROPE), 1, 2048),
}
# (script, Float8, TPS per device): the README's table at 3a40345, row by row
TABLE = [
    ("OLMo2-1B", False, 55000),
    ("OLMo2-1B", True, 65000),
    ("OLMo2-7B", False, 10000),
    ("OLMo2-7B", True, 13000),
    ("Llama3-8B", False, 9500),
    ("Llama3-8B", True, 12500),
    ("OLMo2-13B", False, 4600),
    ("OLMo2-13B", True, 5500),
]


def olmo_layout(name: str, fp8: bool) -> Layout:
    """A script's layout (module doc): FSDP2 over the node's 8 GPUs, its micro-batch, no recomputation."""
    _, mb, _ = OLMO_CORE[name]
    return Layout(
        dp=GPUS_USED, tp=1, pp=1, micro_batch=mb, zero=3, recompute="none", flash_attention=True,
        overlap=frozenset({"dp"}), grad_bytes=4, fp8=fp8,
    )  # fmt: skip


def olmo_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)``: the published TPS per device as an MFU of this model's count."""
    dev = with_fused_loss(replace(GPUS["h100"], compiled=True, fsdp2=True))  # compiled blocks and loss; FSDP2
    out = []
    for name, fp8, tps in TABLE:
        shape, mb, gb = OLMO_CORE[name]
        lab = f"OLMo-core {name:9s} {GPUS_USED} H100 fsdp{GPUS_USED}·b{mb} {'fp8' if fp8 else 'bf16'} MISS:compile"
        e = estimate(shape, dev, olmo_layout(name, fp8), gb)
        out.append((lab, e, "mfu", published_mfu(shape, gb, tps, dev.peak_flops)))
    return out
