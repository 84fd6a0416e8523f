"""Where a parallel group's ranks sit: whether it straddles nodes and how many of its ranks share one. Megatron-LM's
rank order (tp, cp, dp, pp, innermost first): a group of ``size`` ranks ``stride`` apart is a block of size·stride
consecutive ranks. Read by :mod:`minipar.perf.sharding` (which link a group runs on) and :mod:`minipar.perf.moe` (an
EP group's all-to-all, split between NVLink and the NICs)."""

from __future__ import annotations

import math

from minipar.perf.hardware import Device


def members_per_node(size: int, stride: int, g: int) -> int:
    """The fewest ranks that any one group of ``size`` ranks ``stride`` apart (blocks of size·stride
    consecutive ranks, Megatron's order) has on a node of ``g`` GPUs that it touches (>= 1).

    In O(1), for any sizes (a search may ask for 10⁹ ranks or nodes of 10²⁰ GPUs). A group starts at
    p = (b·size·stride + o) mod g on its first node (block b, offset o < stride): b·size·stride mod g runs
    over every multiple of d = gcd(size·stride, g), so p runs over the residues p ≡ o (mod d). The fewest
    members sit on a group's first node when p is the largest such residue (ceil((g − p)/stride) before
    the boundary) or on its last node when a boundary falls nearest below its last rank ((size − 1)·stride
    − m)/stride + 1 after the boundary at m, where m's residue mod d is 0 or above d − stride); a node in
    between holds floor(g/stride) or more, never fewer than the first node's fewest."""
    if stride >= g:
        return 1
    last = (size - 1) * stride  # the group's last rank, counted from its first
    d = math.gcd(size * stride, g)
    p = g - 1 if stride >= d else g - d + stride - 1  # the latest a group starts on its first node
    fewest = min(size, -(-(g - p) // stride))  # all of it when it does not reach the next node
    t = last % d  # the last node boundary at or below the last rank (m >= 1: a boundary inside the group)
    m = last if stride >= d or t == 0 or t > d - stride else last - t
    return min(fewest, (last - m) // stride + 1) if m >= 1 else fewest


def across_nodes(dev: Device, size: int, stride: int) -> bool:
    """True if groups of ``size`` ranks ``stride`` apart straddle nodes (off NVLink:
    :func:`minipar.perf.sharding.group_link`)."""
    span, g = size * stride, dev.gpus_per_node
    return not (size <= 1 or (span <= g and g % span == 0))
