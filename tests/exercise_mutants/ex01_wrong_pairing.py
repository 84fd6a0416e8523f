"""Receives from the right neighbour, which sends to its own right: no send matches (hangs without a timeout)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex01_collectives import *  # noqa: F401,F403
from exercises.solutions.ex01_collectives import ring_neighbours
from minipar.comm.collectives import chunk_bounds


def ring_reduce_scatter(tensor, group=None):
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    right = ranks[(i + 1) % n]
    for s in range(n - 1):
        c, d = chunk_bounds(flat.numel(), n, (i - s - 2) % n)
        buf = torch.empty(d - c, dtype=flat.dtype)
        dist.recv(buf, src=right, group=group)  # wrong: everyone waits on the right, nobody sends
        flat[c:d] += buf
    a, b = chunk_bounds(flat.numel(), n, i)
    return flat[a:b]
