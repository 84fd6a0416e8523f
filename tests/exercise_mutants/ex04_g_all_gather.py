"""g's forward as an all_gather of every rank's partial result, summed locally: right sum, N× the bytes."""

import torch
import torch.distributed as dist

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class ReduceFromTP(_sol.ReduceFromTP):
    @staticmethod
    def forward(ctx, x, group):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return sum(parts)


class RowParallelLinear(_sol.RowParallelLinear):
    def forward(self, x):
        return ReduceFromTP.apply(torch.nn.functional.linear(x, self.weight), self.group) + self.bias
