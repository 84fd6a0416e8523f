"""``python -m minipar.plan``: which layout for N GPUs and a dense or MoE model? (a MODEL: :mod:`minipar.perf`)

    python -m minipar.plan --model 70b --gpus 64 --gpu h100 --global-batch 1024
    python -m minipar.plan --layers 80 --hidden 8192 --heads 64 --kv-heads 8 --ffn 28672 --swiglu \\
        --vocab 128256 --seq 8192 --gpus 1024 --gpu h100 --global-batch 2048 \\
        --tp 8 --pp 8 --dp 16 --v 5 --zero 1 --recompute selective --sp --flash-attention --json
 Searches every layout (dp, tp, pp, cp where each rank keeps >= 4,096 tokens, micro-batch b, interleaving v, ZeRO stage,
recompute; on a GPU where pp·v does not divide the layers, Megatron-Core's split with the embedding and / or the loss
counted as a block, first/last shown in the layout: :func:`minipar.perf.layout_checks.edge_splits`) and prints the best
with their modelled MFU, tokens/s per GPU, step time and memory per GPU, then one line per reason the others were
rejected; or, given ``--tp --pp --dp`` (and optionally ``--cp --cp-allgather --v --micro-batch --zero --recompute --sp
--flash-attention --first-stage-layers --last-stage-layers --recompute-layers --recompute-modules --hsdp --hpz
--stage-split --pipeline-model-parallel-layout --ddp-bucket-mb``), evaluates exactly that layout (``--recompute-layers
N``: N blocks per model chunk recomputed; ``--recompute-modules layernorm,moe``: Megatron-Core's selective modules,
:mod:`minipar.perf.recompute_modules`; ``--hsdp N``: ZeRO sharded over N dp ranks, replicated across; ``--hpz N``:
ZeRO-3's backward all-gather over N ranks, ZeRO++'s hpZ; ``--stage-split 9,9,8,6``: the blocks of each model chunk (v =
1: stage) as the run split them, or Megatron-Core's string, ``--pipeline-model-parallel-layout "Et|(tt|)*30mL"``,
:mod:`minipar.perf.pp_layout`; ``--ddp-bucket-mb 25``: ZeRO 0/1's reduction in PyTorch DDP's buckets, each paying its
latency; :mod:`minipar.perf.sharding`, :mod:`minipar.perf.shard_flags`; ``--precision fp8``, search too: the blocks'
GEMMs at the FP8 peak, :func:`minipar.perf.block_time.gemm_rate`; each is in ``--json`` when given).
``--first/last-stage-layers``: the blocks of pipeline stage 0 / pp−1 with v = 1, of the first / last model chunk with v
> 1 (Llama 3's 126 layers: ``--pp 16 --v 8 --first-stage-layers 0 --last-stage-layers 0``;
:meth:`minipar.perf.layout.Layout.chunk_layers`); ``--no-dropout``: a block without dropout masks (Llama);
``--untie-embeddings-and-output-weights``: an output layer of its own, ``--position-embedding-type rope|none``: no
learned position table (Llama; Megatron-LM's flags, both in the parameters, memory and DP traffic; the presets 7b, 13b,
70b are Llama 2's); ``--window-size W --window-attn-skip-freq N``: sliding-window attention in all but every N-th block
(GPT-OSS: 128, 2; in ``--json``; :mod:`minipar.perf.shape_flags`). ``--json``: one JSON object per layout per line, with
``mfu`` (0–1, model FLOPs without recomputation over peak: MegaScale's and PaLM's count), ``tflops_per_gpu`` (executed
FLOPs per GPU, recomputation included: Narayanan et al. 2021 eq. 3), ``tokens_per_s_per_gpu`` (a column of the table
too: no FLOP count, so it compares with any run's tokens/s), ``step_s``, ``mem_gb`` (GB = 1e9 bytes), ``fits``, the time
terms and ``dp_collectives`` (per DP/ZeRO pass, each paying the ring's latency:
:func:`minipar.perf.sharding.collectives`) and ``overlap``: what ``--overlap`` hides (``dp``: the gradients' reduction
and ZeRO's weight all-gather, Megatron-LM's ``--overlap-grad-reduce --overlap-param-gather``; ``grad_reduce``: the first
only, as DeepSpeed's ZeRO-1/2 and nanotron's ZeRO-1, which all-gather the weights after the optimizer step). ``--gpus``:
64 by default, or the fixed layout's tp·pp·dp·cp (a ``--gpus`` that differs from it is refused). ``--moe-experts E
--moe-top-k k`` (and ``--moe-shared-expert-intermediate-size F``, shared experts' width; ``--moe-ffn-hidden-size``, the
experts' own; ``--moe-layer-freq ([0]*K+[1]*M)``, the first K blocks dense; MLA's ``--kv-lora-rank`` ... and
``--mtp-num-layers``: :mod:`minipar.perf.shape_flags`): the experts' counts, then the search with expert parallelism ep
(every ep dividing dp and E, or tp·cp·dp/etp where expert TP 1, tried by default at tp > 1 on a GPU, or ``--expert-tp``
folds the experts' mesh; ``--ep`` fixes it and must divide ``--moe-experts`` and ``--gpus``; ``--expert-tp N``: the
experts' TP degree in every layout whose tp it divides, Megatron-Core's folded expert mesh, ``Layout.etp``;
``--moe-dispatcher alltoall|flex``, the all-to-all's kind, ``Layout.dispatcher``; ``--moe-router-num-groups
--moe-router-group-topk``, ``moe.node_hit``; ``--cuda-graph-scope``, ``moe.host_floor``; ``--overlap ep`` hides part of
the all-to-all (``moe.EP_OVERLAP_HIDES``); ``--json`` adds ``ep``, ``etp``, ``experts``, ``top_k``, ``dispatcher``;
:mod:`minipar.perf.moe`), or, with ``--tp/--pp/--dp``, that fixed MoE layout (``--ep``, default 1), ``--precision fp8``
included. ``--recompute op``: torchtitan's per-op checkpointing (the search tries it on a GPU under ``--framework
pytorch``, dense models; with experts under ``--framework megatron`` it tries ``--recompute-modules`` layernorm,moe_act
and layernorm,moe). The software stack (:mod:`minipar.perf.stack_flags`): ``--framework``, ``--precision``,
``--grad-reduce-dtype``, ``--attention-kernel``, ``--fused-loss`` (``loss_bytes``), ``--compile``, ``--fsdp2``,
``--use-precision-aware-optimizer`` with ``--main-params-dtype --exp-avg-dtype --exp-avg-sq-dtype``
(``optimizer_dtypes``), each in ``--json``. The model: :mod:`minipar.perf.model`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import replace

from minipar.comm.links import NETWORKS
from minipar.errors import ConfigError, check_magnitudes
from minipar.perf.flops import moe_params
from minipar.perf.gemm import attention_kernel
from minipar.perf.hardware import (
    GPUS,
    HBM_EFF,
    block_passes,
    check_rate,
    for_framework,
    with_fused_loss,
    with_links,
)
from minipar.perf.layout import OVERLAP, RECOMPUTE, Layout
from minipar.perf.model import estimate
from minipar.perf.moe import moe_summary
from minipar.perf.moe_flags import add_moe_flags, check_moe_flags, cuda_graph_scope, with_experts
from minipar.perf.plan_notes import plan_notes
from minipar.perf.search import plan
from minipar.perf.shape import MLA
from minipar.perf.shape_flags import add_shape_flags, check_shape_flags, model_shape, window_note
from minipar.perf.shard_flags import SHARD_FLAGS, add_shard_flags, check_fixed_flags, check_shard_flags
from minipar.perf.sharding import dp_collectives
from minipar.perf.stack_flags import GRAD_BYTES, add_stack_flags, check_stack_flags, optimizer_dtypes

FIXED = ("tp", "pp", "dp", "cp", "v", "micro_batch", "first_stage_layers", "last_stage_layers")
ONLY_FIXED = (*FIXED[3:], "zero", "recompute", "sp", "cp_allgather")  # a fixed layout's settings: no search tries them
DEFAULT_GPUS = 64
# A custom device: (flag, Device field, unit, scale to the field's unit). The HBM rate is the datasheet's;
# memory-bound kernels reach HBM_EFF of it, as for the presets (minipar.perf.hardware).
CUSTOM_DEVICE = (
    ("device_peak_tflops", "peak_flops", "dense bf16 TFLOP/s per GPU", 1e12),
    ("hbm_gbps", "hbm_bw", "datasheet HBM GB/s per GPU", HBM_EFF * 1e9),
    ("mem_gb", "mem_bytes", "GB = 1e9 bytes of memory per GPU", 1e9),
    ("device_fp8_tflops", "fp8_flops", "dense FP8 TFLOP/s per GPU (with --precision fp8)", 1e12),
)


def check_args(a: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` (one line: the flag, the value, the fix) for an impossible input."""
    check_magnitudes(vars(a))  # first: every integer flag within one bound, before any divisor is listed
    check_shape_flags(a)
    for flag in ("gpus", "gpus_per_node", "global_batch", "top", *FIXED):
        v, least = getattr(a, flag), 0 if flag.endswith("stage_layers") else 1  # a chunk may hold no block
        if v is not None and v < least:
            raise ConfigError(f"--{flag.replace('_', '-')} {v}: must be an integer >= {least}")
    bad = [x for x in a.overlap.split(",") if x and x not in OVERLAP]
    if bad:
        raise ConfigError(
            f"--overlap {a.overlap}: {', '.join(bad)} is not one of {', '.join(OVERLAP)} (comma-separated)"
        )
    fixed = check_fixed_flags(a, ONLY_FIXED)
    check_shard_flags(a, fixed)
    check_moe_flags(a, DEFAULT_GPUS)
    check_stack_flags(a)
    cuda_graph_scope(a)


def _device(a):
    """The ``--gpu`` preset with the node size, links and a custom device's numbers the flags give."""
    dev = GPUS[a.gpu] if a.gpus_per_node is None else replace(GPUS[a.gpu], gpus_per_node=a.gpus_per_node)
    custom, notes = {}, []
    for flag, field, unit, scale in CUSTOM_DEVICE:
        v = getattr(a, flag)
        if v is None:
            continue
        check_rate(f"--{flag.replace('_', '-')}", v, unit)
        custom[field] = v * scale
        notes.append(f"--{flag.replace('_', '-')} {v:g}")
    if custom:
        dev = replace(dev, name=f"{dev.name} with {', '.join(notes)}", **custom)
    if a.precision == "fp8" and dev.fp8_flops is None:
        raise ConfigError(
            f"--precision fp8: {dev.name} has no FP8 tensor cores (the A100's datasheet: TF32, bf16/fp16, int8); "
            "use --gpu h100, h200 or b200, --device-fp8-tflops for a custom device, or --precision bf16"
        )
    dev = replace(dev, attention=a.attention_kernel or dev.attention, compiled=a.compile, fsdp2=a.fsdp2)
    dev = for_framework(dev, a.framework)
    dev = with_fused_loss(dev) if a.fused_loss else dev
    return with_links(dev, a.intra_node_gbps, a.inter_node_gbps, a.network)


def tokens_per_s_per_gpu(e, model) -> float:
    """Tokens/s per GPU of an estimate: m·b·dp sequences of ``model.seq`` per step over the GPUs (no FLOP count)."""
    return e.m * e.layout.micro_batch * e.layout.dp * model.seq / e.time["total"] / e.layout.gpus


def _row(e, dev, model) -> dict:
    moe = {"ep": e.layout.ep, "etp": e.layout.expert_tp, "experts": model.experts, "top_k": model.top_k}
    groups = ("moe_router_num_groups", "moe_router_group_topk")
    moe |= {k: getattr(model, k) for k in ("shared_ffn", "moe_ffn", "dense_layers", *groups) if getattr(model, k)}
    moe["dispatcher"] = e.layout.dispatcher
    return {
        "layout": str(e.layout),
        "overlap": sorted(e.layout.overlap),  # hidden behind compute (Layout.hides)
        **{k: getattr(model, k) for k in ("tied_embeddings", "learned_positions")},  # the shape's embeddings
        **({} if model.mla else {"kv_channels": model.head_dim}),  # a head's width (MLA: its own three, below)
        **{
            k: getattr(model, k)
            for k in ("window_size", "window_attn_skip_freq", *MLA, "mtp_num_layers")
            if getattr(model, k)
        },
        **(moe if model.experts else {}),
        "device": {
            "name": dev.name,
            "peak_tflops": round(dev.peak_flops / 1e12, 1),
            "hbm_gbps": round(dev.hbm_bw / HBM_EFF / 1e9, 1) if dev.hbm_bw else None,
            "mem_gb": round(dev.mem_bytes / 1e9, 2),
            **{k: getattr(dev, k) for k in ("gemm_efficiency", "mem_passes", "overlap_cost")},
            "block_passes": block_passes(dev, model.gated),  # this model's: + GATED_EAGER_PASSES if gated and eager
            **({"fp8_tflops": round(dev.fp8_flops / 1e12, 1)} if e.layout.fp8 else {}),
        },
        "framework": dev.framework,
        "attention_kernel": attention_kernel(dev),
        **{k: getattr(dev, k) for k in ("compiled", "loss_bytes", "fsdp2")},
        **({"precision": "fp8", "fp8_param_gather": e.layout.fp8_params} if e.layout.fp8 else {}),
        **({"cuda_graph_scope": list(e.layout.cuda_graphs)} if e.layout.cuda_graphs else {}),
        **({"optimizer_dtypes": list(e.layout.optimizer_dtypes)} if e.layout.optimizer_dtypes else {}),
        "grad_reduce_dtype": next(k for k, b in GRAD_BYTES.items() if b == e.layout.grad_bytes),
        **{k: getattr(e.layout, k) for k in (*SHARD_FLAGS, *FIXED[-2:]) if getattr(e.layout, k) is not None},
        "mfu": round(e.mfu, 4),
        "tflops_per_gpu": round(e.tflops_per_gpu, 1),
        "tokens_per_s_per_gpu": round(tokens_per_s_per_gpu(e, model)),
        "step_s": round(e.time["total"], 4) if e.time else None,
        "mem_gb": round(e.mem["total"] / 1e9, 2),
        "fits": bool(e.fits),
        "m": e.m,
        "dp_collectives": dp_collectives(model, dev, e.layout),
        "time_s": {k: round(v, 4) for k, v in e.time.items()},
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minipar.plan", description=__doc__.split("\n")[0])
    add_shape_flags(p)
    p.add_argument("--gpus", type=int, default=None, help=f"default: {DEFAULT_GPUS}, or the fixed layout's count")
    p.add_argument("--gpu", default="h100", choices=sorted(GPUS))
    p.add_argument("--gpus-per-node", type=int, default=None, help="default: the GPU's (8)")
    p.add_argument("--network", default=None, choices=sorted(NETWORKS), help="inter-node preset (default: the GPU's)")
    p.add_argument("--inter-node-gbps", type=float, default=None, help="Gb/s per GPU across nodes, per direction")
    p.add_argument("--intra-node-gbps", type=float, default=None, help="Gb/s per GPU inside a node, per direction")
    for flag, _, unit, _ in CUSTOM_DEVICE:
        p.add_argument(f"--{flag.replace('_', '-')}", type=float, default=None, help=f"a custom device: {unit}")
    add_stack_flags(p)
    p.add_argument("--global-batch", type=int, default=1024, help="sequences per optimizer step")
    p.add_argument("--top", type=int, default=5)
    p.add_argument(
        "--overlap",
        default="",
        help=f"communication hidden behind compute, of {','.join(OVERLAP)} (dp: grad_reduce and ZeRO's all-gather)",
    )
    for f in FIXED:
        p.add_argument(f"--{f.replace('_', '-')}", type=int, default=None, help=f"fixed layout: {f}")
    p.add_argument("--zero", type=int, default=None, choices=(0, 1, 2, 3))
    rc_help = "selective: the attention core (Korthikanti et al. 2022 §5); op: torchtitan's per-op checkpointing"
    p.add_argument("--recompute", default=None, choices=RECOMPUTE, help=rc_help + ", every second matmul of a block")
    add_shard_flags(p)
    p.add_argument("--sp", action="store_true", help="sequence parallelism (fixed layout)")
    p.add_argument("--cp-allgather", action="store_true", help="CP by all-gathered K/V, Llama 3's (fixed layout)")
    p.add_argument("--flash-attention", action="store_true", help="FlashAttention (search and fixed layout)")
    p.add_argument("--json", action="store_true", help="one JSON object per layout per line")
    add_moe_flags(p)
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    try:
        check_args(a)
        a.gpus = a.gpus or (a.tp * a.pp * a.dp * (a.cp or 1) if a.tp is not None else DEFAULT_GPUS)
        name, model = model_shape(a)
        model = with_experts(a, model)
        dev = _device(a)
        overlap = frozenset(x for x in a.overlap.split(",") if x)
        stack = {"cuda_graphs": cuda_graph_scope(a), "optimizer_dtypes": optimizer_dtypes(a)}  # fixed, search alike
        stack["fp8_params"] = a.fp8_param_gather
        if a.tp is not None:
            moe = {"ep": a.ep or 1, "etp": a.expert_tp, "dispatcher": a.moe_dispatcher} if model.experts else {}
            lay = Layout(
                a.dp,
                a.tp,
                a.pp,
                a.micro_batch or 1,
                a.v or 1,
                a.zero or 0,
                a.recompute or "selective",
                a.sp,
                overlap=overlap,
                cp=a.cp or 1,
                cp_allgather=a.cp_allgather,
                flash_attention=a.flash_attention,
                first_stage_layers=a.first_stage_layers,
                last_stage_layers=a.last_stage_layers,
                grad_bytes=GRAD_BYTES[a.grad_reduce_dtype],
                recompute_layers=a.recompute_layers,
                recompute_modules=a.recompute_modules,
                hsdp=a.hsdp,
                hpz=a.hpz,
                stage_split=a.stage_split,
                bucket_mb=a.bucket_mb,
                fp8=a.precision == "fp8",
                **stack,
                **moe,
            )
            rows = [(estimate(model, dev, lay, a.global_batch), "")]
        else:
            rows = plan(
                model,
                dev,
                a.gpus,
                a.global_batch,
                overlap=overlap,
                flash_attention=a.flash_attention,
                grad_bytes=GRAD_BYTES[a.grad_reduce_dtype],
                fp8=a.precision == "fp8",
                eps=None if a.ep is None else (a.ep,),
                etp=a.expert_tp,
                dispatcher=a.moe_dispatcher,
                **stack,
            )
        kept = [e for e, why in rows if not why]
        if model.experts and not a.json:  # the counts, at the best layout's ep (or the given one)
            ep = a.ep or (kept[0].layout.ep if kept else math.gcd(model.experts, a.gpus))
            print(moe_summary(name, model, model.experts, model.top_k, ep, a.gpus, a.global_batch))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        for e in kept[: a.top] if a.tp is None else kept:
            print(json.dumps(_row(e, dev, model), ensure_ascii=False))
        return 0
    gpus = rows[0][0].layout.gpus if a.tp is not None else a.gpus
    params = moe_params(model, model.experts, model.top_k)[0] if model.experts else model.params
    print(
        f"{name} ({params / 1e9:.1f}B params, seq {model.seq}{window_note(model)}) on {gpus} × {dev.name}"
        + (f" (GEMM efficiency {dev.gemm_efficiency:g}: {dev.framework})" if dev.framework != "pytorch" else "")
        + ", "
        f"global batch {a.global_batch}: {len(rows)} layouts modelled, {len(kept)} kept (a MODEL, not a measurement)"
    )
    print(f"{'layout':46s} {'MFU':>5s} {'tok/s/GPU':>9s} {'step s':>7s} {'mem/GPU GB':>10s} {'bubble':>6s}")
    for e in kept[: a.top]:
        print(
            f"{str(e.layout):46s} {e.mfu:5.1%} {tokens_per_s_per_gpu(e, model):9,.0f} {e.time['total']:7.2f} "
            f"{e.mem['total'] / 1e9:10.1f} {e.time['bubble'] / e.time['total']:6.1%}"
            + ("" if e.fits else "  (does not fit)")
        )
    for note in plan_notes(kept[0], dev, model) if kept else []:  # where published runs of its kind read
        print(note)
    if a.tp is None and not a.flash_attention and kept:  # the search, too, models only what its flags say
        print("  (--flash-attention not given: every layout above runs the unfused attention core and keeps its s² "
              "scores in memory; add it for a run on FlashAttention or cuDNN's fused kernel)")  # fmt: skip
    if a.tp is not None:  # a fixed layout models only what its flags say: name what was left out
        given = {"--flash-attention": a.flash_attention, "--sp": a.sp or a.tp == 1, "--zero": a.zero is not None}
        left = " ".join(k for k, v in {**given, "--overlap": a.overlap}.items() if not v)
        if left:
            print(f"  (not given, so not modelled: {left}; add what the run uses)")
        return 0
    if not rows:
        print(
            f"  (none: no layout of {a.gpus} GPUs is valid here: tp must divide the heads ({model.heads}) and "
            f"the hidden size, pp split the layers ({model.layers}), dp·micro-batch divide the global batch "
            f"({a.global_batch}))"
        )
    elif not kept:
        print("  (none: every layout was rejected; see below)")
    reasons = Counter(
        why.split(" (")[0].split(" ")[0] if why.startswith("bubble") else why.split(" (")[0] for _, why in rows if why
    )
    print("rejected:")
    for reason, n in reasons.most_common():
        ex = next((e, why) for e, why in rows if why and why.startswith(reason))
        print(f"  {n:5d} × {reason:16s} e.g. {ex[0].layout}: {ex[1]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... | head`: the reader closed the pipe; nothing is wrong with the plan
        sys.stdout = None
        sys.exit(0)
