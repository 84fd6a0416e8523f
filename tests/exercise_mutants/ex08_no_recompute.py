"""A 'recompute' that never recomputes: forward builds fn's graph with grad on and keeps it on ctx (not
via save_for_backward, so a meter of saved tensors does not see it); backward just back-propagates it."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.inputs = [x.detach().requires_grad_(x.requires_grad) for x in inputs]
        with torch.enable_grad():
            ctx.out = fn(*ctx.inputs)
        return ctx.out.detach()

    @staticmethod
    def backward(ctx, grad_out):
        torch.autograd.backward(ctx.out, grad_out)
        return (None, *[x.grad if x.requires_grad else None for x in ctx.inputs])


def checkpoint(fn, *inputs):
    return Checkpoint.apply(fn, *inputs)
