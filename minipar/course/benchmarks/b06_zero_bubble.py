"""Lesson 06 / zero bubble: ZB-H1's bubble against 1F1B's, on the cluster clock and in the simulator.

- Simulator: ZB-H1 (Qi et al. 2024, arXiv:2401.10241 §2.1) at T_F = T_I = T_W against the paper's
  (p−1)(T_F+T_B−T_W) (exact: sums of small integers), p = 4, m = 8.
- Cluster clock: one real 4-rank step each of 1F1B and ZB-H1 (p = 4, m = 8, the fastest of the timed
  steps), compute = each rank's CPU time (:mod:`minipar.clock`): ZB-H1's bubble over what 1F1B would
  idle on the same clocked work (B = I + W; below 1: W fills the bubble), the two runs and formulas beside it.
- Simulator: DeepSeek-V3's DualPipe (arXiv:2412.19437 §3.2.1, Table 2; :mod:`minipar.pp.dualpipe`),
  p = 8, m = 20 (Figure 5), F = I = W = 1, B = 2, F&B = F + B: its idle per rank over 1F1B's on the
  same work, against Table 2's ratio (PP/2−1)(F&B+B−3W) / ((PP−1)(F+B)) = 6/21.
"""

from __future__ import annotations

from dataclasses import replace

from minipar.comm.links import IB_NDR, NVLINK4
from minipar.course.bench import Row
from minipar.course.pipeline_trace import RunSpec, measured_durations, message_bytes, read_clock, traced_run
from minipar.pp.dualpipe import dualpipe, idle_per_rank, route, table2_bubble
from minipar.pp.native import v_shape
from minipar.pp.schedules import Action, one_f_one_b, simulate
from minipar.pp.zero_bubble import zb_h1, zb_h1_bubble
from minipar.runtime.launch import launch

BASE = RunSpec(n_layer=8, d_model=64, T=64, B=32, m=8, clock=(NVLINK4, IB_NDR))


def rows(quick: bool) -> list[Row]:
    sim_zb, sim_1 = simulate(zb_h1(4, 8), 1, 1, t_w=1), simulate(one_f_one_b(4, 8), 1, 2)
    diff = abs(sim_zb.bubble - zb_h1_bubble(4, 8)) * 100
    out = [
        Row(
            "06",
            "ZB-H1 p=4 m=8 simulated bubble - (p-1)(T_F+T_B-T_W) formula, T_F=T_I=T_W",
            diff,
            unit="pp",
            target="<= 1e-9",
            ok=diff <= 1e-9,
            note=f"ZB-H1 {sim_zb.bubble:.1%} vs 1F1B {sim_1.bubble:.1%} of the step (simulated)",
        )
    ]
    full = lambda a: 2.0 if a.kind == "B" else 1.0  # noqa: E731 — B = I + W
    dp = simulate(dualpipe(8, 20), 1, full, t_w=1, place=v_shape(8), route=route(8, 20))
    one = max(idle_per_rank(simulate(one_f_one_b(8, 20), 1, 2)))
    ratio, want = max(idle_per_rank(dp)) / one, table2_bubble(8, 1, 2, 1) / ((8 - 1) * (1 + 2))
    out.append(
        Row(
            "06",
            "DualPipe p=8 m=20 simulated idle per rank / 1F1B's on the same work, F=I=W=1, F&B=F+B",
            ratio,
            target=f"== Table 2's {want:.3f}",
            ok=abs(ratio - want) <= 1e-12 and ratio < 1,
            note=f"DualPipe bubble {dp.bubble:.1%} of the step, peak in flight {max(dp.peak_inflight):g} "
            f"micro-batches per rank (Table 2: PP+1 = 9), 2x parameters (simulated)",
        )
    )
    clock = {}
    for name in ("1f1b", "zb-h1"):
        spec = replace(BASE, schedule=name, steps=2 if quick else 4)
        clock[name] = read_clock(launch(traced_run, world_size=4, args=(spec,), prefix=False), spec)
    d_f, d_b = measured_durations(clock["zb-h1"]["trace"], cpu=True)
    both = lambda a: d_b[Action(a.stage, "I", a.mb)] + d_b[Action(a.stage, "W", a.mb)]  # noqa: E731 — B = I + W
    t_comm = BASE.clock[0].time(message_bytes(BASE))
    as_1f1b = simulate(one_f_one_b(4, 8), d_f.__getitem__, both, t_comm=t_comm).bubble
    ratio = clock["zb-h1"]["clock"] / as_1f1b
    out.append(
        Row(
            "06",
            "bubble p=4 m=8: ZB-H1 on the cluster clock / 1F1B simulated on the same clocked work",
            ratio,
            target="< 1",
            ok=ratio < 1,
            note=f"1F1B on that work {as_1f1b:.1%}; "
            + ", ".join(
                f"{k} run {c['clock']:.1%} (simulated {c['simulated']:.1%}, formula {c['formula']:.1%})"
                for k, c in clock.items()
            ),
        )
    )
    return out
