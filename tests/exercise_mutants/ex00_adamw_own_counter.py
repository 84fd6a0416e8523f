"""AdamW that ignores `step` and counts its own calls in a module-level counter (bias correction by call count)."""

import math

import torch

from exercises.solutions.ex00_single_device import *  # noqa: F401,F403

_CALLS = 0


@torch.no_grad()
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    global _CALLS
    _CALLS += 1
    b1, b2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - b2**_CALLS)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - b1**_CALLS))
