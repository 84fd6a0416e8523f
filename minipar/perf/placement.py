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
            nodes: dict[int, int] = {}
            for i in range(size):
                node = (block * span + offset + i * stride) // g
                nodes[node] = nodes.get(node, 0) + 1
            fewest = min(fewest, *nodes.values())
    return fewest


def across_nodes(dev: Device, size: int, stride: int) -> bool:
    """True if groups of ``size`` ranks ``stride`` apart straddle nodes (off NVLink:
    :func:`minipar.perf.sharding.group_link`)."""
    span, g = size * stride, dev.gpus_per_node
    return not (size <= 1 or (span <= g and g % span == 0))
