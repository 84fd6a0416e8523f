"""What the performance model (:mod:`minipar.perf.model`) is asked about: a model's shape, a layout, and its answer.

:class:`ModelShape` (a GPT's sizes), :class:`Layout` (how the job is cut over devices),
:func:`check_layout` (which layouts are valid, and why not), :class:`Estimate` (step time in
seconds and memory in bytes by term).
"""

from __future__ import annotations

from dataclasses import dataclass

from minipar.errors import ConfigError


@dataclass(frozen=True)
class ModelShape:
    """A GPT: ``layers`` blocks of width ``hidden``, ``heads`` heads, sequence ``seq``, vocabulary ``vocab``
    (``bias``: minipar's ``GPTConfig.bias``, read by the minipar counts only)."""

    layers: int
    hidden: int
    heads: int
    seq: int = 2048
    vocab: int = 51200
    bias: bool = True

    @property
    def params(self) -> float:
        """12·l·h² + 13·l·h + (V + s)·h (blocks, embeddings; head tied), Narayanan et al. 2021 §5.1."""
        l, h = self.layers, self.hidden
        return 12 * l * h * h + 13 * l * h + (self.vocab + self.seq) * h


def shape_of(cfg) -> ModelShape:
    """:class:`ModelShape` of a ``minipar.models.GPTConfig``."""
    return ModelShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.block_size, cfg.vocab_size, cfg.bias)


@dataclass(frozen=True)
class Layout:
    """How the job is cut: dp·tp·pp devices, micro-batch size b, interleaving v, ZeRO stage,
    recompute ``"none" | "selective" | "full"``, sequence parallelism, optimizer offload, which
    communication is hidden behind compute (``overlap``: subset of {"dp", "pp", "tp"}), the
    gradient all-reduce's bytes per value, and the pipeline ``schedule`` ("1f1b" or "gpipe";
    interleaved when v > 1)."""

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

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def __str__(self) -> str:
        s = f"dp{self.dp}·tp{self.tp}·pp{self.pp}·b{self.micro_batch}"
        s += f"·v{self.v}" if self.v > 1 else ""
        s += f"·zero{self.zero}" if self.zero else ""
        s += {"none": "", "selective": "·sel-rc", "full": "·full-rc"}[self.recompute]
        s += "·gpipe" if self.schedule == "gpipe" else ""
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


def check_layout(model: ModelShape, layout: Layout, global_batch: int, counts: str = "megatron") -> int:
    """Micro-batches per pipeline m = B/(d·b) of a valid layout.

    Raises:
        ConfigError: an unknown recompute, ZeRO stage or schedule; tp not dividing heads and hidden;
            layers not divisible by pp·v (megatron counts; minipar: more stages than layers); ZeRO-3
            with pp > 1; a batch not divisible by dp·b; interleaving with m not a multiple of pp.
    """
    d, t, p, b, v = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v
    if layout.recompute not in ("none", "selective", "full"):
        raise ConfigError(f"recompute={layout.recompute!r}: use 'none', 'selective' or 'full'")
    if layout.zero not in (0, 1, 2, 3):
        raise ConfigError(f"zero={layout.zero}: use 0, 1, 2 or 3")
    if layout.schedule not in ("1f1b", "gpipe") or (layout.schedule == "gpipe" and v > 1):
        raise ConfigError(f"schedule={layout.schedule!r} with v={v}: use '1f1b' (interleaved if v > 1) or 'gpipe'")
    if model.heads % t or model.hidden % t:
        raise ConfigError(f"tp={t} must divide heads={model.heads} and hidden={model.hidden}")
    if model.layers % (p * v) if counts == "megatron" else p * v > model.layers:
        raise ConfigError(f"layers={model.layers} is not divisible by pp·v = {p}·{v}; pick pp·v dividing the layers")
    if layout.zero == 3 and p > 1:
        raise ConfigError(
            "zero=3 with pp > 1: ZeRO-3 would re-gather every stage's weights for each micro-batch; "
            "Megatron-LM and DeepSpeed do not combine them. Use zero=1 with pipelines, or pp=1"
        )
    if global_batch % (d * b):
        raise ConfigError(f"global batch {global_batch} is not divisible by dp·micro_batch = {d}·{b}")
    m = global_batch // (d * b)
    if v > 1 and m % p:
        raise ConfigError(f"interleaving needs m = {m} micro-batches to be a multiple of pp={p}")
    return m
