"""Lesson 08: activation recomputation, minipar's hand-written checkpoint vs ``torch.utils.checkpoint``.

- step time (forward + backward) of a 4-layer GPT (d = 128, T = 128, batch 4, explicit attention,
  dropout 0.1) with minipar full recompute vs the same blocks wrapped in
  ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: both re-run every block once, so the
  ratio should be ~1 (target <= 1.20);
- full recompute vs none: the cost of one extra forward (reported; ~1.33 if backward = 2 forwards);
- peak saved-activation bytes (counted with ``minipar.model.memory.SavedTensorMeter``, exact): full / none,
  and minipar full / torch reentrant checkpoint (must be 1.00: the same tensors kept).
Timing blocks alternate between the sides, medians of repeats, one process.
"""

from __future__ import annotations

import statistics
import time

import torch

from minipar.course.bench import Row
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.memory import SavedTensorMeter
from minipar.model.recompute import set_recompute, use_torch_checkpoint

CFG = dict(vocab_size=96, n_layer=4, n_head=4, d_model=128, block_size=128, dropout=0.1, attention="explicit")


def _model(mode: str) -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(**CFG))
    if mode.startswith("torch"):
        use_torch_checkpoint(m, reentrant=mode == "torch-reentrant")
    else:
        set_recompute(m, mode)
    return m


def rows(quick: bool) -> list[Row]:
    repeats = 3 if quick else 9
    torch.set_num_threads(1)
    x = torch.randint(
        0, CFG["vocab_size"], (4, CFG["block_size"]), generator=torch.Generator().manual_seed(0), device="cpu"
    )
    models = {k: _model(k) for k in ("none", "full", "torch", "torch-reentrant")}
    peaks = {}
    for k in ("none", "full", "torch-reentrant"):
        with SavedTensorMeter(exclude=models[k]) as meter:
            models[k](x, x)[1].backward()
        peaks[k] = meter.peak
    step = {k: (lambda m=models[k]: m(x, x)[1].backward()) for k in ("none", "full", "torch")}
    for f in step.values():
        f()
    times = {k: [] for k in step}
    for r in range(repeats):
        for k in list(step) if r % 2 == 0 else list(step)[::-1]:
            t = time.perf_counter()
            step[k]()
            times[k].append(time.perf_counter() - t)
    t = {k: statistics.median(v) for k, v in times.items()}
    ratio = t["full"] / t["torch"]
    return [
        Row(
            "08",
            "minipar full recompute vs torch.utils.checkpoint, GPT 4x128 T=128 b=4, step time",
            ratio,
            target="<= 1.20",
            ok=ratio <= 1.2,
            note=f"{t['full'] * 1e3:.1f} ms vs {t['torch'] * 1e3:.1f} ms",
        ),
        Row(
            "08",
            "full recompute vs none, step time (one extra forward: ~1.33)",
            t["full"] / t["none"],
            note=f"{t['full'] * 1e3:.1f} ms vs {t['none'] * 1e3:.1f} ms (reported only)",
        ),
        Row(
            "08",
            "peak saved activation bytes, full / none (counted)",
            peaks["full"] / peaks["none"],
            unit="",
            target="<= 0.50",
            ok=peaks["full"] <= 0.5 * peaks["none"],
            note=f"{peaks['full']:,} vs {peaks['none']:,} bytes",
        ),
        Row(
            "08",
            "peak saved bytes, minipar full / torch checkpoint (reentrant)",
            peaks["full"] / peaks["torch-reentrant"],
            unit="",
            target="== 1.00",
            ok=peaks["full"] == peaks["torch-reentrant"],
            note=f"{peaks['full']:,} bytes both",
        ),
    ]
