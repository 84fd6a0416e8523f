"""Top-k that forgets the error: selects on the gradient alone."""

from exercises.solutions.ex09_communication import *  # noqa: F401,F403


def topk_with_error_feedback(grad, error, k):
    idx = grad.abs().topk(k).indices
    new_error = grad.clone()
    new_error[idx] = 0
    return grad[idx], idx, new_error
