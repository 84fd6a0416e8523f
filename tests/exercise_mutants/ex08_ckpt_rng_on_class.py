"""The RNG state kept on the class (shared by every call in flight) instead of on ctx."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


class Checkpoint(torch.autograd.Function):
    rng = None

    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn = fn
        Checkpoint.rng = torch.get_rng_state()
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, grad_out):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        with torch.random.fork_rng():
            torch.set_rng_state(Checkpoint.rng)
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad_out)
        return (None, *[x.grad if x.requires_grad else None for x in inputs])


def checkpoint(fn, *inputs):
    return Checkpoint.apply(fn, *inputs)
