"""Cross-entropy gradient without the 1/N of the mean."""

import torch

from exercises.solutions.ex00_single_device import *  # noqa: F401,F403


def cross_entropy_backward(logits, targets):
    p = torch.softmax(logits, dim=-1)
    p[torch.arange(logits.shape[0]), targets] -= 1
    return p
