"""The single-device reference: the plainest training loop, which every parallel layout must equal.

No process group, no executor, no shards: one ``GPT``, one ``torch.optim.AdamW``, the same data
order, learning-rate schedule (:func:`minipar.job.config.lr_at`) and clipping as ``minipar.train``.
Lesson 00 reads it; the tests check that ``minipar.train`` on any (pp, dp, tp) layout gives these
losses (tests/test_reference.py, tests/test_3d.py).

    for step in range(steps):
        x, y = next(loader)                               # the global batch (B, T)
        for xm, ym in zip(x.chunk(m), y.chunk(m)):        # m micro-batches: gradient accumulation
            _, loss = model(xm, ym)                       # forward: builds the autograd graph
            (loss / m).backward()                         # backward: grads accumulate in p.grad
        clip_grad_norm_(model.parameters(), grad_clip)
        opt.step(); opt.zero_grad()                       # AdamW update, then forget the grads
"""

from __future__ import annotations

import torch

from minipar.data import make_loader
from minipar.job.config import TrainConfig, build, check, lr_at


def train_single_device(cfg: TrainConfig) -> list[dict]:
    """Train ``cfg`` on one device with a plain loop; return ``[{"step", "loss"}, ...]`` for every step.

    The loss logged at a step is the mean over its global batch (``cfg.batch_size`` sequences),
    measured before that step's update — what ``minipar.train`` logs as ``loss``.
    """
    corpus = check(cfg).corpus  # the settings checked (for one device), the text loaded
    loader = make_loader(corpus.split("train", cfg.block_size), cfg.batch_size, seed=cfg.seed)
    model, opt = build(cfg, corpus.vocab_size)
    m = cfg.microbatches
    history = []
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        x, y = next(loader)
        total = 0.0
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            _, loss = model(xm, ym)
            (loss / m).backward()
            total += loss.item() / m
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append({"step": step, "loss": total})
    return history
