"""The cluster clock: an emulator that shows on a laptop the step times a GPU cluster would show.

Compute is MEASURED (each rank's own thread CPU time, which time-slicing by other processes
does not stretch; read its ratios on a loaded machine, see :mod:`minipar.clock.clock`); links
are MODELLED (the link table's α–β presets, :mod:`minipar.comm.links`, scaled to this machine's
compute speed; each collective's α–β time from :mod:`minipar.comm.cost`).
Use it on every rank, around any torch.distributed code:

    from minipar.clock import ClusterClock, cluster_links
    with ClusterClock(*cluster_links(cpu_flops), node_of=8) as clk:
        ...
    clk.now, clk.timeline

- :mod:`minipar.clock.scaling`  the link table's presets scaled to this machine (slow motion)
- :mod:`minipar.clock.clock`    :class:`ClusterClock`: the per-rank virtual time, what each operation costs
- :mod:`minipar.clock.hooks`    its listener on :mod:`minipar.comm.intercept`: how it sees torch.distributed's calls
- :mod:`minipar.clock.replay`   :func:`replay`: one run's recorded durations under another policy (overlap or not)
- :mod:`minipar.clock.trace`    :func:`chrome_trace`: a timeline as Chrome-trace JSON (Perfetto, chrome://tracing)
"""

from minipar.clock.clock import ClusterClock, Span, compute_seconds
from minipar.clock.replay import post_after_backward, replay
from minipar.clock.scaling import cluster_links, link_of, scaled, slow_motion
from minipar.clock.trace import chrome_trace

__all__ = [
    "ClusterClock",
    "Span",
    "compute_seconds",
    "scaled",
    "slow_motion",
    "link_of",
    "cluster_links",
    "chrome_trace",
    "replay",
    "post_after_backward",
]
