"""Gradient buckets: the unit of communication of :class:`minipar.dp.ddp.DistributedDataParallel`.

Gradients are grouped into *buckets* of about ``bucket_cap_mb`` megabytes, in **reverse**
parameter order, because backward produces gradients roughly from the last layer to the first
(Li et al. 2020, "PyTorch Distributed", arXiv:2006.15704, §3.2.2 "gradient bucketing"). Each
bucket is one flat buffer, so its gradients travel in one ``all_reduce``: buckets trade the
latency of many small messages against how early the first message can leave.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Bucket:
    """A group of parameters whose gradients travel in one ``all_reduce``.

    Attributes:
        index: position in launch order (0 = the last layers, whose gradients are ready first).
        params, names: the parameters (reverse model order) and their names.
        buffer: flat tensor, shape ``(sum of numel,)``, the parameters' dtype; the hooks write each
            gradient into it divided by N, and after the all-reduce's wait each ``p.grad`` becomes its
            view of it.
        views: per parameter, its slice of ``buffer`` shaped like the parameter.
        nbytes: size of ``buffer`` in bytes.
        t_ready, t_launch, t_done: ``time.perf_counter()`` seconds when its last gradient
            arrived, when its all-reduce was launched, and when it was first seen completed (this step;
            polled from the gradient hooks, so up to one parameter's backward late).
    """

    def __init__(self, index: int, named: list[tuple[str, nn.Parameter]]):
        self.index = index
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.offsets, total = [], 0
        for p in self.params:
            self.offsets.append(total)
            total += p.numel()
        self.buffer = torch.zeros(total, dtype=self.params[0].dtype, device=self.params[0].device)
        self.views = [self.buffer[o : o + p.numel()].view_as(p) for o, p in zip(self.offsets, self.params)]
        self.nbytes = total * self.buffer.element_size()
        self.reset()

    def reset(self) -> None:
        self.ready: set[int] = set()  # positions in self.params whose gradient is in the buffer
        self.work = None
        self.t_ready = self.t_launch = self.t_done = None


def make_buckets(named: list[tuple[str, nn.Parameter]], bucket_cap_mb: float) -> list[Bucket]:
    """Split ``named`` (already in reverse order) into buckets of at most ``bucket_cap_mb`` MiB each.

    A parameter larger than the cap gets a bucket of its own; a dtype or device change starts a
    new bucket (one flat buffer holds one dtype).
    """
    cap = bucket_cap_mb * 2**20
    groups: list[list] = []
    size = 0
    for name, p in named:
        nbytes = p.numel() * p.element_size()
        new = (
            not groups
            or size + nbytes > cap
            and size > 0
            or groups[-1][-1][1].dtype != p.dtype
            or groups[-1][-1][1].device != p.device
        )
        if new:
            groups.append([])
            size = 0
        groups[-1].append((name, p))
        size += nbytes
    return [Bucket(i, g) for i, g in enumerate(groups)]
