"""Where a parallel group's ranks sit: whether it straddles nodes and how many of its ranks share one. Megatron-LM's
rank order (tp, cp, dp, pp, innermost first): a group of ``size`` ranks ``stride`` apart is a block of size·stride
consecutive ranks. Read by :mod:`minipar.perf.sharding` (which link a group runs on) and :mod:`minipar.perf.moe` (an
EP group's all-to-all, split between NVLink and the NICs)."""

from __future__ import annotations

import math

from minipar.perf.hardware import Device


def members_per_node(size: int, stride: int, g: int) -> int:
    """The fewest ranks that any one group of ``size`` ranks ``stride`` apart (blocks of size·stride
    consecutive ranks, Megatron's order) has on a node of ``g`` GPUs that it touches (>= 1)."""
    if stride >= g:
        return 1
    span = size * stride
    if span % g == 0 and g % stride == 0:  # the group covers whole nodes, g/stride ranks on each
        return g // stride
    fewest = size
    for block in range(math.lcm(span, g) // span):  # the pattern of blocks over nodes repeats after lcm ranks
        for offset in range(stride):
            fewest = min(fewest, _fewest_on_a_node(block * span + offset, size, stride, g))
    return fewest


def _fewest_on_a_node(start: int, size: int, stride: int, g: int) -> int:
    """The fewest ranks of the group ``start, start + stride, …`` (``size`` of them, stride < g) on any node of ``g``
    GPUs it touches: its first and last node, and the nodes between, whose counts repeat every lcm(g, stride)/g nodes
    (so a group of any size costs O(stride) steps, not O(size))."""
    end = start + (size - 1) * stride
    first, last = start // g, end // g

    def on(node: int) -> int:  # ranks start + i·stride inside [node·g, (node + 1)·g)
        lo, hi = max(node * g, start), min((node + 1) * g - 1, end)
        return (hi - start) // stride - -(-(lo - start) // stride) + 1

    between = range(first + 1, min(last, first + 1 + math.lcm(g, stride) // g))
    return min(on(n) for n in (first, last, *between))


def across_nodes(dev: Device, size: int, stride: int) -> bool:
    """True if groups of ``size`` ranks ``stride`` apart straddle nodes (off NVLink:
    :func:`minipar.perf.sharding.group_link`)."""
    span, g = size * stride, dev.gpus_per_node
    return not (size <= 1 or (span <= g and g % span == 0))
