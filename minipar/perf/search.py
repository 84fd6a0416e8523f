"""Search the layouts with the performance model: enumerate, estimate, reject, rank; and score a ranking.

:func:`plan` answers "which (dp, tp, pp, cp, b, v, ZeRO, recompute; ep with experts) for N devices?" with
:func:`minipar.perf.model.estimate` on every valid layout (``python -m minipar.plan`` prints it);
:func:`rank_correlation` says how well a model's ordering of layouts matches a measured one
(lesson 07 checks the model against every factorization of 8 ranks on this CPU).
"""

from __future__ import annotations

import itertools
import math

from minipar.errors import ConfigError
from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate, Layout
from minipar.perf.layout_checks import check_layout, edge_splits, ep_pool, flexible_splits
from minipar.perf.memory import memory_per_gpu
from minipar.perf.model import estimate
from minipar.perf.shape import ModelShape
from minipar.runtime.mesh import divisors

CP_MIN_TOKENS = 4096  # tokens each context-parallel rank keeps, at least, in the default search (ASSUMED)


def cp_degrees(model: ModelShape, dev: Device, gpus: int) -> list[int]:
    """Context-parallel degrees the search tries by default: 1, and every c > 1 dividing ``gpus`` that
    splits the sequence into 2·c load-balanced chunks (Megatron-LM's causal split; Llama 3,
    arXiv:2407.21783, §3.3.2) and leaves each rank at least :data:`CP_MIN_TOKENS` tokens (ASSUMED: a
    rule that keeps the search small; Llama 3 kept 8,192 per rank at 128K). GPU counts only (minipar's
    GPT has no CP): [1] for the CPU counts."""
    if dev.counts != "megatron":
        return [1]
    return [c for c in divisors(gpus) if c == 1 or (model.seq % (2 * c) == 0 and model.seq // c >= CP_MIN_TOKENS)]


def ep_degrees(model: ModelShape, dp: int, eps=None, tp: int = 1, cp: int = 1, etp: int | None = None) -> list[int]:
    """Expert-parallel degrees the search tries at data-parallel degree ``dp``: those of ``eps`` (None: every
    divisor of the pool) that divide the pool (:func:`minipar.perf.layout_checks.ep_pool`: dp, or tp·cp·dp/etp with the
    experts' mesh folded) and ``model.experts`` (whole experts per rank); [1] for a dense model."""
    if not model.experts:
        return [1]
    pool = ep_pool(dp, tp, cp, etp)
    return [e for e in (divisors(pool) if eps is None else eps) if pool % e == 0 and model.experts % e == 0]


def expert_tps(model: ModelShape, dev: Device, tp: int, etp: int | None) -> tuple[int | None, ...]:
    """The experts' TP degrees (``Layout.etp``) the search tries at tensor-parallel degree ``tp``: ``etp`` where given
    (one a layout's tp must be a multiple of); by default, for a model with experts on a GPU (Megatron counts), both
    Megatron-Core's default (None: the experts split as the dense MLP, over tp) and expert TP 1 (the experts' mesh
    folded over tp·cp·dp, :func:`minipar.perf.layout_checks.ep_pool`; what Megatron-Bridge's Qwen3 235B-A22B and the
    Mixtral 8x22B recipes set); None only for a dense model, on the CPU or at tp = 1."""
    if etp is not None or not model.experts:
        return (etp,)
    return (None, 1) if tp > 1 and dev.counts == "megatron" else (None,)


def recompute_modes(model: ModelShape, dev: Device) -> tuple[str, ...]:
    """The recomputation modes a search tries: none, selective, full; and ``"op"`` (torchtitan's per-op
    checkpointing, :func:`minipar.perf.flops.op_saved_values`) for a dense model on a GPU under a PyTorch stack
    (``dev.framework`` "pytorch"), where PyTorch's ``create_selective_checkpoint_contexts`` runs it."""
    gpu_pytorch = dev.framework == "pytorch" and dev.counts == "megatron" and not model.experts
    return ("none", "selective", "op", "full") if gpu_pytorch else ("none", "selective", "full")


# Megatron-Core's selective modules the search tries for a model with experts (Layout.recompute_modules): the norms with
# the experts' activation, or with the whole MoE layer, as Megatron-MoE-ModelZoo's Qwen3 235B-A22B runs set them
MOE_MODULE_SETS = (("layernorm", "moe_act"), ("layernorm", "moe"))


def recompute_choices(model: ModelShape, dev: Device, recomputes) -> list[tuple[str, tuple | None]]:
    """(recompute mode, modules) pairs a search tries: each of ``recomputes`` with Megatron-Core's default modules
    (None); for a model with experts under Megatron-Core (``dev.framework`` "megatron") and "selective" among them,
    also :data:`MOE_MODULE_SETS` (:mod:`minipar.perf.recompute_modules`) and, with MLA, DeepSeek-V3's recipe's
    ``mla_up_proj`` (+ ``mlp`` where the first blocks are dense)."""
    out = [(rc, None) for rc in recomputes]
    if model.experts and dev.framework == "megatron" and dev.counts == "megatron" and "selective" in recomputes:
        out += [("selective", mods) for mods in MOE_MODULE_SETS]
        if model.mla:  # DeepSeek-V3's recipe: MLA's up projections, and the dense first blocks' MLP where it has them
            out.append(("selective", ("mla_up_proj", "mlp") if model.dense_layers else ("mla_up_proj",)))
    return out


def plan(
    model: ModelShape,
    dev: Device,
    gpus: int,
    global_batch: int,
    micro_batches=(1, 2, 4, 8),
    recomputes=None,
    zeros=(0, 1, 3),
    vs=(1, 2, 4),
    seq_parallel=True,
    overlap=frozenset(),
    microbatches=None,
    schedule: str = "1f1b",
    offload: bool = False,
    max_bubble: float | None = 0.25,
    flash_attention: bool = False,
    cps=None,
    grad_bytes: int = 4,
    fp8: bool = False,
    eps=None,
    etp: int | None = None,
    dispatcher: str = "alltoall",
    cuda_graphs: tuple | None = None,
    optimizer_dtypes: tuple | None = None,
    fp8_params: bool = False,
) -> list[tuple[Estimate, str]]:
    """Every layout of ``gpus`` devices, why it is rejected ("" if not); best MFU (shortest step) first among the kept.

    A MODEL's ranking (:func:`minipar.perf.model.estimate` per layout), not a measurement.

    Args:
        micro_batches: micro-batch sizes b to try; ``microbatches``: numbers m of micro-batches per
            pipeline instead (b = B/(dp·m), skipped where not whole). ``recomputes`` (None:
            :func:`recompute_modes`; with experts under Megatron-Core "selective" also with
            :data:`MOE_MODULE_SETS`, :func:`recompute_choices`), ``zeros``
            (ZeRO stages, dp > 1 only; ZeRO-3 only with pp = 1: with pipelines FSDP2 keeps the
            weights gathered for the step, ZeRO-1's cost, :func:`minipar.perf.sharding.dp_time`),
            ``vs`` (interleaving, pp > 1 only): the choices tried;
            ``seq_parallel`` (where tp > 1), ``overlap``, ``schedule``, ``offload``, ``flash_attention``,
            ``grad_bytes`` (bytes per gradient element reduced over dp: 4 fp32, 2 bf16), ``fp8`` (the blocks'
            GEMMs in FP8, :func:`minipar.perf.block_time.gemm_rate`): fixed.
            ``cps``: context-parallel degrees (ring attention) to try; None: :func:`cp_degrees` (cp > 1
            only where each rank keeps ≥ :data:`CP_MIN_TOKENS` of the sequence).
        max_bubble: reject a layout whose bubble exceeds this fraction of the step (None: keep).
        eps: expert-parallel degrees to try for a model with experts (``model.experts``), each where it
            divides dp (tp·cp·dp/etp when ``etp`` < tp folds the experts' mesh) and the experts; None: every such
            divisor (ep = 1 included; :func:`ep_degrees`). A dense model: ep = 1 only.
        etp: the experts' TP degree (``Layout.etp``) in every layout of a model with experts; a layout whose tp it
            does not divide is invalid, so skipped. None: both tp (Megatron-Core's default) and 1 on a GPU
            (:func:`expert_tps`). ``dispatcher``: their all-to-all (``Layout.dispatcher``), fixed. ``cuda_graphs``:
            Megatron-Core's CUDA graph scopes (``Layout.cuda_graphs``), fixed. ``optimizer_dtypes``: the
            precision-aware optimizer's (``Layout.optimizer_dtypes``), fixed; its layouts keep ZeRO 1 (Megatron-Core's
            distributed optimizer), or ZeRO 0 where dp is 1. ``fp8_params`` (``Layout.fp8_params``), fixed: ZeRO ≥ 1
            wherever dp·cp > 1.

    Where pp·v does not divide the layers, a GPU layout's chunks are split as Megatron-Core splits them with the
    embedding and / or the loss counted as a block (:func:`edge_splits`: ``first_stage_layers`` /
    ``last_stage_layers``); a GPU layout also tries the balanced flexible layouts (:func:`stage_ends`, MTP blocks
    counted on the last chunk); minipar's CPU counts keep even stages only.

    Rejected (checked in this order; memory first, so layouts that cannot run are not simulated):
    "TP across nodes" (tp > devices per node; a tp group that straddles two nodes because tp does not
    divide the devices per node is kept and costed on the inter-node link), "does not fit" (memory >
    ``usable_mem``), "bubble";
    context-parallel layouts are judged by the same reasons (their memory keeps s/cp tokens per rank,
    their time pays the ring's exposed K/V exchange);
    an invalid combination (:func:`minipar.perf.layout_checks.check_layout`) is skipped, so nothing is raised
    for one; a rejected layout that was not estimated has an empty ``time`` and MFU 0 (across nodes an empty ``mem``
    too, ``fits`` False: its memory is not counted).
    """
    out = []
    recomputes = recompute_modes(model, dev) if recomputes is None else recomputes
    cps = cp_degrees(model, dev, gpus) if cps is None else cps
    # Skipped before any Layout is built, as check_layout would skip them (so a huge --gpus with many divisors
    # answers at once): tp not dividing the heads and hidden size, pp above the layers, dp not dividing the batch.
    tps = [t for t in divisors(gpus) if model.heads % t == 0 and model.hidden % t == 0]
    for tp, cp in ((tp, cp) for tp in tps for cp in cps if gpus % (tp * cp) == 0):
        for pp in (p for p in divisors(gpus // (tp * cp)) if p <= model.layers):
            dp = gpus // (tp * pp * cp)
            if global_batch % dp:
                continue
            if microbatches is None:
                sizes = micro_batches
            else:
                sizes = [global_batch // (dp * m) for m in microbatches if global_batch % (dp * m) == 0]
            zs = [z for z in zeros if (pp == 1 or z != 3) and (not optimizer_dtypes or z in (1, 2))]
            dp1_zero = 1 if fp8_params and cp > 1 else 0  # dp 1: ZeRO 0, or 1 over the cp ranks for FP8 weights
            zs = [z for z in zs if z or not fp8_params] if dp > 1 else [dp1_zero]  # FP8 weights: ZeRO >= 1
            shapes = [(v, ends) for v in (vs if pp > 1 else (1,)) for ends in stage_ends(model, dev, pp, v)]
            experts = [
                (et, ep) for et in expert_tps(model, dev, tp, etp) for ep in ep_degrees(model, dp, eps, tp, cp, et)
            ]
            choices = recompute_choices(model, dev, recomputes)
            for b, (v, (first, last)), (rc, mods), z, (e_tp, ep) in itertools.product(
                sizes, shapes, choices, zs, experts
            ):
                lay = Layout(
                    dp,
                    tp,
                    pp,
                    b,
                    v,
                    z,
                    rc,
                    seq_parallel and tp > 1,
                    offload,
                    overlap,
                    schedule=schedule,
                    cp=cp,
                    flash_attention=flash_attention,
                    recompute_modules=mods,
                    first_stage_layers=first,
                    last_stage_layers=last,
                    grad_bytes=grad_bytes,
                    fp8=fp8,
                    ep=ep,
                    etp=e_tp if model.experts else None,
                    dispatcher=dispatcher if model.experts else "alltoall",
                    cuda_graphs=cuda_graphs,
                    optimizer_dtypes=optimizer_dtypes,
                    fp8_params=fp8_params,
                )
                out.append(_judge(model, dev, lay, global_batch, max_bubble))
    return sorted((x for x in out if x is not None), key=lambda x: (x[1] != "", -x[0].mfu))


def stage_ends(model: ModelShape, dev: Device, pp: int, v: int) -> list[tuple[int | None, int | None]]:
    """(first, last) chunk block counts the search tries at pp · v: Megatron-Core's even or account-for-embedding/loss
    split (:func:`~minipar.perf.layout_checks.edge_splits`); where there is none (DeepSeek-V3's 61 blocks on 8 · 4
    chunks), or the model has MTP blocks to balance on the last chunk, also the balanced flexible layouts
    (:func:`~minipar.perf.layout_checks.flexible_splits`), each once."""
    out = edge_splits(model.layers, pp, v, dev.counts)
    if out and not model.mtp_num_layers:
        return out
    return out + [e for e in flexible_splits(model.layers, pp, v, dev.counts, model.mtp_num_layers) if e not in out]


def _judge(model: ModelShape, dev: Device, lay: Layout, global_batch: int, max_bubble) -> tuple[Estimate, str] | None:
    """(estimate, why rejected or "") of one layout; None if it is invalid."""
    try:
        m = check_layout(model, lay, global_batch, dev.counts)
    except ConfigError:
        return None
    if lay.tp > dev.gpus_per_node:  # neither its memory nor its time modelled: empty dicts
        return Estimate(lay, m, {}, {}, False, 0.0, 0.0, True), "TP across nodes"
    mem = memory_per_gpu(model, dev, lay, m)
    usable = dev.usable_mem * dev.mem_bytes
    if mem["total"] > usable:
        gb = f"{mem['total'] / 2**30:.0f} GiB > {dev.usable_mem:.0%} of {dev.mem_bytes / 2**30:.0f} GiB"
        return Estimate(lay, m, {}, mem, False, 0.0, 0.0), f"does not fit ({gb})"
    e = estimate(model, dev, lay, global_batch)
    if max_bubble is not None and e.time["bubble"] > max_bubble * e.time["total"]:
        return e, f"bubble {e.time['bubble'] / e.time['total']:.0%} of the step"
    return e, ""


def rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's ρ: the Pearson correlation of the ranks of ``a`` and ``b`` (ties get the mean rank).

    1 = the model orders the layouts exactly as the measurement does; 0 = no relation (also
    returned when either list is constant).
    """

    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else 0.0
