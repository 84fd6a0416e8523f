"""A small 3D-parallelism planner: memory and step time of every (pp, dp, tp, m) layout, ranked.

    hw = Hardware(peak_flops=..., mem_bytes=..., bw=..., latency=...)    # measured, not a datasheet
    for e in plan(cfg, batch=16, world=8, hw=hw)[:3]:
        print(e.layout, e.mem["total"], e.time["total"])

It is a MODEL (a few lines of arithmetic per layout), to be checked against measured runs
(lesson 07 does, for every factorization of 8 on its CPU). Its cluster-scale sibling, with mixed
precision, recomputation, ZeRO stages, interleaving and NVLink/InfiniBand topology, checked against
published Megatron-LM and MegaScale runs, is :mod:`minipar.perf_model` (``python -m minipar.plan``). All sizes in bytes, times in seconds,
fp32 training with AdamW.

Memory per rank (the busiest pipeline stage):

- parameters Φ_rank: the stage's blocks (12d²+13d each; the 12d²+7d of the four matrices, qkv's
  and fc's biases split over tp) plus, on the first/last stage, the vocabulary-split embedding
  and head (⌈V/tp⌉·d each) and the replicated position embedding / final LayerNorm;
- weights 4Φ, gradients 4Φ, AdamW moments 8Φ (÷dp with ZeRO-1: Rajbhandari et al. 2020,
  arXiv:1910.02054, §5.1);
- activations: Korthikanti et al. 2022 (arXiv:2205.05198, §4, eq. 2 with tensor parallelism,
  no sequence parallelism) give s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes per layer and micro-batch
  for 16-bit activations; fp32 doubles it. A rank holds ``L/pp`` layers for ``min(pp, m)``
  micro-batches under 1F1B (stage 0 is the worst), ``m`` under GPipe (Narayanan et al. 2021,
  arXiv:2104.04473, §2.2.1).
- recomputation (lesson 08, Korthikanti §5): ``"selective"`` drops the 5·a·s/(h·t) attention-core
  term; ``"full"`` keeps only each layer's input, s·b·h values, plus one layer's full activations
  while it is recomputed in backward; full costs one more forward (compute × 4/3);
- offload (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840): AdamW's moments move to host memory
  (``mem["host"]``, not in the device total); the step adds 2 · 4Φ bytes over ``bw["host"]``.

Step time (Narayanan et al. 2021, §3, with a latency–bandwidth (α–β) cost per message):

- a pipeline of ``pp`` uniform stages finishes ``m`` micro-batches in ``(m + pp − 1)`` stage
  times (bubble fraction (pp−1)/m, §2.2.1); one stage time = compute + its TP all-reduces
  (4 per layer, of b·s·h·4 bytes: §3 of Shoeybi et al. 2019, arXiv:1909.08053) + two
  point-to-point transfers of b·s·h·4 bytes between stages;
- compute: 6·N + 12·L·h·s FLOPs per token (``GPT.flops_per_token``) at ``peak_flops`` plus a
  fixed ``layer_overhead`` per layer and micro-batch, stretched by ``1 / compute_share`` when
  ranks share cores (8 ranks on 2 cores: 4×);
- then the data-parallel gradient all-reduce (2(dp−1)/dp · 4Φ bytes) — not overlapped here;
- a ring all-reduce over n ranks costs 2(n−1)·α + 2(n−1)/n · S/β; a transfer α + S/β.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from minipar.errors import ConfigError
from minipar.mesh import factorizations
from minipar.models import GPTConfig
from minipar.pp.executor import partition_layers


@dataclass
class Hardware:
    """What the planner knows about a device and its links (measure them: see lesson 07).

    Attributes:
        peak_flops: one device's achievable FLOP/s; ``compute_share``: the fraction of a device a
        rank gets (1 on GPUs; cores / ranks when processes share CPU cores).
        mem_bytes: memory per device. bw: bytes/s per link, ``{"tp", "dp", "pp"}`` (TP inside a
        node, DP/PP possibly across nodes). latency: α, seconds per message step.
        layer_overhead: seconds per layer and micro-batch (forward + backward) that do not scale
        with FLOPs — operator launches, autograd bookkeeping; dominant for tiny models (and, on a
        GPU, kernel-launch latency).
    """

    peak_flops: float
    mem_bytes: float
    bw: dict = field(default_factory=lambda: {"tp": 1e9, "dp": 1e9, "pp": 1e9})
    latency: float = 1e-4
    compute_share: float = 1.0
    layer_overhead: float = 0.0


@dataclass
class Estimate:
    pp: int
    dp: int
    tp: int
    m: int
    mem: dict  # bytes: params, grads, optimizer, activations, total
    time: dict  # seconds: compute, tp, pp, bubble, dp, total
    fits: bool

    @property
    def layout(self) -> str:
        return f"pp{self.pp}·dp{self.dp}·tp{self.tp}·m{self.m}"


def stage_params(cfg: GPTConfig, pp: int, tp: int) -> list[float]:
    """Parameters held by one rank of each pipeline stage (its TP share), stage 0 .. pp−1."""
    d, V = cfg.d_model, cfg.vocab_size
    block = (12 * d * d + 7 * d) / tp + 6 * d  # sharded matrices (+ split biases) + replicated vectors
    out = []
    for s, (lo, hi) in enumerate(partition_layers(cfg.n_layer, pp)):
        n = (hi - lo) * block
        if s == 0:
            n += math.ceil(V / tp) * d + cfg.block_size * d
        if s == pp - 1:
            n += math.ceil(V / tp) * d + 2 * d
        out.append(n)
    return out


def activation_bytes_per_layer(
    cfg: GPTConfig, micro_batch: int, tp: int, bytes_per_value: int = 4, recompute: str = "none"
) -> float:
    """Bytes one layer keeps for backward per micro-batch. Korthikanti et al. 2022, eq. 2 (TP, no SP):
    s·b·h·(10 + 24/t + 5·a·s/(h·t)) for 2-byte values; "selective" drops the last term (§5); "full"
    keeps the layer input only, s·b·h values (§4.3). Raises ConfigError for another mode."""
    s, b, h, a = cfg.block_size, micro_batch, cfg.d_model, cfg.n_head
    if recompute == "full":
        return s * b * h * bytes_per_value
    if recompute not in ("none", "selective"):
        raise ConfigError(f"recompute={recompute!r}: use none, selective or full")
    core = 5 * a * s / (h * tp) if recompute == "none" else 0.0
    return s * b * h * (10 + 24 / tp + core) * bytes_per_value / 2


def _all_reduce(n: int, nbytes: float, bw: float, alpha: float) -> float:
    return 0.0 if n == 1 else 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw


def estimate(
    cfg: GPTConfig,
    batch: int,
    pp: int,
    dp: int,
    tp: int,
    m: int,
    hw: Hardware,
    zero: int = 0,
    schedule: str = "1f1b",
    recompute: str = "none",
    offload: bool = False,
) -> Estimate:
    """Memory (bytes) and step time (seconds) of one layout; see the module doc for every term."""
    import torch

    from minipar.models import GPT

    with torch.device("meta"):
        fpt = GPT(cfg).flops_per_token()
    s, h = cfg.block_size, cfg.d_model
    b = batch / (dp * m)  # sequences per micro-batch
    params = max(stage_params(cfg, pp, tp))
    layers = max(hi - lo for lo, hi in partition_layers(cfg.n_layer, pp))
    in_flight = m if schedule == "gpipe" else min(pp, m)
    act = layers * in_flight * activation_bytes_per_layer(cfg, b, tp, recompute=recompute)
    if recompute == "full":  # one layer re-run in full during backward
        act += activation_bytes_per_layer(cfg, b, tp)
    opt_bytes = 8 * params / (dp if zero else 1)
    mem = {"params": 4 * params, "grads": 4 * params, "optimizer": 0 if offload else opt_bytes, "activations": act}
    mem["total"] = sum(mem.values())
    mem["host"] = opt_bytes if offload else 0
    msg = b * s * h * 4  # one activation (b, s, h) in fp32
    t_c = (fpt * b * s * (layers / cfg.n_layer) / tp / hw.peak_flops + layers * hw.layer_overhead) / hw.compute_share
    if recompute == "full":
        t_c *= 4 / 3  # forward + backward = 3 forwards, plus one
    t_tp = (4 * layers + 2) * _all_reduce(tp, msg, hw.bw["tp"], hw.latency)
    t_pp = 2 * (hw.latency + msg / hw.bw["pp"]) if pp > 1 else 0.0
    stage = t_c + t_tp + t_pp
    pipe = (m + pp - 1) * stage
    t_dp = _all_reduce(dp, 4 * params, hw.bw["dp"], hw.latency)
    t_host = 2 * 4 * params / hw.bw.get("host", float("inf")) if offload else 0.0
    time = {
        "compute": m * t_c,
        "tp": m * t_tp,
        "pp": m * t_pp,
        "bubble": (pp - 1) * stage,
        "dp": t_dp,
        "offload": t_host,
    }
    time["total"] = pipe + t_dp + t_host
    return Estimate(pp, dp, tp, m, mem, time, mem["total"] <= hw.mem_bytes)


def plan(
    cfg: GPTConfig,
    batch: int,
    world: int,
    hw: Hardware,
    microbatches=(1, 2, 4, 8),
    zero: int = 0,
    schedule: str = "1f1b",
    recompute: str = "none",
    offload: bool = False,
) -> list[Estimate]:
    """Every valid (pp, dp, tp, m) for ``world`` ranks, fitting ones first, fastest first.

    Valid: tp divides n_head and d_model, pp <= n_layer, dp·m divides ``batch``.
    """
    out = []
    for pp, dp, tp in factorizations(world):
        if cfg.n_head % tp or cfg.d_model % tp or pp > cfg.n_layer:
            continue
        for m in microbatches:
            if batch % (dp * m) == 0:
                out.append(estimate(cfg, batch, pp, dp, tp, m, hw, zero, schedule, recompute, offload))
    return sorted(out, key=lambda e: (not e.fits, e.time["total"]))


def rank_correlation(a: list[float], b: list[float]) -> float:
    """Spearman's ρ: the Pearson correlation of the ranks of ``a`` and ``b`` (ties get the mean rank).

    1 = the planner orders the layouts exactly as the measurement does; 0 = no relation.
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
