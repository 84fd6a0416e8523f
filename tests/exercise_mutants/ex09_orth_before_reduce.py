"""PowerSGD that orthogonalizes P before the all-reduce: ranks end up with different P̂."""

import torch.distributed as dist

from exercises.solutions.ex09_communication import *  # noqa: F401,F403
from exercises.solutions.ex09_communication import orthogonalize


def powersgd_round(m, q, group=None):
    n = dist.get_world_size(group)
    p = orthogonalize(m @ q)
    dist.all_reduce(p, group=group)
    p /= n
    new_q = m.t() @ p
    dist.all_reduce(new_q, group=group)
    new_q /= n
    return p @ new_q.t(), new_q
