"""Device descriptions for the performance model (:mod:`minipar.perf.model`): what a device computes, how fast it talks.

Two kinds, one dataclass (:class:`Device`):

- **a GPU cluster** (:data:`GPUS`: A100 80 GiB / 40 GiB, H100, H200, B200): datasheet presets,
  NVLink inside a node and InfiniBand across nodes at the link table's datasheet rates
  (:mod:`minipar.comm.links`: ``NVLINK_GBPS``, ``NETWORKS``, or any rate: :func:`with_links`) times
  the fraction NCCL's rings achieve on them (``NVLINK_EFF``, ``IB_EFF``),
  counted the way Megatron-LM's papers count a step (``counts="megatron"``). Every constant is a
  datasheet figure, an ASSUMPTION named with the measurement that would pin it, or CHOSEN on the
  declared fit set (:mod:`minipar.perf.published`);
- **this CPU, measured** (:func:`cpu_device`): one rank's matmul FLOP/s (:func:`measured_peak_flops`),
  gloo's α and β (lesson 01's fit), the per-layer overhead, ranks sharing cores; counted as minipar's
  own GPT runs on it (``counts="minipar"``), or with the cluster counts to compare the two (lesson 07).

Units: FLOP/s, bytes, bytes/s, seconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from minipar.comm.links import NETWORKS, NVLINK_GBPS
from minipar.errors import ConfigError
from minipar.perf.gemm import ATTN_KERNELS, SMS, family

if TYPE_CHECKING:
    import torch

COUNTS = ("megatron", "minipar")


@dataclass(frozen=True)
class Device:
    """One device and its links (datasheet or measured). Units: FLOP/s, bytes, bytes/s, seconds.

    Attributes:
        peak_flops: dense peak of the training dtype (bf16 on GPUs; a rank's measured fp32 matmul
        FLOP/s on this CPU). mem_bytes: memory per device; ``usable_mem`` the fraction a layout may
        fill (0.9 on a GPU, ASSUMED: CUDA context, NCCL buffers, fragmentation; ``torch.cuda.max_memory_reserved``
        on a real run pins it; one published run held more: Megatron-Bridge's Nemotron-3.5 Lightning card, 16 H100s,
        72.1 GiB allocated and 75.3 GiB reserved of 80, 90 % and 94 %; a hybrid model this planner cannot describe,
        so the figure is not checked against the model's count). gpus_per_node.
        intra/inter: (α seconds, β bytes/s) inside a node (NVLink) and across nodes (InfiniBand,
        per GPU); the same pair on this CPU. gemm_efficiency: achievable fraction of the peak on
        large GEMMs (0.68, chosen on the fit set). hbm_bw: achievable memory bandwidth for the
        memory-bound operators (None: not modelled,
        ``layer_overhead`` measures them). layer_overhead: seconds per layer, forward + backward,
        that do not scale with FLOPs (operator launches, autograd bookkeeping). compute_share:
        fraction of a device one rank gets (cores / ranks when processes share CPU cores).
        bytes_per_value: activation/communication dtype (2 bf16, 4 fp32). host_bw: bytes/s to host
        memory for optimizer offload (inf: not modelled). counts: how a step is counted,
        ``"megatron"`` or ``"minipar"`` (see :mod:`minipar.perf.model`). fp8_flops: dense FP8
        tensor-core peak (None: the device has none, as the A100). sms: streaming multiprocessors
        (0: no shape model, every GEMM at ``gemm_efficiency``; GPUs: waves and roofline, :mod:`minipar.perf.gemm`).
        framework: whose kernels run the step (:data:`FRAMEWORKS`, set by :func:`for_framework`): it sets
        ``gemm_efficiency``, ``mem_passes``, ``overlap_cost`` and, under FP8, which activations are kept in 1 byte
        (:mod:`minipar.perf.memory`). mem_passes: how many times a block's activation bytes (Korthikanti eq. 2)
        cross HBM in its forward's memory-bound operators (2: written once, read once; more when unfused
        elementwise kernels each read and write their tensor). overlap_cost: the fraction of a hidden DP/ZeRO
        collective's time that still lands on the step (0: hiding is free; 1: as if exposed), :data:`OVERLAP_COST`.
        attention: the FlashAttention kernel, one of :data:`~minipar.perf.gemm.ATTN_KERNELS` ("": the framework's,
        :data:`~minipar.perf.gemm.ATTN_KERNEL`), :func:`~minipar.perf.gemm.attention_rate`. compiled: the blocks run
        under ``torch.compile`` (their elementwise operators fused: :func:`block_passes`). loss_bytes: HBM bytes the
        loss's memory-bound kernels move per logit value (s·b·V/t of them per micro-batch, on the last pipeline stage):
        :data:`LOSS_BYTES` by framework, :data:`FUSED_LOSS_BYTES` with a fused cross-entropy kernel; 0 on this CPU
        (``layer_overhead`` measures it). fsdp2: ZeRO >= 2 runs as PyTorch's FSDP2 (``fully_shard``), which copies
        each gathered unit out of its all-gather buffer and each gradient into its reduce-scatter buffer on the
        compute stream (:func:`minipar.perf.sharding.fsdp2_copy_time`).
    """

    name: str
    peak_flops: float
    mem_bytes: float
    gpus_per_node: int = 8
    intra: tuple = (5e-6, 230e9)
    inter: tuple = (1e-5, 22e9)
    gemm_efficiency: float = 0.68  # = GEMM_EFF below (A100's, chosen on its fit set)
    hbm_bw: float | None = None
    layer_overhead: float = 0.0
    compute_share: float = 1.0
    bytes_per_value: int = 2
    usable_mem: float = 0.9
    host_bw: float = math.inf
    counts: str = "megatron"
    fp8_flops: float | None = None
    sms: int = 0
    framework: str = "pytorch"
    mem_passes: float = 2.0
    overlap_cost: float = 0.0
    attention: str = ""
    compiled: bool = False
    loss_bytes: float = 0.0
    fsdp2: bool = False

    def __post_init__(self):
        if self.counts not in COUNTS:
            raise ConfigError(f"Device.counts={self.counts!r}: use one of {COUNTS}")
        if self.attention and self.attention not in ATTN_KERNELS:
            raise ConfigError(f"attention kernel {self.attention!r}: use one of {ATTN_KERNELS}")


GiB = 2**30
# Link efficiencies: the fraction of a link's per-direction datasheet rate that NCCL's ring reaches.
# ASSUMPTIONS, not fitted: 0.77 on NVLink (230 of 300 GB/s: the all_reduce bus bandwidth nccl-tests
# reports on DGX A100), 0.88 on InfiniBand (22 of 25 GB/s per 200 Gb/s HCA). What pins them down on
# a real cluster: ``all_reduce_perf`` of nccl-tests, busbw at >= 1 GB messages, inside a node and across.
NVLINK_EFF, IB_EFF = 0.77, 0.88
ALPHA_INTRA, ALPHA_INTER = 5e-6, 1e-5  # s per ring step: ASSUMED (nccl-tests' small-message latency pins it)
GEMM_EFF = 0.68  # A100: fraction of peak on large bf16 GEMMs, CHOSEN on its fit set (published.fit_gemm_efficiency)
# Per device (large GEMMs; :mod:`minipar.perf.gemm` adds waves and the roofline): A100 (both memories) on
# Narayanan Table 1; H100 CHOSEN on its own fit set (llm-foundry's single-node H100 rows,
# :func:`minipar.perf.published.fit_gemm_efficiency` with device "h100"); H200 the H100's (same SMs and
# clocks, ASSUMED); B200 ASSUMED as H100 (no fit set: a published B200 run would pin it).
GEMM_EFF_BY_DEVICE = {"A100": GEMM_EFF, "H100": 0.64, "H200": 0.64, "B200": 0.64}
# With it, per device, for PyTorch stacks (FSDP, eager kernels), CHOSEN jointly with the efficiency on the same fit
# set (:func:`minipar.perf.published.fit_h100_pytorch`; grid: passes 2-6, cost 0-1 by 0.25, efficiency 0.40-0.74 by
# 0.02, at most 0.75, the isolated bf16 GEMM rate measured on an H100 SXM, ``examples/gemm_rate.py``):
# MEM_PASSES: each activation byte crosses HBM this many times in a forward's memory-bound operators (2 = written
# once and read once, Megatron's fused kernels; eager PyTorch runs LayerNorm, GELU, residual adds and casts as
# separate kernels that each read and write their tensor). OVERLAP_COST: the fraction of a "hidden" DP/ZeRO
# collective's time the step still pays: NCCL's kernels take SMs and HBM bandwidth from the GEMMs beside them, and
# FSDP issues each all-gather from the CPU, late when the CPU falls behind. llm-foundry's H100 rows, read with their
# collectives exposed, agree across checkpointed and other rows (:func:`minipar.perf.foundry.compute_only_hfu`).
# A100: 2 and 0, as its fit set (Megatron-LM) was chosen with; its llm-foundry rows read within 11 % at them,
# and read with their collectives exposed they pass 0.8 of the peak, so there the collectives were hidden.
# H200 and B200 ASSUMED as the H100. Chosen (2026-11-27, with llm-foundry's rows at their Triton attention kernel,
# minipar.perf.gemm.TRITON_VS_FA2): 3 passes, 0.5, 0.66; fit median 1.9 %. Re-chosen the same day, when each FSDP unit's
# collective began to pay its own ring latency (minipar.perf.sharding.collectives): 3 passes, 0.25, 0.64; fit median 2.1
# % (3, 0.5, 0.66 now read 2.3 %: a flat minimum). Checked on a device, after the choice
# (``examples/attention_rate.py``, one H100 SXM, 2026-11-27; tests/test_perf_model.py): one block, eager bf16,
# FlashAttention-2, profiled. Llama 3 8B and 70B (torchtitan's code: fp32 RMSNorm, complex RoPE, SwiGLU): the
# memory-bound kernels took 4.9-5.1 passes of the block's activation bytes. MPT 1b-30b (llm-foundry's code: bf16
# LayerNorm, GELU): 1.1-1.3 passes, and its GEMMs ran at 0.67-0.82 of the peak. So the chosen 3 passes and 0.64 are not
# one block's: they also carry what llm-foundry's steps lose outside the blocks (its published 1b step at s = 2048 is
# 1.5x its 24 blocks measured). PyTorch's fused RMSNorm saves about 3 ms of an 8B block's 6 (probe1.jsonl).
MEM_PASSES = {"A100": 2.0, "H100": 3.0, "H200": 3.0, "B200": 3.0}
# Those passes are the fit set's blocks' (MPT: LayerNorm, GELU). A gated block in eager PyTorch as torchtitan writes it
# (fp32 RMSNorm, complex RoPE, SwiGLU) crossed HBM 3.8 more times per activation byte on the same H100 (4.9-5.1 against
# 1.1-1.3, the measured blocks above): GATED_EAGER_PASSES, added for a gated model under a PyTorch stack in eager mode
# (:func:`block_passes`). ASSUMED: what the steps lose outside the blocks is the same for both stacks, and under
# torch.compile (``Device.compiled``) a gated block's fused operators cross HBM no more than MPT's.
GATED_EAGER_PASSES = 3.8
OVERLAP_COST = {"A100": 0.0, "H100": 0.25, "H200": 0.25, "B200": 0.25}
# Per framework: these are PyTorch-native stacks' (llm-foundry, torchtitan, fms-fsdp: FSDP, eager or compiled
# kernels), the default. Megatron-Core with Transformer Engine (Megatron-LM, NeMo, Megatron-Bridge) runs the same
# GEMMs with fused neighbours and less around them: its own value per device, CHOSEN on its own fit set (H100:
# NeMo 24.07's DGX-H100 table, 12 rows, :func:`minipar.perf.published.fit_gemm_efficiency` with framework
# "megatron"; :mod:`minipar.perf.nemo`); A100: Narayanan Table 1 (Megatron-LM) is already the A100's fit set,
# and llm-foundry's A100 test rows read within 11 % at it, so both frameworks share 0.68; H200 and B200 ASSUMED
# as the H100.
FRAMEWORKS = ("pytorch", "megatron")
GEMM_EFF_MEGATRON = {"A100": GEMM_EFF, "H100": 0.60, "H200": 0.60, "B200": 0.60}
# HBM_EFF: the fraction of the datasheet HBM bandwidth memory-bound kernels reach, ASSUMED (STREAM-like copies). On an
# H100 SXM (examples/attention_rate.py, 2026-11-27, examples/h100_2026-11-27/hbm.json): copy, add and scale on 1-4 GiB
# reach 2.94-3.06 TB/s, 0.88-0.91 of 3.35; a bf16 -> fp32 cast 1.97 TB/s, 0.59. MEM_PASSES is counted at 0.85: the
# eager blocks' memory-bound kernels measured their passes at this rate (the product is what the model uses).
HBM_EFF = 0.85
# The loss: cross-entropy over s·b·V/t logits per micro-batch on the last stage, memory-bound. Counted from the code
# (bytes per logit value, forward + backward). Megatron-LM's VocabParallelCrossEntropy
# (megatron/core/tensor_parallel/cross_entropy.py at core_v0.8.0; its default, without --cross-entropy-loss-fusion):
# the cast to fp32 (2 read, 4 written), max (4), subtract (8), exp (8), sum (4), divide (8); backward: × the
# gradient (8), the cast back (6): 52. PyTorch's F.cross_entropy(logits.float(), ...) (torchtitan's loss): the cast
# (6), log_softmax (16), the gradient of nll_loss written (4), log_softmax's backward (16), the cast back (6): 48.
# A fused kernel (Transformer Engine's, flash-attn's, Liger's: reads the bf16 logits in forward, reads them and
# writes the gradient in backward): 6 (``--fused-loss``). At HBM_EFF of the datasheet rate, as every memory-bound
# operator here. The H100's constants were chosen with it (Megatron-Core on NeMo 24.07, unfused: median 3.0 % without
# it, 2.4 % with, the efficiency 0.60 either way; PyTorch on llm-foundry, whose fused loss is given: the same three
# constants); H200 and B200 as the H100. The A100's efficiency was chosen without it (Narayanan's fit set): 0 there,
# where it rides among what a step loses outside its blocks (charged, the fit would move the efficiency to 0.70).
LOSS_BYTES = {"pytorch": 48.0, "megatron": 52.0}
FUSED_LOSS_BYTES = 6.0
LOSS_CARRIED = {"A100"}  # families whose constants were chosen without the loss term: loss_bytes 0 there


def gpu(name, tflops, mem_gib, hbm_tbs, nvlink, net="hdr", mem_bytes=None, fp8_tflops=None) -> Device:
    """A GPU preset from its datasheet: dense bf16 TFLOP/s, memory (GiB unless ``mem_bytes``), HBM TB/s,
    NVLink generation and inter-node network (:data:`minipar.comm.links.NETWORKS`), dense FP8 TFLOP/s
    (None: no FP8 tensor cores); links at the link table's rates times the assumed efficiencies."""
    intra = (ALPHA_INTRA, NVLINK_EFF * NVLINK_GBPS[nvlink] / 8 * 1e9)
    inter = (ALPHA_INTER, IB_EFF * NETWORKS[net][0] / 8 * 1e9)
    mem = mem_bytes or mem_gib * GiB
    fp8 = fp8_tflops * 1e12 if fp8_tflops else None
    fam = family(name)
    return Device(
        name, tflops * 1e12, mem, 8, intra, inter, hbm_bw=HBM_EFF * hbm_tbs * 1e12, fp8_flops=fp8, sms=SMS[fam],
        **_chosen(fam, "pytorch"),
    )  # fmt: skip


def block_passes(dev: Device, gated: bool) -> float:
    """How many times a block's activation bytes cross HBM in its forward's memory-bound operators on ``dev``:
    ``Device.mem_passes``, plus :data:`GATED_EAGER_PASSES` for a gated (SwiGLU) model under a PyTorch stack
    (``framework`` "pytorch", a GPU with a shape model) in eager mode (not ``Device.compiled``)."""
    eager = dev.framework == "pytorch" and dev.sms and not dev.compiled
    return dev.mem_passes + (GATED_EAGER_PASSES if gated and eager else 0.0)


def _chosen(fam: str, framework: str) -> dict:
    """The constants chosen for a device family under a framework: ``gemm_efficiency``, ``mem_passes`` and
    ``overlap_cost`` (Megatron-Core: its own efficiency, 2 passes, hidden collectives free, as on its fit set), and
    the framework's unfused loss, ``loss_bytes`` (:data:`LOSS_BYTES`)."""
    if framework == "megatron":
        chosen = {"gemm_efficiency": GEMM_EFF_MEGATRON[fam], "mem_passes": 2.0, "overlap_cost": 0.0}
    else:
        chosen = {
            "gemm_efficiency": GEMM_EFF_BY_DEVICE[fam],
            "mem_passes": MEM_PASSES[fam],
            "overlap_cost": OVERLAP_COST[fam],
        }
    return {**chosen, "loss_bytes": 0.0 if fam in LOSS_CARRIED else LOSS_BYTES[framework]}


# Datasheets (dense bf16 peak, memory, HBM bandwidth): A100 SXM 80 GB (312 TFLOP/s, 80 GiB, 2.04 TB/s;
# 40 GB: 1.56 TB/s), H100 SXM (989 TFLOP/s, 80 GiB, 3.35 TB/s), H200 SXM (989 TFLOP/s, 141 GB, 4.8 TB/s),
# B200 (HGX B200: 2.25 PFLOP/s dense bf16, 180 GB per GPU, 8 TB/s). "80 GB" cards hold 80 GiB (nvidia-smi: 81920 MiB).
# Dense FP8: half the datasheets' "with sparsity" figures: H100 SXM and H200 SXM 3,958 -> 1,979 TFLOP/s, HGX B200
# 9 -> 4.5 PFLOP/s per GPU; the A100 has no FP8 tensor cores (its datasheet: TF32, bf16/fp16, int8 only).
GPUS = {
    "a100": gpu("A100-SXM4-80GB", 312, 80, 2.04, 3, "hdr"),
    "a100-40gb": gpu("A100-SXM4-40GB", 312, 40, 1.56, 3, "hdr"),
    "h100": gpu("H100-SXM5-80GB", 989, 80, 3.35, 4, "ndr", fp8_tflops=1979),
    "h200": gpu("H200-SXM-141GB", 989, 0, 4.8, 4, "ndr", mem_bytes=141e9, fp8_tflops=1979),
    "b200": gpu("B200-180GB", 2250, 0, 8.0, 5, "ndr", mem_bytes=180e9, fp8_tflops=4500),
}


def for_framework(dev: Device, framework: str) -> Device:
    """``dev`` run by ``framework`` (:data:`FRAMEWORKS`): ``"pytorch"`` (the presets') takes
    :data:`GEMM_EFF_BY_DEVICE` of its family, ``"megatron"`` :data:`GEMM_EFF_MEGATRON`, and ``Device.framework`` says
    which. The same framework, or a device with no shape model (this CPU, measured), is returned unchanged.

    Raises:
        ConfigError: an unknown ``framework``.
    """
    if framework not in FRAMEWORKS:
        raise ConfigError(f"framework {framework!r}: use one of {FRAMEWORKS} (the stack whose kernels run the GEMMs)")
    fam = family(dev.name)
    if framework == dev.framework or fam is None or not dev.sms:
        return dev
    return replace(dev, framework=framework, **_chosen(fam, framework))


def with_fused_loss(dev: Device) -> Device:
    """``dev`` with a fused cross-entropy kernel (:data:`FUSED_LOSS_BYTES`, ``--fused-loss``), where the loss is charged
    at all (``loss_bytes`` > 0: not on the A100, whose constants carry it, nor on this CPU)."""
    return replace(dev, loss_bytes=FUSED_LOSS_BYTES) if dev.loss_bytes else dev


RATE_RANGE = (1e-3, 1e6)  # a custom device's or link's number, in its flag's unit: beyond it the model's sums overflow


def check_rate(flag: str, value: float, unit: str) -> None:
    """Raise :class:`ConfigError` unless ``value`` (of ``flag``, in ``unit``) is finite, within :data:`RATE_RANGE`."""
    if not 0 < value < math.inf:
        raise ConfigError(f"{flag} {value}: must be a finite number > 0 ({unit})")
    if not RATE_RANGE[0] <= value <= RATE_RANGE[1]:
        raise ConfigError(f"{flag} {value:g}: outside {RATE_RANGE[0]:g} … {RATE_RANGE[1]:g} ({unit}); a typo?")


def with_links(dev: Device, intra_gbps: float | None = None, inter_gbps: float | None = None, net: str | None = None):
    """``dev`` with other links: per-direction Gb/s inside a node / per GPU across nodes (datasheet rates,
    scaled by the assumed efficiencies), or a network preset ``net`` of :data:`minipar.comm.links.NETWORKS`.

    Raises:
        ConfigError: a rate <= 0, not finite or outside 0.001 … 1e6 Gb/s, or an unknown ``net``.
    """
    if net is not None and net not in NETWORKS:
        raise ConfigError(f"network {net!r}: use one of {sorted(NETWORKS)} or give --inter-node-gbps")
    for k, x in (("intra-node", intra_gbps), ("inter-node", inter_gbps)):
        if x is not None:
            check_rate(f"--{k}-gbps", x, "Gb/s per direction per GPU")
    inter_gbps = inter_gbps or (NETWORKS[net][0] if net else None)
    intra = (dev.intra[0], NVLINK_EFF * intra_gbps / 8 * 1e9) if intra_gbps else dev.intra
    inter = (dev.inter[0], IB_EFF * inter_gbps / 8 * 1e9) if inter_gbps else dev.inter
    return replace(dev, intra=intra, inter=inter)


def cpu_device(
    peak_flops: float,
    alpha: float = 1e-4,
    beta: float = 1e9,
    layer_overhead: float = 0.0,
    ranks: int = 1,
    cores: int = 1,
    mem_bytes: float = 2**30,
    counts: str = "minipar",
    host_bw: float = math.inf,
) -> Device:
    """This machine as a :class:`Device`, from minipar's own measurements (lesson 07 fits them).

    ``peak_flops``: a rank's fp32 matmul FLOP/s (:func:`measured_peak_flops`; already achievable:
    gemm_efficiency 1); α (seconds per ring step) and β (bytes/s) of gloo, lesson 01's fit;
    ``layer_overhead``: one block's forward + backward seconds beyond its FLOPs; ``ranks``
    processes sharing ``cores`` cores (compute_share = min(1, cores / ranks)); all on one "node"
    (every link is (α, β)); fp32 values; a rank may fill all of ``mem_bytes``; no HBM term
    (``layer_overhead`` measures it). ``counts``: ``"minipar"`` (minipar's GPT as it runs here) or
    ``"megatron"`` (the cluster counts, fed with this CPU's numbers). Raises ConfigError for
    another ``counts``.
    """
    return Device(
        "this CPU",
        peak_flops,
        mem_bytes,
        ranks,
        (alpha, beta),
        (alpha, beta),
        1.0,
        None,
        layer_overhead,
        min(1.0, cores / ranks),
        4,
        1.0,
        host_bw,
        counts,
    )


def measured_peak_flops(
    device: torch.device, dtype: torch.dtype | None = None, n: int = 512, repeats: int = 5
) -> float:
    """This device's achievable matmul FLOP/s, *measured*: best of ``repeats`` (n×n)@(n×n) products.

    2n³ FLOPs per product; ``dtype`` None: float32. Used as the denominator of MFU (model-FLOPs
    utilisation, Chowdhery et al. 2022, PaLM, arXiv:2204.02311, App. B) instead of a vendor's datasheet figure.
    """
    import torch  # here, not at the top: the planner's command line starts without torch

    dtype = dtype or torch.float32
    g = torch.Generator(device).manual_seed(0)  # a private generator: the training RNG is untouched
    a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=g) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
