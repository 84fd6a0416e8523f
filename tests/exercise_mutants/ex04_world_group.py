"""g all-reduces over the whole world instead of its tensor-parallel group."""

import torch.distributed as dist

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class ReduceFromTP(_sol.ReduceFromTP):
    @staticmethod
    def forward(ctx, x, group):
        y = x.contiguous().clone()
        dist.all_reduce(y)
        return y
