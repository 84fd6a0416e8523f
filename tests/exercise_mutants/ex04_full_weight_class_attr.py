"""ColumnParallelLinear keeps the full weight in a class attribute (outside the instance a walk of the layer sees)."""

import torch

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class ColumnParallelLinear(_sol.ColumnParallelLinear):
    full: dict = {}

    @torch.no_grad()
    def load_full_(self, weight, bias):
        ColumnParallelLinear.full[id(self)] = (weight.clone(), bias.clone())
        k, r = self.weight.shape[0], _sol.tp_rank(self.group)
        self.weight.copy_(weight[r * k : (r + 1) * k])
        self.bias.copy_(bias[r * k : (r + 1) * k])
