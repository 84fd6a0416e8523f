"""Restores the RNG state for the re-run but never gives the caller's stream back."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403
from exercises.solutions.ex08_memory import Checkpoint as _Ref


class Checkpoint(_Ref):
    @staticmethod
    def backward(ctx, grad_out):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        torch.set_rng_state(ctx.rng)
        with torch.enable_grad():
            out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad_out)
        return (None, *[x.grad if x.requires_grad else None for x in inputs])


def checkpoint(fn, *inputs):
    return Checkpoint.apply(fn, *inputs)
