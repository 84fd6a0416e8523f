"""All-gather from send/recv only, but every rank sends its chunk straight to every other rank:
point-to-point, yet not a ring (N − 1 peers each way)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex01_collectives import *  # noqa: F401,F403
from exercises.solutions.ex01_collectives import ring_neighbours
from minipar.comm.collectives import chunk_bounds


def ring_all_gather(tensor, group=None):
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    a, b = chunk_bounds(flat.numel(), n, i)
    reqs, bufs = [], []
    for j, peer in enumerate(ranks):
        if j == i:
            continue
        c, d = chunk_bounds(flat.numel(), n, j)
        buf = torch.empty(d - c, dtype=flat.dtype)
        bufs.append((c, d, buf))
        reqs += [dist.irecv(buf, src=peer, group=group), dist.isend(flat[a:b].clone(), dst=peer, group=group)]
    for r in reqs:
        r.wait()
    for c, d, buf in bufs:
        flat[c:d] = buf
    return tensor
