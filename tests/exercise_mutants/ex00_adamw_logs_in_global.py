"""Right values, but the update keeps the last gradient in a module global (state outside the contract)."""

from exercises.solutions.ex00_single_device import *  # noqa: F401,F403

LAST = {}


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, **kw):
    LAST["grad"] = grad.clone()
    b1, b2 = kw["betas"]
    import math

    import torch

    with torch.no_grad():
        param.mul_(1 - kw["lr"] * kw["weight_decay"])
        exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
        exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1 - b2**step)).add_(kw["eps"])
        param.addcdiv_(exp_avg, denom, value=-kw["lr"] / (1 - b1**step))
