"""W computed in I: the weight gradient is computed at once and stashed; W only hands it over."""

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403


def linear_backward_input(x, weight, grad_y, stash):
    g2, x2 = grad_y.reshape(-1, grad_y.shape[-1]), x.reshape(-1, x.shape[-1])
    stash.append((g2.t() @ x2, g2.sum(0)))
    return grad_y @ weight


def linear_backward_weight(stash):
    return stash.pop(0)
