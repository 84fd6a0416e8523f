"""Checks for lesson 05: the GPipe schedule (validated by the simulator) and its bubble."""

from __future__ import annotations

from exercises.checks.common import CheckFailed, call
from exercises.checks.schedules import CASES, validate

TITLE = "pipeline, micro-batches"
MODULE = "ex05_pipeline_microbatches"


def check_gpipe(mod) -> str:
    for p, m in CASES:
        sched = call(f"gpipe({p}, {m})", mod.gpipe, p, m)
        sim = validate(f"gpipe({p}, {m})", sched, p, m)
        for r, acts in enumerate(sched):
            fw = [a.mb for a in acts if a.kind == "F"]
            first_b = next((i for i, a in enumerate(acts) if a.kind == "B"), len(acts))
            if any(a.kind == "F" for a in acts[first_b:]):
                raise CheckFailed(
                    f"gpipe({p}, {m}): rank {r} runs a forward after a backward ({[str(a) for a in acts]}): "
                    "GPipe runs every forward first, then every backward"
                )
            if fw != list(range(m)):
                raise CheckFailed(
                    f"gpipe({p}, {m}): rank {r}'s forwards are micro-batches {fw}, expected 0 .. {m - 1} in order"
                )
        if max(sim.peak_inflight) != m:
            raise CheckFailed(f"gpipe({p}, {m}): peak in flight {sim.peak_inflight}, GPipe holds all m = {m}")
    return "p = 1, 3, 4; m = 1, 2, 4, 8 (m < p too): valid (simulated), all forwards then all backwards"


def check_bubble(mod) -> str:
    from minipar.pp.schedules import gpipe, simulate

    for p, m in CASES:
        got = call(f"bubble_fraction({p}, {m})", mod.bubble_fraction, p, m)
        want = simulate(gpipe(p, m), t_f=1.0, t_b=2.0).bubble
        if not abs(got - want) < 1e-12:
            raise CheckFailed(
                f"bubble_fraction({p}, {m}) = {got!r}, the simulator measures {want:.6f} (t_B = 2·t_F): "
                "the bubble is (p − 1)/m of the *ideal* time, so (p − 1)/(m + p − 1) of the whole step"
            )
    return "p = 1, 3, 4; m = 1, 2, 4, 8: equals the simulated idle fraction"


CHECKS = [("gpipe", check_gpipe), ("bubble_fraction", check_bubble)]
