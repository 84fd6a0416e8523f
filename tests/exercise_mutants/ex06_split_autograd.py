"""Delegation: autograd on the whole layer computes dL/dx (and would do the weight's too)."""

import torch

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403


def linear_backward_input(x, weight, grad_y, stash):
    stash.append((x, grad_y))
    xx = x.detach().requires_grad_()
    (gx,) = torch.autograd.grad(torch.nn.functional.linear(xx, weight), xx, grad_y)
    return gx
