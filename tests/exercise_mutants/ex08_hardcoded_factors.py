"""Loss scaling with ×2 and ×0.5 written in, ignoring the growth and backoff arguments."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


def loss_scale_step(grads, scale, clean, growth_interval=2000, growth=2.0, backoff=0.5):
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return False, scale * 0.5, 0
    for g in grads:
        g.div_(scale)
    clean += 1
    if clean == growth_interval:
        return True, scale * 2.0, 0
    return True, scale, clean
