"""A MODEL of training step time, throughput (MFU) and memory per device, for one layout.

This is arithmetic, not a measurement: a few lines per term, each with its source, so that a
learner can plan "64 H100s and a 70B model: which (dp, tp, pp, cp, m, v, ZeRO, recompute)?" before
spending GPU hours, and check it against published runs: a declared fit set
(:mod:`minipar.perf.published`, where the one chosen constant was picked) and a declared test set
(:mod:`minipar.perf.runs`, not tuned on). One model, two device descriptions
(:mod:`minipar.perf.hardware`): a GPU cluster and this CPU, measured.

    from minipar.perf.hardware import GPUS
    from minipar.perf.layout import Layout
    from minipar.perf.model import estimate
    from minipar.perf.published import MODELS
    e = estimate(MODELS["175b"], GPUS["a100"], Layout(dp=24, tp=8, pp=8, micro_batch=1), global_batch=1536)
    e.tflops_per_gpu, e.mfu, e.mem["total"], e.time["bubble"]

Terms (b micro-batch, s sequence, h hidden, l layers, V vocabulary, t/p/d/c the TP/PP/DP/CP
degrees, m = B/(d·b) micro-batches per pipeline; counts in :mod:`minipar.perf.flops`).
``Device.counts``: ``"megatron"`` (GPU presets) / ``"minipar"`` (minipar's GPT on this CPU):

- **Compute** (megatron): each block's weight GEMMs 2·b·s·(weights) (24·b·s·h² for a GPT; GQA, SwiGLU and any FFN width
  by their weights) and the attention core 4·b·s²·h (Narayanan et al. 2021, arXiv:2104.04473, App. A). On a GPU each
  weight GEMM runs at its own shape (:mod:`minipar.perf.gemm`: the device's large-GEMM ``gemm_efficiency``, CHOSEN per
  device on its fit set, A100 0.68, H100 0.64, times wave quantisation over its SMs, capped by the HBM roofline),
  FlashAttention's core at its kernel's efficiency for the size (H100: measured, 0.02-0.57 by micro-batch × heads and
  sequence; A100 0.60, the FlashAttention-2 paper; :func:`~minipar.perf.gemm.attention_rate`), the unfused core and the
  logit layer at ``gemm_efficiency``; the memory-bound operators move each layer's activation bytes (Korthikanti et al.
  2022, arXiv:2205.05198, eq. 2) through HBM ``Device.mem_passes`` times (2, written and read, on the A100 and under
  Megatron-Core; 3 for PyTorch stacks on the H100, chosen on its fit set; 3.8 more for a gated model in eager PyTorch,
  measured: ``hardware.block_passes``) at ``hbm_bw`` (0.85 of the datasheet, ASSUMED). A backward is 2 forwards; full
  recomputation adds one (``recompute_layers`` N: for N blocks of each model chunk only, Megatron-LM's block method),
  selective the attention core (§5) or Megatron-Core's modules (``Layout.recompute_modules``:
  :mod:`minipar.perf.recompute_modules`), ``"op"`` (torchtitan's per-op checkpointing) every second weight matmul of a
  block and its memory-bound operators. FP8 (``Layout.fp8``): the weight GEMMs at the FP8 peak, the rest bf16
  (:func:`~minipar.perf.block_time.gemm_rate`); under Megatron-Core (``Device.framework``) their saved inputs take 1
  byte in memory (:func:`~minipar.perf.flops.fp8_saved_bytes`). FlashAttention (Dao et al. 2022, arXiv:2205.14135): no
  s² scores in HBM, half the attention core runs (causal blocks skipped), its backward recomputes QKᵀ. The logit layer
  2·b·s·h·V runs on the last stage, and the loss after it moves ``Device.loss_bytes`` per logit value through HBM (fp32
  passes over s·b·V/t values: 52 bytes in Megatron-LM's unfused loss, 48 in PyTorch's, 6 in a fused kernel; the count in
  :data:`minipar.perf.hardware.LOSS_BYTES`). minipar: ``GPT.flops_per_token`` per token at ``peak_flops``; full
  recomputation × 4/3. Both add ``layer_overhead`` per layer and divide by ``compute_share``.
- **Links** (:func:`group_link`): a group uses NVLink only if every group of its kind lies inside
  one node in Megatron's rank order (tp innermost, then cp, dp, pp); tp = 6 on 8-GPU nodes straddles
  nodes and runs on the inter-node link. α–β ring costs (lesson 01; :mod:`minipar.comm.cost`): all-reduce
  2(n−1)α + 2(n−1)/n·S/β, reduce-scatter and all-gather half of it, one message α + n/β; the 2(n−1)α
  latency is the first-principles per-GPU-count effect (it grows with n).
- **TP** (Shoeybi et al. 2019, arXiv:1909.08053, §3): per layer and micro-batch 2 all-reduces of
  b·s·h values forward, 2 backward, 2 more in a recomputed forward (sequence parallelism: all-gather
  + reduce-scatter, the same volume, Korthikanti §4.2.2). ``"tp"`` in overlap hides them behind the
  layer's compute (MegaScale, arXiv:2402.15627, §3.2).
- **CP** (ring attention, Liu et al. 2023, arXiv:2310.01889): c − 1 steps per layer, each passing this
  rank's K and V (2·b·(s/c)·h_kv values ÷ t) while the attention of one chunk runs; only the excess is
  exposed; the backward passes twice the bytes. ``cp_allgather`` (Llama 3, arXiv:2407.21783, §3.3.2):
  c − 1 blocks all-gathered before attention, again and a reduce-scatter of dK, dV in backward, exposed.
  DP gradients are reduced over d·c ranks.
- **PP**: each action sends one b·s·h activation or gradient; with scatter/gather (Narayanan §4.1) or
  sequence parallelism 1/t of it crosses nodes, then an all-gather over NVLink. ``"pp"`` in overlap
  hides it (MegaScale §3.2).
- **Pipeline time**: megatron: the makespan of the real schedule (:func:`minipar.pp.schedules.simulate`
  of 1F1B, interleaved 1F1B or GPipe) with each virtual stage's own forward and backward time (its own
  blocks, :meth:`~minipar.perf.layout.Layout.chunk_layers`: uneven first/last stages or chunks; the
  logit layer on the last); the bubble is what the busiest rank leaves idle.
  minipar: uniform stages, (m + p − 1) stage times (Narayanan §2.2.1).
- **DP / ZeRO** (Rajbhandari et al. 2020, arXiv:1910.02054, §7): :func:`minipar.perf.sharding.dp_time`
  (HSDP: reduce-scatter and all-gather in the shard group, all-reduce of the shard across replicas;
  ZeRO-3 with pp > 1: FSDP2's one all-gather per step). Under gradient
  accumulation only the last micro-batch's backward can hide the gradient reduction (bucket by
  bucket; the last bucket stays exposed). Optimizer step: 32 bytes per parameter over HBM, ÷ the
  ranks ZeRO shards over (:attr:`~minipar.perf.layout.Layout.shard`).
- **Offload** (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840): AdamW's state moves to the host
  (``mem["host"]``); the step adds 2·bytes_per_value·Φ over ``host_bw``.
- **Memory per device**: model states by ZeRO's formula (:func:`minipar.zero.formula.zero_bytes_formula`,
  over d·c ranks; unsharded gradients at ``grad_bytes``, Megatron-LM's fp32 main gradients; the optimizer's 12 bytes
  a parameter, or the precision-aware optimizer's, ``Layout.optimizer_bytes``), activations per
  Korthikanti (:func:`~minipar.perf.flops.activation_bytes_per_layer`)
  × the blocks each rank holds at its peak along the real schedule (:func:`minipar.perf.memory.held_layers`:
  min(p − i, m)·l/p under 1F1B, l·(1 + (p−1)/(p·v)) on rank 0 interleaved, §4.2.3; each chunk's own
  blocks); the busiest rank. Fits if ≤ ``usable_mem`` (0.9, ASSUMED). :mod:`minipar.perf.memory`.

- **Experts** (``ModelShape.experts``, ``Layout.ep``): :mod:`minipar.perf.moe` (each block's GEMMs with the
  E/ep local experts at their own shapes, 4 all-to-alls per block per micro-batch over the EP group, ``"ep"``,
  not overlapped unless ``"ep"`` is in ``Layout.overlap``, then partly (``EP_OVERLAP_HIDES``, chosen on one published
  pair of runs); the flex dispatcher's network bytes under group-limited routing (``moe.node_hit``); a block's time at
  least the host's floor under Megatron-Core, lifted by CUDA graphs (``moe.host_floor``); each rank's dispatched rows
  (``moe.dispatched_rows``); expert states over the expert-dp ranks; every setting given or ASSUMED there). Blocks of
  two kinds (``ModelShape.dense_layers``: the first k dense, the rest with experts) each at its own seconds and bytes,
  per model chunk (:meth:`~minipar.perf.layout.Layout.chunk_kinds`; one block's terms: :mod:`minipar.perf.block_time`).

Left out, on purpose (not first principles, or not measured here): stragglers and congestion (MegaScale
§5 measures them; they grow with the GPU count), kernel-launch and framework overhead on GPUs,
GEMM kernels' tile choice (one 128×128 tile, :mod:`minipar.perf.gemm`), data loading, DeepSpeed's real overlap
of ZeRO-3's all-gathers, MegaScale's parallel block. (Sliding-window attention is in: ``ModelShape.window_size``,
:func:`minipar.perf.flops.attention_keys`.)
"""

from __future__ import annotations

import functools

from minipar.comm.cost import all_reduce_time, p2p_time, ring_time
from minipar.perf.block_time import block_terms, gemm_rate
from minipar.perf.flops import (  # noqa: F401  (activation_bytes_per_layer, stage_params: read here by lessons 00, 07, 08)
    activation_bytes_per_layer,
    attention_core_flops,
    gpt_flops_per_token,
    layer_gemm_flops,
    logit_flops,
    stage_params,
)
from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate, Layout
from minipar.perf.layout_checks import check_layout
from minipar.perf.makespan import makespan, schedule_order
from minipar.perf.memory import memory_per_gpu, stage_layers_of  # noqa: F401  (stage_layers_of: read by lessons)
from minipar.perf.moe import training_flops
from minipar.perf.recompute_modules import base_recompute, extra_flops
from minipar.perf.shape import ModelShape
from minipar.perf.sharding import BUCKET_PARAMS, across_nodes, dp_time, group_link, stage_psi  # noqa: F401
from minipar.perf.sharding import links as _links
from minipar.pp.schedules import make_schedule, simulate


@functools.lru_cache(maxsize=4096)
def _simulated(p: int, m: int, v: int, f: tuple, b: tuple, schedule: str = "1f1b") -> float:
    order = schedule_order("interleaved" if v > 1 else schedule, p, m, v)
    if order is None:  # not a plain F/B schedule: the full simulator
        sched = make_schedule("interleaved" if v > 1 else schedule, p, m, v)
        return simulate(sched, t_f=lambda a: f[a.stage], t_b=lambda a: b[a.stage]).makespan
    return makespan(order, p, f, b)


def pipeline_makespan(p: int, m: int, v: int, f, b, schedule: str = "1f1b") -> float:
    """Makespan of 1F1B (v = 1), interleaved 1F1B (v chunks per rank) or GPipe with m micro-batches,
    from :func:`minipar.pp.schedules.simulate`: ``f[k]``, ``b[k]`` the forward and backward time of
    virtual stage k (p·v of them; a number: every stage alike), in any unit.

    For m > 3p the schedule is simulated at m₁ = 2p and m₂ = 3p and extended linearly: in the steady
    state every extra micro-batch adds exactly the same time (``tests/test_perf_model.py`` checks the
    extension against the full simulation), and never less than the busiest rank's work for one micro-batch
    (uneven chunks under interleaving may not be steady by 3p: a slope below it would make the bubble negative).
    Keeps ``python -m minipar.plan`` under a few seconds.
    """
    S = p * v
    f = tuple(f) if isinstance(f, (list, tuple)) else (float(f),) * S
    b = tuple(b) if isinstance(b, (list, tuple)) else (float(b),) * S
    if m <= 3 * p:
        return _simulated(p, m, v, f, b, schedule)
    m1, m2 = 2 * p, 3 * p
    t1, t2 = _simulated(p, m1, v, f, b, schedule), _simulated(p, m2, v, f, b, schedule)
    busiest = max(sum(f[k] + b[k] for k in range(r, S, p)) for r in range(p))  # a rank's work per micro-batch
    return t2 + max((t2 - t1) / (m2 - m1), busiest) * (m - m2)


def _pipeline_megatron(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Per-term seconds of the pipeline, megatron counts: per-layer FLOPs, per-stage times, the simulated schedule."""
    t, p, b, v, c, L = layout.tp, layout.pp, layout.micro_batch, layout.v, layout.cp, _links(dev, layout)
    bpv, sp, s = dev.bytes_per_value, layout.seq_parallel, model.seq // c  # this rank's tokens of each sequence
    kinds = [(block_terms(view, dev, layout), n) for view, n in layout.chunk_kinds(model)]  # each kind's block, chunks
    eff = dev.peak_flops * dev.gemm_efficiency * dev.compute_share  # the large GEMMs' FLOP/s (the logit layer's)
    msg = b * s * model.hidden * bpv  # one activation; 1/t of it crosses nodes with scatter/gather or SP
    p2p = 0.0
    if p > 1 and "pp" not in layout.overlap:
        split = layout.scatter_gather or sp
        p2p = p2p_time(msg / (t if split else 1), L["pp"])
        if layout.scatter_gather and not sp and t > 1:
            p2p += ring_time(t, msg, L["tp"])  # the all-gather over NVLink
    n_mtp = model.mtp_num_layers  # multi-token prediction: as many more passes through the output layer and the loss
    logit = (logit_flops(model, b) * (1 + n_mtp) + n_mtp * 4 * b * s * model.hidden**2) / c / t / eff  # + projections
    loss = (1 + n_mtp) * dev.loss_bytes * b * s * model.vocab / t / dev.hbm_bw if dev.hbm_bw else 0.0
    S, rc = p * v, layout.recomputed_layers(model.layers)  # model chunks; of each one's blocks, those recomputed
    split, before = [], [0] * S  # each kind: its block's terms, its blocks per chunk and of them recomputed
    for x, counts in kinds:  # a chunk's first blocks are the first kind's (dense_layers), recomputed first
        split.append((x, counts, [max(0, min(n, rc[k] - before[k])) for k, n in enumerate(counts)]))
        before = [a + n for a, n in zip(before, counts)]
    lf = [
        sum(n[k] * (x["f"] + x["tp_f"] + x["cp_f"] + x["ep_f"] + x["pad_f"]) for x, n, _ in split) + p2p
        for k in range(S)
    ]
    lb = [
        sum(
            (n[k] - r[k]) * (x["b0"] + x["tp_b0"] + x["cp_b"] + x["ep_b0"])
            + r[k] * (x["b"] + x["tp_b"] + x["cp_b"] + x["ep_b"])
            + n[k] * x["pad_b"]
            for x, n, r in split
        )
        + p2p
        for k in range(S)
    ]
    lf[-1], lb[-1] = lf[-1] + logit + loss, lb[-1] + 2 * logit  # the logit layer and the loss: the last stage
    if p == 1:
        pipe = m * (lf[0] + lb[0])
    else:
        unit = max(lf)
        rel = lambda xs: tuple(round(x / unit, 4) for x in xs)  # noqa: E731 (4 digits: the cache stays small)
        pipe = pipeline_makespan(p, m, v, rel(lf), rel(lb), layout.schedule) * unit
    rank = max(range(p), key=lambda r: sum(lf[k] + lb[k] for k in range(r, S, p)))
    mine = list(range(rank, S, p))  # the busiest rank's chunks
    busy = m * sum(lf[k] + lb[k] for k in mine)
    per = [(x, sum(n[k] for k in mine) - sum(r[k] for k in mine), sum(r[k] for k in mine)) for x, n, r in split]
    moe = any(x["moe"] for x, _ in kinds)  # (x, blocks not recomputed n_0, recomputed n_r) on that rank, per kind
    ep = {
        "ep": sum(m * n_0 * (x["ep_f"] + x["ep_b0"]) + m * n_r * (x["ep_f"] + x["ep_b"]) for x, n_0, n_r in per),
        "host": sum(m * (n_0 + n_r) * x["pad"] for x, n_0, n_r in per),
    }
    return {
        "compute": m
        * (
            sum(n_0 * (x["f"] + x["b0"]) + n_r * (x["f"] + x["b"]) for x, n_0, n_r in per)
            + (3 * logit + loss if rank == p - 1 else 0.0)
        ),
        "tp": sum(m * n_0 * (x["tp_f"] + x["tp_b0"]) + m * n_r * (x["tp_f"] + x["tp_b"]) for x, n_0, n_r in per),
        "cp": sum(m * (n_0 + n_r) * (x["cp_f"] + x["cp_b"]) for x, n_0, n_r in per),
        **(ep if moe else {}),
        "pp": m * len(mine) * 2 * p2p,
        "bubble": pipe - busy,
        "pipe": pipe,
        "busy": busy,
        "fwd1": sum(lf[k] for k in mine),  # one micro-batch's forward / backward on the busiest rank
        "bwd1": sum(lb[k] for k in mine),
    }


def _pipeline_minipar(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Per-term seconds of the pipeline, minipar counts: GPT.flops_per_token, uniform stages."""
    from minipar.pp.stages import partition_layers  # imports torch: only the CPU counts need it

    t, p, b = layout.tp, layout.pp, layout.micro_batch
    s, h = model.seq, model.hidden
    layers = max(hi - lo for lo, hi in partition_layers(model.layers, p))
    msg = b * s * h * dev.bytes_per_value  # one activation (b, s, h)
    t_c = (
        gpt_flops_per_token(model) * b * s * (layers / model.layers) / t / dev.peak_flops + layers * dev.layer_overhead
    ) / dev.compute_share
    if layout.recompute == "full":
        t_c *= 4 / 3  # forward + backward = 3 forwards, plus one
    L = _links(dev, layout)
    t_tp = (4 * layers + 2) * all_reduce_time(t, msg, L["tp"])
    t_pp = 2 * p2p_time(msg, L["pp"]) if p > 1 else 0.0
    stage = t_c + t_tp + t_pp
    return {
        "compute": m * t_c,
        "tp": m * t_tp,
        "cp": 0.0,
        "pp": m * t_pp,
        "bubble": (p - 1) * stage,
        "pipe": (m + p - 1) * stage,
        "busy": m * stage,
        "fwd1": t_c / 3,
        "bwd1": 2 * t_c / 3,
    }


def estimate(model: ModelShape, dev: Device, layout: Layout, global_batch: int) -> Estimate:
    """Step time (s), TFLOP/s per device, MFU and memory per device (bytes) of one layout (a MODEL;
    every term in the module doc; ``dev.counts`` picks the megatron or minipar counts).

    Raises:
        ConfigError: a degree that does not divide the model or the batch (the message names it).
    """
    m = check_layout(model, layout, global_batch, dev.counts)
    gemm_rate(dev, layout)  # fp8 on a device without FP8: refused before any work
    pipeline = _pipeline_megatron if dev.counts == "megatron" else _pipeline_minipar
    time = pipeline(model, dev, layout, m)
    pipe, _, fwd1, bwd1 = (time.pop(k) for k in ("pipe", "busy", "fwd1", "bwd1"))
    dp_t = dp_time(model, dev, layout, m, fwd1, bwd1)
    psi, psi_e = stage_psi(model, dev, layout)  # experts (psi_e): ZeRO over the expert-dp ranks, shard/ep
    n_opt = layout.shard if layout.zero else 1
    opt_t = (32 * psi / n_opt / dev.hbm_bw) if dev.hbm_bw and not layout.offload else 0.0
    opt_t += (
        (32 * psi_e / max(1, n_opt // layout.ep) / dev.hbm_bw) if psi_e and dev.hbm_bw and not layout.offload else 0.0
    )
    host_t = 2 * dev.bytes_per_value * (psi + psi_e) / dev.host_bw if layout.offload else 0.0
    time.update(dp=dp_t, optimizer=opt_t, offload=host_t, total=pipe + dp_t + opt_t + host_t)
    mem = memory_per_gpu(model, dev, layout, m)
    n, total = layout.gpus, time["total"]
    rc = None if layout.recompute_layers is None else sum(layout.recomputed_layers(model.layers))
    executed = training_flops(model, global_batch, base_recompute(layout), layout.flash_attention, rc)
    executed += extra_flops(model, global_batch, layout)  # Megatron-Core's moe module: the experts' forward again
    return Estimate(
        layout,
        m,
        time,
        mem,
        mem["total"] <= dev.usable_mem * dev.mem_bytes,
        executed / total / n / 1e12,
        training_flops(model, global_batch) / total / n / dev.peak_flops,
        across_nodes(dev, layout.tp, 1) and dev.inter != dev.intra,
    )
