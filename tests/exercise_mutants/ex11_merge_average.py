"""merge that averages the two outputs instead of weighing each by its share of the softmax mass."""

import torch

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403


def merge(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)
