"""Which layouts are valid, and why not: :func:`check_layout` (a shape, a layout and a global batch), with the checks it
runs on expert parallelism (:func:`check_ep`) and on what modifies a layout's sharding or recomputation
(:func:`check_hybrid`: ``hsdp``, ``hpz``, ``recompute_layers``, ``bucket_mb``). Each raises one
:class:`~minipar.errors.ConfigError` line naming the value and the fix."""

from __future__ import annotations

import math

from minipar.errors import ConfigError
from minipar.perf.layout import DISPATCHERS, OVERLAP, RECOMPUTE, Layout
from minipar.perf.recompute_modules import check_modules
from minipar.perf.shape import ModelShape
from minipar.runtime.mesh import divisors


def check_layout(model: ModelShape, layout: Layout, global_batch: int, counts: str = "megatron") -> int:
    """Micro-batches per pipeline m = B/(d·b) of a valid layout.

    Raises:
        ConfigError: an unknown recompute, overlap, ZeRO stage or schedule; a degree below 1; tp not dividing
            heads and hidden, or kv_heads not a multiple or divisor of tp; cp not dividing the
            sequence (or cp with minipar counts); layers not split by pp·v (megatron counts: pp·v
            dividing them, or uneven first/last stages or chunks, :meth:`Layout.chunk_layers`;
            minipar: more stages than layers, or uneven stages); a batch not divisible by dp·b;
            interleaving with m not a multiple of pp; ``hsdp`` or ``hpz`` as :func:`check_hybrid` refuses;
            ``recompute_layers`` without full recomputation, with minipar counts, or above the blocks of
            the largest model chunk; ``ep`` not dividing dp or the experts, ep > 1 without experts, experts
            with minipar counts or with hsdp (:func:`check_ep`); ``fp8_params`` without fp8, or with ZeRO 0 over more
            than one rank. (ZeRO-3 with pp > 1 is valid: FSDP2's
            per-step all-gather, :func:`minipar.perf.sharding.dp_time`.)
    """
    d, t, p, b, v, c = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v, layout.cp
    for k in ("dp", "tp", "pp", "micro_batch", "v", "cp"):
        if not isinstance(getattr(layout, k), int) or getattr(layout, k) < 1:
            raise ConfigError(f"{k}={getattr(layout, k)!r}: must be an integer >= 1")
    if layout.recompute not in RECOMPUTE:
        raise ConfigError(f"recompute={layout.recompute!r}: use one of {', '.join(RECOMPUTE)}")
    if isinstance(layout.overlap, str):
        raise ConfigError(f"overlap={layout.overlap!r}: a set of names, e.g. frozenset({{'dp', 'tp'}}), not a string")
    if not set(layout.overlap) <= set(OVERLAP):
        bad = sorted(set(map(str, layout.overlap)) - set(OVERLAP))
        raise ConfigError(
            f"overlap={sorted(map(str, layout.overlap))}: {', '.join(bad)} not one of {', '.join(OVERLAP)}"
        )
    if layout.recompute == "op" and (model.experts or model.mla or layout.recompute_layers is not None):
        raise ConfigError("recompute='op' (torchtitan's per-op checkpointing) is modelled for dense models without "
                          "MLA or recompute_layers; use 'selective' or 'full'")  # fmt: skip
    if v > 1 and p == 1:
        raise ConfigError(f"v={v} with pp=1: interleaving splits a pipeline stage; use v=1 or pp > 1")
    if layout.zero not in (0, 1, 2, 3):
        raise ConfigError(f"zero={layout.zero}: use 0, 1, 2 or 3")
    if layout.fp8_params and not layout.fp8:
        raise ConfigError("fp8_params=True keeps the blocks' weights in FP8: needs fp8=True (--precision fp8); or drop "
                          "fp8_params")  # fmt: skip
    if layout.fp8_params and layout.zero == 0 and layout.shard > 1:
        raise ConfigError(
            f"fp8_params=True with zero=0 over {layout.shard} ranks: Megatron-LM gathers FP8 weights only with its "
            "distributed optimizer or FSDP2 (its arguments.py); use zero 1, 2 or 3, or drop fp8_params"
        )
    if layout.schedule not in ("1f1b", "gpipe") or (layout.schedule == "gpipe" and v > 1):
        raise ConfigError(f"schedule={layout.schedule!r} with v={v}: use '1f1b' (interleaved if v > 1) or 'gpipe'")
    if model.heads % t or model.hidden % t:
        raise ConfigError(f"tp={t} must divide heads={model.heads} and hidden={model.hidden}")
    if model.kv % t and t % model.kv:
        raise ConfigError(
            f"tp={t} and kv_heads={model.kv}: one must divide the other (kv heads are split or replicated)"
        )
    if c > 1 and (model.seq % (2 * c) or counts != "megatron"):
        raise ConfigError(
            f"cp={c}: the sequence ({model.seq}) must split into 2·cp load-balanced chunks (GPU counts only)"
        )
    if c > 1 and model.window_size:
        raise ConfigError(f"cp={c} with window_size={model.window_size}: ring attention over a sliding window is not "
                          "modelled (its ring would skip the blocks out of the window); use cp=1")  # fmt: skip
    ends = (layout.first_stage_layers, layout.last_stage_layers, layout.stage_split)
    uneven = any(x is not None for x in ends)
    if counts != "megatron":
        if model.window_size or model.mla:
            raise ConfigError(
                f"window_size={model.window_size}, kv_lora_rank={model.kv_lora_rank}: minipar's GPT attends to every "
                "earlier token with plain heads; GPU counts only"
            )
        if model.q_width != model.hidden:
            raise ConfigError(
                f"kv_channels={model.kv_channels}: minipar's GPT has heads of hidden/heads; GPU counts only"
            )
        if p * v > model.layers or uneven:
            raise ConfigError(
                f"pp·v = {p}·{v} stages for {model.layers} layers (minipar counts: even stages, pp·v <= layers)"
            )
    elif uneven:
        layout.chunk_layers(model.layers)
    elif model.layers % (p * v):
        raise ConfigError(
            f"layers={model.layers} is not divisible by pp·v = {p}·{v}; pick pp·v dividing the layers, "
            "or uneven first/last stages (--first-stage-layers/--last-stage-layers)"
        )
    check_hybrid(model, layout, counts)
    check_modules(model, layout, counts)
    check_ep(model, layout, counts)
    if global_batch % (d * b):
        raise ConfigError(f"global batch {global_batch} is not divisible by dp·micro_batch = {d}·{b}")
    m = global_batch // (d * b)
    if v > 1 and m % p:
        raise ConfigError(f"interleaving needs m = {m} micro-batches to be a multiple of pp={p}")
    return m


def edge_splits(layers: int, pp: int, v: int, counts: str) -> list[tuple[int | None, int | None]]:
    """(first, last) model-chunk block counts for ``layers`` blocks on pp·v chunks (the search tries each; the published
    Megatron-Core rows take the first): (None, None)
    where pp·v divides the layers (even chunks); otherwise, under Megatron counts (a GPU), Megatron-Core's
    ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the embedding, the loss or
    both count as a block in the split, so (layers + 1 or 2) blocks share pp·v chunks evenly and the first chunk
    (rank 0's, with the embedding) or the last (rank pp−1's, with the loss) builds one block fewer
    (``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build``; Llama 3 405B's 126 blocks on 16
    stages as 7 + 14·8 + 7, Grattafiori et al. 2024, arXiv:2407.21783, §3.3.2). Each valid one, [] if none is."""
    S = pp * v
    if layers % S == 0:
        return [(None, None)]
    if counts != "megatron" or S == 1:
        return []
    out = []
    for emb, loss in ((1, 1), (1, 0), (0, 1)):
        if (layers + emb + loss) % S == 0 and (layers + emb + loss) // S >= 1:
            per = (layers + emb + loss) // S
            out.append((per - 1 if emb else None, per - 1 if loss else None))
    return out


def flexible_splits(layers: int, pp: int, v: int, counts: str, mtp: int = 0) -> list[tuple[int, int]]:
    """(first, last) model-chunk block counts of a balanced ``--pipeline-model-parallel-layout`` (Megatron-Core's
    flexible layout, ``megatron/core/transformer/pipeline_parallel_layer_layout.py``): the ``layers`` blocks and the
    ``mtp`` multi-token-prediction blocks (always on the last chunk) share pp·v chunks, every middle chunk holding
    ⌈(layers + mtp)/(pp·v)⌉, the first and the last (with its MTP blocks) splitting what is left as evenly as they can.
    DeepSeek-V3's recipe, ``Et|(tt|)*30mL`` on 8 · 4 chunks, is (1, 0): 1 + 30·2 + 0 blocks and the MTP block.
    [] on minipar's CPU counts, with pp·v < 3 (no middle chunk) or where no such split exists; the even split
    (every chunk ``per``) is :func:`edge_splits`' and left out."""
    S = pp * v
    if counts != "megatron" or S < 3:
        return []
    per = -(-(layers + mtp) // S)
    rest = layers - per * (S - 2)  # the blocks of the first and last chunks
    half = (rest + mtp) / 2
    out = []
    for first in sorted({math.floor(half), math.ceil(half)}):
        last = rest - first
        even = first == last == per  # every chunk alike: edge_splits' (None, None)
        if 0 <= first <= per and 0 <= last and last + mtp <= per and not even and (first, last) not in out:
            out.append((first, last))
    return out


def ep_pool(dp: int, tp: int, cp: int, etp: int | None) -> int:
    """The ranks expert parallelism is carved out of: dp (Megatron-Core: EP inside DP) or, with the experts' mesh
    folded (``etp`` < tp, a divisor of it), tp·cp·dp/etp (its expert ``RankGenerator``); ep must divide it."""
    return dp if etp is None or etp >= tp or tp % etp else tp * cp * dp // etp


def check_ep(model: ModelShape, layout: Layout, counts: str) -> None:
    """``ep`` of a layout (:func:`check_layout`): it divides the experts and dp (with the experts' mesh folded,
    ``etp`` < tp: tp·cp·dp/etp); experts need the GPU counts."""
    ep, d, E = layout.ep, layout.dp, model.experts
    if not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"ep={ep!r}: must be an integer >= 1")
    if ep > 1 and not E:
        raise ConfigError(f"ep={ep} without experts: expert parallelism needs a model with experts (or ep=1)")
    if E and counts != "megatron":
        raise ConfigError(f"experts={E}: mixture-of-experts layouts are modelled with the GPU counts only")
    e, t = layout.etp, layout.tp
    if e is not None and (not E or not isinstance(e, int) or e < 1 or t % e):
        use = ", ".join(str(x) for x in divisors(t))
        raise ConfigError(f"etp={e!r}: the experts' TP degree needs experts and must divide tp={t}; use etp {use}")
    # folded (etp < tp): the experts' mesh spans the tp·cp·dp ranks, etp·ep·edp of them (Megatron-Core)
    pool = ep_pool(d, t, layout.cp, e)
    of = "dp" if layout.expert_tp == t else "tp·cp·dp/etp"
    if E and (E % ep or pool % ep):
        ok = ", ".join(str(x) for x in divisors(math.gcd(pool, E)))
        why = (
            f"experts={E} (whole experts per rank)"
            if E % ep
            else f"{of}={pool} (expert parallelism is carved out of {of})"
        )
        raise ConfigError(f"ep={ep} must divide {why}; use ep {ok}")
    if E and layout.hsdp is not None:
        raise ConfigError(f"hsdp={layout.hsdp} with experts={E}: hybrid sharding of experts is not modelled; drop hsdp")
    if E and layout.hpz is not None:
        raise ConfigError(f"hpz={layout.hpz} with experts={E}: hpZ for the experts' weights is not modelled; drop hpz")
    if layout.dispatcher not in DISPATCHERS:
        raise ConfigError(f"dispatcher={layout.dispatcher!r}: not one of {', '.join(DISPATCHERS)}")


def check_hpz(layout: Layout) -> None:
    """``hpz`` N of a layout: ZeRO++'s hierarchical partitioning (hpZ; Wang et al. 2023, arXiv:2306.10209; DeepSpeed's
    ``zero_hpz_partition_size``) or FSDP2's ``fully_shard(reshard_after_forward=N)``. PyTorch's docstring: "a
    non-trivial divisor of the mesh shard dim size (i.e. excluding 1 and the dim size itself)": 1 < N < dp, N dividing
    dp. It reshards ZeRO-3's weights after the forward, so it needs zero 3 and a backward all-gather to shorten:
    pp = 1 (ZeRO-3 under pipelining gathers once per step and keeps the weights, :func:`minipar.perf.sharding.dp_time`);
    not with ``hsdp`` (whose shard group already keeps the gathers inside it)."""
    N, d = layout.hpz, layout.dp
    if not isinstance(N, int) or not 1 < N < d or d % N:
        ok = ", ".join(str(x) for x in divisors(d)[1:-1]) or f"none: dp={d} has no divisor between 1 and itself"
        raise ConfigError(f"hpz={N!r} must divide dp={d}, above 1 and below dp (a non-trivial secondary group): {ok}")
    if layout.zero != 3:
        raise ConfigError(f"hpz={N} reshards ZeRO-3's weights after the forward: needs zero 3 (got zero={layout.zero})")
    if layout.pp > 1:
        raise ConfigError(
            f"hpz={N} with pp={layout.pp}: ZeRO-3 under pipelining gathers the weights once per step and keeps them, "
            "no backward all-gather to shorten; use pp=1 or drop hpz"
        )
    if layout.hsdp is not None:
        raise ConfigError(f"hpz={N} with hsdp={layout.hsdp}: pick one (HSDP's shard group already holds its gathers)")


def check_hybrid(model: ModelShape, layout: Layout, counts: str) -> None:
    """The ``hsdp``, ``hpz`` (:func:`check_hpz`), ``bucket_mb`` and ``recompute_layers`` of a layout
    (:func:`check_layout`). Raises ConfigError."""
    H, N, d, mb = layout.hsdp, layout.recompute_layers, layout.dp, layout.bucket_mb
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, (int, float)) or not 0 < mb < math.inf):
        raise ConfigError(f"bucket_mb={mb!r}: DDP's bucket size in MiB, a finite number > 0 (PyTorch's default: 25)")
    if mb is not None and layout.zero >= 2:
        raise ConfigError(
            f"bucket_mb={mb:g} with zero={layout.zero}: DDP's buckets are ZeRO 0/1's; ZeRO 2/3 (FSDP) reduce per "
            "unit, a block: drop bucket_mb"
        )
    if H is not None and (not isinstance(H, int) or H < 1 or d % H):
        ok = ", ".join(str(x) for x in divisors(d))
        raise ConfigError(f"hsdp={H!r} must divide dp={d} (shard groups of hsdp ranks, dp/hsdp replicas); use {ok}")
    if H is not None and layout.zero == 0:
        raise ConfigError(f"hsdp={H} shards ZeRO's model states: needs zero 1, 2 or 3 (zero=0 keeps nothing sharded)")
    if layout.hpz is not None:
        check_hpz(layout)
    if N is None:
        return
    if layout.recompute != "full" or counts != "megatron":
        raise ConfigError(
            f"recompute_layers={N} recomputes N whole blocks: needs recompute='full' (not {layout.recompute!r}) "
            "and the GPU counts"
        )
    most = max(layout.chunk_layers(model.layers))
    if not isinstance(N, int) or not 1 <= N <= most:
        raise ConfigError(
            f"recompute_layers={N!r} (--recompute-layers): between 1 and the {most} blocks of the largest chunk "
            f"(pp·v = {layout.pp}·{layout.v}); use recompute_layers <= {most}, or none for every block"
        )
