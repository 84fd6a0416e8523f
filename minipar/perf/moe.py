"""A mixture-of-experts block in the performance model (a MODEL, :mod:`minipar.perf.model`), and the counts
``python -m minipar.plan --moe-experts`` prints first (:func:`moe_summary`).

A model with ``ModelShape.experts`` = E and ``top_k`` = k: every block's MLP is E MLPs of the dense MLP's shape
(h×f, SwiGLU if ``gated``), a router (an h×E matrix) sends each token to k of them (Switch Transformer, Fedus
et al. 2021, arXiv:2101.03961, §2; GShard, Lepikhin et al. 2020, arXiv:2006.16668, §2; Mixtral, arXiv:2401.04088
§2.1). Expert parallelism ``Layout.ep`` borrows ranks from dp (Megatron-Core's MoE: EP inside DP, Megatron-LM
docs "Mixture of Experts", megatron/core/transformer/moe/README.md; :class:`minipar.runtime.mesh.Mesh`): each
ep rank holds E/ep experts, an EP group is ep consecutive dp ranks (stride tp·cp in Megatron's order tp, cp,
dp, pp), the expert-data-parallel group the dp/ep ranks (× cp) that hold the same experts.

GIVEN (the model's and the layout's own numbers): E, k, h, f, gated, tp, cp, dp, ep, b, s, the device.
ASSUMED, each a choice a source run would pin:

- **balanced routing**: every expert gets tokens·k/E of the routed rows (no capacity factor, no dropped
  tokens: Megatron-Core's dropless default; DeepSeek-V3, arXiv:2412.19437, §3 / §2.1.2, balances by its
  auxiliary-loss-free bias). Imbalance would add to the busiest rank; not modelled.
- **expert tensor parallelism = tp** (Megatron-Core's default: ``--expert-tensor-parallel-size`` unset is
  ``--tensor-model-parallel-size``): each expert's matrices split over the tp ranks as the dense MLP's
  (column / row), and over ep (E/ep experts per rank). GIVEN where a run sets it (``Layout.etp``, a divisor of
  tp): Megatron-Core builds the experts' mesh apart (``megatron/core/parallel_state.py``,
  ``initialize_model_parallel``: an expert ``RankGenerator`` with tp = etp, ep, dp = the expert-data-parallel
  size, cp = 1, etp innermost), folded over the tp·cp·dp ranks: an EP group is ep ranks etp apart, the expert
  GEMMs (r·etp/tp rows, f/etp columns) the same FLOPs per rank, their TP collective over etp ranks (none at 1),
  their states sharded over tp·cp·dp/(etp·ep) ranks (``Layout.expert_shard``).
- **compute**: attention's QKV and output projection as the dense block's; the router one (T, E, h) GEMM
  (T = b·s/cp tokens of this rank; ÷ tp with sequence parallelism); each of the E/ep local experts one
  up (T·k·ep/E, (2 if gated else 1)·f/t, h) and one down (T·k·ep/E, h, f/t) GEMM at ITS shape
  (:func:`minipar.perf.gemm.gemms_time`: waves and roofline), the experts one after another (a grouped
  GEMM that fills the waves across experts would be faster: not modelled); backward the data and weight
  gradients at their shapes. Memory-bound operators over the MoE block's activations (below).
- **all-to-all** (dispatch and combine, Lepikhin et al. §2.2; DeepSeek-V3 §3.2.2): 2 per MoE layer in the
  forward, 2 in the backward, 2 more in a fully recomputed forward; each moves this TP rank's T/t tokens'
  k rows of h values (Megatron-Core's ``MoEAlltoAllTokenDispatcher``: tokens split over the TP ranks, the
  received rows all-gathered over TP after), :func:`minipar.perf.flops.all_to_all_bytes`: inside a node over
  NVLink at the α–β cost of :func:`minipar.comm.cost.all_to_all_time`; across nodes (:func:`a2a_seconds`) the
  intra-node and inter-node bytes at once, NCCL's ``"alltoall"`` or DeepEP / HybridEP's ``"flex"`` (one copy of a
  token per node: ``Layout.dispatcher``). Overlapped only with ``"ep"`` in ``Layout.overlap`` (Megatron-Core's
  ``--overlap-moe-expert-parallel-comm``: another micro-batch's compute hides :data:`EP_OVERLAP_HIDES` of what it
  could, min(all-to-all, that block); the rest stays; CHOSEN on one published pair of runs, below).
- **the host's floor** (:data:`MOE_HOST_S`, Megatron-Core only): a block and its exposed all-to-alls take at least
  that long per micro-batch, the CPU's launches the GPU waits for; CHOSEN on one published row (below).
- **TP collectives** of the MoE MLP carry its k·T rows: one all-reduce of b·s·h (attention) and one of
  k·b·s·h (the experts' input gathered, their output reduce-scattered) per layer forward, instead of two of
  b·s·h (Shoeybi et al. 2019's count, :mod:`minipar.perf.model`).
- **memory**: dense parameters (attention, norms, router E·h per block, embeddings) by ZeRO over dp·cp as
  today; the expert parameters (E/ep experts ÷ tp per block) and their gradients and optimizer states by
  ZeRO over the expert-data-parallel group, (dp/ep)·cp ranks (Megatron-Core's distributed optimizer shards
  expert parameters over their own DP group). Activations per block: the dense count (Korthikanti et al.
  2022) plus k−1 more copies of the MLP's split part and the dispatched k·T rows of h (2 bytes per value);
  full recomputation keeps the block's input only.
- **DP time**: the expert gradients reduced over the expert-dp group on its link (``"edp"``), added to the
  dense gradients' (:func:`minipar.perf.sharding.dp_time`).

Units: seconds, bytes, FLOPs, parameters.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from minipar.comm.cost import all_reduce_time, all_to_all_time
from minipar.model.moe.capacity import check_moe
from minipar.perf.flops import (
    activation_bytes_per_layer,
    all_to_all_bytes,
    attention_keys,
    expert_extra_flops,
    fp8_saved_bytes,
    layer_gemm_flops,
    mlp_params,
    model_flops,
    moe_flops_per_token,
    moe_params,
    stage_params,
)
from minipar.perf.gemm import attention_gemms, block_gemms, gemms_time
from minipar.perf.layout import Layout
from minipar.perf.placement import across_nodes, members_per_node
from minipar.perf.shape import ModelShape

# Seconds of host (CPU) work under one MoE block of one micro-batch, forward + backward, that its GPU work cannot hide,
# per framework (Device.framework): a block runs for max(its GPU time and exposed communication, this). Megatron-Core's
# dispatchers wait on the GPU for the received tokens' counts (DeepEP's README: "an implicit CPU wait for GPU received
# count signal"; the alltoall dispatcher's split sizes), so the CPU cannot run ahead and a fine-grained MoE block's
# launches (router, permutation, grouped GEMMs, FP8 casts) set its time: the "compute wall"'s host-boundedness
# (Megatron Core MoE report, arXiv:2603.07685, §1). CHOSEN on one row, Megatron-Bridge 26.04.01's Qwen3 30B-A3B on 16
# H100s (:data:`minipar.perf.mb_archive.MOE_HOST_FIT`), after the errors of its five H100 rows were seen; 0
# elsewhere (not modelled): its error there +0.2 %. Checked on a B200 row (25.11: 8 GPUs, micro-batch 1, 9,299
# tokens/s, about an H100's): -1.7 %.
MOE_HOST_S = {"megatron": 9.2e-3}
# The fraction of the all-to-all time an ideal overlap would hide (``min(all-to-all, the other micro-batch's compute)``)
# that Megatron-Core's combined 1F1B (``--overlap-moe-expert-parallel-comm``, ``"ep"`` in ``Layout.overlap``) hides.
# CHOSEN (0.05 grid) on one row, Megatron-MoE-ModelZoo's Qwen3 235B-A22B with "+1f1b overlap" on 256 H100s
# (:data:`minipar.perf.moe_zoo.EP_OVERLAP_FIT`), after its error was seen (+13 % at 1.0, an ideal overlap): the same
# run without the overlap, 19.7 s a step, reads -2 % and the overlap saved 2.1 s of the 7.4 s of all-to-all the model
# has there. 0.4 until 2026-11-29, re-chosen by the same rule on the same row (-0.7 % at 0.35, +1.3 % at 0.4) once each
# rank's dispatched rows were counted as Megatron-Core keeps them (:func:`dispatched_rows`). Checked on
# Megatron-Bridge's FP8 Qwen3 235B-A22B rows (NCCL's all-to-all, another team's recipe): -10 to -3 % (+16 to +25 % at
# 1.0). Why so little is hidden is not modelled: the dispatcher's host sync on the received
# counts (above), the SMs the communication kernels take from the GEMMs (DeepEP's README: 20-24 SMs) are candidates.
EP_OVERLAP_HIDES = 0.35


def host_floor(dev, layout: Layout) -> float:
    """Seconds of :data:`MOE_HOST_S` a MoE block of one micro-batch waits for at least on ``dev``'s framework: 0 where
    the block's router and the dispatcher's preprocessing (Megatron-Core's ``moe_router`` and ``moe_preprocess`` CUDA
    graph scopes) or its whole MoE MLP (``moe``) replay as CUDA graphs (``Layout.cuda_graphs``): one launch for their
    many small kernels. ASSUMED, and chosen after the only published run with those graphs was seen
    (:mod:`minipar.perf.mb_cards`: Megatron-Bridge's Qwen3 30B-A3B on 16 H100s, BF16, -31 % with the floor, +2.2 %
    without). That run bounds the floor left at at most its 6.6 ms per block, not at 0: any value below the model's time
    there (6.4 ms per block and micro-batch) reads the same. The dispatcher's wait for the received counts stays
    (HybridEP syncs unless given the permuted tokens' count, Megatron-Core ``fused_a2a.py``); what the graphs save is
    the launches around it."""
    graphs = set(layout.cuda_graphs or ())
    if "moe" in graphs or {"moe_router", "moe_preprocess"} <= graphs:
        return 0.0
    return MOE_HOST_S.get(dev.framework, 0.0)


def expert_params(model: ModelShape) -> int:
    """Parameters of one expert: the dense MLP's matrices ((3 if gated else 2)·h·f) and biases (2f or f, and h)
    (:func:`minipar.perf.flops.mlp_params`, as :func:`minipar.perf.flops.moe_params` counts it)."""
    return mlp_params(model)


def moe_stage_params(model: ModelShape, layout: Layout, stage_layers=None) -> list[tuple[float, float]]:
    """(dense, expert) parameters one rank of each pipeline stage holds, megatron counts: the dense model's
    :func:`~minipar.perf.flops.stage_params` less its MLPs, plus a router (E·h, replicated over tp, ASSUMED) and the
    shared experts' MLP ÷ tp per block with experts; and those blocks' E/ep experts (of ``moe_ffn``) ÷ the experts' TP
    degree (:attr:`~minipar.perf.layout.Layout.expert_tp`). The first ``dense_layers`` blocks keep their MLP."""
    p = layout.pp
    moe = [0] * p  # blocks with experts per rank, the MTP blocks among them (Layout.chunk_kinds, chunk k on rank k % p)
    for view, counts in layout.chunk_kinds(model):
        for k, n in enumerate(counts):
            moe[k % p] += n if view.experts else 0
    layers = tuple(stage_layers or [model.layers // p] * p)
    return list(_moe_stage_params(model, layout.tp, layout.expert_tp, layout.ep, layers, tuple(moe)))


@functools.lru_cache(maxsize=1024)
def _moe_stage_params(model: ModelShape, t: int, e: int, ep: int, layers: tuple, moe: tuple) -> tuple:
    """:func:`moe_stage_params` at tp ``t``, expert TP ``e``, ``ep``, for stages of ``layers`` blocks, ``moe`` of them
    with experts, kept: a search asks it for every layout."""
    E = model.experts
    base = stage_params(model, len(layers), t, "megatron", list(layers))
    mlp, shared = mlp_params(model), mlp_params(model, model.shared_ffn) if model.shared_ffn else 0
    per_block = E * model.hidden + (shared - mlp) / t  # the dense MLP (ffn) out; the router and the shared MLP in
    expert = expert_params(model.block_kinds()[-1][0])  # at moe_ffn
    return tuple((q + n * per_block, n * (E // ep) * expert / e) for q, n in zip(base, moe))


def moe_gemm_shapes(
    model: ModelShape, tokens: float, t: int, ep: int, sp: bool = False, etp: int | None = None
) -> tuple[list, list]:
    """(attention's and the router's GEMMs, one local expert's GEMMs) of one MoE block's forward on one TP rank for
    ``tokens`` = b·s rows: QKV and output projection (:func:`~minipar.perf.gemm.block_gemms`), the router
    (tokens ÷ t with sequence parallelism, E, h), the shared experts' MLP as a dense one's (up and down, split over
    t); per expert up (r, (2 if gated else 1)·f/e, h) and down (r, h,
    f/e) with e = ``etp`` (None: t) and r = tokens·(e/t)·k·ep/E rows (balanced routing; an expert TP group of e
    ranks holds e/t of the TP group's tokens). The FLOPs per rank do not depend on e."""
    E, k, e = model.experts, model.top_k, etp or t
    attention = attention_gemms(model, tokens, t, sp)
    rows = tokens * e / t * k * ep / E
    shared = block_gemms(replace(model, ffn=model.shared_ffn), tokens, t)[-2:] if model.shared_ffn else []
    return attention + [(tokens / (t if sp else 1), E, model.hidden)] + shared, [
        (rows, n, kk) for _, n, kk in block_gemms(model, tokens, e)[-2:]
    ]


def moe_block_times(model: ModelShape, dev, layout: Layout, tokens: float, links: dict) -> dict:
    """Seconds of one MoE block for one micro-batch on one rank (module doc): ``"f"`` / ``"b"`` its weight GEMMs
    forward / backward (the E/ep local experts at their shape), ``"a2a"`` ONE all-to-all (dispatch or combine)
    over the EP group, ``"tp_mlp"`` the experts' TP all-reduce over their etp ranks of k·b·s·h·etp/tp values (0 with
    etp = 1: Megatron-Core's folded experts need no TP collective), and the shared experts' MLP's over tp of b·s·h."""
    t, ep, k, e = layout.tp, layout.ep, model.top_k, layout.expert_tp
    dense, expert = moe_gemm_shapes(model, tokens, t, ep, layout.seq_parallel, e)
    local = model.experts // ep
    f = gemms_time(dev, dense, layout.fp8) + local * gemms_time(dev, expert, layout.fp8)
    b = gemms_time(dev, dense, layout.fp8, True) + local * gemms_time(dev, expert, layout.fp8, True)
    bpv = dev.bytes_per_value
    a2a = a2a_seconds(model, tokens, layout, dev, bpv) if ep > 1 else 0.0
    tp_mlp = all_reduce_time(e, k * tokens * e / t * model.hidden * bpv, links["tp"])
    if model.shared_ffn:  # the shared MLP's row-parallel output, reduced over tp as a dense MLP's
        tp_mlp += all_reduce_time(t, tokens * model.hidden * bpv, links["tp"])
    return {"f": f, "b": b, "a2a": a2a, "tp_mlp": tp_mlp}


def ep_nodes(dev, layout: Layout) -> tuple[int, int]:
    """(g, n): the ranks one EP group has on each node it touches and the nodes it spans, in Megatron's rank order
    (an EP group is ep ranks tp·cp apart, or etp apart when the experts' mesh folds; :mod:`minipar.perf.placement`)."""
    ep, stride = layout.ep, (layout.tp * layout.cp if layout.expert_tp == layout.tp else layout.expert_tp)
    g = members_per_node(ep, stride, dev.gpus_per_node) if across_nodes(dev, ep, stride) else ep
    return g, -(-ep // g)


def node_hit(model: ModelShape, n: int) -> float:
    """The chance that one of a token's k experts sits on a given node of an EP group over n nodes (E/n experts each):
    uniform routing (ASSUMED; forced balancing draws random logits, Megatron-Core's ``RandomSTE``), 1 − C(E − E/n,
    k)/C(E, k); with group-limited routing (:class:`~minipar.perf.shape.ModelShape` ``moe_router_num_groups`` G,
    ``moe_router_group_topk`` M) whose groups are whole nodes or hold whole nodes (G a multiple of n or n of G), at most
    the chance that one of the node's groups is among the token's M: 1 − C(G − c, M)/C(G, M), c = max(1, G/n).
    DeepSeek-V3's G = 8 nodes, M = 4: 0.50 for 0.66 uniform (a simulation of its routing on random logits: 0.496,
    ``tests/test_mb_cards.py``); a chosen group nearly always receives an expert, as its best two experts chose it."""
    E, k = model.experts, model.top_k
    hit = 1 - _none_of(E, E // n, k)
    G, M = model.moe_router_num_groups, model.moe_router_group_topk
    if G and (G % n == 0 or n % G == 0):
        hit = min(hit, 1 - _none_of(G, max(1, G // n), M))
    return hit


def _none_of(total: int, marked: int, k: int) -> float:
    """The chance that k of ``total`` drawn without replacement miss all ``marked`` ones, C(total − marked, k) /
    C(total, k), by log-gamma (a bound on the work however large the counts: no big integers)."""
    if total - marked < k:
        return 0.0
    lg = math.lgamma
    return math.exp(lg(total - marked + 1) - lg(total - marked - k + 1) - lg(total + 1) + lg(total - k + 1))


def a2a_seconds(model: ModelShape, tokens: float, layout: Layout, dev, bytes_per_value: int = 2) -> float:
    """Seconds of one all-to-all (dispatch or combine) of this TP rank's tokens/t tokens' k rows of h values, S bytes
    (:func:`~minipar.perf.flops.all_to_all_bytes`), over an EP group with g ranks on each of its n nodes
    (:func:`ep_nodes`). Inside one node: :func:`minipar.comm.cost.all_to_all_time` over NVLink. Across nodes the
    intra-node and the inter-node bytes move at once, on NVLink and on this GPU's own NIC (``dev.inter``, a rail):
    ``"alltoall"`` (NCCL, Megatron-Core's ``MoEAlltoAllTokenDispatcher``): S/ep to each peer, (ep − g)·S/ep through the
    NIC; ``"flex"`` (DeepEP / HybridEP, ``--moe-token-dispatcher-type flex``): a token crosses the network once per
    node that holds one of its experts, then fans out over NVLink (DeepSeek-V3, arXiv:2412.19437, §3.2.2), so the NIC
    carries (n − 1)·P·S/k, P the chance that a given other node holds one of its k experts (:func:`node_hit`);
    DeepEP measures 43-58 GB/s per 50 GB/s NIC at EP 16-64 (its README, V1 "normal kernels"), this model's NIC rate.
    Latency: one α per peer, as NCCL's n − 1 send/recv pairs."""
    ep, k = layout.ep, model.top_k
    S = tokens / layout.tp * k * model.hidden * bytes_per_value
    g, n = ep_nodes(dev, layout)
    if n == 1:
        return all_to_all_time(ep, S, dev.intra)
    (a_in, b_in), (a_out, b_out) = dev.intra, dev.inter
    if layout.dispatcher == "flex":
        net = (n - 1) * node_hit(model, n) * S / k
    else:
        net = (ep - g) / ep * S
    return (g - 1) * a_in + (ep - g) * a_out + max(net / b_out, (g - 1) / g * S / b_in)


def moe_activation_bytes(
    model: ModelShape, b: float, tp: int, recompute: str, sp: bool, bpv: int, flash, cp: int, etp: int | None = None
):
    """Bytes one MoE block keeps for backward for one micro-batch: the dense count
    (:func:`~minipar.perf.flops.activation_bytes_per_layer`) plus k − 1 more copies of the MLP's TP-split
    tensors (2·f·(3 if gated else 2)·s·b ÷ t), as many for the shared experts' MLP of width f_s (f_s for f; its
    input, the router's, counted once: ASSUMED), and this rank's dispatched rows, k·s·b·h·etp/t of 2 bytes
    (:func:`dispatched_rows`); full recomputation keeps only the block's input (the dense count)."""
    dense = activation_bytes_per_layer(model, b, tp, recompute, sp, bpv, flash, cp)
    if recompute == "full":
        return dense
    s, k = model.seq // cp, model.top_k
    widths = (k - 1) * model.f + (model.shared_ffn or 0)  # the k − 1 more MLPs and the shared experts' MLP
    mlp = 2 * widths * (3 if model.gated else 2) * s * b / tp
    return dense + (mlp + 2 * dispatched_rows(model, b, tp, cp, etp) * model.hidden) * bpv / 2


def dispatched_rows(model: ModelShape, b: float, tp: int, cp: int, etp: int | None = None) -> float:
    """Token rows one rank's experts receive per MoE block and micro-batch (balanced routing): the k·(s/t)·b rows of
    its own sequence-parallel share (Megatron-Core requires sequence parallelism with MoE and TP), gathered over the
    experts' TP group of etp ranks (None: t): k·s·b·etp/t. Megatron-Core's ``MoEAlltoAllTokenDispatcher`` gathers
    over ``expt_tp`` only (``token_dispatcher.py``: ``if self.tp_size > 1``, ``tp_group = pg_collection.expt_tp``), so
    with the experts' mesh folded to etp = 1 a rank keeps its own k·(s/t)·b rows, not the TP group's."""
    return model.top_k * model.seq // cp * b * (tp if etp is None else etp) / tp


def moe_fp8_saved_bytes(
    model: ModelShape, b: float, tp: int, recompute: str, sp: bool, cp: int, etp: int | None = None
) -> float:
    """Bytes per MoE block and micro-batch that FP8 training saves (:func:`moe_activation_bytes` less): the attention's
    GEMM inputs as in :func:`~minipar.perf.flops.fp8_saved_bytes`, the dispatched rows (the experts' fc1 input,
    :func:`dispatched_rows`)
    and the k·s·b·f/t fc2 inputs (and the shared MLP's s·b·f_s/t) in 1 byte, not 2, while the router's input (s·b·h, ÷t
    with sequence parallelism) stays bf16. Transformer Engine's ``GroupedLinear`` saves its quantized inputs for the
    weight gradient (``module/grouped_linear.py`` at v2.10, ``_GroupedLinear.forward``: ``inputmats`` from
    ``tex.split_quantize``, column-wise usage, into ``save_for_backward``) unless ``save_original_input``, which
    Megatron-Core sets on the experts only under ``moe_act`` recomputation (fc2) or fc1 offloading
    (``transformer/moe/experts.py``). 0 with full recomputation."""
    if recompute == "full":
        return 0.0
    s, h, k = model.seq // cp, model.hidden, model.top_k
    dense = fp8_saved_bytes(model, b, tp, recompute, sp, cp)
    widths = (k - 1) * model.f + (model.shared_ffn or 0)  # fc2 inputs: k − 1 more experts', the shared MLP's
    return dense - s * b * h / (tp if sp else 1) + dispatched_rows(model, b, tp, cp, etp) * h + widths * s * b / tp


def moe_model_flops(model: ModelShape, global_batch: int, recompute="none", flash=False, recomputed=None) -> float:
    """FLOPs of one step with experts: :func:`~minipar.perf.flops.model_flops` of the dense shape plus, per block
    pass (3 per block, one more per recomputed block), the forward FLOPs of k − 1 more MLPs and the router:
    2·B·s·((k − 1)·(3 if gated else 2)·h·f + E·h) (and the shared MLP); with ``dense_layers`` each kind of block at its
    own MLP (:meth:`~minipar.perf.shape.ModelShape.block_kinds`). The MFU counts the active parameters (k, not E)."""
    base = model_flops(model, global_batch, recompute, flash, recomputed)
    l, B = model.layers, global_batch
    passes = 3 * l + ((l if recomputed is None else recomputed) if recompute == "full" else 0)
    kinds, mtp = model.block_kinds(), 3 * model.mtp_num_layers  # MTP's blocks, of the last kind: 3 passes each
    if kinds == [(model, l)]:  # every block alike: k − 1 more MLPs and the router each
        return base + (passes + mtp) * expert_extra_flops(model, B)
    beyond = lambda v: layer_gemm_flops(v, B) - layer_gemm_flops(model, B) + expert_extra_flops(v, B)  # noqa: E731
    blocks = sum(n * beyond(view) for view, n in kinds)  # beyond l of the model's own dense blocks, per kind
    return base + passes / l * blocks + mtp * beyond(kinds[-1][0])


def training_flops(model: ModelShape, global_batch: int, recompute="none", flash=False, recomputed=None) -> float:
    """FLOPs of one step: :func:`moe_model_flops` for a model with experts (the active parameters'),
    :func:`~minipar.perf.flops.model_flops` for a dense one."""
    return (moe_model_flops if model.experts else model_flops)(model, global_batch, recompute, flash, recomputed)


def moe_summary(name: str, model: ModelShape, experts: int, top_k: int, ep: int, gpus: int, global_batch: int) -> str:
    """Three lines: total vs active parameters, training FLOPs per token, and the all-to-all bytes per GPU of
    one step for ``experts`` experts per MLP, ``top_k`` per token, expert parallelism ``ep`` over ``gpus``
    GPUs and ``global_batch`` sequences per step (bf16, balanced routing). The layout search that follows it
    (:func:`minipar.perf.search.plan`) models the step. Raises ConfigError
    (:func:`minipar.model.moe.capacity.check_moe`) for impossible counts."""
    E, k = experts, top_k
    check_moe(E, k, None, ep)
    total, active = moe_params(model, E, k)
    tokens = global_batch * model.seq / gpus  # per GPU per step, data and expert parallel ranks alike
    a2a = all_to_all_bytes(tokens, model.hidden, k, ep)
    core = 12 * model.layers * model.core_width * attention_keys(model, model.seq)  # the attention core, per token
    n_moe = sum(n for view, n in model.block_kinds() if view.experts) if model.experts else model.layers
    dense = 6 * (model.params - model.lookup_params) + core
    return "\n".join(
        (
            f"{name} with {E} experts, top-{k}: {total / 1e9:.1f}B parameters, {active / 1e9:.1f}B active per token",
            f"training FLOPs per token: {moe_flops_per_token(model, E, k) / 1e9:.1f} GFLOP (the dense model's: "
            f"{dense / 1e9:.1f})",
            f"expert parallelism ep={ep}, {tokens:,.0f} tokens per GPU per step: {a2a / 1e9:.2f} GB per all-to-all, "
            f"4 per layer per step = {4 * n_moe * a2a / 1e9:.1f} GB per GPU per step (bf16, balanced routing)",
        )
    )
