"""The ring step delegated to PyTorch's context-parallel rotater (all-to-all under the hood)."""

import torch.distributed as dist
from torch.distributed.tensor.experimental._context_parallel._attention import _AllToAllRotater

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403


def ring_step(send, recv, group=None):
    if dist.get_world_size(group) == 1:
        return send
    rot = _AllToAllRotater(group or dist.group.WORLD, 2)
    rot.exchange_buffers(send)
    recv.copy_(rot.next_buffer())
    return recv
