"""RowParallelLinear adds the bias before g: the bias is counted N times."""

import torch.nn.functional as F

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class RowParallelLinear(_sol.RowParallelLinear):
    def forward(self, x):
        return _sol.ReduceFromTP.apply(F.linear(x, self.weight, self.bias), self.group)
