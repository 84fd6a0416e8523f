"""Lesson 01: minipar's ring all-reduce (Python, over isend/irecv) against gloo's built-in all_reduce.

16 MB of float32 on 4 ranks, the median of repeated runs in one process (one ``launch``), the two
algorithms interleaved so that both see the same machine load. Target: ≤ 1.2× gloo's own C++
implementation. What brings the Python ring close: chunk pipelining (each step's 4 MB chunk
travels in 1 MiB segments and a segment is added while the next ones arrive) and no copies in the
all-gather (received straight into place). What is left: 2(N−1) + (N−1) Python-level steps (the
data and the shape check), each paying interpreter and scheduler latency, which grows when the
machine is loaded; and no overlap *across* steps (gloo and NCCL forward a segment as soon as it
is reduced).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from minipar.comm.collectives import ring_all_reduce
from minipar.course.bench import Row
from minipar.runtime import dist as md
from minipar.runtime.launch import launch


def time_all_reduce(numels: list[int], algos=("torch", "ring"), repeats: int = 5) -> dict:
    """Worker: median seconds of each all-reduce algorithm for float32 tensors of each size.

    ``algos``: ``"torch"`` (``torch.distributed.all_reduce``: gloo's C++ on CPU, NCCL on GPUs),
    ``"ring"`` (:func:`minipar.comm.collectives.ring_all_reduce`), ``"ring (no check)"``.
    Each repeat starts after a barrier; a repeat's time is the slowest rank's (an all-reduce is
    done when every rank is done). One warm-up run per size is not timed. Algorithms alternate
    within a repeat so that they see the same load. Returns ``{algo: [median seconds per size]}``.
    Works under ``torchrun`` on GPUs too (tensors on ``minipar.runtime.dist.device()``, CUDA synchronised).
    """
    fns = {
        "torch": dist.all_reduce,
        "ring": ring_all_reduce,
        "ring (no check)": lambda t: ring_all_reduce(t, check=False),
    }
    device = md.device()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out = {a: [] for a in algos}
    for numel in numels:
        x = torch.randn(numel, device=device)
        times = torch.zeros(len(algos), repeats, device=device)
        for i in range(repeats + 1):
            for j, a in enumerate(algos):
                y = x.clone()
                dist.barrier()
                t = time.perf_counter()
                fns[a](y)
                sync()
                if i:
                    times[j, i - 1] = time.perf_counter() - t
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        for j, a in enumerate(algos):
            out[a].append(statistics.median(times[j].cpu().tolist()))
    return out


def rows(quick: bool) -> list[Row]:
    """Two rows: the like-for-like ratio (ring without minipar's up-front shape/dtype check, which
    gloo's ``all_reduce`` does not make either) carries the target; the default ``check=True`` call,
    whose check costs N−1 more small ring steps, is reported beside it."""
    n, numel, reps = 4, 4 * 2**20, 5 if quick else 31  # 16 MB of float32
    res = launch(
        time_all_reduce, world_size=n, args=([numel], ("torch", "ring (no check)", "ring"), reps), prefix=False
    )[0]
    t_gloo, t_ring, t_checked = res["torch"][0], res["ring (no check)"][0], res["ring"][0]
    return [
        Row(
            "01",
            f"ring_all_reduce(check=False) vs dist.all_reduce (gloo), 16 MB fp32, {n} ranks",
            t_ring / t_gloo,
            target="<= 1.2",
            ok=t_ring / t_gloo <= 1.2,
            note=f"{t_ring * 1e3:.1f} ms vs {t_gloo * 1e3:.1f} ms (median of {reps})",
        ),
        Row(
            "01",
            f"ring_all_reduce (default check=True) vs dist.all_reduce (gloo), 16 MB fp32, {n} ranks",
            t_checked / t_gloo,
            note=f"{t_checked * 1e3:.1f} ms vs {t_gloo * 1e3:.1f} ms; the shape check is N-1 extra small ring steps",
        ),
    ]
