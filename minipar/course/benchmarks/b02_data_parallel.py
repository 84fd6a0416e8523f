"""Lesson 02: minipar's DistributedDataParallel step time against torch.nn.parallel.DistributedDataParallel.

Same GPT, same per-rank batch, same bucket size, same ranks (gloo on a CPU; the row's name says which). Both
wrappers live in the same launched job (two model copies), and their timing blocks alternate, so a slow moment of the
shared machine hits both alike. Ratio = minipar median step / PyTorch median step, per launch; the row is the
median over 3 launches, the first building minipar's copy first, the second PyTorch's, the third minipar's.

Target (issue #39): at most PyTorch's step. minipar's hooks write each gradient divided by N into its
bucket in one pass (a 0-dim tensor divisor; a copy and a division of each bucket read it twice: about
0.4 ms per backward here) and leave ``p.grad`` as a view of the averaged bucket (no copy
back, where PyTorch's default copies it back), and they poll
``Work.is_completed()`` for the bucket timeline instead of hanging a Python callback on each all-reduce's
future (a callback makes gloo's thread wait for the GIL before it starts the next bucket: 5-10 % of the
step on a 2-core machine). What is left over PyTorch is its reducer's hooks running in C++ where
minipar's run in Python.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from minipar.course.bench import Row
from minipar.dp.ddp import DistributedDataParallel
from minipar.model.gpt import GPT, GPTConfig
from minipar.runtime import dist as md
from minipar.runtime.launch import launch

CFG = dict(vocab_size=96, n_layer=4, n_head=4, d_model=128, block_size=64)
BUCKET_MB = 1.0


def step_times(repeats: int, steps: int, local_batch: int = 4, torch_first: bool = False) -> dict:
    """On every rank: median seconds per training step for each wrapper (runs inside ``launch``), and the backend
    the ranks ran (``"backend"``: the row's name says it).

    On ``minipar.runtime.dist.device()`` (``cuda:LOCAL_RANK`` under NCCL, CUDA synchronised before each clock read).
    ``torch_first``: build PyTorch's copy first (where each copy's memory lands is one more thing a launch fixes).
    """
    dev = md.device()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x = torch.randint(
        0, CFG["vocab_size"], (local_batch, CFG["block_size"]), generator=torch.Generator().manual_seed(dist.get_rank())
    ).to(dev)
    nets = {}
    for kind in ("torch", "minipar") if torch_first else ("minipar", "torch"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**CFG)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        net = (
            DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB)
            if kind == "minipar"
            else torch.nn.parallel.DistributedDataParallel(
                model, bucket_cap_mb=BUCKET_MB, device_ids=[dev.index] if dev.type == "cuda" else None
            )
        )
        nets[kind] = (net, opt)

    def block(kind: str) -> float:
        net, opt = nets[kind]
        sync()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(steps):
            _, loss = net(x, x)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync()
        return (time.perf_counter() - t) / steps

    block("minipar"), block("torch")  # warm-up
    times = {"minipar": [], "torch": []}
    for r in range(repeats):
        for kind in ("minipar", "torch") if r % 2 == 0 else ("torch", "minipar"):
            times[kind].append(block(kind))
    return {**{k: statistics.median(v) for k, v in times.items()}, "backend": dist.get_backend()}


def rows(quick: bool) -> list[Row]:
    """One row per rank count: the median over ``launches`` jobs of each job's ratio (on a 2-core machine the
    ratio moves by ±5 % from one launch to the next, more than between the blocks of one launch)."""
    repeats, steps, launches = (3, 3, 1) if quick else (9, 5, 3)
    out = []
    for n in (2, 4):
        job = dict(world_size=n, args=(repeats, steps), prefix=False)
        runs = [launch(step_times, kwargs=dict(torch_first=k % 2 == 1), **job)[0] for k in range(launches)]
        ratios = [t["minipar"] / t["torch"] for t in runs]
        ratio = statistics.median(ratios)
        t = runs[ratios.index(ratio)]  # the median launch's step times (launches is odd)
        out.append(
            Row(
                "02",
                f"minipar DDP vs torch DDP, GPT 4x128 T=64, 4 seq/rank, {BUCKET_MB:g} MiB buckets, "
                f"{n} {t['backend']} ranks",
                ratio,
                target="<= 1.0",
                ok=ratio <= 1.0,
                note=f"median of {launches} launches ({', '.join(f'{r:.3f}' for r in ratios)}); "
                f"{t['minipar'] * 1e3:.1f} ms vs {t['torch'] * 1e3:.1f} ms per step",
            )
        )
    return out
