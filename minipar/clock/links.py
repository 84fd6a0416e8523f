"""Links of the emulated cluster: α–β presets named for real hardware, and their scaling to this machine.

    from minipar.clock.links import NVLINK4, IB_NDR, PCIE5, scaled, cluster_links
    NVLINK4.time(2**20)                          # seconds to move 1 MiB over one H100's NVLink 4
    intra, inter = cluster_links(cpu_flops)      # NVLink 4 / IB NDR, scaled to this CPU (see below)
    slow_motion(IB_NDR, here_s=20e-3, there_s=2e-3)   # an action: 20 ms here, 2 ms on an H100

A :class:`Link` costs ``α + n/β`` seconds for one message of ``n`` bytes (Hockney's model): α the
per-message (per ring step) latency, β the bandwidth of ONE direction as one GPU sees it.

The presets and where their numbers come from:

- :data:`NVLINK4`, inside an H100 SXM node (NVSwitch): β = 450 GB/s per direction per GPU, the
  H100 datasheet's "NVLink 900 GB/s" counted both ways (18 NVLink 4 links × 25 GB/s per direction;
  NVIDIA H100 Tensor Core GPU datasheet). NVIDIA's ``p2pBandwidthLatencyTest`` reaches ~380 GB/s
  of it (NVIDIA/nccl issue #1264, 83 %). α = 3.4 µs: NCCL's per-ring-step latency for NVLink
  with the Simple protocol (``hwLat[NVLINK][Ring][Simple]``, ``src/graph/tuning.cc``).
- :data:`IB_NDR`, across nodes: one 400 Gb/s NDR InfiniBand HCA per GPU (ConnectX-7, as in DGX
  H100): β = 400e9 / 8 = 50 GB/s per direction. α = 9.6 µs: NCCL's ``hwLat[NET][Ring][Simple]``.
- :data:`PCIE5`, a PCIe Gen5 x16 slot (GPUs without NVLink, or GPU to host): β = 64 GB/s per
  direction (32 GT/s × 16 lanes, 128b/130b; the H100 PCIe datasheet's "128 GB/s" counts both
  ways). α = 5.7 µs: NCCL's ``hwLat[PCI][Ring][Simple]``.

These are link (datasheet) rates; NCCL's rings reach ~75–85 % of them. The performance model's
devices (:data:`minipar.perf.hardware.GPUS`) use those *achieved* rates: :func:`link_of` turns a
device's intra/inter pair into a Link, so the clock and the planner can run on the same numbers.

Scaling (:func:`scaled`). A CPU core computes ~10⁴ times slower than an H100; emulating the
cluster's links at their real speed would make communication free. Scaling both α and n/β by
``gpu_flops / cpu_flops`` (β × cpu/gpu, α × gpu/cpu) keeps the ratio of compute time to
communication time what it is on the cluster for the same FLOPs: the emulated cluster is the real
one in slow motion. Compute the scaled links ONCE (in the parent) and pass them to every rank:
ranks that scale by their own measurement would disagree about the same message.

Units: seconds, bytes, bytes/s, FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from minipar.errors import ConfigError
from minipar.perf.hardware import GPUS, Device, measured_peak_flops


@dataclass(frozen=True)
class Link:
    """One direction of a link: ``time(n) = alpha_s + n / beta_bytes_per_s`` seconds for ``n`` bytes.

    Raises ConfigError when ``alpha_s < 0`` or ``beta_bytes_per_s <= 0``.
    """

    name: str
    alpha_s: float  # seconds per message (per ring step)
    beta_bytes_per_s: float  # bytes/s, one direction

    def __post_init__(self):
        if not self.alpha_s >= 0 or not self.beta_bytes_per_s > 0:
            raise ConfigError(
                f"Link {self.name!r}: alpha_s={self.alpha_s!r} must be >= 0 seconds and "
                f"beta_bytes_per_s={self.beta_bytes_per_s!r} > 0 bytes/s"
            )

    def time(self, nbytes: float) -> float:
        """Seconds to move one message of ``nbytes`` bytes: α + n/β."""
        return self.alpha_s + nbytes / self.beta_bytes_per_s


NVLINK4 = Link("NVLink 4 (H100 SXM, in a node)", 3.4e-6, 450e9)
IB_NDR = Link("InfiniBand NDR 400 Gb/s (across nodes)", 9.6e-6, 50e9)
PCIE5 = Link("PCIe Gen5 x16", 5.7e-6, 64e9)


def scaled(link: Link, cpu_flops: float, gpu_flops: float) -> Link:
    """``link`` slowed down by ``gpu_flops / cpu_flops``: β × cpu/gpu, α × gpu/cpu.

    Args:
        cpu_flops: FLOP/s one rank achieves here (:func:`minipar.perf.hardware.measured_peak_flops`).
        gpu_flops: FLOP/s the GPU achieves (e.g. ``GPUS["h100"].peak_flops * GPUS["h100"].gemm_efficiency``).
    Raises:
        ConfigError: a FLOP/s that is not > 0.
    """
    if not cpu_flops > 0 or not gpu_flops > 0:
        raise ConfigError(f"scaled(): cpu_flops={cpu_flops!r} and gpu_flops={gpu_flops!r} must be > 0 FLOP/s")
    k = gpu_flops / cpu_flops
    return replace(
        link, name=f"{link.name} ×{k:.3g} slower", alpha_s=link.alpha_s * k, beta_bytes_per_s=link.beta_bytes_per_s / k
    )


def slow_motion(link: Link, here_s: float, there_s: float) -> Link:
    """``link`` slowed by ``here_s / there_s``: the same work takes ``there_s`` seconds on the cluster and
    ``here_s`` here (e.g. one stage's forward of the lesson's model here vs the model it stands for on
    H100s), so a message keeps the ratio to that work it has on the cluster.

    Raises ConfigError for a time that is not > 0.
    """
    if not here_s > 0 or not there_s > 0:
        raise ConfigError(f"slow_motion(): here_s={here_s!r} and there_s={there_s!r} must be > 0 seconds")
    return scaled(link, cpu_flops=1.0 / here_s, gpu_flops=1.0 / there_s)


def link_of(device: Device, which: str = "intra") -> Link:
    """The ``intra`` (in a node) or ``inter`` (across nodes) link of a performance-model device.

    Raises ConfigError for another ``which``.
    """
    if which not in ("intra", "inter"):
        raise ConfigError(f"link_of(which={which!r}): use 'intra' or 'inter'")
    alpha, beta = getattr(device, which)
    return Link(f"{device.name} {which}", alpha, beta)


def cluster_links(cpu_flops: float | None = None, gpu: str = "h100") -> tuple[Link, Link]:
    """``(intra, inter)`` = (:data:`NVLINK4`, :data:`IB_NDR`) scaled from ``gpu``'s achievable FLOP/s
    (``GPUS[gpu]``: peak × gemm_efficiency) to ``cpu_flops`` (measured here, fp32 matmul, when None).

    Raises ConfigError for a ``gpu`` not in :data:`minipar.perf.hardware.GPUS`.
    """
    if gpu not in GPUS:
        raise ConfigError(f"cluster_links(gpu={gpu!r}): use one of {sorted(GPUS)}")
    if cpu_flops is None:
        import torch

        cpu_flops = measured_peak_flops(torch.device("cpu"))
    g = GPUS[gpu].peak_flops * GPUS[gpu].gemm_efficiency
    return scaled(NVLINK4, cpu_flops, g), scaled(IB_NDR, cpu_flops, g)
