"""Rank functions for tests/test_cluster_clock.py (minipar.clock on real ranks)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import minipar.runtime.dist as md
from minipar.clock import ClusterClock
from minipar.comm import p2p
from minipar.comm.comm_log import CommLog
from minipar.comm.links import Link


def burn(cpu_s: float) -> None:
    """Use ``cpu_s`` seconds of this thread's CPU time (however long that takes on a busy machine)."""
    c0 = time.thread_time()
    while time.thread_time() - c0 < cpu_s:
        pass


def _spans(clk, kind="comm"):
    return [tuple(s) for s in clk.timeline if s.kind == kind]


def ping(nbytes: int, alpha: float, beta: float, sleep_s: float) -> dict:
    """Rank 0 sleeps, then sends twice (blocking dist.send, then minipar's p2p.isend); rank 1 receives."""
    link = Link("test", alpha, beta)
    t = torch.ones(nbytes // 4)
    wall = time.perf_counter()
    with ClusterClock(link, link) as clk:
        nows = []
        if md.rank() == 0:
            time.sleep(sleep_s)  # wall time only: no CPU time, so no virtual time
            dist.send(t, 1)
            p2p.isend(t, 1, label="second").wait()
        else:
            dist.recv(t, 0)
            nows.append(clk.now)
            p2p.irecv(t, 0, label="second").wait()
            nows.append(clk.now)
    return dict(comm=_spans(clk), nows=nows, wall=time.perf_counter() - wall)


def all_reduce_after_compute(nbytes: int, alpha: float, beta: float) -> dict:
    """Rank r computes 0.02·(r+1) CPU seconds, then all-reduces ``nbytes``."""
    link = Link("test", alpha, beta)
    t = torch.ones(nbytes // 4)
    with ClusterClock(link, link) as clk:
        burn(0.02 * (md.rank() + 1))
        before = clk.now
        dist.all_reduce(t)
        after = clk.now
    return dict(before=before, after=after, comm=_spans(clk), sum=t[0].item())


def overlap(nbytes: int, alpha: float, beta: float, compute_s: float) -> dict:
    """An async all-reduce, ``compute_s`` CPU seconds of compute, then wait()."""
    link = Link("test", alpha, beta)
    t = torch.ones(nbytes // 4)
    with ClusterClock(link, link) as clk:
        work = dist.all_reduce(t, async_op=True)
        posted = clk.now
        burn(compute_s)
        computed = clk.now
        work.wait()
        after = clk.now
    return dict(posted=posted, computed=computed, after=after, comm=_spans(clk))


def straggler(factor: float, cpu_s: float) -> dict:
    """Both ranks compute ``cpu_s`` CPU seconds (rank 1 is a straggler), then all-reduce."""
    with ClusterClock(straggler={1: factor}) as clk:
        c0 = time.thread_time()
        burn(cpu_s)
        cpu = time.thread_time() - c0
        before = clk.now
        dist.all_reduce(torch.ones(4))
        after = clk.now
    return dict(cpu=cpu, before=before, after=after, comm=_spans(clk))


def scoped() -> dict:
    """Patched inside the block only, restored after an exception; what a CommLog outside / inside the clock records."""
    orig = {n: (getattr(dist, n), getattr(c10d, n)) for n in ("all_reduce", "send", "isend", "barrier")}
    me = md.rank()
    inside = None
    t = torch.full((250,), float(me + 1))  # 1000 bytes
    with CommLog() as log:
        try:
            with ClusterClock() as clk:
                inside = dist.all_reduce is not orig["all_reduce"][0] and c10d.isend is not orig["isend"][1]
                dist.all_reduce(t)
                if me == 0:
                    dist.send(t, 1)
                else:
                    dist.recv(t, 0)
                dist.barrier()
                raise KeyError("leaves the block")
        except KeyError:
            pass
    restored = {n: (getattr(dist, n), getattr(c10d, n)) for n in orig} == orig
    with ClusterClock(), CommLog() as inner:  # a log inside the clock sees the program's calls exactly
        p2p.isend(t * 10, 1).wait() if me == 0 else p2p.irecv(t, 0).wait()
    return dict(
        inside=inside,
        restored=restored,
        ops=[(r.op, r.bytes) for r in log.records],
        inner=[(r.op, r.bytes) for r in inner.records],
        comm=[s[1] for s in _spans(clk)],
        value=t[0].item(),
    )


def pipeline_1f1b(m: int = 4) -> dict:
    """Two identical 1F1B steps (p = world size), clock off then on: the losses, and the clocked step's spans."""
    from minipar.model.gpt import GPT, GPTConfig
    from minipar.pp.executor import PipelineExecutor
    from minipar.pp.schedules import make_schedule
    from minipar.pp.stages import build_stages

    p, me = md.world_size(), md.rank()
    sched = make_schedule("1f1b", p, m)
    g = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, 32, (8, 16), generator=g) for _ in range(2))
    losses = []
    for on in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=p, n_head=2, d_model=16))
        ex = PipelineExecutor(build_stages(model, p, sorted({a.stage for a in sched[me]})), sched)
        with ClusterClock(enabled=on) as clk:
            losses.append(ex.step(x, y).loss)
    return dict(losses=losses, comm=_spans(clk), now=clk.now)


def pipeline_on_clock(
    m: int = 8, coupled: bool = False, steps: int = 2, d_model: int = 64, alpha: float | None = None
) -> dict:
    """``steps`` 1F1B steps (p = world size) of a 4-layer GPT on the cluster clock (NVLink 4 at its real
    speed, or a link costing ``alpha`` seconds per message); the last step's clock timeline, virtual seconds."""
    from minipar.model.gpt import GPT, GPTConfig
    from minipar.pp.executor import PipelineExecutor
    from minipar.pp.schedules import make_schedule
    from minipar.pp.stages import build_stages

    p, me = md.world_size(), md.rank()
    sched = make_schedule("1f1b", p, m)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=64, n_layer=p, n_head=4, d_model=d_model))
    ex = PipelineExecutor(build_stages(model, p, [me]), sched, coupled=coupled, count_memory=False)
    g = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, 64, (2 * m, 64), generator=g) for _ in range(2))
    links = () if alpha is None else (Link("alpha", alpha, float("inf")),) * 2
    for _ in range(steps):
        with ClusterClock(*links) as clk:
            ex.step(x, y, clock=clk)
    return dict(timeline=[tuple(s) for s in clk.timeline], now=clk.now)


def late_receiver(compute_s: float, transfer_s: float) -> dict:
    """Rank 0 sends at once; rank 1 computes ``compute_s`` CPU seconds, then posts its receive."""
    link = Link("test", transfer_s, float("inf"))
    t = torch.ones(4)
    with ClusterClock(link, link) as clk:
        if md.rank() == 0:
            dist.send(t, 1)
        else:
            burn(compute_s)
            dist.recv(t, 0)
        after = clk.now
    return dict(comm=_spans(clk), after=after)


def ddp_on_clock(alpha: float = 0.5e-3, steps: int = 3) -> dict:
    """A 2-layer GPT in minipar's DDP (0.05 MiB buckets) on the cluster clock, each message costing
    ``alpha``; overlap off and on alternating. Per mode, the fastest step: virtual seconds,
    compute, backward compute, all-reduce time (this rank's clock)."""
    from minipar.dp.ddp import DistributedDataParallel
    from minipar.model.gpt import GPT, GPTConfig

    link = Link("alpha", alpha, float("inf"))
    x = torch.randint(0, 64, (4, 32), generator=torch.Generator().manual_seed(md.rank()))
    nets = {}
    for overlap in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=2, d_model=64))
        nets[overlap] = DistributedDataParallel(model, bucket_cap_mb=0.05, overlap=overlap)
    best: dict = {}
    for i in range(steps + 1):
        for overlap, net in nets.items():
            with ClusterClock(link, link) as clk:
                _, loss = net(x, x)
                with clk.label("backward"):
                    loss.backward()
            spans = clk.timeline
            row = dict(
                step=clk.now,
                compute=sum(s.t1 - s.t0 for s in spans if s.kind == "compute"),
                backward=sum(s.t1 - s.t0 for s in spans if s.kind == "compute" and s.label == "backward"),
                comm=sum(s.t1 - s.t0 for s in spans if s.kind == "comm"),
                compute_s=clk.compute_s,
                events=list(clk.events),
                durations=[e - s for _, s, e in clk.collectives],
            )
            slowest = torch.tensor([clk.now], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # every rank keeps the same step (for the replay)
            row["slowest"] = slowest.item()
            if i > 0 and row["slowest"] < best.get(overlap, {"slowest": float("inf")})["slowest"]:
                best[overlap] = row
    return best
