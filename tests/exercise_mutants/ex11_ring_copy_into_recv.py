"""Receives into a new buffer, then copies it into the caller's `recv` (twice the memory, one more copy)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403
from exercises.solutions.ex11_context_parallel import ring_neighbours


def ring_step(send, recv, group=None):
    ranks, i = ring_neighbours(group)
    n = len(ranks)
    if n == 1:
        return send
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    fresh = torch.empty_like(recv)
    reqs = [dist.irecv(fresh, src=left, group=group), dist.isend(send, dst=right, group=group)]
    for r in reqs:
        r.wait()
    recv.copy_(fresh)
    return recv
