"""What the performance model (:mod:`minipar.perf.model`) is asked about: a layout of a model, and its answer.

:class:`Layout` (how the job is cut over devices), :class:`Estimate` (step time in seconds and memory in bytes by
term); which layouts are valid, and why not: :func:`~.layout_checks.check_layout`. The model's shape is
:class:`~minipar.perf.shape.ModelShape` (:mod:`minipar.perf.shape`; ``ModelShape`` and ``shape_of`` are importable
from here too, as the README's API table names them).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from minipar.errors import ConfigError
from minipar.perf.shape import ModelShape, shape_of  # noqa: F401 - the public API (README) imports them from here

RECOMPUTE = ("none", "selective", "op", "full")  # the recomputation modes (Layout.recompute, --recompute)
# What Layout.overlap may hide behind compute (--overlap): "dp" the DP/ZeRO gradient reduction and weight all-gather,
# "grad_reduce" only the reduction; PP's sends; TP's collectives; EP's all-to-alls (Megatron-Core's
# --overlap-moe-expert-parallel-comm). (Ring attention's K/V steps always hide behind the attention.)
OVERLAP = ("dp", "grad_reduce", "pp", "tp", "ep")
DISPATCHERS = ("alltoall", "flex")  # Megatron-Core's --moe-token-dispatcher-type (Layout.dispatcher, minipar.perf.moe)
# bytes of an optimizer state's dtype in Megatron-Core's precision-aware optimizer (Layout.optimizer_dtypes)
STATE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Megatron-Core's per-layer CUDA graph scopes (--cuda-graph-scope, Layout.cuda_graphs; transformer_config.py)
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")


@dataclass(frozen=True)
class Layout:
    """How the job is cut: dp·tp·pp·cp devices, micro-batch size b, interleaving v, ZeRO stage, recompute ``"none" |
    "selective" | "op" | "full"`` (``"op"``: torchtitan's per-op checkpointing,
    :func:`~minipar.perf.flops.op_recomputed_matmuls`), sequence parallelism, optimizer offload, which communication is
    hidden behind compute (``overlap``: a subset of :data:`OVERLAP`; ``"dp"``: the gradients' reduction and ZeRO's
    weight all-gather, ``"grad_reduce"``: the reduction only; :attr:`hides`), the gradient reduction's bytes per value,
    the pipeline ``schedule`` ("1f1b" or "gpipe"; interleaved when v > 1); ``cp`` context parallelism (ring attention
    over cp ranks, Liu et al. 2023, arXiv:2310.01889; Megatron's order tp, cp, dp, pp); ``flash_attention`` (Dao et al.
    2022, arXiv:2205.14135: no s² scores in memory, causal blocks skipped, one extra QKᵀ in backward);
    ``scatter_gather`` (Narayanan et al. 2021 §4.1: a stage sends 1/t of its activation per TP rank across nodes and
    all-gathers it over NVLink); ``first_stage_layers`` / ``last_stage_layers``: uneven first/last pipeline stages (v =
    1) or first/last model chunks (v > 1): :meth:`chunk_layers` (None: even); ``cp_allgather``: context parallelism by
    all-gathering K and V before attention and reduce-scattering dK, dV after (Llama 3, arXiv:2407.21783, §3.3.2)
    instead of the ring, not overlapped; ``recompute_layers`` N (with recompute "full"): only the first N blocks of each
    model chunk are recomputed (:meth:`recomputed_layers`); ``recompute_modules`` (with "selective"; None:
    ``("core_attn",)``): Megatron-Core's modules recomputed, :mod:`minipar.perf.recompute_modules`; ``hsdp`` H: hybrid
    sharding, ZeRO's state sharded over a group of H dp ranks (× cp), replicated over dp/H groups (:attr:`shard`;
    :mod:`minipar.perf.sharding`); ``hpz`` N: ZeRO-3 resharded after the forward to groups of N dp ranks (× cp), so the
    backward gathers inside one (ZeRO++'s hpZ, Wang et al. 2023, arXiv:2306.10209; FSDP2's ``reshard_after_forward=N``;
    :func:`~minipar.perf.sharding.secondary_gather`); ``stage_split``: the blocks of each model chunk 0 .. pp·v−1 (with
    v = 1 each pipeline stage) as the run split them (:meth:`chunk_layers`; :mod:`minipar.perf.pp_layout`);
    ``bucket_mb``: ZeRO 0/1's gradient reduction in buckets of this
    many MiB of 16-bit gradients, each its own collective, as PyTorch DDP's ``bucket_cap_mb`` (default 25; None:
    Megatron-Core's buckets; :func:`~minipar.perf.sharding.collectives`); ``fp8``: the blocks' weight GEMMs in FP8
    (:func:`minipar.perf.block_time.gemm_rate`); ``fp8_params``: with fp8, the blocks' weights kept in FP8 and
    ZeRO's all-gather of them in 1 byte each (Megatron-LM's ``--fp8-param-gather``, NeMo's ``fp8_params``; torchao's
    ``enable_fsdp_float8_all_gather`` under FSDP2; :func:`minipar.perf.memory.fp8_weight_bytes`,
    :func:`minipar.perf.sharding.gather_bytes`); ``ep``: expert parallelism for a model with experts, borrowed from dp
    as in :class:`minipar.runtime.mesh.Mesh` (ep divides dp; an EP group is ep consecutive dp ranks, stride tp·cp;
    :mod:`minipar.perf.moe`); ``etp``: the experts' TP degree (Megatron-Core's ``expert_tensor_parallel_size``; None:
    tp), a divisor of tp; below tp the experts' mesh folds, an EP group is ep ranks etp apart (:mod:`minipar.perf.moe`,
    :attr:`expert_shard`); ``dispatcher``: the experts' all-to-all, NCCL's ("alltoall") or DeepEP / HybridEP's ("flex",
    one copy of a token per node; :func:`minipar.perf.moe.a2a_seconds`); ``cuda_graphs``: the parts of each block
    captured in CUDA graphs (Megatron-Core's ``cuda_graph_scope`` with ``cuda_graph_impl="transformer_engine"``, a
    subset of :data:`CUDA_GRAPH_SCOPES`; None: eager): the router and the dispatcher's preprocessing (or the whole MoE
    MLP) graphed lift the host's floor under a MoE block (:data:`minipar.perf.moe.MOE_HOST_S`,
    :func:`minipar.perf.moe.host_floor`); ``optimizer_dtypes``: (main params, exp_avg, exp_avg_sq) dtypes of
    Megatron-Core's precision-aware optimizer (``--use-precision-aware-optimizer --main-params-dtype --exp-avg-dtype
    --exp-avg-sq-dtype``; None: fp32 each, 12 bytes per parameter: :attr:`optimizer_bytes`)."""

    dp: int
    tp: int
    pp: int
    micro_batch: int = 1
    v: int = 1
    zero: int = 0
    recompute: str = "full"
    seq_parallel: bool = False
    offload: bool = False
    overlap: frozenset = frozenset()
    grad_bytes: int = 4  # Megatron-LM all-reduces fp32 main gradients
    schedule: str = "1f1b"
    cp: int = 1
    flash_attention: bool = False
    scatter_gather: bool = True
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    cp_allgather: bool = False
    recompute_layers: int | None = None
    recompute_modules: tuple | None = None
    hsdp: int | None = None
    hpz: int | None = None
    stage_split: tuple | None = None
    bucket_mb: float | None = None
    fp8: bool = False
    fp8_params: bool = False
    ep: int = 1
    etp: int | None = None
    dispatcher: str = "alltoall"
    cuda_graphs: tuple | None = None
    optimizer_dtypes: tuple | None = None

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard(self) -> int:
        """Ranks ZeRO divides the model states over: dp·cp (every rank holding the same weights), or hsdp·cp
        with hybrid sharding (PyTorch FSDP2's HSDP: shard within a group, replicate across groups)."""
        return (self.hsdp or self.dp) * self.cp

    @property
    def hides(self) -> tuple[bool, bool]:
        """(the gradients' reduction hidden, ZeRO's weight all-gather hidden). ``"dp"`` in ``overlap``: both
        (Megatron-LM's ``--overlap-grad-reduce --overlap-param-gather``: "Must use --overlap-param-gather with
        --overlap-grad-reduce", megatron/training/arguments.py; FSDP's prefetch); ``"grad_reduce"``: the reduction only
        (Megatron-LM's first flag alone; DeepSpeed's ZeRO-1/2 with ``overlap_comm`` and nanotron's ZeRO-1, which
        all-gather the updated weights at the end of the optimizer step: ``stage_1_and_2.py``, ``optim/zero.py``).
        :func:`minipar.perf.sharding.dp_time`."""
        o = set(self.overlap)  # a frozenset, or any collection of the names
        return bool({"dp", "grad_reduce"} & o), "dp" in o

    @property
    def optimizer_bytes(self) -> int:
        """Bytes of optimizer state per parameter under mixed precision: fp32 master weights and Adam's two moments,
        12 (ZeRO's K, Rajbhandari et al. 2019, arXiv:1910.02054, §3.1), or the sum of :attr:`optimizer_dtypes`'."""
        return sum(STATE_BYTES[d] for d in self.optimizer_dtypes) if self.optimizer_dtypes else 12

    @property
    def expert_tp(self) -> int:  # the experts' TP degree: etp, or tp when it is None (Megatron-Core's default)
        return self.tp if self.etp is None else self.etp

    @property
    def expert_shard(self) -> int:
        """Ranks the experts' model states shard over (their data-parallel group, ZeRO): shard/ep with etp = tp;
        folded (etp < tp) shard·tp/(etp·ep), the tp·cp·dp ranks less the etp·ep that hold different experts."""
        return self.shard * self.tp // (self.expert_tp * self.ep)

    def recomputed_layers(self, layers: int) -> list[int]:
        """Blocks of each model chunk (:meth:`chunk_layers`) whose forward runs again in backward: all with recompute
        "full", none otherwise; with ``recompute_layers`` N the first min(N, n) of a chunk of n (Megatron-LM's
        ``--recompute-granularity full --recompute-method block --recompute-num-layers N``, counted per model chunk:
        ``TransformerBlock._checkpointed_forward`` loops over the chunk's own layers,
        megatron/core/transformer/transformer_block.py); the others keep every activation."""
        chunks = self.chunk_layers(layers)
        if self.recompute != "full":
            return [0] * len(chunks)
        return chunks if self.recompute_layers is None else [min(n, self.recompute_layers) for n in chunks]

    def chunk_layers(self, layers: int) -> list[int]:
        """Blocks per virtual stage (model chunk) k = 0 .. pp·v−1; chunk k lives on rank k mod pp (Narayanan et al. 2021
        §2.2.2). Without uneven stages: layers/(pp·v) each. With ``first_stage_layers`` / ``last_stage_layers``: v = 1,
        pipeline stages 0 and pp−1 hold them (Megatron-LM's ``--decoder-first/last-pipeline-num-layers``); v > 1, the
        FIRST and LAST MODEL CHUNK hold them (chunk 0 on rank 0, with the embedding; chunk pp·v−1 on rank pp−1, with the
        logit layer and the loss), as Llama 3 removes one block from each (Grattafiori et al. 2024, arXiv:2407.21783,
        §3.3.2); 0 is allowed (a chunk with only the embedding or the loss). The other chunks share the rest evenly.
        (Megatron-LM under v > 1 spreads its first/last count over all v chunks of rank 0 / pp−1 instead, each count
        divisible by v; that layout is not expressible here.) ``stage_split``: model chunk k holds ``stage_split[k]``
        blocks (v = 1: stage k), a split the run chose, as nanotron's cost-balanced one (``nanotron/models/base.py``:
        blocks placed in order, a stage closed once its cumulative cost passes its share, the logit layer weighing V·h),
        Megatron-Core's ``--pipeline-model-parallel-layout`` (:func:`minipar.perf.pp_layout.parse_layout`) or
        DeepSpeed's ``partition_method``; a chunk may hold none.

        Raises:
            ConfigError: a negative count, first/last with pp·v = 1, or counts that leave the other chunks an uneven
                share or none; a ``stage_split`` that is not pp·v counts >= 0 summing to ``layers``, or given with
                first/last.
        """
        S, first, last = self.pp * self.v, self.first_stage_layers, self.last_stage_layers
        if self.stage_split is not None:
            return self._split(layers)
        if first is None and last is None:
            return [layers // S] * S
        if S == 1:
            raise ConfigError("first/last_stage_layers need pp > 1")
        fixed = [x for x in (first, last) if x is not None]
        rest, n_rest = layers - sum(fixed), S - len(fixed)
        if min(fixed) < 0 or rest < n_rest or (n_rest == 0 and rest) or (n_rest and rest % n_rest):
            what = "stages" if self.v == 1 else "model chunks (pp·v)"
            raise ConfigError(
                f"first_stage_layers={first}, last_stage_layers={last} with {layers} layers on pp={self.pp}, "
                f"v={self.v}: the other {n_rest} {what} must share the remaining {rest} layers evenly, at least 1 each"
            )
        mid = rest // n_rest if n_rest else 0
        out = [mid] * S
        out[0] = first if first is not None else mid
        out[-1] = last if last is not None else mid
        return out

    def _split(self, layers: int) -> list[int]:
        """``stage_split`` checked: one count >= 0 per model chunk (pp·v), summing to ``layers``, without first/last."""
        split, text, S = self.stage_split, ",".join(map(str, self.stage_split)), self.pp * self.v
        if not all(isinstance(n, int) and n >= 0 for n in split) or len(split) != S:
            raise ConfigError(
                f"stage_split={text}: give pp·v={S} block counts, integers >= 0, one per model chunk (v=1: per stage)"
            )
        if sum(split) != layers:
            raise ConfigError(f"stage_split={text} holds {sum(split)} blocks, not the model's {layers}: make them sum")
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            raise ConfigError("stage_split with first/last_stage_layers: give the whole split, or only first/last")
        return list(split)

    def chunk_kinds(self, model: ModelShape) -> list[tuple[ModelShape, list[int]]]:
        """Each kind of block of ``model`` (:meth:`~minipar.perf.shape.ModelShape.block_kinds`, in model order) with
        how many of it each model chunk k = 0 .. pp·v−1 holds (:meth:`chunk_layers`, whose ConfigError): the first
        chunks hold the first kind's blocks (DeepSeek-V3's 3 dense blocks on the first chunk); the last chunk also the
        ``mtp_num_layers`` multi-token-prediction blocks (Megatron-Core's default placement)."""
        return [(view, list(counts)) for view, counts in _chunk_kinds(model, tuple(self.chunk_layers(model.layers)))]

    def stage_layers(self, layers: int) -> list[int]:
        """Blocks per pipeline rank 0 .. pp−1: the sum of its chunks' (:meth:`chunk_layers`, whose ConfigError)."""
        chunks = self.chunk_layers(layers)
        return [sum(chunks[r :: self.pp]) for r in range(self.pp)]

    def __str__(self) -> str:
        s = f"dp{self.dp}·tp{self.tp}·pp{self.pp}" + (f"·cp{self.cp}" if self.cp > 1 else "") + f"·b{self.micro_batch}"
        s += f"·v{self.v}" if self.v > 1 else ""
        s += f"·first{self.first_stage_layers}" if self.first_stage_layers is not None else ""
        s += f"·last{self.last_stage_layers}" if self.last_stage_layers is not None else ""
        s += f"·split{_runs(self.stage_split)}" if self.stage_split is not None else ""
        s += f"·zero{self.zero}" if self.zero else ""
        s += f"·hsdp{self.hsdp}" if self.hsdp is not None else ""
        s += f"·hpz{self.hpz}" if self.hpz is not None else ""
        s += f"·ddp{self.bucket_mb:g}MB" if self.bucket_mb is not None else ""
        s += f"·ep{self.ep}" if self.ep > 1 else ""
        s += f"·etp{self.etp}" if self.expert_tp != self.tp else ""
        s += f"·{self.dispatcher}" if self.dispatcher != "alltoall" and self.ep > 1 else ""
        s += {"none": "", "selective": "·sel-rc", "op": "·op-rc", "full": "·full-rc"}[self.recompute]
        s += f"{self.recompute_layers}" if self.recompute_layers is not None else ""
        s += f"({'+'.join(self.recompute_modules)})" if self.recompute_modules is not None else ""
        s += "·gpipe" if self.schedule == "gpipe" else ""
        s += "·flash" if self.flash_attention else ""
        s += "·ag-cp" if self.cp_allgather and self.cp > 1 else ""
        s += "·fp8" + ("(params)" if self.fp8_params else "") if self.fp8 else ""
        s += f"·graphs({'+'.join(self.cuda_graphs)})" if self.cuda_graphs else ""
        s += f"·adam({'/'.join(self.optimizer_dtypes)})" if self.optimizer_dtypes else ""
        return s + ("·sp" if self.seq_parallel else "") + ("·offload" if self.offload else "")


@dataclass
class Estimate:
    """The model's answer for one layout: time (seconds per step by term), mem (bytes per device by term)."""

    layout: Layout
    m: int
    time: dict
    mem: dict
    fits: bool
    tflops_per_gpu: float  # executed FLOPs (with recomputation) per second per device, / 1e12 (Narayanan's metric)
    mfu: float  # model FLOPs (no recomputation) / (time · devices · peak) (MegaScale's, PaLM's metric)
    tp_across_nodes: bool = False


def _runs(split: tuple) -> str:
    """A split as ``1/2×30/0``: counts by "/", three or more equal ones in a row as count×run."""
    out = []
    for n, group in itertools.groupby(split):
        k = len(list(group))
        out += [f"{n}×{k}"] if k >= 3 else [str(n)] * k
    return "/".join(out)


@functools.lru_cache(maxsize=1024)
def _chunk_kinds(model: ModelShape, chunks: tuple) -> tuple:
    """:meth:`Layout.chunk_kinds` for blocks per chunk ``chunks``, kept (a search asks it for every layout)."""
    out, start = [], 0
    ends = [0, *itertools.accumulate(chunks)]  # chunk k holds blocks ends[k] .. ends[k + 1] − 1
    for view, n in model.block_kinds():
        out.append((view, [max(0, min(ends[k + 1], start + n) - max(ends[k], start)) for k in range(len(chunks))]))
        start += n
    out[-1][1][-1] += model.mtp_num_layers  # multi-token prediction: more of the last kind, on the last chunk
    return tuple((view, tuple(counts)) for view, counts in out)
