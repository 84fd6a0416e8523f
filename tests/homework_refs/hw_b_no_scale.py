"""Homework (b) without dividing the loss by k: the accumulated gradient is k times too large."""

from homework.b_accumulate_zero2.accumulate import *  # noqa: F401,F403


def accumulation_step(model, opt, x, y, k, after_backward=None):
    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        model(xs, ys)[1].backward()
        if after_backward is not None:
            after_backward()
    opt.step()
    opt.zero_grad()
    return 0.0
