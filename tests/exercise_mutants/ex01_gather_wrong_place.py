"""All-gather that writes what it receives into the chunk it sent."""

import torch
import torch.distributed as dist

from exercises.solutions.ex01_collectives import *  # noqa: F401,F403
from exercises.solutions.ex01_collectives import ring_neighbours
from minipar.comm.collectives import chunk_bounds


def ring_all_gather(tensor, group=None):
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    for s in range(n - 1):
        a, b = chunk_bounds(flat.numel(), n, (i - s) % n)
        c, d = chunk_bounds(flat.numel(), n, (i - s - 1) % n)
        buf = torch.empty(d - c, dtype=flat.dtype)
        reqs = [dist.irecv(buf, src=left, group=group), dist.isend(flat[a:b].clone(), dst=right, group=group)]
        for r in reqs:
            r.wait()
        if b - a == d - c:
            flat[a:b] = buf
    return tensor
