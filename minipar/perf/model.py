"""A MODEL of training step time, throughput (MFU) and memory per device, for one layout.

This is arithmetic, not a measurement: a few lines per term, each with its source, so that a
learner can plan "64 H100s and a 70B model: which (dp, tp, pp, m, v, ZeRO, recompute)?" before
spending GPU hours, and check it against published runs (:mod:`minipar.perf.published`) and
against measured runs on this CPU (lesson 07). One model, two device descriptions
(:mod:`minipar.perf.hardware`): a GPU cluster and this CPU, measured.

    from minipar.perf.hardware import GPUS
    from minipar.perf.layout import Layout
    from minipar.perf.model import estimate
    from minipar.perf.published import MODELS
    e = estimate(MODELS["175b"], GPUS["a100"], Layout(dp=24, tp=8, pp=8, micro_batch=1), global_batch=1536)
    e.tflops_per_gpu, e.mfu, e.mem["total"], e.time["bubble"]

Every term (B global batch, b micro-batch, s sequence, h hidden, a heads, l layers, V vocabulary,
t/p/d the TP/PP/DP degrees, m = B/(d·b) micro-batches per pipeline). ``Device.counts`` picks how
a step is counted where the two differ; ``"megatron"`` (GPU presets) / ``"minipar"`` (this CPU):

- **Parameters** per rank (:func:`stage_params`): Narayanan et al. 2021 (arXiv:2104.04473, §5.1),
  12·l·h² + 13·l·h + (V + s)·h with the head tied, ÷ t / minipar's ``GPT`` counted exactly: the
  four matrices (+ biases) ÷ t, LayerNorm vectors replicated, an untied vocabulary-split head on
  the last stage, uneven stages (:func:`minipar.pp.stages.partition_layers`).
- **Compute.** megatron: FLOPs per forward of one layer and micro-batch 24·b·s·h²·(1 + s/6h); a
  backward costs 2 forwards, full recomputation adds one forward (Narayanan §5.1, eq. 3), selective
  only the attention scores 4·b·s²·h (Korthikanti et al. 2022, arXiv:2205.05198, §5); the logits'
  6·B·s·h·V spread over the stages; GEMMs at ``gemm_efficiency`` of peak (0.75: cuBLAS reaches
  70–80 % on large bf16 GEMMs); non-GEMM operators memory-bound, moving each layer's activation
  bytes (Korthikanti eq. 2) through HBM twice, at ``hbm_bw`` — whole steps then run at 40–55 % of
  peak, the range Megatron-LM reports. minipar: ``GPT.flops_per_token`` (6·N + 12·l·h·s, Kaplan et
  al. 2020, arXiv:2001.08361; PaLM App. B) per token at ``peak_flops``, the stage's share of it;
  full recomputation × 4/3. Both add ``layer_overhead`` per layer and divide by ``compute_share``.
- **TP** (Shoeybi et al. 2019, arXiv:1909.08053, §3): per layer and micro-batch 2 all-reduces of
  b·s·h values forward, 2 backward (megatron: 2 more in a recomputed forward; sequence parallelism
  replaces each by an all-gather + reduce-scatter of the same volume, Korthikanti §4.2.2; minipar:
  2 more per stage for the vocabulary-parallel embedding and head).
- **PP**: each forward and backward of a stage sends one b·s·h activation or gradient; across
  nodes when a node cannot hold two stages (t·d ≥ GPUs per node).
- **Pipeline time**: megatron: the makespan of the real schedule (:func:`minipar.pp.schedules.simulate`
  of ``1f1b``, ``interleaved`` or ``gpipe``), the bubble what it leaves idle; minipar: uniform
  stages, (m + p − 1) stage times, bubble (p − 1) of them (Narayanan §2.2.1).
- **DP / ZeRO** (Rajbhandari et al. 2020, arXiv:1910.02054, §7): an all-reduce of the stage's
  gradients (ZeRO-1/2: reduce-scatter + all-gather, the same volume; ZeRO-3, pp = 1 only: one
  reduce-scatter and an all-gather of the 16-bit weights per forward and backward), after the
  pipeline drains unless ``overlap`` hides it. Optimizer step: 32 bytes per parameter over HBM.
- **Offload** (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840): AdamW's state moves to the host
  (``mem["host"]``); the step adds 2·bytes_per_value·Φ over ``host_bw``.
- **α–β** (lesson 01): a ring all-reduce over n ranks costs 2(n−1)·α + 2(n−1)/n · S/β, a transfer α + S/β.
- **Memory per device**: model states by ZeRO's formula (:func:`minipar.zero.flat.zero_bytes_formula`;
  2 + 2 + 12 bytes per parameter in mixed precision, 4 + 4 + 8 in fp32), the busiest stage;
  activations per Korthikanti et al. 2022 (eq. 2 with TP, §4.2.2 sequence parallel, §5 selective,
  §4.3 full: the layer input kept plus one layer's working set) times the micro-batches stage 0
  holds: min(p, m) under 1F1B, × (1 + (p−1)/(p·v)) interleaved (§4.2.3), m under GPipe. A layout
  fits if this is ≤ ``usable_mem`` of the device's memory.

Left out: kernel-launch and framework overhead on GPUs (``layer_overhead`` 0 there), stragglers,
congestion, data loading, first/last-stage imbalance (megatron), GEMM-shape effects.
"""

from __future__ import annotations

import functools

from minipar.errors import ConfigError
from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate, Layout, ModelShape, check_layout
from minipar.pp.schedules import make_schedule, simulate
from minipar.pp.stages import partition_layers
from minipar.zero.flat import zero_bytes_formula


def all_reduce_time(n: int, nbytes: float, link: tuple) -> float:
    """Seconds of a ring all-reduce over ``n`` ranks of ``nbytes`` on ``link = (α s, β bytes/s)``:
    2(n−1)α + 2(n−1)/n·S/β (Patarasuk & Yuan 2009; lesson 01's fit)."""
    a, b = link
    return 0.0 if n <= 1 else 2 * (n - 1) * a + 2 * (n - 1) / n * nbytes / b


def activation_bytes_per_layer(
    model: ModelShape, b: float, tp: int, recompute: str = "none", seq_parallel: bool = False, bytes_per_value: int = 2
) -> float:
    """Bytes one layer keeps for backward for one micro-batch of ``b`` sequences (Korthikanti et al. 2022,
    arXiv:2205.05198): none s·b·h·(10 + 24/t + 5·a·s/(h·t)) (eq. 2), with sequence parallelism
    s·b·h·(34/t + 5·a·s/(h·t)) (§4.2.2); selective drops the 5·a·s/(h·t) term (§5); full keeps the
    layer's input, 2·s·b·h (÷t with sequence parallelism, §4.3). Written for 2-byte values, scaled
    by bytes_per_value/2. Raises ConfigError for another ``recompute``."""
    if recompute not in ("none", "selective", "full"):
        raise ConfigError(f"recompute={recompute!r}: use 'none', 'selective' or 'full'")
    s, h, a, t = model.seq, model.hidden, model.heads, tp
    sbh = s * b * h
    if recompute == "full":
        x = 2 * sbh / (t if seq_parallel else 1)
    else:  # the replicated part (LayerNorms, dropouts: 10sbh) and the part TP splits, kept apart so that
        # integer sizes give the exact integer count (lesson 08 checks it byte for byte)
        core = 0 if recompute == "selective" else 5 * a * s * s * b
        x = (34 * sbh + core) / t if seq_parallel else 10 * sbh + (24 * sbh + core) / t
    return x * bytes_per_value / 2


def stage_params(model: ModelShape, pp: int, tp: int, counts: str = "megatron") -> list[float]:
    """Parameters one rank of each pipeline stage holds (its TP share), stage 0 .. pp−1 (see module doc).

    megatron (Narayanan §5.1): l/p blocks of 12h² + 13h and the word embedding ÷ t, plus the
    position embedding on stage 0, the tied head's copy of the embedding on the last stage.
    minipar: blocks (12h²+7h)/t + 6h (matrices and split biases; replicated vectors), stage 0 adds
    ⌈V/t⌉·h + s·h (embeddings), the last stage ⌈V/t⌉·h + 2h (head, final LayerNorm).
    """
    h, V = model.hidden, model.vocab
    if counts == "megatron":
        blocks = model.layers // pp * (12 * h * h + 13 * h)
        out = [blocks / tp] * pp
        out[-1] = (blocks + V * h) / tp
        out[0] = (blocks + V * h) / tp + model.seq * h
        return out
    block = (12 * h * h + 7 * h) / tp + 6 * h
    out = []
    for s, (lo, hi) in enumerate(partition_layers(model.layers, pp)):
        n = (hi - lo) * block
        if s == 0:
            n += -(-V // tp) * h + model.seq * h
        if s == pp - 1:
            n += -(-V // tp) * h + 2 * h
        out.append(n)
    return out


@functools.lru_cache(maxsize=256)
def gpt_flops_per_token(model: ModelShape) -> float:
    """Training FLOPs per token of minipar's GPT of this shape: ``GPT.flops_per_token()`` itself (6·N +
    12·l·h·s; Kaplan et al. 2020, arXiv:2001.08361, Table 1; PaLM, arXiv:2204.02311, App. B), the
    model built on the meta device (no memory, no data)."""
    import torch

    from minipar.models import GPT, GPTConfig

    l, h, a, s, V = model.layers, model.hidden, model.heads, model.seq, model.vocab
    with torch.device("meta"):
        return GPT(
            GPTConfig(vocab_size=V, block_size=s, n_layer=l, n_head=a, d_model=h, bias=model.bias)
        ).flops_per_token()


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


@functools.lru_cache(maxsize=4096)
def _simulated(p: int, m: int, v: int, ratio: float, schedule: str = "1f1b") -> float:
    sched = make_schedule("interleaved" if v > 1 else schedule, p, m, v)
    return simulate(sched, t_f=1.0, t_b=ratio).makespan


def pipeline_makespan(p: int, m: int, v: int, ratio: float, schedule: str = "1f1b") -> float:
    """Makespan of 1F1B (v = 1), interleaved 1F1B (v chunks per rank) or GPipe with m micro-batches, in
    units of one action's forward (one chunk: 1/v of a stage), the backward taking ``ratio`` of
    those; from :func:`minipar.pp.schedules.simulate`.

    For m > 4p the schedule is simulated at m₁ = 4p and m₂ = 5p and extended linearly: in the steady
    state every extra micro-batch adds exactly the same time (``tests/test_perf_model.py`` checks the
    extension against the full simulation). Keeps ``python -m minipar.plan`` under a few seconds.
    """
    if m <= 4 * p:
        return _simulated(p, m, v, ratio, schedule)
    m1, m2 = 4 * p, 5 * p
    t1, t2 = _simulated(p, m1, v, ratio, schedule), _simulated(p, m2, v, ratio, schedule)
    return t1 + (t2 - t1) / (m2 - m1) * (m - m1)


def _links(dev: Device, t: int, d: int) -> tuple[tuple, tuple, tuple]:
    """(α, β) of the TP, PP and DP links: inside a node unless the group spans nodes."""
    tp = dev.intra if t <= dev.gpus_per_node else dev.inter
    pp = dev.inter if t * d >= dev.gpus_per_node else dev.intra
    dp = dev.inter if t * d > dev.gpus_per_node else dev.intra
    return tp, pp, dp


def _pipeline_megatron(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Per-term seconds of the pipeline, megatron counts: per-layer FLOPs, the simulated schedule."""
    t, p, b, v, d = layout.tp, layout.pp, layout.micro_batch, layout.v, layout.dp
    s, h, l, V = model.seq, model.hidden, model.layers, model.vocab
    lps = l // p  # layers per stage
    f_layer = 24 * b * s * h * h * (1 + s / (6 * h)) / t
    f_logit = 2 * b * s * h * V / t / p  # logit layer, spread over the stages
    act = activation_bytes_per_layer(model, b, t, "none", layout.seq_parallel, dev.bytes_per_value)
    mem_t = 2 * act / dev.hbm_bw if dev.hbm_bw else 0.0  # memory-bound operators: activations written + read
    eff = dev.peak_flops * dev.gemm_efficiency * dev.compute_share
    ovh = dev.layer_overhead / 3  # per pass: a backward counts as two
    fwd = lps * (f_layer / eff + mem_t / dev.compute_share + ovh / dev.compute_share) + f_logit / eff
    extra = {"none": 0.0, "full": fwd, "selective": lps * 4 * b * s * s * h / t / eff}[layout.recompute]
    bwd = 2 * fwd + extra
    tp_link, pp_link, _ = _links(dev, t, d)
    ar = all_reduce_time(t, b * s * h * dev.bytes_per_value, tp_link)
    tp_f = 2 * lps * ar
    tp_b = 2 * lps * ar + (tp_f if layout.recompute == "full" else 0.0)
    if "tp" in layout.overlap:
        tp_f, tp_b = max(0.0, tp_f - fwd), max(0.0, tp_b - bwd)
    p2p = (pp_link[0] + b * s * h * dev.bytes_per_value / pp_link[1]) if p > 1 and "pp" not in layout.overlap else 0.0
    t_f, t_b = (fwd + tp_f) / v + p2p, (bwd + tp_b) / v + p2p  # one chunk's forward / backward action
    if p == 1:
        pipe = m * (t_f + t_b)
    else:
        ratio = round(t_b / t_f * 20) / 20  # 0.05 steps: the cache of simulations stays small
        pipe = pipeline_makespan(p, m, v, ratio, layout.schedule) * t_f
    busy = m * v * (t_f + t_b)
    return {
        "compute": m * (fwd + bwd),
        "tp": m * (tp_f + tp_b),
        "pp": m * v * 2 * p2p,
        "bubble": pipe - busy,
        "pipe": pipe,
        "busy": busy,
    }


def _pipeline_minipar(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Per-term seconds of the pipeline, minipar counts: GPT.flops_per_token, uniform stages."""
    t, p, b, d = layout.tp, layout.pp, layout.micro_batch, layout.dp
    s, h = model.seq, model.hidden
    layers = max(hi - lo for lo, hi in partition_layers(model.layers, p))
    msg = b * s * h * dev.bytes_per_value  # one activation (b, s, h)
    t_c = (
        gpt_flops_per_token(model) * b * s * (layers / model.layers) / t / dev.peak_flops + layers * dev.layer_overhead
    ) / dev.compute_share
    if layout.recompute == "full":
        t_c *= 4 / 3  # forward + backward = 3 forwards, plus one
    tp_link, pp_link, _ = _links(dev, t, d)
    t_tp = (4 * layers + 2) * all_reduce_time(t, msg, tp_link)
    t_pp = 2 * (pp_link[0] + msg / pp_link[1]) if p > 1 else 0.0
    stage = t_c + t_tp + t_pp
    return {
        "compute": m * t_c,
        "tp": m * t_tp,
        "pp": m * t_pp,
        "bubble": (p - 1) * stage,
        "pipe": (m + p - 1) * stage,
        "busy": m * stage,
    }


def estimate(model: ModelShape, dev: Device, layout: Layout, global_batch: int) -> Estimate:
    """Step time (s), TFLOP/s per device, MFU and memory per device (bytes) of one layout (a MODEL;
    every term in the module doc; ``dev.counts`` picks the megatron or minipar counts).

    Raises:
        ConfigError: a degree that does not divide the model or the batch (the message names it).
    """
    m = check_layout(model, layout, global_batch, dev.counts)
    d, t, z = layout.dp, layout.tp, layout.zero
    pipeline = _pipeline_megatron if dev.counts == "megatron" else _pipeline_minipar
    time = pipeline(model, dev, layout, m)
    pipe, busy = time.pop("pipe"), time.pop("busy")
    psi = max(stage_params(model, layout.pp, t, dev.counts))
    dp_link = _links(dev, t, d)[2]
    dp_t = all_reduce_time(d, layout.grad_bytes * psi, dp_link)
    if z == 3:  # reduce-scatter the gradients once; all-gather 16-bit weights for every fwd and bwd
        dp_t = dp_t / 2 + 2 * m * all_reduce_time(d, 2 * psi, dp_link) / 2
    if "dp" in layout.overlap:
        dp_t = max(0.0, dp_t - 0.9 * busy)  # hidden behind the backward passes
    opt_t = (32 * psi / (d if z else 1) / dev.hbm_bw) if dev.hbm_bw and not layout.offload else 0.0
    host_t = 2 * dev.bytes_per_value * psi / dev.host_bw if layout.offload else 0.0
    time.update(dp=dp_t, optimizer=opt_t, offload=host_t, total=pipe + dp_t + opt_t + host_t)
    mem = memory_per_gpu(model, dev, layout, m)
    n, total = layout.gpus, time["total"]
    return Estimate(
        layout,
        m,
        time,
        mem,
        mem["total"] <= dev.usable_mem * dev.mem_bytes,
        model_flops(model, global_batch, layout.recompute) / total / n / 1e12,
        model_flops(model, global_batch, "none") / total / n / (dev.peak_flops),
        t > dev.gpus_per_node,
    )


def memory_per_gpu(model: ModelShape, dev: Device, layout: Layout, m: int) -> dict:
    """Bytes per device of the busiest stage: params, grads, optimizer (ZeRO formula), activations,
    total (all on the device) and host (offloaded optimizer state)."""
    d, t, p, b, v = layout.dp, layout.tp, layout.pp, layout.micro_batch, layout.v
    bpv = dev.bytes_per_value
    states = zero_bytes_formula(max(stage_params(model, p, t, dev.counts)), layout.zero, d, mixed_precision=bpv == 2)
    opt = 0.0 if layout.offload else states["optimizer"]
    per_layer = activation_bytes_per_layer(model, b, t, layout.recompute, layout.seq_parallel, bpv)
    if layout.schedule == "gpipe":
        inflight = m
    else:
        inflight = min(p, m) * (1 + (p - 1) / (p * v) if v > 1 else 1)
    acts = -(-model.layers // p) * inflight * per_layer
    if layout.recompute == "full":  # the layer being recomputed holds its full activations
        acts += activation_bytes_per_layer(model, b, t, "none", layout.seq_parallel, bpv)
    mem = {"params": states["params"], "grads": states["grads"], "optimizer": opt, "activations": acts}
    mem["total"] = sum(mem.values())
    mem["host"] = states["optimizer"] if layout.offload else 0
    return mem
