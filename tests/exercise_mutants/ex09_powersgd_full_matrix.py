"""PowerSGD that all-reduces the whole gradient matrix, then runs the round locally on the mean:
right numbers, n·k numbers sent instead of (n + k)·r."""

import torch.distributed as dist

from exercises.solutions.ex09_communication import *  # noqa: F401,F403
from exercises.solutions.ex09_communication import orthogonalize


def powersgd_round(m, q, group=None):
    mean = m.clone()
    dist.all_reduce(mean, group=group)
    mean /= dist.get_world_size(group)
    p = orthogonalize(mean @ q)
    new_q = mean.t() @ p
    return p @ new_q.t(), new_q
