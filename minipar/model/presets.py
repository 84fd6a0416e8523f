"""Named GPT sizes that the lessons share, the seeded model built from one, and a default-dtype scope.

    from minipar.model.presets import SMALL, default_dtype, seeded_gpt
    model = seeded_gpt(SMALL)                      # torch.manual_seed(0); GPT(...) in float64
    with default_dtype(torch.float64):             # every tensor minipar creates inside is float64
        ...

The presets are keyword arguments of :class:`minipar.model.gpt.GPTConfig` without the vocabulary (it
is the corpus's). A lesson that needs another value of one field says so where it uses the preset,
e.g. ``{**MEDIUM, "block_size": 128}``.
"""

from __future__ import annotations

import contextlib

import torch

from minipar.data import builtin_corpus
from minipar.model.gpt import GPT, GPTConfig

SMALL = dict(n_layer=2, n_head=2, d_model=32, block_size=32)  # float64 proofs: a few seconds per run
MEDIUM = dict(n_layer=4, n_head=4, d_model=128, block_size=64)  # timings, timelines and throughput


def seeded_gpt(preset: dict = SMALL, dtype: torch.dtype = torch.float64, seed: int = 0, **overrides) -> GPT:
    """``torch.manual_seed(seed)``, then ``GPT(GPTConfig(vocab_size=<built-in corpus>, **preset, **overrides))``
    cast to ``dtype``: the same weights on every rank and on the single device that checks them.

    The weights are drawn in the default dtype (float32), then cast, so a float32 and a float64 model
    start from the same numbers. ``overrides``: other ``GPTConfig`` fields (e.g. ``dropout=0.1``,
    ``moe_experts=4``). Raises what ``GPTConfig`` raises for an impossible shape.
    """
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=builtin_corpus().vocab_size, **preset, **overrides)).to(dtype)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """``torch.set_default_dtype(dtype)`` inside the ``with`` block, the previous default restored after
    (also when the block raises). The float64 proofs use it: reordered float64 sums differ by ~1e-16
    relative, so an equivalence bound can be derived rather than fitted. Process-wide, like the
    setting itself: every rank process sets its own."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)
