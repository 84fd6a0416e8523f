"""f whose backward forgets the all-reduce."""

from exercises.solutions import ex04_tensor_parallel as _sol
from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403


class CopyToTP(_sol.CopyToTP):
    @staticmethod
    def backward(ctx, grad):
        return grad, None
