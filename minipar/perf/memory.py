"""Memory per device of one layout (a MODEL, :mod:`minipar.perf.model`): states by ZeRO's formula (unsharded
gradients at their reduction dtype, as Megatron-LM keeps them),
activations by Korthikanti et al.'s counts held as long as the pipeline schedule holds them.

Units: bytes. Sources per function.
"""

from __future__ import annotations

import functools

from minipar.perf.flops import activation_bytes_per_layer, fp8_saved_bytes, head_params, stage_params
from minipar.perf.hardware import Device
from minipar.perf.layout import Layout
from minipar.perf.moe import moe_activation_bytes, moe_fp8_saved_bytes, moe_stage_params
from minipar.perf.recompute_modules import base_recompute, freed_bytes, modules
from minipar.perf.shape import ModelShape
from minipar.pp.schedules import make_schedule
from minipar.zero.formula import zero_bytes_formula


def stage_layers_of(model: ModelShape, layout: Layout, dev: Device):
    """Blocks per pipeline rank under the megatron counts (:meth:`Layout.stage_layers`); None for minipar's."""
    return layout.stage_layers(model.layers) if dev.counts == "megatron" else None


@functools.lru_cache(maxsize=1024)
def held_layers(p: int, m: int, v: int, schedule: str, chunks: tuple) -> tuple:
    """Per rank, the most blocks' activations it holds at once: the peak, along that rank's actions in
    the real schedule (:func:`minipar.pp.schedules.make_schedule`: 1F1B, interleaved 1F1B if v > 1, or
    GPipe), of Σ ``chunks[stage]`` over the forwards whose backward has not run yet (one micro-batch
    each). Uniform chunks give Narayanan et al. 2021 §4.2.3: min(p − i, m)·l/p on stage i under 1F1B,
    l·(1 + (p − 1)/(p·v)) on rank 0 interleaved; uneven chunks count each chunk's own blocks. The peak
    is reached in the warm-up, so m is capped at 3p (GPipe: m·layers, no cap). Units: blocks (× one
    micro-batch's activations of one block, :func:`~minipar.perf.flops.activation_bytes_per_layer`).

    Raises:
        ConfigError: from :func:`~minipar.pp.schedules.make_schedule` (e.g. interleaving with m not a
            multiple of p).
    """
    if schedule == "gpipe" and v == 1:
        return tuple(m * chunks[r] for r in range(p))
    sched = _schedule("interleaved" if v > 1 else schedule, p, min(m, 3 * p), v)
    out = []
    for acts in sched:
        held = peak = 0.0
        for a in acts:
            held += chunks[a.stage] if a.kind == "F" else -chunks[a.stage]
            peak = max(peak, held)
        out.append(peak)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _schedule(kind: str, p: int, m: int, v: int) -> tuple:
    """:func:`~minipar.pp.schedules.make_schedule`'s actions per rank, kept (read only here): :func:`held_layers` asks
    the same (p, m, v) for chunks of many byte counts."""
    return tuple(tuple(acts) for acts in make_schedule(kind, p, m, v))


def logit_bytes(model: ModelShape, b: float, tp: int, cp: int = 1) -> float:
    """Bytes of one micro-batch's logits the loss keeps, on the last pipeline stage: 4·s·b·V/t (Korthikanti et al.
    2022, arXiv:2205.05198, §4.3: "cross entropy loss ... stores logits in 32-bit"; the vocabulary split over TP, the
    sequence over CP). Its 1F1B backward follows its forward at once there, so one micro-batch's. Other stacks
    differ, not modelled: llm-foundry's default fused loss keeps the bf16 logits (2 bytes; ``loss_fn:
    fused_crossentropy``, llmfoundry/models/mpt/modeling_mpt.py at 3e5b960); torchtitan's ``cross_entropy`` on
    ``pred.float()`` holds the bf16 logits, an fp32 copy and log-softmax's fp32 output at the loss (10 bytes;
    train.py at 9dec370). A fixed 4 is ASSUMED for every framework."""
    return 4 * (model.seq // cp) * b * model.vocab / tp


def _states(psi: float, zero: int, shard: int, bpv: int, grad_bytes: int, opt_bytes: int = 12) -> dict:
    """Model-state bytes of ``psi`` parameters: ZeRO's formula, but unsharded gradients (ZeRO 0 and 1) held at
    ``grad_bytes`` each under mixed precision: Megatron-LM's fp32 main-gradient buffers, "bf16 param, fp32 grads:
    18" bytes per parameter and "6 + 12/d" with its distributed optimizer (Megatron-LM README, "Distributed
    Optimizer"), where ZeRO's formula counts 16 and 4 + 12/d (2-byte gradients); ``opt_bytes`` of optimizer state
    per parameter for ZeRO's 12 under mixed precision (``Layout.optimizer_bytes``)."""
    states = zero_bytes_formula(psi, zero, shard, mixed_precision=bpv == 2)
    if bpv == 2 and opt_bytes != 12:
        states["optimizer"] *= opt_bytes / 12
    if bpv == 2 and zero < 2:
        states["grads"] = grad_bytes * psi
    states["total"] = states["params"] + states["grads"] + states["optimizer"]
    return states


FP8_WEIGHT_BYTES = 2  # an FP8 weight as Transformer Engine keeps it: its FP8 data and their transpose, 1 byte each


def fp8_weight_bytes(model: ModelShape, dev: Device, layout: Layout, params, experts) -> list[float]:
    """Bytes per pipeline rank that FP8 training adds to the weights (``params``, ``experts``: that rank's dense
    and expert parameters) under Megatron-Core with Transformer Engine (``layout.fp8``, ``dev.framework``
    "megatron"; 0 otherwise: torchao's Float8Linear casts a weight for each GEMM and keeps no copy).

    TE casts each block weight (its Linear and GroupedLinear modules: QKV, projections, MLPs, experts) to FP8 once per
    step and keeps the FP8 data and its transpose (Hopper's FP8 GEMMs take one operand layout, so the backward
    needs Wᵀ in FP8 too) for the step's other micro-batches: ``get_fp8_workspace(cache_name="weight")``, cached
    whenever Megatron-Core passes ``is_first_microbatch`` (its default, without
    ``--disable-parameter-transpose-cache``): :data:`FP8_WEIGHT_BYTES` per weight beside the bf16 one. With
    ``layout.fp8_params`` (Megatron-LM's ``--fp8-param-gather``, NeMo's ``fp8_params``) the weight itself is an
    FP8 tensor with a transpose cache (``Float8Tensor.to_float8(..., with_transpose_cache=True)``): the same bytes in
    place of the bf16 weight's. The embedding and output layer stay bf16 (:func:`~minipar.perf.flops.head_params`);
    the blocks' norms and routers, not TE's GEMMs, are counted with them (under 1 % of a rank's block weights on every
    published row; DeepSeek-V3's 256-expert router 0.6 %). Under ZeRO-3 with pp = 1 the copies shard as the weights do
    (TE scatters its cached FP8 workspace over an FSDP group, ``_fsdp_scatter_tensors``; ASSUMED for Megatron-FSDP).
    Sources: TransformerEngine v1.13 ``transformer_engine/pytorch/module/base.py`` (``get_fp8_workspace``,
    ``reset_parameters``) and ``module/linear.py`` (v2.7 alike: the cached weight quantized for both row-wise and
    column-wise use); Megatron-LM core_r0.10.0 ``megatron/core/extensions/transformer_engine.py``
    (``TELinear.forward``)."""
    if not (layout.fp8 and dev.framework == "megatron"):
        return [0.0] * layout.pp
    per_weight = FP8_WEIGHT_BYTES - (dev.bytes_per_value if layout.fp8_params else 0)
    heads = head_params(model, layout.pp, layout.tp)
    sharded = layout.zero == 3 and layout.pp == 1  # ZeRO-3's weights: sharded between their passes, so their copies
    d, d_e = (layout.shard, layout.expert_shard) if sharded else (1, 1)
    return [per_weight * ((q - head) / d + e / d_e) for q, head, e in zip(params, heads, experts)]


def memory_per_gpu(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Bytes per device of the busiest pipeline rank: params, grads, optimizer (ZeRO's formula over the
    dp·cp ranks that hold the same weights; Rajbhandari et al. 2020, arXiv:1910.02054; unsharded gradients at
    ``layout.grad_bytes``, Megatron-LM's fp32 main gradients: :func:`_states`), activations
    (:func:`~minipar.perf.flops.activation_bytes_per_layer` × :func:`held_layers`, each model chunk
    with its own block count; full recomputation adds the one block being recomputed; the last stage the
    loss's fp32 logits, :func:`logit_bytes`; with ``recompute_layers`` each chunk's recomputed blocks keep their
    input and its others every activation),
    total (all on the device) and host (offloaded optimizer state). ZeRO shards over
    :attr:`~minipar.perf.layout.Layout.shard` ranks (dp·cp, or hsdp·cp); ZeRO-3 with pp > 1 keeps a
    stage's weights and gradients unsharded from its first forward to the step's one reduce-scatter
    (FSDP2 under pipelining, :func:`minipar.perf.sharding.dp_time`): ZeRO-1's bytes; ``hpz`` = N adds the weights'
    secondary partition, bytes_per_value·psi/(N·cp) (:func:`minipar.perf.sharding.secondary_gather`). With experts
    (:mod:`minipar.perf.moe`) the expert states shard over the shard·/ep expert-dp ranks, and each block keeps
    :func:`~minipar.perf.moe.moe_activation_bytes`. FP8 (``layout.fp8``) under Megatron-Core (``dev.framework``): each
    weight GEMM's saved input in 1 byte (:func:`~minipar.perf.flops.fp8_saved_bytes`; with experts
    :func:`~minipar.perf.moe.moe_fp8_saved_bytes`), and the weights' FP8 copies (:func:`fp8_weight_bytes`).
    Megatron-Core's recomputed modules free what :func:`~minipar.perf.recompute_modules.freed_bytes` says in every held
    block but the one being recomputed.
    Raises ConfigError for an invalid layout."""

    t, p, b, v, c = layout.tp, layout.pp, layout.micro_batch, layout.v, layout.cp
    bpv, flash, sp = dev.bytes_per_value, layout.flash_attention, layout.seq_parallel
    layers = stage_layers_of(model, layout, dev)
    params = stage_params(model, p, t, dev.counts, layers)
    experts = [0.0] * p  # expert parameters per stage (minipar.perf.moe): ZeRO over the expert-dp ranks
    if model.experts:
        params, experts = zip(*moe_stage_params(model, layout, layers))
    fp8_inputs = layout.fp8 and dev.framework == "megatron"  # TE keeps GEMM inputs in FP8

    def act_bytes(model, rc):  # one block of this shape (dense, or with experts), one micro-batch, GEMM inputs in FP8
        kept, saved = activation_bytes_per_layer, fp8_saved_bytes
        if model.experts:
            kept, saved = moe_activation_bytes, moe_fp8_saved_bytes
        e = (layout.expert_tp,) if model.experts else ()  # the dispatched rows: gathered over the experts' TP group
        return kept(model, b, t, rc, sp, bpv, flash, c, *e) - (saved(model, b, t, rc, sp, c, *e) if fp8_inputs else 0)

    mods = modules(layout)  # Megatron-Core's selective modules (minipar.perf.recompute_modules): what they free
    kinds = layout.chunk_kinds(model) if dev.counts == "megatron" else [(model, None)]  # dense_layers: two kinds
    freed = [freed_bytes(view, b, t, sp, bpv, c, fp8_inputs, mods, layout.expert_tp) for view, _ in kinds]
    per = [act_bytes(view, base_recompute(layout)) - f for (view, _), f in zip(kinds, freed)]  # bytes per block
    none = [act_bytes(view, "none") for view, _ in kinds]  # a block keeping everything
    if dev.counts == "megatron":  # each chunk's blocks, the last one's multi-token-prediction blocks too
        chunks = tuple(sum(per_kind) for per_kind in zip(*(counts for _, counts in kinds)))
    else:  # minipar's partition: ⌈l/p⌉ blocks on the busiest stage
        chunks = (-(-model.layers // p) / v,) * (p * v)
    rc = layout.recomputed_layers(model.layers)
    if len(kinds) == 1 and layout.recompute_layers is None:  # every block alike: held blocks × one block's bytes
        held, per_layer = held_layers(p, m, v, layout.schedule, chunks), per[0]
    else:  # per chunk, in bytes: each kind's blocks (recomputed ones keep their input, the others all), first first
        weights, before = [0.0] * len(chunks), [0] * len(chunks)
        for (_, counts), pb, nb in zip(kinds, per, none):
            for k, n in enumerate(counts or chunks):
                r = max(0, min(n, rc[k] - before[k])) if layout.recompute_layers is not None else n
                weights[k], before[k] = weights[k] + r * pb + (n - r) * nb, before[k] + n
        held, per_layer = held_layers(p, m, v, layout.schedule, tuple(weights)), 1.0  # held is in bytes now
    freed = max(freed)  # the block whose modules are being recomputed: the largest kind's, ASSUMED on every rank
    zero = 1 if layout.zero == 3 and p > 1 else layout.zero  # FSDP2 + pipelining: unsharded through the step
    best = None
    k = layout.optimizer_bytes  # optimizer state per parameter: 12, or the precision-aware optimizer's dtypes
    dense_1 = _states(1.0, zero, layout.shard, bpv, layout.grad_bytes, k)  # bytes of one parameter (linear in Ψ)
    expert_1 = _states(1.0, zero, layout.expert_shard, bpv, layout.grad_bytes, k) if any(experts) else dense_1
    fp8_copies = fp8_weight_bytes(model, dev, layout, params, experts)  # FP8 weights' bytes (0 without FP8)
    for i in range(p):
        states = {k: params[i] * x + experts[i] * expert_1[k] for k, x in dense_1.items()}
        states["params"] += fp8_copies[i]
        if layout.hpz is not None:  # hpZ's secondary partition of the 16-bit weights, kept from forward to backward
            states["params"] += bpv * params[i] / (layout.hpz * c)
        opt = 0.0 if layout.offload else states["optimizer"]
        acts = held[i] * per_layer
        if layout.recompute == "full":  # the layer being recomputed holds its full activations
            acts += max(none)
        acts += freed  # the block whose modules are being recomputed holds what they freed again
        if i == p - 1:  # the loss: one micro-batch's logits (logit_bytes)
            acts += (1 + model.mtp_num_layers) * logit_bytes(model, b, t, c)
        mem = {"params": states["params"], "grads": states["grads"], "optimizer": opt, "activations": acts}
        mem["total"] = sum(mem.values())
        mem["host"] = states["optimizer"] if layout.offload else 0
        if best is None or mem["total"] > best["total"]:
            best = mem
    return best
