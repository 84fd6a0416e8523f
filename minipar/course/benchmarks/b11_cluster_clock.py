"""The cluster clock (issue #21, for lessons 05-06): its overhead on a real 4-rank 1F1B step (p = 4, m = 8).

One launched job runs minipar's :class:`~minipar.pp.executor.PipelineExecutor` step by step,
alternating a step with the clock off and one inside a :class:`~minipar.clock.ClusterClock`
(entered and left outside the timed region: a program enters it once; a third step runs the
clock on the unscaled links). Each step starts after a
barrier; its time is the slowest rank's; the row is the ratio of the fastest steps (other processes
on a shared machine only ever add time). Reported beside it: the clocked step's virtual time and
its bubble on the emulated cluster against 1F1B's (p−1)/(m+p−1), with NVLink 4 at its real speed
(communication ≈ free: the bubble of the measured compute) and scaled to this CPU (the tiny
model's messages then cost what they would on H100s: α dominates).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from minipar.clock import ClusterClock, cluster_links
from minipar.comm.links import IB_NDR, NVLINK4
from minipar.course.bench import Row
from minipar.model.gpt import GPT, GPTConfig
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import make_schedule
from minipar.pp.stages import build_stages
from minipar.runtime import dist as mdist
from minipar.runtime.launch import launch

P, M, B, T = 4, 8, 32, 64
CFG = dict(vocab_size=96, block_size=T, n_layer=4, n_head=4, d_model=64)


def clock_overhead(steps: int, intra, inter) -> dict:
    """On each of P ranks: ``steps`` rounds of 1F1B steps after one warm-up round, each round one step
    with the clock off, one on the given links ("on"), one on the unscaled NVLink 4 / IB NDR ("raw").

    Returns, per mode, the fastest wall seconds (slowest rank) and, for the clocked modes, the fastest
    step's virtual seconds on this rank (``virtual_<mode>``) and its compute seconds (``busy_<mode>``).
    """
    me = mdist.rank()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    sched = make_schedule("1f1b", P, M)
    stages = build_stages(model, P, sorted({a.stage for a in sched[me]}))
    opt = torch.optim.AdamW([q for s in stages.values() for q in s.parameters()], lr=1e-3)
    ex = PipelineExecutor(stages, sched, count_memory=False)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, CFG["vocab_size"], (B, T), generator=g).to(mdist.device())
    y = torch.randint(0, CFG["vocab_size"], (B, T), generator=g).to(mdist.device())
    links = {"off": (intra, inter), "on": (intra, inter), "raw": (NVLINK4, IB_NDR)}
    out = {m: float("inf") for m in links}
    for i in range(steps + 1):
        for mode in list(links) if i % 2 else list(links)[::-1]:
            clk = ClusterClock(*links[mode], enabled=mode != "off")
            mdist.barrier()
            with clk:
                t0 = time.perf_counter()
                ex.step(x, y, opt)
                wall = time.perf_counter() - t0
                now = clk.now
            t = torch.tensor([wall], dtype=torch.float64, device=mdist.device())
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if i > 0 and t.item() < out[mode]:
                out[mode] = t.item()
                out[f"virtual_{mode}"] = now
                out[f"busy_{mode}"] = sum(s.t1 - s.t0 for s in clk.timeline if s.kind == "compute")
    return out


def rows(quick: bool) -> list[Row]:
    steps = 3 if quick else 20  # the fastest of many: 4 ranks share the cores with anything else
    intra, inter = cluster_links()  # measured once, here: every rank gets the same links
    out = launch(clock_overhead, world_size=P, args=(steps, intra, inter), prefix=False)
    off, on = out[0]["off"], out[0]["on"]
    ratio = on / off
    formula = (P - 1) / (M + P - 1)
    out_rows = [
        Row(
            "05",
            f"1F1B step p={P} m={M} inside ClusterClock / clock off (wall time)",
            ratio,
            target="<= 1.15",
            ok=ratio <= 1.15,
            note=f"{on * 1e3:.1f} ms vs {off * 1e3:.1f} ms (best of {steps}, alternating in one job)",
        )
    ]
    for mode, what in (("raw", "NVLink 4 at its real speed"), ("on", "NVLink 4 scaled to this CPU")):
        makespan = max(o[f"virtual_{mode}"] for o in out)
        bubble = 1 - sum(o[f"busy_{mode}"] for o in out) / (P * makespan)
        out_rows.append(
            Row(
                "05",
                f"1F1B p={P} m={M} bubble on the cluster clock, {what}",
                bubble * 100,
                unit="%",
                note=f"formula (p-1)/(m+p-1) = {formula:.1%}; virtual step {makespan * 1e3:.2f} ms; "
                "unbalanced stages (embedding on the first, head and loss on the last)",
            )
        )
    return out_rows
