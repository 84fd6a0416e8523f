"""The stash keeps copies of x and dL/dy instead of references (same element count, twice the memory)."""

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403


def linear_backward_input(x, weight, grad_y, stash):
    stash.append((x.clone(), grad_y.clone()))
    return grad_y @ weight
