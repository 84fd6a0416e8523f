"""Checkpoint saves a copy of its inputs (same bytes counted, but twice the memory: the caller holds the input too)."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn = fn
        ctx.rng = torch.get_rng_state()
        ctx.save_for_backward(*[x.detach().clone().requires_grad_(x.requires_grad) for x in inputs])
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
        return (None, *[x.grad if x.requires_grad else None for x in inputs])


def checkpoint(fn, *inputs):
    return Checkpoint.apply(fn, *inputs)
