"""Homework (b) with one full-batch backward, then k calls of ``after_backward()``: the right gradient,
no accumulation (the checker's forward hook sees one batch of B_local rows)."""

from homework.b_accumulate_zero2.accumulate import *  # noqa: F401,F403


def accumulation_step(model, opt, x, y, k, after_backward=None):
    _, loss = model(x, y)
    loss.backward()
    for _ in range(k):
        if after_backward is not None:
            after_backward()
    opt.step()
    opt.zero_grad()
    return loss.item()
