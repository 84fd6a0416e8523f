"""all_reduce_perf that starts the clock before the barrier: the wait for the last rank is timed."""

import time

import torch
import torch.distributed as dist

from exercises.solutions.ex10_nccl import *  # noqa: F401,F403
from exercises.solutions.ex10_nccl import bus_bandwidth


def all_reduce_perf(sizes, warmup=2, iters=5, group=None):
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    rows = []
    for size in sizes:
        count = size // 4
        buf = torch.full((count,), float(rank + 1))
        for _ in range(warmup):
            dist.all_reduce(buf, group=group)
        start = time.perf_counter()
        dist.barrier(group=group)
        for _ in range(iters):
            dist.all_reduce(buf, group=group)
        if buf.is_cuda:
            torch.cuda.synchronize()
        t = (time.perf_counter() - start) / iters
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf, group=group)
        wrong = (buf != n * (n + 1) / 2).sum()
        stats = torch.tensor([t, float(wrong)], dtype=torch.float64)
        dist.all_reduce(stats, group=group)
        t = stats[0].item() / n
        algbw, busbw = bus_bandwidth(size, t, n)
        rows.append(dict(size=size, count=count, time_us=t * 1e6, algbw=algbw, busbw=busbw, wrong=int(stats[1])))
    return rows
