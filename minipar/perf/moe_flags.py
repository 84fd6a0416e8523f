"""The command line's mixture-of-experts flags (``python -m minipar.plan --moe-experts E --moe-top-k k [--ep N]``),
checked before any work: one line each, naming the value and the fix (:class:`minipar.errors.ConfigError`)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

from minipar.errors import ConfigError
from minipar.perf.layout import CUDA_GRAPH_SCOPES, DISPATCHERS
from minipar.runtime.mesh import divisors


def _fit(n: int) -> str:
    """The divisors of ``n``, comma-separated (the first 12)."""
    return ", ".join(map(str, divisors(n)[:12]))


def add_moe_flags(p) -> None:
    """``--moe-experts``, ``--moe-top-k``, ``--moe-ffn-hidden-size``, ``--moe-layer-freq``,
    ``--moe-shared-expert-intermediate-size``, ``--moe-router-num-groups``, ``--moe-router-group-topk``, ``--ep``,
    ``--expert-tp``, ``--moe-dispatcher`` and ``--cuda-graph-scope`` on the argparse parser ``p``."""
    p.add_argument(
        "--moe-experts", type=int, default=None, help="experts per MLP: the MoE counts and a search with ep (lesson 12)"
    )
    p.add_argument("--moe-top-k", type=int, default=None, help="experts per token (with --moe-experts; default 1)")
    p.add_argument(
        "--moe-ffn-hidden-size",
        type=int,
        default=None,
        help="the experts' MLP width where it is not --ffn, the dense blocks' (Megatron-Core's; with --moe-experts)",
    )
    p.add_argument(
        "--moe-layer-freq",
        default=None,
        help="which blocks have experts (Megatron-Core's): 1, every one (default), or '([0]*K+[1]*M)', the first K "
        "dense, with an MLP of --ffn (DeepSeek-V3: ([0]*3+[1]*58))",
    )
    p.add_argument(
        "--moe-shared-expert-intermediate-size",
        type=int,
        default=None,
        help="the shared experts' MLP width every token also passes through (Megatron-Core's; with --moe-experts)",
    )
    for flag, what in (
        ("num-groups", "G groups of consecutive experts"),
        ("group-topk", "a token's k from its M best"),
    ):
        p.add_argument(
            f"--moe-router-{flag}",
            type=int,
            default=None,
            help=f"group-limited routing (Megatron-Core's; with --moe-experts): {what} (DeepSeek-V3: 8 and 4, one "
            "group per node, a token on at most 4 nodes: the flex dispatcher's network bytes)",
        )
    p.add_argument(
        "--ep",
        type=int,
        default=None,
        help="fix the expert-parallel degree (default: the search tries it; a fixed layout: 1)",
    )
    p.add_argument(
        "--expert-tp",
        type=int,
        default=None,
        help="the experts' TP degree in the layouts whose tp it divides (Megatron-Core's --expert-tensor-parallel-"
        "size; default: tp): below tp the experts' mesh folds, an EP group of ep ranks etp apart (1: inside a node)",
    )
    p.add_argument(
        "--moe-dispatcher",
        choices=DISPATCHERS,
        default="alltoall",
        help="the experts' all-to-all (Megatron-Core's --moe-token-dispatcher-type): alltoall, NCCL's; flex, DeepEP / "
        "HybridEP's, one copy of a token per node across the network (with --moe-experts)",
    )
    p.add_argument(
        "--cuda-graph-scope",
        default=None,
        help=f"the parts of each block replayed as CUDA graphs, of {','.join(CUDA_GRAPH_SCOPES)} (Megatron-Core's, "
        "Transformer Engine's graphs; --framework megatron): moe_router,moe_preprocess or moe lift the host's floor "
        "under a MoE block",
    )


def with_experts(a, model):
    """``model`` (a :class:`~minipar.perf.shape.ModelShape`) with the experts ``--moe-experts`` and its flags build
    (unchanged without it): k, the shared and the experts' widths, the dense first blocks, group-limited routing.
    Raises ConfigError where the shape refuses them."""
    if a.moe_experts is None:
        return model
    built = {"shared_ffn": a.moe_shared_expert_intermediate_size, "moe_ffn": a.moe_ffn_hidden_size}
    built |= {k: getattr(a, k) for k in ("moe_router_num_groups", "moe_router_group_topk")}
    dense = dense_layers(a.moe_layer_freq, model.layers)
    return replace(model, experts=a.moe_experts, top_k=moe_top_k(a), **built, dense_layers=dense)


def moe_top_k(a) -> int:
    """Experts per token from ``--moe-top-k`` (default 1), read without changing the parsed arguments."""
    return 1 if a.moe_top_k is None else a.moe_top_k


def dense_layers(freq: str | None, layers: int) -> int:
    """The first blocks without experts from ``--moe-layer-freq`` (Megatron-Core's ``moe_layer_freq``): ``1`` (or
    None) every block has experts, 0; ``([0]*K+[1]*M)`` with K + M = ``layers``, K. Read as text, never evaluated.
    Raises ConfigError for any other pattern (experts every N-th block, Llama 4 Maverick's, is not modelled)."""
    text = (freq or "1").replace(" ", "")
    if text == "1":
        return 0
    m = re.fullmatch(r"\(?\[0\]\*(\d+)\+\[1\]\*(\d+)\)?", text)
    if not m:
        raise ConfigError(
            f"--moe-layer-freq {freq}: give 1 (experts in every block) or ([0]*K+[1]*M), the first K blocks dense; "
            "other patterns are not modelled"
        )
    if int(m[1]) + int(m[2]) != layers:
        raise ConfigError(f"--moe-layer-freq {freq}: {m[1]} + {m[2]} blocks, the model has {layers}; make them sum")
    return int(m[1])


def cuda_graph_scope(a) -> tuple | None:
    """``--cuda-graph-scope`` as ``Layout.cuda_graphs`` (None: eager), checked: known scopes (Megatron-Core's
    :data:`~minipar.perf.layout.CUDA_GRAPH_SCOPES`), ``moe_preprocess`` only with ``moe_router`` (Megatron-Core's
    rule), the MoE scopes only with ``--moe-experts``, all only at ``--framework megatron``. Raises ConfigError."""
    if a.cuda_graph_scope is None:
        return None
    scopes = tuple(x for x in a.cuda_graph_scope.split(",") if x)
    bad = [x for x in scopes if x not in CUDA_GRAPH_SCOPES] or ([] if scopes else ["(empty)"])
    if bad:
        raise ConfigError(
            f"--cuda-graph-scope {a.cuda_graph_scope}: {', '.join(bad)} is not a scope; use some of "
            f"{','.join(CUDA_GRAPH_SCOPES)} (the whole layer and mamba are not modelled)"
        )
    if a.framework != "megatron":
        raise ConfigError(
            f"--cuda-graph-scope {a.cuda_graph_scope} is Megatron-Core's per-layer CUDA graphs: add --framework "
            "megatron, or drop it"
        )
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        raise ConfigError(
            f"--cuda-graph-scope {a.cuda_graph_scope}: moe_preprocess must be used together with moe_router "
            "(Megatron-Core's rule); add moe_router"
        )
    moe = [x for x in scopes if x.startswith("moe")]
    if moe and a.moe_experts is None:
        raise ConfigError(f"--cuda-graph-scope {a.cuda_graph_scope}: {moe[0]} graphs a MoE block: add --moe-experts E")
    return tuple(sorted(set(scopes), key=CUDA_GRAPH_SCOPES.index))


def check_moe_flags(a, default_gpus: int) -> None:
    """``--moe-top-k``, ``--moe-shared-expert-intermediate-size``, ``--ep``, ``--expert-tp``, ``--moe-dispatcher`` and
    ``--overlap ep`` need ``--moe-experts``; with it: sizes >= 1, k <= E, ep
    dividing E and the GPUs (a fixed layout's ep is checked against its dp, tp and etp by
    :func:`minipar.perf.layout_checks.check_ep`). Raises ConfigError."""
    if a.moe_experts is None:
        if a.moe_top_k is not None:
            raise ConfigError(f"--moe-top-k {a.moe_top_k} picks experts per token: add --moe-experts E, or drop it")
        for flag in ("moe_shared_expert_intermediate_size", "moe_ffn_hidden_size", "moe_layer_freq",
                     "moe_router_num_groups", "moe_router_group_topk"):  # fmt: skip
            if getattr(a, flag) is not None:
                raise ConfigError(
                    f"--{flag.replace('_', '-')} {getattr(a, flag)}: says how the experts are built: add "
                    "--moe-experts E, or drop it"
                )
        if a.ep is not None:
            raise ConfigError(
                f"--ep {a.ep} splits experts over ranks: add --moe-experts E (a multiple of {a.ep}), or drop --ep"
            )
        if a.expert_tp is not None:
            raise ConfigError(f"--expert-tp {a.expert_tp} is the experts' TP degree: add --moe-experts E, or drop it")
        if a.moe_dispatcher != "alltoall":
            raise ConfigError(f"--moe-dispatcher {a.moe_dispatcher} moves tokens to experts: add --moe-experts E")
        if "ep" in a.overlap.split(","):
            raise ConfigError(f"--overlap {a.overlap}: ep hides the all-to-all of experts: add --moe-experts E")
        return
    n, k, ep, gpus = a.moe_experts, moe_top_k(a), a.ep, a.gpus or default_gpus
    shared, width = a.moe_shared_expert_intermediate_size, a.moe_ffn_hidden_size
    for flag, v in (("--moe-experts", n), ("--moe-top-k", k), ("--ep", ep), ("--expert-tp", a.expert_tp),
                    ("--moe-shared-expert-intermediate-size", shared), ("--moe-ffn-hidden-size", width)):  # fmt: skip
        if v is not None and v < 1:
            raise ConfigError(f"{flag} {v}: must be an integer >= 1")
    if k > n:
        raise ConfigError(f"--moe-top-k {k}: at most --moe-experts {n} experts per token; use --moe-top-k {n} or less")
    if ep is not None and n % ep:
        raise ConfigError(f"--ep {ep} must divide --moe-experts {n} (whole experts per GPU); use --ep {_fit(n)}")
    if ep is not None and gpus % ep:
        raise ConfigError(
            f"--ep {ep} must divide --gpus {gpus} (expert parallelism is carved out of the GPUs); use --ep "
            f"{_fit(math.gcd(n, gpus))}, or --gpus a multiple of {ep}"
        )
