"""NVIDIA's published Megatron-Core H100 runs: expert parallelism (Mixtral 8x22B) and partial recomputation: TEST rows.

Sources (read in the repositories, commit named):

- **Megatron-MoE-ModelZoo** (github.com/yanring/Megatron-MoE-ModelZoo, commit e865051, 2026-05-16; NVIDIA's
  Megatron-Core MoE recipes): ``best_practice/mixtral/run_mixtral_8x22B.sh`` publishes, for H100, "Dropless
  training with forced balancing, performance should be around 465 TFLOPS" (BF16) and "Use PR=fp8 to enable
  block-wise FP8 training, performance should be around 560 TFLOPS" (rounded numbers: "around"). GIVEN by
  ``runtime_configs/benchmarking/runtime.conf`` (Mixtral-8x22B: TP 2, PP 8, EP 8, CP 1, VPP 7 = 56 layers / PP /
  1 layer per virtual stage, MBS 1, GBS 256, 16 nodes = 128 GPUs, alltoall dispatcher, grouped GEMM, s = 4096),
  ``model_configs/benchmarking/Mixtral-8x22B.yaml`` (56 layers, h 6,144, FFN 16,384, 48 heads, 8 query groups,
  SwiGLU, RMSNorm, no biases, no dropout, 8 experts, top-2, expert TP 1, distributed optimizer with
  ``--overlap-grad-reduce``/``--overlap-param-gather``, sequence parallelism, flash attention, Llama2Tokenizer:
  V = 32,000; no recompute flag) and ``sbatch_benchmarking.sh`` (fp8: ``--fp8-recipe blockwise``). The shape
  is Mixtral-8x22B-v0.1's published config. TFLOP/s as Megatron-LM counts them
  (``num_floating_point_operations``, megatron/training/training.py at ff45bd4, 2025-12-15:
  :func:`megatron_flops_per_token`), turned into tokens/s, then into this model's MFU count.
- **Megatron-Bridge** (github.com/NVIDIA-NeMo/Megatron-Bridge), ``docs/performance-summary-archive.md`` (as at
  commit 0a25f91), "25.11 NeMo Container", System DGX-H100: LLAMA3_8B, 8 GPUs, FP8-CS, GBS 128, MBS 1, s =
  8192, TP/PP/CP 1, 14,451 tokens/s/GPU. The 25.11 release's recipe (tag v0.2.0,
  ``scripts/performance/configs/llama3/workload_base_configs.py``: ``LLAMA3_8B_H100_FP8_CS_BASE_CONFIG``,
  set on the r0.2.0 branch by 8aed9a2, 2025-11-21) runs CP 1 and ``recompute_num_layers=5`` (full granularity,
  ``recompute_method = "block"``: scripts/performance/utils/helpers.py) without Megatron-FSDP; the table's
  FSDP column says 8 (the recipe before 8aed9a2: ``use_megatron_fsdp=True``, no recomputation). The row is
  modelled as the release's recipe (distributed optimizer, ZeRO-1 here) and labelled ``MISS:provenance``
  (rule: the table and the release's recipe disagree on the layout). Shape: Llama 3 8B (arXiv:2407.21783).

ASSUMED: the H100 preset's links (NDR, 400 Gb/s per GPU; the Qwen3 page of the same zoo gives "InfiniBand
8x50 GB/s" per node, the same rate); expert tensor parallelism = tp (the run has expert TP 1: the same FLOPs
per rank, other all-to-all sizes); balanced routing (forced balancing: given); the all-to-all not overlapped
(no ``A2A_OVERLAP``: given); the interleaved schedule's sends overlapped (Megatron's default with VPP);
fp32 gradient reduction (Megatron-LM's default under bf16); FP8 blockwise as ``Layout.fp8``.

Known misses (``MISS:mcore``): the Mixtral rows, labelled AFTER their errors were seen (-33 %, -26 %), so the label
is no rule chosen beforehand. What it marks: Megatron-Core with Transformer Engine runs its GEMMs faster than
the H100's chosen efficiency, 0.46, which was chosen on llm-foundry's runs and so absorbs that framework's
overheads. At 0.46 the model's compute alone (5.0 s) is longer than the whole published step (about 4.3 s);
with 0.75, the top of the 0.55-0.75 that isolated bf16 GEMMs reach on an H100 (``examples/gemm_rate.py``),
both Mixtral rows and the Llama 3 8B row read -2 to -8 %. The dense Llama 3 8B row reads as low as the MoE
ones, so the cause is not the MoE terms. A per-framework efficiency would need a Megatron-Core fit set: not
done. The runs also fuse the MoE permute (``--moe-permute-fusion``) and the cross-entropy. The README says so.
"""

from __future__ import annotations

from minipar.perf.hardware import GPUS, Device
from minipar.perf.layout import Estimate, Layout, ModelShape
from minipar.perf.model import estimate
from minipar.perf.moe import training_flops

# Mixtral-8x22B (ModelZoo yaml; Mixtral-8x22B-v0.1 config): 56 layers, h 6144, 48 heads, 8 kv, FFN 16384, V 32000
MIXTRAL_8X22B = ModelShape(56, 6144, 48, 4096, 32000, False, 8, 16384, True, False, experts=8, top_k=2)
LLAMA3_8B = ModelShape(32, 4096, 32, 8192, 128256, False, 8, 14336, True, False)

# (source, model, GPUs, (dp, tp, pp, v, ep), micro-batch, global batch, recompute layers, fp8, metric, published)
NEMO = [
    ("MoE-Zoo", "Mixtral-8x22B", 128, (8, 2, 8, 7, 8), 1, 256, None, False, "tflops", 465),
    ("MoE-Zoo", "Mixtral-8x22B", 128, (8, 2, 8, 7, 8), 1, 256, None, True, "tflops", 560),
    ("MB 25.11", "Llama3-8B", 8, (8, 1, 1, 1, 1), 1, 128, 5, True, "tps", 14451),
]
SHAPES = {"Mixtral-8x22B": MIXTRAL_8X22B, "Llama3-8B": LLAMA3_8B}


def megatron_flops_per_token(model: ModelShape) -> float:
    """Megatron-LM's training FLOPs per token (``num_floating_point_operations`` ÷ tokens, at ff45bd4): 12·l·h·(1.5·f·k)
    (SwiGLU MLPs, k routed experts) + 12·l·h²·(1 + g/a + s/(2h)) (attention, the causal half of the s² core)
    + 6·h·V (logits); no router, no recomputation."""
    l, h, a, g, f, s, V = model.layers, model.hidden, model.heads, model.kv, model.f, model.seq, model.vocab
    k = model.top_k if model.experts else 1
    return 12 * l * h * (1.5 * f * k) + 12 * l * h * h * (1 + g / a + s / h / 2) + 6 * h * V


def nemo_layout(row) -> Layout:
    """The row's layout (module doc: given and ASSUMED)."""
    _, _, _, (dp, tp, pp, v, ep), mb, _, rl, fp8, *_ = row
    return Layout(
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batch=mb,
        v=v,
        zero=1,
        recompute="full" if rl else "none",
        recompute_layers=rl,
        seq_parallel=tp > 1,
        overlap=frozenset({"dp", "pp"} if pp > 1 else {"dp"}),
        grad_bytes=4,
        flash_attention=True,
        fp8=fp8,
        ep=ep,
    )


def label(row) -> str:
    """``<source> <model> <GPUs> H100 <layout> <bf16|fp8>`` and its ``MISS:`` reason (module doc)."""
    src, name, n, (dp, tp, pp, v, ep), *_, rl, fp8, _, _ = row
    lay = f"dp{dp}" + (f"·tp{tp}" if tp > 1 else "") + (f"·pp{pp}·v{v}" if pp > 1 else "")
    lay += (f"·ep{ep}" if ep > 1 else "") + (f"·rc{rl}" if rl else "")
    why = "MISS:mcore" if ep > 1 else "MISS:provenance"
    return f"{src} {name} {n:3d} H100 {lay} {'fp8' if fp8 else 'bf16'} {why}"


def nemo_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row; the published TFLOP/s (Megatron's count) or tokens/s per GPU
    as an MFU of this model's count over the same peak (so the error is the throughput error)."""
    dev = dev or GPUS["h100"]
    out = []
    for row in NEMO:
        model, gb, metric, pub = SHAPES[row[1]], row[5], row[-2], row[-1]
        tps = pub * 1e12 / megatron_flops_per_token(model) if metric == "tflops" else pub
        ours = training_flops(model, gb) / (gb * model.seq)
        out.append((label(row), estimate(model, dev, nemo_layout(row), gb), "mfu", tps * ours / dev.peak_flops))
    return out
