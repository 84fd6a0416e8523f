"""Dynamic loss scaling that ignores `clean` and counts clean steps in a module global."""

import torch

from exercises.solutions.ex08_memory import *  # noqa: F401,F403

_CLEAN = [0]


def loss_scale_step(grads, scale, clean, growth_interval=2000, growth=2.0, backoff=0.5):
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        _CLEAN[0] = 0
        return False, scale * backoff, 0
    for g in grads:
        g.div_(scale)
    _CLEAN[0] += 1
    if _CLEAN[0] == growth_interval:
        _CLEAN[0] = 0
        return True, scale * growth, 0
    return True, scale, _CLEAN[0]
