"""Lesson 12 (mixture of experts): an expert-parallel MoE layer against a dense MLP of the same active
compute, and minipar's differentiable all-to-all against PyTorch's.

1. Forward + backward of one layer on 2 ranks, 512 tokens of d = 128 per rank, float32: the dense MLP
   (d -> 4d -> d, every rank its own tokens) against ``ExpertParallelMoE`` with 4 such experts, top-1
   (the same FLOPs per token, plus the router), experts sharded 2 per rank. The ratio is what routing,
   the three all-to-alls and the per-expert loop cost on this machine (reported; no target: a CPU's
   gloo all-to-all says little about NVLink).
2. The all-to-all bytes CommLog counts per rank against each rank's plan (exact) and against the
   balanced formula (ep − 1)/ep · T·k·d·b (``minipar.perf.flops.all_to_all_bytes``).
3. minipar's ``all_to_all`` (forward + backward, uneven splits) against
   ``torch.distributed._functional_collectives.all_to_all_single_autograd`` on the same rows.

Timed runs are interleaved in one launch (a busy machine slows both alike), barriers around each, the
slowest rank's time per run, the median over runs; one all-to-all sample is ``A2A_CALLS`` calls (one
call, about a millisecond, is below the noise of the barriers around it).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm.all_to_all import all_to_all
from minipar.comm.comm_log import CommLog
from minipar.course.bench import Row, median_times
from minipar.ep.parallel import ExpertParallelMoE
from minipar.model.moe.layer import MoE
from minipar.perf.flops import all_to_all_bytes
from minipar.runtime.launch import launch

N, D, T, E = 2, 128, 512, 4
A2A_CALLS = 10


def _timed(fn) -> float:
    dist.barrier()
    t = time.perf_counter()
    fn()
    dist.barrier()
    dt = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device="cpu")
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return dt.item()


def job(runs: int) -> dict:
    import torch.distributed._functional_collectives as fc

    r = dist.get_rank()
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    ep = ExpertParallelMoE(MoE(D, E, 1))
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(r), device="cpu").requires_grad_(True)
    splits = [T // 4 + 37 * j for j in range(N)]  # uneven rows to each rank, the same pattern on all
    rows = torch.randn(sum(splits), D, requires_grad=True, device="cpu")
    recv = [splits[r]] * N
    steps = {
        "dense": lambda: dense(x).sum().backward(),
        "moe": lambda: ep(x).sum().backward(),
    }
    times = {k: [] for k in steps}
    for i in range(runs + 1):
        for k, fn in steps.items():
            t = _timed(fn)
            if i:  # the first run of each is a warm-up
                times[k].append(t)

    def a2a(fn):  # one timed sample = A2A_CALLS calls: a single call (~1 ms) is below the barrier's noise
        return lambda: [fn() for _ in range(A2A_CALLS)]

    pair = {
        "minipar_a2a": a2a(lambda: all_to_all(rows, recv, splits).sum().backward()),
        "torch_a2a": a2a(
            lambda: fc.wait_tensor(fc.all_to_all_single_autograd(rows, recv, splits, dist.group.WORLD)).sum().backward()
        ),
    }
    for k, t in median_times(pair, runs, barrier=True, slowest=True).items():
        times[k] = [t / A2A_CALLS]
    with CommLog() as log:
        ep(x).sum().backward()
    a2a = [rec.sent for rec in log.records if rec.op == "all_to_all_single" and rec.dtype == "torch.float32"]
    return dict(times=times, a2a=a2a, rows=ep.stats["a2a_rows"][0])


def rows(quick: bool) -> list[Row]:
    out = launch(job, world_size=N, args=(3 if quick else 15,), prefix=False)
    t = {k: statistics.median(v) for k, v in out[0]["times"].items()}
    formula = all_to_all_bytes(T, D, 1, N, 4)
    worst = max(max(o["a2a"]) for o in out)
    exact = all(o["a2a"][0] == o["rows"] * D * 4 for o in out)
    return [
        Row(
            "12",
            f"MoE layer, {E} experts top-1, EP over {N} ranks, fwd+bwd vs the dense MLP (same active FLOPs)",
            t["moe"] / t["dense"],
            note=f"{t['moe'] * 1e3:.1f} ms vs {t['dense'] * 1e3:.1f} ms ({T} tokens of d={D} per rank, fp32)",
        ),
        Row(
            "12",
            "EP all-to-all bytes per rank: CommLog = the plan's rows; the largest / balanced formula",
            worst / formula,
            unit="",
            target="CommLog = plan",
            ok=exact,
            note=f"{worst:,.0f} B in the largest all-to-all vs (N−1)/N·T·k·d·4 = {formula:,.0f} B",
        ),
        Row(
            "12",
            "minipar all_to_all (uneven splits, fwd+bwd) vs all_to_all_single_autograd",
            t["minipar_a2a"] / t["torch_a2a"],
            target="<= 1.2",
            ok=t["minipar_a2a"] / t["torch_a2a"] <= 1.2,
            note=f"{t['minipar_a2a'] * 1e3:.2f} ms vs {t['torch_a2a'] * 1e3:.2f} ms",
        ),
    ]
