"""A MODEL of training step time, throughput (MFU) and memory per GPU at cluster scale.

This is arithmetic, not a measurement: a few lines per term, each with its source, so that a
learner can plan "64 H100s and a 70B model: which (dp, tp, pp, m, v, ZeRO, recompute)?" before
spending GPU hours, and check the model against published runs (``tests/test_perf_model.py``
reproduces every row of Narayanan et al. 2021, Table 1, and MegaScale's 175B runs). Lesson 07's
small :mod:`minipar.planner` ranks CPU layouts; this module is its cluster-scale sibling and
takes the same kind of inputs, measured (lesson 07 fits them on the CPU) or from a datasheet.

    from minipar.perf_model import GPUS, MODELS, Layout, estimate
    e = estimate(MODELS["175b"], GPUS["a100"], Layout(dp=24, tp=8, pp=8, micro_batch=1), global_batch=1536)
    e.tflops_per_gpu, e.mfu, e.mem["total"], e.time["bubble"]

Every term (B global batch, b micro-batch, s sequence, h hidden, a heads, l layers, V vocabulary,
t/p/d the TP/PP/DP degrees, m = B/(d·b) micro-batches per pipeline):

- **Compute.** FLOPs per forward of one layer and micro-batch: 24·b·s·h²·(1 + s/6h); a backward
  costs 2 forwards, full recomputation adds one forward (Narayanan et al. 2021, arXiv:2104.04473,
  §5.1 and eq. 3: 96·B·s·l·h²(1 + s/6h + V/16lh) per step with recomputation), selective
  recomputation only the attention-score part 4·b·s²·h (Korthikanti et al. 2022, arXiv:2205.05198,
  §5). The logit layer's 6·B·s·h·V is spread over the stages. GEMMs run at ``gemm_efficiency`` of
  peak; the non-GEMM operators (LayerNorm, GeLU, softmax, dropout, residual adds) are
  memory-bound: per pass they move each layer's activation bytes (Korthikanti eq. 2) through HBM
  twice (written, then read), at ``hbm_bw``. Achievable fraction: 0.75 of peak for bf16 GEMMs of
  these shapes (cuBLAS on A100/H100 reaches 70–80 % of the datasheet's dense peak on large GEMMs);
  with the memory-bound term, the compute of a layer runs at 47 % (h = 2304) to 70 % (h = 25600) of
  peak, and whole steps at 40–55 %, the range Megatron-LM reports.
- **TP** (Shoeybi et al. 2019, arXiv:1909.08053, §3): per layer and micro-batch 2 all-reduces of
  b·s·h values in the forward, 2 in the backward, 2 more in a recomputed forward; sequence
  parallelism replaces each by an all-gather + reduce-scatter of the same volume (Korthikanti §4.2.2).
- **PP**: each forward and backward action of a stage sends one b·s·h activation or gradient to
  the next stage (a boundary); across nodes when a node cannot hold two stages (tp·dp ≥ GPUs per node).
- **DP / ZeRO** (Rajbhandari et al. 2020, arXiv:1910.02054, §7): per step an all-reduce of the
  stage's gradients (ZeRO-1/2: reduce-scatter + all-gather, the same volume; ZeRO-3, pp = 1 only:
  one gradient reduce-scatter and an all-gather of the bf16 weights for every forward and backward),
  after the pipeline drains unless ``overlap`` hides it behind compute.
- **α–β** (lesson 01): a ring all-reduce over n ranks costs 2(n−1)·α + 2(n−1)/n · S/β, a
  transfer α + S/β; β is NVLink's inside a node and InfiniBand's (per GPU) across nodes.
- **Bubble**: the step's pipeline time is the makespan of the real schedule
  (:func:`minipar.pp.schedules.simulate` of ``1f1b`` or ``interleaved`` with these durations),
  not a separate formula; the bubble is what the simulation leaves idle.
- **Memory per GPU**: model states by ZeRO's formula (:func:`minipar.zero.flat.zero_bytes_formula`,
  mixed precision 2 + 2 + 12 bytes per parameter; ``offload`` moves the 12 off the GPU), the
  busiest stage's parameters; activations per Korthikanti et al. 2022 (eq. 2 with TP, §4.2.2 with
  sequence parallelism, §5 selective, §4.3 full recomputation: 2·s·b·h per layer kept plus one
  layer's working set), times the micro-batches stage 0 holds (min(p, m) under 1F1B, × (1 +
  (p−1)/(p·v)) interleaved, §4.2.3). A layout fits if this is ≤ 90 % of the GPU's memory (the
  rest: CUDA context, NCCL buffers, allocator fragmentation).

What it leaves out: kernel-launch and framework overhead (``layer_overhead``, 0 on GPUs by
default), stragglers, network congestion, data loading, imbalance between the first/last stage
and the others (embedding, logits), GEMM-shape effects (wave quantization).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from minipar.errors import ConfigError
from minipar.pp.schedules import make_schedule, simulate
from minipar.zero.flat import zero_bytes_formula


@dataclass(frozen=True)
class Device:
    """One accelerator and its links (datasheet or measured). Units: FLOP/s, bytes, bytes/s, seconds.

    Attributes:
        peak_flops: dense peak of the training dtype (bf16 on GPUs). gemm_efficiency: achievable
        fraction of it on large GEMMs. hbm_bw: memory bandwidth for the memory-bound operators
        (None: not modelled, e.g. on a CPU where ``layer_overhead`` measures them). mem_bytes:
        memory per device. gpus_per_node. intra/inter: (α seconds, β bytes/s) inside a node
        (NVLink) and across nodes (InfiniBand, per GPU). layer_overhead: seconds per layer and
        pass that do not scale with FLOPs. compute_share: fraction of a device one rank gets.
        bytes_per_value: activation/communication dtype (2 for bf16, 4 for fp32).
    """

    name: str
    peak_flops: float
    mem_bytes: float
    gpus_per_node: int = 8
    intra: tuple = (5e-6, 230e9)
    inter: tuple = (1e-5, 22e9)
    gemm_efficiency: float = 0.75
    hbm_bw: float | None = None
    layer_overhead: float = 0.0
    compute_share: float = 1.0
    bytes_per_value: int = 2


# Datasheets: A100 SXM 80 GB (312 TFLOP/s bf16 dense, 2.04 TB/s HBM2e, NVLink3 300 GB/s per direction,
# one 200 Gb/s HDR HCA per GPU on DGX A100 / Selene); H100 SXM (989 TFLOP/s, 3.35 TB/s, NVLink4
# 450 GB/s, 400 Gb/s NDR per GPU). β are what NCCL's ring reaches (~75-85 % of the link), α a ring step.
GPUS = {
    "a100": Device("A100-SXM4-80GB", 312e12, 80e9, 8, (5e-6, 230e9), (1e-5, 22e9), 0.75, 0.85 * 2.04e12),
    "a100-40gb": Device("A100-SXM4-40GB", 312e12, 40e9, 8, (5e-6, 230e9), (1e-5, 22e9), 0.75, 0.85 * 1.56e12),
    "h100": Device("H100-SXM5-80GB", 989e12, 80e9, 8, (5e-6, 360e9), (1e-5, 44e9), 0.75, 0.85 * 3.35e12),
}


@dataclass(frozen=True)
class ModelShape:
    """A GPT: ``layers`` blocks of width ``hidden`` with ``heads`` heads, sequence ``seq``, vocabulary ``vocab``."""

    layers: int
    hidden: int
    heads: int
    seq: int = 2048
    vocab: int = 51200

    @property
    def params(self) -> float:
        """12·l·h² + 13·l·h + (V + s)·h (blocks, embeddings; head tied), Narayanan et al. 2021 §5.1."""
        l, h = self.layers, self.hidden
        return 12 * l * h * h + 13 * l * h + (self.vocab + self.seq) * h


MODELS = {  # Narayanan et al. 2021 Table 1 shapes; 175B = GPT-3; 70b = Llama-2-70B's width/depth, MHA, vocab 32000
    "1.7b": ModelShape(24, 2304, 24),
    "3.6b": ModelShape(30, 3072, 32),
    "7.5b": ModelShape(36, 4096, 32),
    "18b": ModelShape(40, 6144, 48),
    "39b": ModelShape(48, 8192, 64),
    "76b": ModelShape(60, 10240, 80),
    "145b": ModelShape(80, 12288, 96),
    "175b": ModelShape(96, 12288, 96),
    "310b": ModelShape(96, 16384, 128),
    "530b": ModelShape(105, 20480, 128),
    "1t": ModelShape(128, 25600, 160),
    "7b": ModelShape(32, 4096, 32, 4096, 32000),
    "13b": ModelShape(40, 5120, 40, 4096, 32000),
    "70b": ModelShape(80, 8192, 64, 4096, 32000),
}


@dataclass(frozen=True)
class Layout:
    """How the job is cut: dp·tp·pp GPUs, micro-batch size b, interleaving v, ZeRO stage,
    recompute ``"none" | "selective" | "full"``, sequence parallelism, optimizer offload, and which
    communication is hidden behind compute (``overlap``: subset of {"dp", "pp", "tp"})."""

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

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def __str__(self) -> str:
        s = f"dp{self.dp}·tp{self.tp}·pp{self.pp}·b{self.micro_batch}"
        s += f"·v{self.v}" if self.v > 1 else ""
        s += f"·zero{self.zero}" if self.zero else ""
        s += {"none": "", "selective": "·sel-rc", "full": "·full-rc"}[self.recompute]
        return s + ("·sp" if self.seq_parallel else "") + ("·offload" if self.offload else "")


@dataclass
class Estimate:
    """The model's answer for one layout. time: seconds per step by term; mem: bytes per GPU by term."""

    layout: Layout
    m: int
    time: dict
    mem: dict
    fits: bool
    tflops_per_gpu: float  # executed FLOPs (with recomputation) per second per GPU, / 1e12 (Narayanan's metric)
    mfu: float  # model FLOPs (no recomputation) / (time · GPUs · peak) (MegaScale's, PaLM's metric)
    tp_across_nodes: bool = False


def all_reduce_time(n: int, nbytes: float, link: tuple) -> float:
    """Ring all-reduce over ``n`` ranks of ``nbytes`` with ``link = (α, β)``: 2(n−1)α + 2(n−1)/n·S/β (lesson 01)."""
    a, b = link
    return 0.0 if n <= 1 else 2 * (n - 1) * a + 2 * (n - 1) / n * nbytes / b


def activation_bytes_per_layer(
    model: ModelShape, b: int, tp: int, recompute: str, seq_parallel: bool, bytes_per_value: int = 2
) -> float:
    """Korthikanti et al. 2022 (arXiv:2205.05198) bytes one layer keeps for one micro-batch of b sequences.

    none: s·b·h·(10 + 24/t + 5·a·s/(h·t)) (eq. 2), with sequence parallelism s·b·h·(34/t + 5·a·s/(h·t))
    (§4.2.2); selective drops the 5·a·s/(h·t) term (§5); full keeps the layer's input, 2·s·b·h
    (÷t with sequence parallelism, §4.3). Written for 2-byte values; scaled by bytes_per_value/2.
    """
    s, h, a, t = model.seq, model.hidden, model.heads, tp
    sbh = s * b * h
    if recompute == "full":
        x = 2 * sbh / (t if seq_parallel else 1)
    else:
        lin = 34 / t if seq_parallel else 10 + 24 / t
        att = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
        x = sbh * (lin + att)
    return x * bytes_per_value / 2


def _check(model: ModelShape, layout: Layout, global_batch: int) -> int:
    d, t, p, b, v = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v
    if layout.recompute not in ("none", "selective", "full"):
        raise ConfigError(f"recompute={layout.recompute!r}: use 'none', 'selective' or 'full'")
    if layout.zero not in (0, 1, 2, 3):
        raise ConfigError(f"zero={layout.zero}: use 0, 1, 2 or 3")
    if model.heads % t or model.hidden % t:
        raise ConfigError(f"tp={t} must divide heads={model.heads} and hidden={model.hidden}")
    if model.layers % (p * v):
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


@functools.lru_cache(maxsize=4096)
def _simulated(p: int, m: int, v: int, ratio: float) -> float:
    sched = make_schedule("interleaved" if v > 1 else "1f1b", p, m, v)
    return simulate(sched, t_f=1.0, t_b=ratio).makespan


def pipeline_makespan(p: int, m: int, v: int, ratio: float) -> float:
    """Makespan of 1F1B (v = 1) or interleaved 1F1B (v chunks per rank) with m micro-batches, in units
    of one action's forward (one chunk: 1/v of a stage), the backward taking ``ratio`` of those; from
    :func:`simulate`.

    For m > 4p the schedule is simulated at m₁ = 4p and m₂ = 5p and extended linearly: in the steady
    state every extra micro-batch adds exactly the same time (``tests/test_perf_model.py`` checks the
    extension against the full simulation). Keeps ``python -m minipar.plan`` under a few seconds.
    """
    if m <= 4 * p:
        return _simulated(p, m, v, ratio)
    m1, m2 = 4 * p, 5 * p
    t1, t2 = _simulated(p, m1, v, ratio), _simulated(p, m2, v, ratio)
    return t1 + (t2 - t1) / (m2 - m1) * (m - m1)


def model_flops(model: ModelShape, global_batch: int, recompute: str = "none") -> float:
    """FLOPs of one step: 72·B·s·l·h²(1 + s/6h) + 6·B·s·h·V without recomputation; with full
    recomputation Narayanan et al.'s eq. 3, 96·B·s·l·h²(1 + s/6h + V/16lh); selective adds 4·B·s²·h·l."""
    B, s, l, h, V = global_batch, model.seq, model.layers, model.hidden, model.vocab
    base = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V
    if recompute == "full":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if recompute == "selective":
        return base + 4 * B * s * s * h * l
    return base


def estimate(model: ModelShape, dev: Device, layout: Layout, global_batch: int) -> Estimate:
    """Step time (s), TFLOP/s per GPU, MFU and memory per GPU (bytes) of one layout (a MODEL; see module doc).

    Raises:
        ConfigError: a degree that does not divide the model or the batch (the message names it).
    """
    m = _check(model, layout, global_batch)
    d, t, p, b, v = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v
    s, h, a, l, V = model.seq, model.hidden, model.heads, model.layers, model.vocab
    bpv = dev.bytes_per_value
    lps = l // p  # layers per stage
    # --- compute of one stage, one micro-batch (forward; backward = 2 forwards [+ recompute]) ---
    f_layer = 24 * b * s * h * h * (1 + s / (6 * h)) / t
    f_logit = 2 * b * s * h * V / t / p  # logit layer, spread over the stages
    act = activation_bytes_per_layer(model, b, t, "none", layout.seq_parallel, bpv)
    mem_t = 2 * act / dev.hbm_bw if dev.hbm_bw else 0.0  # memory-bound operators: activations written + read
    eff = dev.peak_flops * dev.gemm_efficiency * dev.compute_share
    fwd = lps * (f_layer / eff + mem_t / dev.compute_share + dev.layer_overhead / dev.compute_share) + f_logit / eff
    extra = {"none": 0.0, "full": fwd, "selective": lps * 4 * b * s * s * h / t / eff}[layout.recompute]
    bwd = 2 * fwd + extra
    # --- tensor parallelism: 2 all-reduces (or AG + RS with SP) per layer and pass, 2 more if recomputed ---
    tp_link = dev.intra if t <= dev.gpus_per_node else dev.inter
    ar = all_reduce_time(t, b * s * h * bpv, tp_link)
    tp_f = 2 * lps * ar
    tp_b = 2 * lps * ar + (tp_f if layout.recompute == "full" else 0.0)
    if "tp" in layout.overlap:
        tp_f, tp_b = max(0.0, tp_f - fwd), max(0.0, tp_b - bwd)
    # --- pipeline: each action (one of the v chunks of a stage) sends once; makespan from the simulation ---
    pp_link = dev.inter if t * d >= dev.gpus_per_node else dev.intra
    p2p = (pp_link[0] + b * s * h * bpv / pp_link[1]) if p > 1 and "pp" not in layout.overlap else 0.0
    t_f, t_b = (fwd + tp_f) / v + p2p, (bwd + tp_b) / v + p2p  # one chunk's forward / backward action
    if p == 1:
        pipe = m * (t_f + t_b)
    else:
        ratio = round(t_b / t_f * 20) / 20  # 0.05 steps: the cache of simulations stays small
        pipe = pipeline_makespan(p, m, v, ratio) * t_f
    busy = m * v * (t_f + t_b)
    # --- data parallelism / ZeRO: gradient all-reduce (reduce-scatter + all-gather) of the stage ---
    psi = stage_params(model, p, t)
    dp_link = dev.inter if t * d > dev.gpus_per_node else dev.intra
    dp_t = all_reduce_time(d, layout.grad_bytes * psi, dp_link)
    if layout.zero == 3:  # reduce-scatter the gradients once; all-gather bf16 weights for every fwd and bwd
        dp_t = dp_t / 2 + 2 * m * all_reduce_time(d, 2 * psi, dp_link) / 2
    if "dp" in layout.overlap:
        dp_t = max(0.0, dp_t - 0.9 * busy)  # hidden behind the backward passes
    opt_t = (32 * psi / (d if layout.zero else 1) / dev.hbm_bw) if dev.hbm_bw and not layout.offload else 0.0
    total = pipe + dp_t + opt_t
    time = {
        "compute": m * (fwd + bwd),
        "tp": m * (tp_f + tp_b),
        "pp": m * v * 2 * p2p,
        "bubble": pipe - busy,
        "dp": dp_t,
        "optimizer": opt_t,
        "total": total,
    }
    mem = memory_per_gpu(model, dev, layout, m)
    n = layout.gpus
    return Estimate(
        layout,
        m,
        time,
        mem,
        mem["total"] <= 0.9 * dev.mem_bytes,
        model_flops(model, global_batch, layout.recompute) / total / n / 1e12,
        model_flops(model, global_batch, "none") / total / n / (dev.peak_flops),
        t > dev.gpus_per_node,
    )


def memory_per_gpu(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Bytes per GPU of the busiest (first) stage: params, grads, optimizer (ZeRO formula), activations, total."""
    d, t, p, b, v = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v
    bpv = dev.bytes_per_value
    states = zero_bytes_formula(stage_params(model, p, t), layout.zero, d, mixed_precision=bpv == 2)
    opt = 0.0 if layout.offload else states["optimizer"]
    per_layer = activation_bytes_per_layer(model, b, t, layout.recompute, layout.seq_parallel, bpv)
    inflight = min(p, m) * (1 + (p - 1) / (p * v) if v > 1 else 1)
    acts = model.layers // p * inflight * per_layer
    if layout.recompute == "full":  # the layer being recomputed holds its full activations
        acts += activation_bytes_per_layer(model, b, t, "none", layout.seq_parallel, bpv)
    mem = {"params": states["params"], "grads": states["grads"], "optimizer": opt, "activations": acts}
    mem["total"] = sum(mem.values())
    return mem


def stage_params(model: ModelShape, pp: int, tp: int) -> float:
    """Parameters one GPU of the first stage holds: its l/p blocks and the word + position embeddings, ÷ tp."""
    h = model.hidden
    return (model.layers // pp * (12 * h * h + 13 * h) + model.vocab * h) / tp + model.seq * h


def cpu_device(
    peak_flops: float,
    alpha: float,
    beta: float,
    layer_overhead: float,
    ranks: int,
    cores: int,
    mem_bytes: float = 2**30,
) -> Device:
    """This machine as a :class:`Device`, from minipar's own measurements (lesson 07 fits them):
    ``peak_flops`` a rank's fp32 matmul FLOP/s (already achievable: gemm_efficiency 1), α and β of
    gloo (lesson 01's fit), ``layer_overhead`` one block's forward + backward seconds beyond its
    FLOPs (spread as 1/3 per pass), ``ranks`` processes sharing ``cores`` cores (compute_share =
    cores / ranks), all on one "node", fp32 values. No HBM term: ``layer_overhead`` measures it."""
    return Device(
        "this CPU",
        peak_flops,
        mem_bytes,
        ranks,
        (alpha, beta),
        (alpha, beta),
        1.0,
        None,
        layer_overhead / 3,
        min(1.0, cores / ranks),
        4,
    )


def shape_of(cfg) -> ModelShape:
    """:class:`ModelShape` of a ``minipar.models.GPTConfig``."""
    return ModelShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.block_size, cfg.vocab_size)


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def plan(
    model: ModelShape,
    dev: Device,
    gpus: int,
    global_batch: int,
    micro_batches=(1, 2, 4, 8),
    recomputes=("none", "selective", "full"),
    zeros=(0, 1, 3),
    vs=(1, 2, 4),
    seq_parallel=True,
    overlap=frozenset(),
) -> list[tuple[Estimate, str]]:
    """Every layout of ``gpus`` GPUs, with why it is rejected ("" if not): best MFU first among the kept.

    Rejected (checked in this order; memory first, so layouts that cannot run are not simulated):
    "TP across nodes" (tp > GPUs per node), "does not fit" (memory > 90 % of the GPU),
    "bubble" (the bubble costs more than 25 % of the step), or an invalid combination (skipped).
    """
    out = []
    for tp in divisors(gpus):
        for pp in divisors(gpus // tp):
            dp = gpus // (tp * pp)
            for b in micro_batches:
                for v in vs if pp > 1 else (1,):
                    for rc in recomputes:
                        for z in zeros if dp > 1 else (0,):
                            lay = Layout(dp, tp, pp, b, v, z, rc, seq_parallel and tp > 1, overlap=overlap)
                            try:
                                m = _check(model, lay, global_batch)
                            except ConfigError:
                                continue
                            mem = memory_per_gpu(model, dev, lay, m)
                            if tp > dev.gpus_per_node or mem["total"] > 0.9 * dev.mem_bytes:
                                e = Estimate(
                                    lay,
                                    m,
                                    {},
                                    mem,
                                    mem["total"] <= 0.9 * dev.mem_bytes,
                                    0.0,
                                    0.0,
                                    tp > dev.gpus_per_node,
                                )
                                why = (
                                    "TP across nodes"
                                    if e.tp_across_nodes
                                    else f"does not fit ({mem['total'] / 1e9:.0f} GB > 90% of {dev.mem_bytes / 1e9:.0f} GB)"
                                )
                            else:
                                e = estimate(model, dev, lay, global_batch)
                                why = (
                                    f"bubble {e.time['bubble'] / e.time['total']:.0%} of the step"
                                    if e.time["bubble"] > 0.25 * e.time["total"]
                                    else ""
                                )
                            out.append((e, why))
    return sorted(out, key=lambda x: (x[1] != "", -x[0].mfu))


# --- published numbers the model is checked against (tests/test_perf_model.py, lesson 07) ---

# Narayanan et al. 2021, arXiv:2104.04473, Table 1 (weak scaling on Selene, A100-80GB, s = 2048,
# V = 51200, mixed precision, full activation recomputation): params (B), heads, hidden, layers,
# TP t, PP p, GPUs n, batch B, achieved TFLOP/s per GPU (their eq. 3 FLOPs).
NARAYANAN_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def narayanan_row(row, dev: Device | None = None) -> tuple[Estimate, float]:
    """The model's estimate for one Table 1 row and the published TFLOP/s per GPU.

    Assumptions the table does not state: micro-batch size 1, the non-interleaved 1F1B schedule,
    no ZeRO, no sequence parallelism (2021), fp32 gradient all-reduce not overlapped with compute.
    """
    _, a, h, l, t, p, n, B, pub = row
    model = ModelShape(l, h, a)
    lay = Layout(dp=n // (t * p), tp=t, pp=p, micro_batch=1, recompute="full")
    return estimate(model, dev or GPUS["a100"], lay, B), pub


# MegaScale (Jiang et al. 2024, arXiv:2402.15627), Table 2: 175B (GPT-3 shape), s = 2048, batch
# 6144, A100 GPUs, 12,288 GPUs: MFU 55.2 % for MegaScale and 41.2 % for Megatron-LM (the abstract's
# "1.34× compared to Megatron-LM"). Layout: tp 8, pp 8, dp 192, micro-batch 1 (m = 32 per pipeline).
# The paper does not give the interleaving factor: the model uses plain 1F1B (v = 1); with v = 6 it
# predicts 47 % / 66 % instead (+13 % / +19 %), a sensitivity the lesson shows.
MEGASCALE_175B = {"gpus": 12288, "batch": 6144, "megascale_mfu": 0.552, "megatron_mfu": 0.412}


def megascale_estimates(dev: Device | None = None, v: int = 1) -> dict[str, Estimate]:
    """Megatron-LM as MegaScale ran it (selective recomputation, sequence parallelism, distributed
    optimizer = ZeRO-1, bf16 gradients, 1F1B with v = ``v``, no overlap) and MegaScale (the same,
    with DP, PP and TP communication overlapped with compute, §3.2). MegaScale's other gains
    (parallel transformer block, fused operators, §3.1/§3.4) are not modelled.
    Returns ``{"megatron": e, "megascale": e}``."""
    dev = dev or GPUS["a100"]
    model = MODELS["175b"]
    base = Layout(
        dp=192, tp=8, pp=8, micro_batch=1, v=v, zero=1, recompute="selective", seq_parallel=True, grad_bytes=2
    )
    B = MEGASCALE_175B["batch"]
    return {
        "megatron": estimate(model, dev, base, B),
        "megascale": estimate(model, dev, replace(base, overlap=frozenset({"dp", "pp", "tp"})), B),
    }
