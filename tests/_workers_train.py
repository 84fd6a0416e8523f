"""The main job and the plain reference loop in float64, for the equivalence tests (importable by ranks).

``torch.set_default_dtype(torch.float64)`` makes every floating tensor minipar creates (the GPT's
weights, AdamW's moments, pipeline buffers) float64, with no change to the library. In float64,
summing the same numbers in another order (ranks, micro-batches, another CPU's kernels) moves a
result by ~1e-16 relative, so the tests' bounds can be derived rather than fitted to one CPU.
"""

import torch

from minipar.job.reference import train_single_device
from minipar.model.presets import default_dtype
from minipar.train import train


def train_float64(cfg, progress="none"):
    """:func:`minipar.train.train` with float64 as the default dtype (on a rank: for the whole process)."""
    with default_dtype(torch.float64):
        return train(cfg, progress)


def reference_float64(cfg):
    """:func:`minipar.job.reference.train_single_device` in float64."""
    with default_dtype(torch.float64):
        return train_single_device(cfg)
