"""Reduce-scatter that sizes its receive buffer like the chunk it sends, not the chunk it receives: with uneven
chunks a message and its buffer differ in size and gloo aborts the rank (signal 6)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex01_collectives import *  # noqa: F401,F403
from exercises.solutions.ex01_collectives import ring_neighbours
from minipar.comm.collectives import chunk_bounds


def ring_reduce_scatter(tensor, group=None):
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    for s in range(n - 1):
        a, b = chunk_bounds(flat.numel(), n, (i - s - 1) % n)
        c, d = chunk_bounds(flat.numel(), n, (i - s - 2) % n)
        buf = torch.empty(b - a, dtype=flat.dtype)  # the mistake: d - c
        reqs = [dist.irecv(buf, src=left, group=group), dist.isend(flat[a:b].clone(), dst=right, group=group)]
        for r in reqs:
            r.wait()
        flat[c:d] += buf[: d - c]
    a, b = chunk_bounds(flat.numel(), n, i)
    return flat[a:b]
