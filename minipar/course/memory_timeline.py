"""Live tensor bytes over one training step, by category, from PyTorch's memory profiler (lesson 00).

    tl = profile_memory(step)                  # step(): one forward + backward + optimizer step
    draw_memory_timeline(tl, ax, counted)      # stacked bytes per category, the counted total as a line

``torch.profiler.profile(profile_memory=True)`` with ``export_memory_timeline`` is the CPU counterpart
of ``torch.cuda.memory._record_memory_history``'s picture: every allocation and free, each tensor
assigned a category (parameter, gradient, optimizer state, activation, ...) from the autograd graph.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
import warnings
from typing import Callable

from minipar.course.capture import quiet_fds

# The categories of PyTorch's memory profiler, in the order of its raw timeline's columns 1..8
# (torch.profiler._memory_profiler._CATEGORY_TO_COLORS; column 0 is unused).
TIMELINE_CATEGORIES = (
    "parameters",
    "optimizer state",
    "inputs",
    "temporaries",
    "activations",
    "gradients",
    "autograd detail",
    "unknown",
)


def profile_memory(step: Callable[[], object]) -> dict:
    """Run ``step()`` once under ``torch.profiler`` (CPU, ``profile_memory=True``) and return its memory
    timeline: ``{"t": ms since the first event, per allocation/free event, "bytes": {category: list},
    "total": list}`` (bytes alive after each event; categories: :data:`TIMELINE_CATEGORIES`).
    Raises ValueError if the profiler's export has another layout than this PyTorch's."""
    from torch.profiler import ProfilerActivity, profile

    with (
        quiet_fds((2,)),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof,
    ):
        step()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # deprecated in 2.13 in favour of the CUDA-only snapshot API, which has no CPU counterpart
        warnings.simplefilter("ignore", FutureWarning)
        path = pathlib.Path(tmp) / "timeline.json"
        prof.export_memory_timeline(str(path), device="cpu")
        raw = json.loads(path.read_text())
    return coalesce(raw)


def coalesce(raw) -> dict:
    """``export_memory_timeline``'s JSON is ``[times, sizes]``, one row of sizes per event (times in
    µs): column 0 unused, then one column per :data:`TIMELINE_CATEGORIES`. ``t`` is in ms from the first event
    (a clock: only the picture uses it). Raises ValueError on rows of another width."""
    times, sizes = raw
    if not sizes or len(sizes[0]) != len(TIMELINE_CATEGORIES) + 1:
        raise ValueError(f"unexpected memory timeline rows: {str(sizes[:1])[:200]}")
    cols = list(zip(*sizes))
    by = {c: list(cols[i + 1]) for i, c in enumerate(TIMELINE_CATEGORIES)}
    t0 = times[0]
    return {"t": [(t - t0) / 1e3 for t in times], "bytes": by, "total": [sum(r[1:]) for r in sizes]}


def draw_memory_timeline(tl: dict, ax, counted: dict) -> None:
    """Stacked live bytes per category over the step, and the sum of the counted parts as a line."""
    MiB = 2**20
    order = (
        "parameters",
        "optimizer state",
        "gradients",
        "activations",
        "autograd detail",
        "temporaries",
        "inputs",
        "unknown",
    )
    ax.stackplot(tl["t"], *[[v / MiB for v in tl["bytes"][c]] for c in order], labels=order, alpha=0.85)
    total = sum(counted.values())
    ax.axhline(total / MiB, color="k", ls="--", lw=1, label="params + grads + AdamW + activations (counted)")
    ax.set_xlabel("ms into the step (forward → backward → AdamW step), this machine")
    ax.set_ylabel("MiB alive")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
