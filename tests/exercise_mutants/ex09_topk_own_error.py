"""Top-k with error feedback that ignores the `error` argument and keeps the error in a module global."""

import torch

from exercises.solutions.ex09_communication import *  # noqa: F401,F403

_ERROR: dict = {}


def topk_with_error_feedback(grad, error, k):
    a = grad + _ERROR.get(grad.numel(), torch.zeros_like(grad))
    idx = a.abs().topk(k).indices
    new_error = a.clone()
    new_error[idx] = 0
    _ERROR[grad.numel()] = new_error
    return a[idx], idx, new_error.clone()
