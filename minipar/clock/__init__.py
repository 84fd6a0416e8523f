"""The cluster clock: an emulator that shows on a laptop the step times a GPU cluster would show.

Compute is MEASURED (each rank's own thread CPU time, which time-slicing by other processes
does not stretch; read its ratios on a loaded machine, see :mod:`minipar.clock.clock`); links
are MODELLED (α–β presets named for real hardware, scaled to this machine's compute speed).
Use it on every rank, around any torch.distributed code:

    from minipar.clock import ClusterClock, cluster_links
    with ClusterClock(*cluster_links(cpu_flops), node_of=8) as clk:
        ...
    clk.now, clk.timeline

- :mod:`minipar.clock.links`  :class:`Link`, presets (NVLink 4, IB NDR, PCIe Gen5) with sources, scaling
- :mod:`minipar.clock.clock`  :class:`ClusterClock`: the per-rank virtual time, what each operation costs
- :mod:`minipar.clock.hooks`  the scoped wrappers that let it see torch.distributed's calls
"""

from minipar.clock.clock import ClusterClock, Span, collective_time, compute_seconds
from minipar.clock.links import IB_NDR, NVLINK4, PCIE5, Link, cluster_links, link_of, scaled, slow_motion

__all__ = [
    "ClusterClock",
    "Span",
    "collective_time",
    "compute_seconds",
    "Link",
    "NVLINK4",
    "IB_NDR",
    "PCIE5",
    "scaled",
    "slow_motion",
    "link_of",
    "cluster_links",
]
