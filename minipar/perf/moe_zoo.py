"""Megatron-MoE-ModelZoo's Qwen3 235B-A22B tables on 256 H100s (2025): nine runs of one MoE model, TEST rows.

Source: github.com/yanring/Megatron-MoE-ModelZoo (NVIDIA's Megatron-Core MoE team). The layout table:
``examples/qwen3/readme.md`` at 8017e11 (2025-05-27; now ``best_practice/qwen3/readme.md``, the rows unchanged), with
the launch lines of the same commit (``examples/qwen3/run_235b.sh``), its model config
(``model_configs/benchmarking/Qwen3-235B-A22B.yaml``) and ``sbatch_benchmarking.sh``. The long-context table: the
readme's "Long Context" section at b0b92ff (2025-11-04, ``best_practice/Qwen3/readme.md``) with its command and that
commit's config. Added 2026-11-29; every setting below was written down before any row's error was computed.

GIVEN by the layout table: 256 H100s ("NVLink 4th Generation", "InfiniBand 8x50 GB/s": the H100 preset's links), BF16,
sequence 4,096, global batch 2,048; per row the dispatcher (DeepEP, Megatron-Core's ``flex``; or "A2A", NCCL's
``alltoall``), TP, EP, PP, VPP, DP, expert TP 1, FSDP, micro-batch, recomputation, the step time (s) and TFLOP/s per
GPU in Megatron-LM's count (the two agree: 2,048·4,096 tokens / 19.7 s / 256 GPUs · 148.1 GFLOP per token, 245; the
step time is the one used). "+1f1b overlap" is ``--combined-1f1b --combined-1f1b-recipe ep_a2a`` in the launch lines
(the all-to-all hidden behind another micro-batch's compute: ``"ep"`` in ``Layout.overlap``, :mod:`minipar.perf.moe`);
"norm, act" is ``--recompute-granularity selective --recompute-modules moe_act layernorm``
(``Layout.recompute_modules``, :mod:`minipar.perf.recompute_modules`).
GIVEN by the config: Qwen3 235B-A22B's shape (:data:`minipar.perf.nemo_shapes.SHAPES`; V 151,936 = 1,187·128, its
``--make-vocab-size-divisible-by``), expert TP 1 (the experts' mesh folded, ``Layout.etp``), the distributed optimizer
with ``--overlap-grad-reduce --overlap-param-gather``, sequence parallelism,
``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split`` (94 blocks on pp·v chunks as
:func:`minipar.perf.layout_checks.edge_splits`: 2 + 30·3 + 2 on 8 · 4, 0 + 94·1 + 0 on 32 · 3), flash attention through
Transformer Engine (``--framework megatron``'s kernel), forced load balancing (balanced routing, as the model assumes),
no loss fusion and no ``--tp-comm-overlap`` (neither flag is set: the loss unfused, TP not overlapped). The FSDP row:
``--use-custom-fsdp --data-parallel-sharding-strategy optim_grads_params`` (ZeRO-3, its gathers prefetched: ``"dp"``
overlapped) with full recomputation of every block.

GIVEN by the long-context table and command: the same 256 H100s, bf16, DeepEP, global batch 256, sequence 16K, 32K, 64K,
128K with CP 1, 2, 4, 8 (ring attention: Transformer Engine's default p2p), TP 4, PP 8, VPP 4, EP 8, micro-batch 1 (the
config's), DP the rest, no all-to-all overlap (``A2A_OVERLAP=0``), ``--recompute-modules layernorm moe``; TFLOP/s per
GPU in Megatron-LM's count (its causal half of the attention core, :func:`minipar.perf.flops.megatron_flops_per_token`),
the "forced balance" figure; the config of b0b92ff adds Transformer Engine's fused loss
(``--cross-entropy-loss-fusion``). These are the only rows with attention at 16K-128K under Megatron-Core's cuDNN kernel
(:data:`minipar.perf.gemm.ATTN_EFF_H100`), whose rate no published row had checked before (they read -2 to +2 %; +3
to +5 % since each rank's dispatched rows are counted per rank, :func:`minipar.perf.moe.dispatched_rows`).

ASSUMED: the gradients reduced in fp32 (Megatron-LM's default under bf16, as the Mixtral rows of the same repository,
:mod:`minipar.perf.nemo`); the host's floor under a MoE block (:data:`minipar.perf.moe.MOE_HOST_S`) as for
Megatron-Core's later rows.

**FIT**: the "+1f1b overlap" row (:data:`EP_OVERLAP_FIT`) chose how much of the all-to-all Megatron-Core's overlap hides
(:data:`minipar.perf.moe.EP_OVERLAP_HIDES`, 0.4; 0.35 since 2026-11-29, re-chosen by the same rule once each rank's
dispatched rows were counted per rank, :func:`minipar.perf.moe.dispatched_rows`), after its error was seen: +13.4 % with
an ideal overlap, while the same run without the overlap (a TEST row) read -3.7 % (both before their norm and activation
recomputation was modelled); so it is not a test row. The other eight are (:data:`ZOO`, :data:`LONG`).

Known misses by a rule set before the errors were computed (``MISS:provenance``, as :mod:`minipar.perf.mb_archive`'s): a
row whose launch line at the same commit differs from the table in a setting the model uses. The FSDP row (the table: TP
2, DP 128, GA 4; the launch line: ``TP=1``; read with TP 1 and DP 256 it is +4 %, as Megatron-FSDP with the experts
sharded, ZeRO-3 here, the only such row) and the "A2A" row (the config sets ``--moe-token-dispatcher-type flex`` and
DeepEP, the launch line overrides neither); both are evaluated as the table says and stay in the test set.
"""

from __future__ import annotations

from typing import NamedTuple

from minipar.perf.flops import megatron_flops_per_token
from minipar.perf.hardware import GPUS, Device, for_framework, with_fused_loss
from minipar.perf.layout import Estimate, Layout
from minipar.perf.layout_checks import edge_splits
from minipar.perf.model import estimate
from minipar.perf.moe import training_flops
from minipar.perf.nemo import shape

MODEL, GPUS_N, SEQ, BATCH = "Qwen3-235B-A22B", 256, 4096, 2048
NORM_ACT, NORM_MOE = ("moe_act", "layernorm"), ("layernorm", "moe")  # --recompute-modules of the runs


class Run(NamedTuple):
    """One run: its layout and recomputation ("none", "full" or Megatron-Core's modules) as given (module doc), and
    what was published, the step time (s) or TFLOP/s per GPU in Megatron-LM's count."""

    dispatcher: str
    tp: int
    ep: int
    pp: int
    v: int
    dp: int
    fsdp: bool
    micro_batch: int
    recompute: str | tuple
    a2a_overlap: bool
    step_s: float | None = None
    cp: int = 1
    seq: int = SEQ
    batch: int = BATCH
    tflops: float | None = None
    fused_loss: bool = False


# the layout table: dispatcher, TP, EP, PP, VPP, DP, FSDP, micro-batch, recompute, 1F1B all-to-all overlap, step s
TABLE = [
    Run("flex", 2, 32, 8, 4, 16, False, 1, NORM_ACT, False, 19.7),
    Run("flex", 2, 32, 8, 4, 16, False, 1, NORM_ACT, True, 17.6),
    Run("flex", 2, 8, 1, 1, 128, True, 4, "full", False, 17.6),
    Run("alltoall", 2, 8, 32, 3, 4, False, 1, NORM_ACT, False, 24.2),
    Run("flex", 4, 8, 8, 4, 8, False, 1, "none", False, 29.0),
]
# (sequence, CP, TFLOP/s per GPU in Megatron-LM's count, forced balance): the long-context table; TP 4, PP 8, VPP 4,
# EP 8, DeepEP, global batch 256, layernorm and moe recomputed, the fused loss (module doc)
LONG = [(16384, 1, 295), (32768, 2, 335), (65536, 4, 368), (131072, 8, 389)]
LONG_BATCH = 256
LONG_RUNS = [
    Run("flex", 4, 8, 8, 4, 8 // cp, False, 1, NORM_MOE, False, None, cp, seq, LONG_BATCH, tflops, True)
    for seq, cp, tflops in LONG
]
EP_OVERLAP_FIT = [TABLE[1]]  # FIT: chose minipar.perf.moe.EP_OVERLAP_HIDES (module doc); not a test row
ZOO = [r for r in TABLE if r not in EP_OVERLAP_FIT]  # TEST rows, with LONG_RUNS
PROVENANCE = [TABLE[2], TABLE[3]]  # MISS:provenance: the rows whose launch line differs from the table (module doc)


def zoo_layout(run: Run) -> Layout:
    """The run's layout (module doc: given and ASSUMED)."""
    overlap = {"dp"} | ({"pp"} if run.pp > 1 else set()) | ({"ep"} if run.a2a_overlap else set())
    (first, last), *_ = edge_splits(shape(MODEL).layers, run.pp, run.v, "megatron")
    mods = run.recompute if isinstance(run.recompute, tuple) else None  # Megatron-Core's selective modules
    return Layout(
        dp=run.dp,
        tp=run.tp,
        pp=run.pp,
        micro_batch=run.micro_batch,
        v=run.v,
        zero=3 if run.fsdp else 1,
        recompute="selective" if mods else run.recompute,
        recompute_modules=mods,
        cp=run.cp,
        seq_parallel=run.tp > 1,
        overlap=frozenset(overlap),
        grad_bytes=4,
        flash_attention=True,
        ep=run.ep,
        etp=1,
        dispatcher=run.dispatcher,
        first_stage_layers=first,
        last_stage_layers=last,
    )


def label(run: Run) -> str:
    """``MoE-Zoo Qwen3-235B-A22B[ s=<tokens>] 256 H100 <layout> bf16`` [``MISS:provenance``]."""
    r = run
    lay = (f"fsdp{r.dp}" if r.fsdp else f"dp{r.dp}") + f"·tp{r.tp}" + (f"·pp{r.pp}·v{r.v}" if r.pp > 1 else "")
    lay += (f"·cp{r.cp}" if r.seq != SEQ else "") + f"·ep{r.ep}·etp1·b{r.micro_batch}"
    lay += ("·flex" if r.dispatcher == "flex" else "") + ("·a2a-overlap" if r.a2a_overlap else "")
    rc = r.recompute
    lay += "·full-rc" if rc == "full" else (f"·rc:{'+'.join(rc)}" if isinstance(rc, tuple) else "")
    name = f"{MODEL} s={r.seq}" if r.seq != SEQ else MODEL
    return f"MoE-Zoo {name} {GPUS_N} H100 {lay} bf16" + (" MISS:provenance" if r in PROVENANCE else "")


def zoo_rows(dev: Device | None = None, rows=None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per run of ``rows`` (default the TEST runs, :data:`ZOO` then
    :data:`LONG_RUNS`) on ``dev`` (default the H100 preset under Megatron-Core,
    :func:`~minipar.perf.hardware.for_framework`; the fused loss where the run had it): the published step time or
    TFLOP/s as tokens/s per GPU, then as an MFU in this model's own FLOP count over the same peak (the error is the
    throughput error)."""
    dev = dev or for_framework(GPUS["h100"], "megatron")
    out = []
    for run in ZOO + LONG_RUNS if rows is None else rows:
        model = shape(MODEL if run.seq == SEQ else f"{MODEL} s={run.seq}")
        if run.step_s is not None:
            tps = run.batch * run.seq / run.step_s / GPUS_N
        else:
            tps = run.tflops * 1e12 / megatron_flops_per_token(model)
        ours = training_flops(model, run.batch) / (run.batch * run.seq)
        e = estimate(model, with_fused_loss(dev) if run.fused_loss else dev, zoo_layout(run), run.batch)
        out.append((label(run), e, "mfu", tps * ours / dev.peak_flops))
    return out
