"""ring_step via an all-gather of padded blocks (right block, but a collective that moves N − 1 blocks)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403
from exercises.solutions.ex11_context_parallel import ring_neighbours


def ring_step(send, recv, group=None):
    ranks, i = ring_neighbours(group)
    n = len(ranks)
    if n == 1:
        return send
    pad = torch.zeros(2, 1, 3 + n, 4, dtype=send.dtype)
    pad[:, :, : send.shape[2]] = send
    out = [torch.empty_like(pad) for _ in range(n)]
    dist.all_gather(out, pad, group=group)
    recv.copy_(out[(i - 1) % n][:, :, : recv.shape[2]])
    return recv
