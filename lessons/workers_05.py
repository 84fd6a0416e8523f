"""Lesson 05's experiment drivers: pipeline runs on the cluster clock (``minipar.course.pipeline_trace``)."""

from __future__ import annotations

import dataclasses

from minipar import launch
from minipar.course.pipeline_trace import RunSpec, message_bytes, read_clock, stage_durations, traced_run  # noqa: F401 (message_bytes: for the lesson)
from minipar.pp.schedules import Action


def on_clock(spec: RunSpec, p: int) -> dict:
    """Run ``spec`` (its ``clock`` set) on ``p`` ranks: its fastest step on the cluster clock, as
    :func:`minipar.course.pipeline_trace.read_clock` reads it, and the losses."""
    out = launch(traced_run, world_size=p, args=(spec,))
    return {**read_clock(out, spec), "losses": out[-1]["losses"]}


def sweep_m(base: RunSpec, p: int, ms) -> dict:
    """:func:`on_clock` for every m in ``ms`` (the same model, seed and global batch)."""
    return {m: on_clock(dataclasses.replace(base, m=m), p) for m in ms}


def stage_table(trace) -> str:
    """Each stage's median forward and backward on the clock, in ms (measured: print it after ⏱)."""
    t_f, t_b = stage_durations(trace)
    stages = sorted({e.stage for r in trace for e in r})
    rows = [(s, t_f(Action(s, "F", 0)) * 1e3, t_b(Action(s, "B", 0)) * 1e3) for s in stages]
    return ", ".join(f"stage {s}: F {fwd:.2f} B {bwd:.2f}" for s, fwd, bwd in rows)
