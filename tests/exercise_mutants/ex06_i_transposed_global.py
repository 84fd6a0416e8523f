"""Zero bubble in name only: I also computes the weight gradient *transposed* (in, out) and keeps it in a
module-level container, so W does no matmul (it only transposes what I left behind)."""

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403

_DONE: list = []


def linear_backward_input(x, weight, grad_y, stash):
    x2, g2 = x.reshape(-1, x.shape[-1]), grad_y.reshape(-1, grad_y.shape[-1])
    _DONE.append((x2.t() @ g2, g2.sum(0)))
    stash.append((x, grad_y))
    return grad_y @ weight


def linear_backward_weight(stash):
    stash.pop(0)
    dw_t, db = _DONE.pop(0)
    return dw_t.t(), db
