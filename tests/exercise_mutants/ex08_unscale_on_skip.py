"""Unscales before checking: a skipped step's gradients are changed."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403


def loss_scale_step(grads, scale, clean, growth_interval=2000, growth=2.0, backoff=0.5):
    for g in grads:
        g.div_(scale)
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return False, scale * backoff, 0
    clean += 1
    if clean == growth_interval:
        return True, scale * growth, 0
    return True, scale, clean
