"""Checks for lesson 05: the GPipe schedule (validated by the simulator) and its bubble."""

from __future__ import annotations

from exercises.checks.common import CheckFailed, Lesson
from exercises.checks.schedules import CASES, RULES, validate
from exercises.checks.watch import finally_own, watched


def check_gpipe(mod) -> str:
    seen = []
    for p, m in CASES:
        sched, summary = watched(f"gpipe({p}, {m})", RULES, mod, mod.gpipe, p, m)
        seen.append((f"gpipe({p}, {m})", summary))
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
    finally_own(mod, ["gpipe"], seen)
    return "p = 1, 3, 4; m = 1, 2, 4, 8 (m < p too): valid (simulated), all forwards then all backwards"


def check_bubble(mod) -> str:
    from minipar.pp.schedules import gpipe, simulate

    seen = []
    for p, m in CASES:
        got, summary = watched(f"bubble_fraction({p}, {m})", RULES, mod, mod.bubble_fraction, p, m)
        seen.append((f"bubble_fraction({p}, {m})", summary))
        want = simulate(gpipe(p, m), t_f=1.0, t_b=2.0).bubble
        if not abs(got - want) < 1e-12:
            raise CheckFailed(
                f"bubble_fraction({p}, {m}) = {got!r}, the simulator measures {want:.6f} (t_B = 2·t_F): "
                "the bubble is (p − 1)/m of the *ideal* time, so (p − 1)/(m + p − 1) of the whole step"
            )
    finally_own(mod, ["bubble_fraction"], seen)
    return "p = 1, 3, 4; m = 1, 2, 4, 8: equals the simulated idle fraction"


LESSON = Lesson(
    number="05",
    title="pipeline, micro-batches",
    module="ex05_pipeline_microbatches",
    checks=(
        ("gpipe", check_gpipe),
        ("bubble_fraction", check_bubble),
    ),
    rules=(RULES,),
)
