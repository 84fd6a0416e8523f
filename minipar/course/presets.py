"""The main job and the cluster at lesson size: a tiny :class:`~minipar.job.config.TrainConfig`, and the
H100 step a CPU step stands for when the cluster clock runs in slow motion.

    hist = train(tiny_train_config(6, tp=2), progress="none")     # the real main job, seconds per run
    hist = train_float64(tiny_train_config(6, tp=2))               # the same in float64: the proofs' runs
"""

from __future__ import annotations

import torch

from minipar.job.config import TrainConfig
from minipar.model.presets import SMALL, default_dtype

# An H100 SXM's dense bf16 peak (NVIDIA H100 datasheet, 989 TFLOP/s) at the fraction a good run achieves.
H100_BF16_FLOPS = 989e12
ASSUMED_MFU = 0.5


def tiny_train_config(steps: int = 4, **overrides) -> TrainConfig:
    """The main job's settings at lesson size: the ``SMALL`` GPT (2 layers, 2 heads, d = 32, T = 32),
    global batch 8, a log line every step, one one-batch evaluation at the end, no sample, no output
    folder. ``overrides``: any other ``TrainConfig`` field (``tp=2``, ``d_model=64``, ``eval_every=...``).
    Raises what ``TrainConfig`` raises for an impossible combination."""
    base = dict(steps=steps, batch_size=8, **SMALL, eval_every=steps, log_every=1, eval_batches=1, sample_chars=0)
    return TrainConfig(**{**base, "out": None, **overrides})


def train_float64(cfg: TrainConfig) -> list[dict]:
    """The main job (:func:`minipar.train.train`, no progress bar) with float64 as the default dtype, so a
    parallel run can be compared with one device to a derived bound (lessons 08, 12). Returns its history."""
    from minipar.train import train

    with default_dtype(torch.float64):
        return train(cfg, progress="none")


def h100_seconds(num_params: int, tokens: int, mfu: float = ASSUMED_MFU) -> float:
    """Seconds an H100 takes for a training step of a ``num_params``-parameter model on ``tokens`` tokens:
    6·Ψ·tokens FLOPs (forward 2, backward 4 per parameter and token: Kaplan et al. 2020,
    arXiv:2001.08361 §2.1) at ``mfu`` × :data:`H100_BF16_FLOPS`. A CPU step that takes ``t_here`` seconds
    stands for this one on the clock when links are slowed by ``t_here / h100_seconds(...)``
    (:func:`minipar.clock.slow_motion`)."""
    return 6 * num_params * tokens / (mfu * H100_BF16_FLOPS)
