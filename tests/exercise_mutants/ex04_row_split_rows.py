"""RowParallelLinear.load_full_ keeps rows of the weight (the column-parallel split) instead of its columns."""

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class RowParallelLinear(_sol.RowParallelLinear):
    def load_full_(self, weight, bias):
        k, r = self.weight.shape[1], _sol.tp_rank(self.group)
        self.weight.data.copy_(weight[r * k : (r + 1) * k])
        self.bias.data.copy_(bias)
