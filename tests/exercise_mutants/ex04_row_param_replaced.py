"""RowParallelLinear.load_full_ replaces its weight by a new Parameter holding rows (the column split)."""

import torch.nn as nn

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class RowParallelLinear(_sol.RowParallelLinear):
    def load_full_(self, weight, bias):
        n, r = _sol.tp_size(self.group), _sol.tp_rank(self.group)
        self.weight = nn.Parameter(weight.chunk(n, dim=0)[r].clone())  # the mistake: rows, a new shape
        self.bias.data.copy_(bias)
