"""Device descriptions for the performance model (:mod:`minipar.perf.model`): what a device computes, how fast it talks.

Two kinds, one dataclass (:class:`Device`):

- **a GPU cluster** (:data:`GPUS`): datasheet presets, NVLink inside a node and InfiniBand across
  nodes, counted the way Megatron-LM's papers count a step (``counts="megatron"``);
- **this CPU, measured** (:func:`cpu_device`): one rank's matmul FLOP/s (:func:`measured_peak_flops`),
  gloo's α and β (lesson 01's fit), the per-layer overhead, ranks sharing cores; counted as minipar's
  own GPT runs on it (``counts="minipar"``), or with the cluster counts to compare the two (lesson 07).

Units: FLOP/s, bytes, bytes/s, seconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from minipar.errors import ConfigError

COUNTS = ("megatron", "minipar")


@dataclass(frozen=True)
class Device:
    """One device and its links (datasheet or measured). Units: FLOP/s, bytes, bytes/s, seconds.

    Attributes:
        peak_flops: dense peak of the training dtype (bf16 on GPUs; a rank's measured fp32 matmul
        FLOP/s on this CPU). mem_bytes: memory per device; ``usable_mem`` the fraction a layout may
        fill (0.9 on a GPU: CUDA context, NCCL buffers, fragmentation). gpus_per_node.
        intra/inter: (α seconds, β bytes/s) inside a node (NVLink) and across nodes (InfiniBand,
        per GPU); the same pair on this CPU. gemm_efficiency: achievable fraction of the peak on
        large GEMMs. hbm_bw: memory bandwidth for the memory-bound operators (None: not modelled,
        ``layer_overhead`` measures them). layer_overhead: seconds per layer, forward + backward,
        that do not scale with FLOPs (operator launches, autograd bookkeeping). compute_share:
        fraction of a device one rank gets (cores / ranks when processes share CPU cores).
        bytes_per_value: activation/communication dtype (2 bf16, 4 fp32). host_bw: bytes/s to host
        memory for optimizer offload (inf: not modelled). counts: how a step is counted,
        ``"megatron"`` or ``"minipar"`` (see :mod:`minipar.perf.model`).
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
    usable_mem: float = 0.9
    host_bw: float = math.inf
    counts: str = "megatron"

    def __post_init__(self):
        if self.counts not in COUNTS:
            raise ConfigError(f"Device.counts={self.counts!r}: use one of {COUNTS}")


# Datasheets: A100 SXM 80 GB (312 TFLOP/s bf16 dense, 2.04 TB/s HBM2e, NVLink3 300 GB/s per direction,
# one 200 Gb/s HDR HCA per GPU on DGX A100 / Selene); H100 SXM (989 TFLOP/s, 3.35 TB/s, NVLink4
# 450 GB/s, 400 Gb/s NDR per GPU). β are what NCCL's ring reaches (~75-85 % of the link), α a ring step.
GPUS = {
    "a100": Device("A100-SXM4-80GB", 312e12, 80e9, 8, (5e-6, 230e9), (1e-5, 22e9), 0.75, 0.85 * 2.04e12),
    "a100-40gb": Device("A100-SXM4-40GB", 312e12, 40e9, 8, (5e-6, 230e9), (1e-5, 22e9), 0.75, 0.85 * 1.56e12),
    "h100": Device("H100-SXM5-80GB", 989e12, 80e9, 8, (5e-6, 360e9), (1e-5, 44e9), 0.75, 0.85 * 3.35e12),
}


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
    device: torch.device, dtype: torch.dtype = torch.float32, n: int = 512, repeats: int = 5
) -> float:
    """This device's achievable matmul FLOP/s, *measured*: best of ``repeats`` (n×n)@(n×n) products.

    2n³ FLOPs per product. Used as the denominator of MFU (model-FLOPs utilisation, Chowdhery et
    al. 2022, PaLM, arXiv:2204.02311, App. B) instead of a vendor's datasheet figure.
    """
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
