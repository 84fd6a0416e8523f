"""Which link each parallel group runs on, and the data-parallel / ZeRO / HSDP communication of one step
(a MODEL, :mod:`minipar.perf.model`). Units: seconds; (α, β) pairs as :mod:`minipar.comm.cost` reads them.

Rank order (innermost first): tp, cp, dp, pp (Megatron-LM's); with hybrid sharding (``Layout.hsdp`` = H)
dp splits into a shard group of H consecutive dp ranks inside dp/H replicas (PyTorch FSDP2's HSDP on a 2-D
mesh ``(replicate, shard)``; torchtitan's ``dp_replicate × dp_shard``, ``dp_shard`` inner).
"""

from __future__ import annotations

import math

from minipar.comm.cost import all_reduce_time, ring_time
from minipar.perf.flops import head_params, stage_params
from minipar.perf.hardware import Device
from minipar.perf.layout import Layout
from minipar.perf.memory import stage_layers_of
from minipar.perf.moe import moe_stage_params
from minipar.perf.placement import across_nodes, members_per_node  # noqa: F401  (read here and by perf.model)
from minipar.perf.shape import ModelShape
from minipar.perf.timeline import overlap_formula

BUCKET_PARAMS = 40e6  # gradients per DP bucket: Megatron-LM's DistributedDataParallelConfig default (max(40M, 1M·dp))


def group_link(dev: Device, size: int, stride: int, collective: bool = True) -> tuple:
    """(α, β) of a group of ``size`` ranks ``stride`` apart in Megatron's rank order (tp, cp, dp, pp
    innermost first). Its block of size·stride consecutive ranks is inside one node only if it fits and the
    node holds a whole number of blocks: NVLink (tp = 3, 5, 6, 7 on 8-GPU nodes: a group crosses a node
    boundary). A group across nodes runs its collectives at the inter-node rate times the k members it has
    on each node (the fewest, :func:`members_per_node`), capped by NVLink: every GPU of a DGX/HGX node has
    its own NIC (a "rail"), and NCCL splits a collective over channels that leave the node through
    different NICs, each ring crossing between nodes once, so a group with all 8 GPUs of each node on it
    reaches the node's 8 NICs together (nccl-tests on 2 nodes of 8 H100s with 8x NDR 400 Gb/s: ~370-470
    GB/s bus bandwidth, 46-48 GB/s per NIC, NVIDIA/nccl-tests issues #290 and #309; 4 HDR NICs for 8 A100s:
    ~100 GB/s "theoretical 200G x 4 / 8", #119). ``collective=False``: one NIC, k = 1, for a send between two
    stages and for an all-to-all (every GPU sends its own bytes to the other nodes, through its own NIC).
    The latency per ring step, α, is the mean over the ring: of every k steps, k − 1 run on NVLink and one crosses
    the network. NCCL's own cost model charges a ring all-gather or reduce-scatter (nsteps − nInterSteps)·intraLat
    + nInterSteps·interLat, with nInterSteps = nNodes − 1 (src/graph/tuning.cc; its Ring/Simple figures: 3.4 µs
    per NVLink step, 14 µs per network step, around this model's ASSUMED 5 and 10 µs)."""
    if not across_nodes(dev, size, stride):
        return dev.intra
    k = members_per_node(size, stride, dev.gpus_per_node) if collective else 1
    alpha = ((k - 1) * dev.intra[0] + dev.inter[0]) / k  # k - 1 NVLink steps per network step
    return (alpha, min(k * dev.inter[1], max(dev.inter[1], dev.intra[1])))


def links(dev: Device, lay: Layout) -> dict:
    """(α, β) of the TP, CP, DP (over dp·cp ranks) and PP groups (:func:`group_link`); with ``hsdp`` = H
    also ``"shard"`` (H·cp ranks, stride tp: inside a node when H·cp·tp divides the node) and
    ``"replicate"`` (dp/H ranks, stride tp·cp·H: across nodes unless the whole dp·cp·tp fits in one); with ``hpz`` = N
    also ``"secondary"`` (N·cp ranks, stride tp: hpZ's secondary group, inside a node when N·cp·tp divides it)."""
    t, c, d, p = lay.tp, lay.cp, lay.dp, lay.pp
    out = {
        "tp": group_link(dev, t, 1),
        "cp": group_link(dev, c, t),
        "dp": group_link(dev, d * c, t),
        "pp": group_link(dev, p, t * c * d, collective=False),
    }
    if lay.hsdp is not None:
        out["shard"] = group_link(dev, lay.hsdp * c, t)
        out["replicate"] = group_link(dev, d // lay.hsdp, t * c * lay.hsdp)
    if lay.hpz is not None:  # hpZ's secondary group: hpz·cp consecutive ranks of the dp·cp group
        out["secondary"] = group_link(dev, lay.hpz * c, t)
    e = lay.expert_tp
    if lay.ep > 1 and e == t:  # ep consecutive dp ranks; the expert-dp group: dp/ep ranks ep apart (its cp inside)
        out["ep"] = group_link(dev, lay.ep, t * c, collective=False)  # all-to-all: each GPU's bytes on its own NIC
        out["edp"] = group_link(dev, d // lay.ep, t * c * lay.ep) if d > lay.ep else group_link(dev, c, t)
    elif e != t:  # folded (Layout.etp < tp): ep ranks etp apart; the expert-dp group etp·ep apart
        out["ep"] = group_link(dev, lay.ep, e, collective=False)
        out["edp"] = group_link(dev, lay.expert_shard, e * lay.ep)
    return out


def _stages(model: ModelShape, dev: Device, layout: Layout) -> list[tuple[float, float]]:
    """(dense, expert) parameters one rank of each pipeline stage holds (its TP and EP share): :func:`stage_params`
    and 0 for a dense model, :func:`minipar.perf.moe.moe_stage_params` with experts."""
    layers = stage_layers_of(model, layout, dev)
    if not model.experts:
        return [(q, 0.0) for q in stage_params(model, layout.pp, layout.tp, dev.counts, layers)]
    return moe_stage_params(model, layout, layers)


def _busiest(model: ModelShape, dev: Device, layout: Layout) -> tuple[int, float, float]:
    """(stage, dense, expert parameters) of the busiest pipeline rank: the stage with the most of both
    (:func:`_stages`; the first such)."""
    stages = _stages(model, dev, layout)
    i = max(range(len(stages)), key=lambda j: sum(stages[j]))
    return (i, *stages[i])


def stage_psi(model: ModelShape, dev: Device, layout: Layout) -> tuple[float, float]:
    """(dense, expert) parameters of the busiest pipeline rank (its TP and EP share): :func:`_busiest`'s."""
    return _busiest(model, dev, layout)[1:]


def gather_bytes(model: ModelShape, dev: Device, layout: Layout) -> tuple[float, float]:
    """(dense, expert) bytes of one all-gather of the busiest rank's weights (ZeRO ≥ 1): ``dev.bytes_per_value``
    each; with ``layout.fp8_params`` (and fp8) the blocks' weights 1 byte each, the embedding and output layer
    (:func:`~minipar.perf.flops.head_params`) still 16-bit. Megatron-LM's ``--fp8-param-gather``: "Keep the compute
    param in fp8 ... and perform the param all-gather in fp8" (megatron/training/arguments.py, core_v0.13.0); under
    FSDP2 torchao's ``enable_fsdp_float8_all_gather``. The FP8 casts are not timed either way (without fp8_params
    Transformer Engine casts each weight once per step, with them the optimizer writes FP8 weights; ASSUMED alike)."""
    b = dev.bytes_per_value
    i, psi, psi_e = _busiest(model, dev, layout)
    if not (layout.fp8 and layout.fp8_params):
        return b * psi, b * psi_e
    head = head_params(model, layout.pp, layout.tp)[i] if dev.counts == "megatron" else 0.0
    return b * head + (psi - head), psi_e


def _expert_reduce_and_gather(
    dev: Device, layout: Layout, psi_e: float, k: int = 1, gathered: float | None = None
) -> tuple[float, float]:
    """:func:`_reduce_and_gather` of ``psi_e`` expert parameters in ``k`` collectives over their expert-data-parallel
    group (:attr:`~minipar.perf.layout.Layout.expert_shard` ranks, link ``"edp"``; :mod:`minipar.perf.moe`)."""
    L = links(dev, layout)
    return _flat(dev, layout, psi_e, layout.expert_shard, L.get("edp", L["dp"]), k, gathered)  # ep 1, etp tp: dp


def _in(k: int, time, n: int, nbytes: float, link) -> float:
    """Seconds of ``time`` (a :mod:`minipar.comm.cost` collective) moving ``nbytes`` on ``n`` ranks in ``k``
    collectives: the bytes once, the ring's latency k times."""
    return time(n, nbytes, link) + (k - 1) * time(n, 0.0, link)


def _flat(dev: Device, layout: Layout, psi: float, n: int, link, k: int, gathered: float | None) -> tuple[float, float]:
    """(reduction, all-gather) seconds of ``psi`` parameters over ``n`` ranks on ``link`` in ``k`` collectives:
    ZeRO 0 an all-reduce and no gather, ZeRO >= 1 a reduce-scatter and an all-gather of the weights, ``gathered``
    bytes (None: the 16-bit weights', bytes_per_value·psi; :func:`gather_bytes`)."""
    z = layout.zero
    grads = _in(k, ring_time if z else all_reduce_time, n, layout.grad_bytes * psi, link)
    gathered = dev.bytes_per_value * psi if gathered is None else gathered
    return grads, _in(k, ring_time, n, gathered, link) if z else 0.0


def _exposed(comm: float, window: float, k: int) -> float:
    """Seconds of ``comm`` not hidden behind ``window`` seconds of compute, in ``k`` equal collectives
    (:func:`collectives`; two streams, :func:`minipar.perf.timeline.overlap_formula`)."""
    return overlap_formula(k, comm / k, window / k) - window


def _reduce_and_gather(
    dev: Device, layout: Layout, psi: float, k: int = 1, gathered: float | None = None
) -> tuple[float, float]:
    """(seconds of the gradients' reduction, seconds of one all-gather of the weights, ``gathered`` bytes; None:
    bytes_per_value·psi) of ``psi`` parameters in ``k`` collectives (:func:`collectives`): the bytes once, the ring
    latency k times. ZeRO 0: an all-reduce over dp·cp; ZeRO ≥ 1: a reduce-scatter and an all-gather over the dp·cp
    ranks; HSDP (``hsdp`` = H): the reduce-scatter and all-gather inside the shard group (H·cp ranks, its own link),
    then an all-reduce of this rank's 1/(H·cp) shard across the dp/H replicas on theirs (PyTorch FSDP2's HSDP:
    ``FSDPParamGroup.post_backward`` reduce-scatters, then all-reduces over the replicate dimension; Megatron-LM's
    ``--num-distributed-optimizer-instances`` the same for ZeRO-1). Under ZeRO-3 with pp = 1 that all-reduce runs in
    every micro-batch's backward, as FSDP2 does unless ``set_requires_all_reduce(False)``
    (torch/distributed/fsdp/_fully_shard/_fully_shard.py)."""
    L = links(dev, layout)
    if layout.hsdp is None:
        return _flat(dev, layout, psi, layout.dp * layout.cp, L["dp"], k, gathered)
    g, s, r = layout.grad_bytes * psi, layout.hsdp * layout.cp, layout.dp // layout.hsdp
    grads = _in(k, ring_time, s, g, L["shard"]) + _in(k, all_reduce_time, r, g / s, L["replicate"])
    return grads, _in(k, ring_time, s, dev.bytes_per_value * psi if gathered is None else gathered, L["shard"])


def collectives(model: ModelShape, dev: Device, layout: Layout, psi: float) -> int:
    """How many collectives one pass of the DP / ZeRO communication of ``psi`` parameters is split into: each
    pays its own ring latency (:func:`_reduce_and_gather`) and they hide one by one (:func:`_exposed`).

    - ZeRO ≥ 2 (FSDP's units): the busiest stage's blocks + 1. PyTorch FSDP and FSDP2 issue one all-gather
      and one reduce-scatter per wrapped unit; llm-foundry wraps each block, torchtitan calls ``fully_shard``
      on each block and then on the root, which holds the embedding, final norm and output layer.
    - ZeRO 0/1 with the reduction hidden (``"dp"`` or ``"grad_reduce"`` in ``overlap``; Megatron-Core's buckets): ⌈psi /
      max(40M, 1M·dp)⌉. Megatron-Core ``DistributedDataParallel`` sets ``bucket_size = max(40000000, 1000000 * dp)`` "to
      ensure that chunks used in NCCL ring-reduce implementations are large enough to remain bandwidth-bound rather than
      latency-bound" (megatron/core/distributed/distributed_data_parallel.py, core_v0.8.0). It turns bucketing off on
      pipeline stages after the first ("data-parallel communication on these stages is not on the critical path"); the
      model times the busiest stage with the first stage's buckets. ASSUMED for every ZeRO 0 layout without
      ``bucket_mb``: PyTorch DDP's own buckets are not modelled.
    - ZeRO 0/1 with the reduction not hidden: 1. Megatron-Core uses one bucket when ``overlap_grad_reduce`` is off.
    - ZeRO 0/1 with ``bucket_mb`` (PyTorch DDP, ``bucket_cap_mb``): ⌈psi · 2 bytes / bucket_mb MiB⌉, overlapped or
      not. DDP's reducer fills each bucket with the parameters' gradients as autograd produces them (16-bit under
      bf16 training, ``dev.bytes_per_value``) and reduces it as one collective (``torch/nn/parallel/distributed.py``:
      ``bucket_cap_mb * 1024 * 1024`` bytes; its first bucket, 1 MiB, not modelled); a communication hook may
      reduce other buffers per bucket (nanotron's fp32 accumulators: :mod:`minipar.perf.nanotron`). The fit set's
      rows with PyTorch DDP (Narayanan Table 1, pp = 1) move by at most 0.2 points with 25 MiB buckets: not set
      there."""
    if layout.zero >= 2:
        layers = stage_layers_of(model, layout, dev)
        return (max(layers) if layers else -(-model.layers // layout.pp)) + 1
    if layout.bucket_mb is not None:
        return max(1, math.ceil(psi * dev.bytes_per_value / (layout.bucket_mb * 2**20)))
    if not layout.hides[0]:
        return 1
    return max(1, math.ceil(psi / max(BUCKET_PARAMS, 1e6 * layout.dp)))


def dp_collectives(model: ModelShape, dev: Device, layout: Layout) -> int:
    """:func:`collectives` of the busiest stage's dense parameters (``--json``'s ``dp_collectives``)."""
    return collectives(model, dev, layout, stage_psi(model, dev, layout)[0])


def dp_time(model: ModelShape, dev: Device, layout: Layout, m: int, fwd1: float, bwd1: float) -> float:
    """Seconds of DP / ZeRO communication left on the step (Rajbhandari et al. 2020, arXiv:1910.02054, §7), over the
    dp·cp ranks that hold the same weights (HSDP: :func:`_reduce_and_gather`). ZeRO 0: an all-reduce of the busiest
    stage's gradients (``grad_bytes`` each); ZeRO 1/2 (Megatron's distributed optimizer): a reduce-scatter of them
    and an all-gather of the 16-bit weights; ZeRO 3 with pp = 1: per micro-batch an all-gather of the weights for
    the forward and one for the backward, and a reduce-scatter of the gradients (DeepSpeed's stage 3; FSDP2's
    default ``reshard_after_forward=True``); ZeRO 3 with pp > 1 (FSDP2 under ``torch.distributed.pipelining``,
    torchtitan's 3-D layout): ONE all-gather and one reduce-scatter per step, as ZeRO 1/2: torchtitan's
    ``apply_fsdp`` sets ``reshard_after_forward = not pp_enabled`` ("to avoid per-microbatch all-gathers";
    torchtitan/models/llama3/infra/parallelize.py) and PyTorch's ``PipelineStage`` turns
    ``set_reshard_after_backward`` and ``set_requires_gradient_sync`` off for every micro-batch, reducing once in
    ``perform_reduce_grad`` (torch/distributed/pipelining/stage.py). With ``"dp"`` in ``overlap`` (``"grad_reduce"``:
    the reduction only, the weights' all-gather exposed; :attr:`~minipar.perf.layout.Layout.hides`) only what can really
    hide is hidden: under gradient accumulation the gradients are final only in the LAST micro-batch's backward
    (``bwd1`` seconds), which hides the reduction collective by collective (:func:`collectives`: Megatron's buckets,
    FSDP's units; the last one is always exposed); the weights' all-gather hides behind the first micro-batch's forward
    (``fwd1``; MegaScale, arXiv:2402.15627, §3.2); ZeRO-3 (pp = 1) per micro-batch behind its own passes (under ``hpz``,
    the backward's all-gather over its secondary group: :func:`secondary_gather`); hiding is not free:
    ``dev.overlap_cost`` of the hidden time stays on the step (:data:`minipar.perf.hardware.OVERLAP_COST`; 0 on the A100
    and under Megatron-Core). With experts (:mod:`minipar.perf.moe`) the expert gradients are reduced (and their weights
    gathered) over the expert-data-parallel group too: :func:`_expert_reduce_and_gather`."""
    z = layout.zero
    psi, psi_e = stage_psi(model, dev, layout)
    wb, wb_e = gather_bytes(model, dev, layout)  # the weights' all-gather: 16-bit, or FP8 with fp8_params
    k = collectives(model, dev, layout, psi)
    grads, gather = _reduce_and_gather(dev, layout, psi, k, wb)
    if psi_e:  # experts: their own reduction over the expert-dp group, after the dense one (not overlapped)
        g_e, a_e = _expert_reduce_and_gather(dev, layout, psi_e, collectives(model, dev, layout, psi_e), wb_e)
        grads, gather, psi = grads + g_e, gather + a_e, psi + psi_e
    hide_r, hide_g = layout.hides  # (the reduction, the all-gather) hidden: Layout.hides
    if z == 3 and layout.pp == 1:
        passes = (2 * m, m)  # (weight all-gathers, gradient reductions) per step
        again = secondary_gather(dev, layout, psi, k, wb) if layout.hpz else gather  # the backward's all-gather
        full = m * (gather + again + grads)
        hidden = (again if hide_g else 0.0) + (grads if hide_r else 0.0)  # the backward's, hidden together
        left = (0.0 if hide_g else again) + (0.0 if hide_r else grads)  # the backward's, not hidden
        shown = m * ((_exposed(gather, fwd1, k) if hide_g else gather) + _exposed(hidden, bwd1, k) + left)
    else:
        passes = (1, 1)
        full = grads + gather
        shown = (_exposed(grads, bwd1, k) if hide_r else grads) + (_exposed(gather, fwd1, k) if hide_g else gather)
    copies = fsdp2_copy_time(dev, layout, psi, *passes)  # psi: dense and expert parameters here
    return shown + dev.overlap_cost * (full - shown) + copies  # what hiding still costs (Device.overlap_cost)


def secondary_gather(dev: Device, layout: Layout, psi: float, k: int, gathered: float | None = None) -> float:
    """Seconds of the backward's all-gather of ``psi`` weights (``gathered`` bytes; None: 16-bit) under ``hpz`` = N, in
    ``k`` collectives: over the N·cp ranks of the secondary group (link ``"secondary"``, :func:`links`), not the dp·cp
    ranks. After each unit's forward, ZeRO++'s hpZ (Wang et al. 2023, arXiv:2306.10209; DeepSpeed's
    ``zero_hpz_partition_size``, "ideal is number of ranks (gpus) per node", docs/_tutorials/zeropp.md) and FSDP2's
    ``reshard_after_forward=N`` keep the gathered weights sharded over N ranks, bytes_per_value·psi/(N·cp) more per GPU
    (:mod:`minipar.perf.memory`), which "allows the all-gather in backward to be over a smaller world size"
    (``fully_shard``'s docstring, torch 2.13). The forward's all-gather and the gradients' reduce-scatter stay on the
    dp·cp group."""
    n = layout.hpz * layout.cp
    nbytes = dev.bytes_per_value * psi if gathered is None else gathered
    return _in(k, ring_time, n, nbytes, links(dev, layout)["secondary"])


# FSDP2's copies run slower than their bytes at Device.hbm_bw: (copy-out, copy-in cast to fp32, copy-in without a cast)
# time over that, the median over three blocks (OLMo 2 7B and 13B, Llama 3 8B; world_size 8) and two runs on one H100
# SXM, MEASURED 2026-11-27 with examples/fsdp2_copy_rate.py (examples/h100_2026-11-27/fsdp2_copies.jsonl and
# fsdp2_copies_2.jsonl, the second with the bf16 copy-in): 1.10-2.01, 1.75-2.16 and 1.22-1.25. ASSUMED the same on
# other devices.
FSDP2_COPY_SLOWDOWN = (1.18, 1.85, 1.22)


def fsdp2_copy_time(dev: Device, layout: Layout, psi: float, gathers: int, reductions: int) -> float:
    """Seconds of HBM copies FSDP2 (``Device.fsdp2``, ``--fsdp2``) adds on the compute stream for ``psi`` parameters
    of a rank under ZeRO >= 2, at ``dev.hbm_bw`` and never hidden: per all-gather the gathered unit copied out of the
    gather buffer into the parameters (read and write, 2·bytes_per_value per parameter), per reduction the gradients
    copied, cast to the reduction dtype, into the reduce-scatter buffer (bytes_per_value + grad_bytes). Source:
    ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` (torch 2.13): ``foreach_all_gather_copy_out`` makes
    the current stream wait for the all-gather, then ``split_with_sizes_copy``; ``foreach_reduce`` runs
    ``foreach_reduce_scatter_copy_in`` before the reduce-scatter stream waits on the current one. Each at its measured
    rate, :data:`FSDP2_COPY_SLOWDOWN` times its bytes' time at ``hbm_bw`` (the copy-in's with or without a cast to the
    reduction dtype). ``gathers`` and ``reductions``: per step, as :func:`dp_time` charges them (ZeRO-3 with pp = 1:
    two and one per micro-batch; else one each). 0 without ``fsdp2``, below ZeRO-2, or without an HBM model. FSDP1's
    flat parameter is gathered in place."""
    if not (dev.fsdp2 and layout.zero >= 2 and dev.hbm_bw):
        return 0.0
    b = dev.bytes_per_value
    slow_out, slow_cast, slow_copy = FSDP2_COPY_SLOWDOWN
    slow_in = slow_copy if layout.grad_bytes == b else slow_cast
    return psi * (gathers * 2 * b * slow_out + reductions * (b + layout.grad_bytes) * slow_in) / dev.hbm_bw
