"""Homework (b) without ``opt.zero_grad()``: the second step's shards still hold the first step's gradient."""

from homework.b_accumulate_zero2.accumulate import *  # noqa: F401,F403


def accumulation_step(model, opt, x, y, k, after_backward=None):
    total = 0.0
    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        _, loss = model(xs, ys)
        (loss / k).backward()
        total += loss.item() / k
        if after_backward is not None:
            after_backward()
    opt.step()
    return total
