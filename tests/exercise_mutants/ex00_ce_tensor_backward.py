"""cross_entropy_backward by loss.backward() on F.cross_entropy."""

import torch.nn.functional as F

from exercises.solutions.ex00_single_device import *  # noqa: F401,F403


def cross_entropy_backward(logits, targets):
    logits = logits.detach().requires_grad_()
    F.cross_entropy(logits, targets).backward()
    return logits.grad
