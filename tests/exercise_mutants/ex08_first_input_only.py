"""Checkpoint that handles one input only: the gradients of the other inputs are dropped."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn, ctx.rng = fn, torch.get_rng_state()
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, grad_out):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        with torch.random.fork_rng():
            torch.set_rng_state(ctx.rng)
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad_out)
        return (None, inputs[0].grad, *[None] * (len(inputs) - 1))


def checkpoint(fn, *inputs):
    return Checkpoint.apply(fn, *inputs)
