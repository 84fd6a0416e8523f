"""Lessons 05-06 / pipeline: measured bubble vs the simulation, 1F1B memory, step time vs PyTorch.

- Bubble: a real traced step (the fastest of several) against ``simulate`` fed with the same
  step's measured action durations (GPipe and 1F1B, p = 2, m = 8: one core per rank on a 2-core
  machine; p = 4 reported: ranks share cores, so the trace includes time a rank was descheduled).
- Memory: exact saved-activation bytes on rank 0, 1F1B / GPipe against p/m (p = 4, m = 8).
- Step time: minipar's executor / ``torch.distributed.pipelining`` for the same schedule (best of N).
"""

from __future__ import annotations

from dataclasses import replace

from minipar.course.bench import Row
from minipar.course.pipeline_trace import RunSpec, measured_bubble, measured_durations, step_time_vs_native, traced_run
from minipar.pp.schedules import make_schedule, simulate
from minipar.runtime.launch import launch

BASE = RunSpec(n_layer=4, d_model=64, T=64, B=32, m=8)


def _bubble(spec: RunSpec, p: int) -> tuple[float, float]:
    out = launch(traced_run, world_size=p, args=(spec,), prefix=False)
    tr = [o["trace"] for o in out]
    d_f, d_b = measured_durations(tr)
    sim = simulate(make_schedule(spec.schedule, p, spec.m, spec.v), t_f=d_f.__getitem__, t_b=d_b.__getitem__)
    return measured_bubble(tr), sim.bubble


def rows(quick: bool) -> list[Row]:
    steps = 3 if quick else 8
    out = []
    for p, name in ((2, "gpipe"), (2, "1f1b"), (4, "gpipe"), (4, "1f1b")):
        meas, sim = _bubble(replace(BASE, schedule=name, steps=steps), p)
        diff = abs(meas - sim) * 100
        gate = p == 2
        out.append(
            Row(
                "05",
                f"bubble {name} p={p} m=8: |measured - simulated (measured durations)|",
                diff,
                unit="pp",
                target="<= 5" if gate else "",
                ok=(diff <= 5) if gate else None,
                note=f"measured {meas:.1%}, simulated {sim:.1%}" + ("" if gate else "; 4 ranks share 2 cores"),
            )
        )

    mem = {}
    for name in ("gpipe", "1f1b"):
        res = launch(traced_run, world_size=4, args=(replace(BASE, schedule=name, n_layer=8, steps=0),), prefix=False)
        mem[name] = res[0]["peak_act_bytes"]
    ratio = mem["1f1b"] / mem["gpipe"] / (4 / 8)
    out.append(
        Row(
            "06",
            "1F1B peak activations on rank 0 / ((p/m) * GPipe's), p=4 m=8",
            ratio,
            unit="×",
            target="<= 1.2",
            ok=ratio <= 1.2,
            note=f"{mem['1f1b'] / 2**20:.2f} MiB vs GPipe {mem['gpipe'] / 2**20:.2f} MiB (saved-tensor bytes)",
        )
    )

    steps = 3 if quick else 16  # the best of more steps: two ranks on two shared cores are noisy
    for name, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        spec = replace(BASE, schedule=name, v=v, steps=steps)
        best = launch(step_time_vs_native, world_size=2, args=(spec,), prefix=False)[0]
        t_mine, t_ref = best["minipar"], best["native"]
        out.append(
            Row(
                "06" if name != "gpipe" else "05",
                f"pipeline step {name} p=2 m=8 v={v}: minipar / torch.distributed.pipelining",
                t_mine / t_ref,
                target="<= 1.1",
                ok=t_mine / t_ref <= 1.1,
                note=f"{t_mine * 1e3:.1f} ms vs {t_ref * 1e3:.1f} ms (best of {steps}, alternating in one job)",
            )
        )
    return out
