"""RowParallelLinear.forward multiplies by W, not Wᵀ: x (…, in/N) @ W (out, in/N) does not fit."""

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class RowParallelLinear(_sol.RowParallelLinear):
    def forward(self, x):
        return _sol.ReduceFromTP.apply(x @ self.weight, self.group) + self.bias  # the mistake: W, not Wᵀ
