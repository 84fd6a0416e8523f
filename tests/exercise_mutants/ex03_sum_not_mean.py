"""ZeRO-1 without the division by N."""

from exercises.solutions import ex03_zero as _sol
from exercises.solutions.ex03_zero import *  # noqa: F401,F403


def zero1_step(flat_param, flat_grad, state, group=None, **kw):
    import torch.distributed as dist

    n = dist.get_world_size(group)
    return _sol.zero1_step(flat_param, flat_grad * n, state, group=group, **kw)
