"""The emulated cluster's links scaled to this machine: the link table's presets in slow motion.

    from minipar.clock.scaling import cluster_links, scaled, slow_motion
    from minipar.comm.links import IB_NDR
    intra, inter = cluster_links(cpu_flops)      # NVLink 4 / IB NDR, scaled to this CPU (see below)
    slow_motion(IB_NDR, here_s=20e-3, there_s=2e-3)   # an action: 20 ms here, 2 ms on an H100

The links themselves (:class:`~minipar.comm.links.Link`, α + n/β; the presets ``NVLINK4``,
``IB_NDR``, ``PCIE5`` with their datasheet sources) are the link table, :mod:`minipar.comm.links`,
which the performance model reads too (its devices, :data:`minipar.perf.hardware.GPUS`, at the
*achieved* fraction of the same rates): :func:`link_of` turns a device's intra/inter pair into a
Link, so the clock and the planner can run on the same numbers.

Scaling (:func:`scaled`). A CPU core computes ~10⁴ times slower than an H100; emulating the
cluster's links at their real speed would make communication free. Scaling both α and n/β by
``gpu_flops / cpu_flops`` (β × cpu/gpu, α × gpu/cpu) keeps the ratio of compute time to
communication time what it is on the cluster for the same FLOPs: the emulated cluster is the real
one in slow motion. Compute the scaled links ONCE (in the parent) and pass them to every rank:
ranks that scale by their own measurement would disagree about the same message.

Units: seconds, bytes, bytes/s, FLOP/s.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.comm.links import IB_NDR, NVLINK4, Link
from minipar.errors import ConfigError
from minipar.perf.hardware import GPUS, Device, measured_peak_flops


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
