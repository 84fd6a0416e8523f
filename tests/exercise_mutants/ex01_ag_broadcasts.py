"""All-gather as N broadcasts, one from each chunk's owner."""

import torch.distributed as dist

from exercises.solutions.ex01_collectives import *  # noqa: F401,F403
from exercises.solutions.ex01_collectives import ring_neighbours
from minipar.comm.collectives import chunk_bounds


def ring_all_gather(tensor, group=None):
    ranks, _ = ring_neighbours(group)
    flat = tensor.view(-1)
    for j, src in enumerate(ranks):
        a, b = chunk_bounds(flat.numel(), len(ranks), j)
        chunk = flat[a:b].clone()
        dist.broadcast(chunk, src=src, group=group)
        flat[a:b] = chunk
    return tensor
