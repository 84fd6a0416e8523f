"""Rank functions for the ZeRO tests. The training driver is the lesson's own (lessons/workers_03.py),
so the tests check exactly what the notebook shows."""

import os
import sys

import torch

import minipar.runtime.dist as md
from minipar.model.gpt import GPT, GPTConfig
from minipar.zero import zero

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lessons"))
import workers_03  # noqa: E402, F401  (the lesson's drivers: the tests use w.workers_03; launch's children inherit sys.path)

CFG = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, d_model=32)
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)


def batches(steps, batch=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, CFG.vocab_size, (batch, CFG.block_size + 1), generator=g) for _ in range(steps)]


def different_start(stage):
    """Each rank seeds differently: ZeRO must refuse to start."""
    torch.manual_seed(md.rank())
    zero(GPT(CFG), stage, **ADAMW)
