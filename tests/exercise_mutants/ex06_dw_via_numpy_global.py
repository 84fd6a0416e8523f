"""I computes dL/dW outside PyTorch (numpy, unseen by a dispatch mode) into a module-level list; W returns it."""

import torch

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403

_PENDING: list = []


def linear_backward_input(x, weight, grad_y, stash):
    xn, gn = x.numpy().reshape(-1, x.shape[-1]), grad_y.numpy().reshape(-1, grad_y.shape[-1])
    _PENDING.append((torch.from_numpy(gn.T @ xn), torch.from_numpy(gn.sum(0))))
    stash.append((x, grad_y))
    return grad_y @ weight


def linear_backward_weight(stash):
    stash.pop(0)
    return _PENDING.pop(0)
