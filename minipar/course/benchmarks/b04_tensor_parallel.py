"""Lesson 04: minipar tensor parallelism vs PyTorch DTensor TP, same GPT, same ranks.

One training step (forward, backward, AdamW) of a 4-layer GPT (d_model 128, 4 heads, T 128,
batch 8, vocabulary 128) with attention, MLP, embedding and head split over 2 and 4 gloo ranks:
``minipar.tp.gpt.TensorParallelGPT`` against ``minipar.tp.dtensor.parallelize_gpt_dtensor`` (the
same layout with ``ColwiseParallel``/``RowwiseParallel`` + ``loss_parallel``). Both run in the
same processes, alternating, so they see the same machine load. Where the time goes: the note
gives forward and backward+step times of each, and the time minipar spends inside its
collectives (timed by wrapping ``torch.distributed``; DTensor's functional collectives bypass those
Python functions, so only the minipar side is split). The 1-rank row has no communication at
all (a mesh of one): its ratio is DTensor's per-operator cost (sharding propagation, dispatch)
alone, which is what both implementations differ by — they issue the same collectives.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.distributed as dist

from minipar.comm import intercept
from minipar.course.bench import Row
from minipar.runtime.launch import launch

CFG = dict(vocab_size=128, block_size=128, n_layer=4, n_head=4, d_model=128)
BATCH = 8


@contextlib.contextmanager
def _collective_timer(spent: list):
    """Add the seconds spent inside minipar's collectives (incl. waiting for peers) to ``spent[0]``:
    a listener on :mod:`minipar.comm.intercept` (the outermost call only, when one calls another)."""
    names = ("all_reduce", "all_gather_single", "reduce_scatter_single")
    depth = [0]

    def timed(op, call, args, kwargs):
        if op not in names or depth[0]:
            return call(*args, **kwargs)
        depth[0] += 1
        t = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t
            depth[0] -= 1

    with intercept.listening(timed):
        yield


def _timed_step(model, opt, x, y, ctx) -> tuple[float, float, float]:
    """(forward s, backward+step s, s inside collectives) of one step; barriers around it."""
    spent = [0.0]
    dist.barrier()
    t0 = time.perf_counter()
    with ctx(), _collective_timer(spent):
        _, loss = model(x, y)
        t1 = time.perf_counter()
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    dist.barrier()
    return t1 - t0, time.perf_counter() - t1, spent[0]


def job(repeats: int) -> dict:
    """Runs on every rank: median (forward, backward+step, in collectives) seconds per implementation."""
    from torch.distributed.device_mesh import init_device_mesh

    from minipar.model.gpt import GPT, GPTConfig
    from minipar.tp.dtensor import loss_context, parallelize_gpt_dtensor
    from minipar.tp.gpt import TensorParallelGPT

    cfg = GPTConfig(**CFG)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (BATCH, cfg.block_size), generator=g, device="cpu")
    y = torch.randint(0, cfg.vocab_size, (BATCH, cfg.block_size), generator=g, device="cpu")
    torch.manual_seed(0)
    mine = TensorParallelGPT(cfg)
    torch.manual_seed(0)
    theirs = parallelize_gpt_dtensor(GPT(cfg), init_device_mesh("cpu", (dist.get_world_size(),)), vocab_parallel=True)
    runs = {
        "minipar": (mine, torch.optim.AdamW(mine.parameters(), lr=1e-3), contextlib.nullcontext),
        "dtensor": (theirs, torch.optim.AdamW(theirs.parameters(), lr=1e-3), lambda: loss_context(theirs)),
    }
    times = {k: [] for k in runs}
    for i in range(repeats + 1):  # first round = warm-up
        for name, (model, opt, ctx) in runs.items():
            t = _timed_step(model, opt, x, y, ctx)
            if i:
                times[name].append(t)
    return {k: tuple(statistics.median(t[j] for t in v) for j in range(3)) for k, v in times.items()}


def rows(quick: bool) -> list[Row]:
    reps = 3 if quick else 7
    out = []
    for n in (1, 2, 4):
        res = launch(job, world_size=n, args=(reps,), prefix=False)
        mf, mb = (max(r["minipar"][i] for r in res) for i in range(2))
        df, db = (max(r["dtensor"][i] for r in res) for i in range(2))
        comm = max(r["minipar"][2] for r in res)
        ratio = (mf + mb) / (df + db)
        out.append(
            Row(
                "04",
                f"TP GPT step (4 layers, d 128, T 128, B 8), minipar vs DTensor TP, {n} gloo rank{'s' * (n > 1)}"
                + (" (no communication: per-operator overhead only)" if n == 1 else ""),
                ratio,
                target="<= 1.0",
                ok=ratio <= 1.0,
                note=(
                    f"{(mf + mb) * 1e3:.0f} ms vs {(df + db) * 1e3:.0f} ms; forward {mf * 1e3:.0f} vs "
                    f"{df * 1e3:.0f} ms, backward+step {mb * 1e3:.0f} vs {db * 1e3:.0f} ms; "
                    f"minipar inside collectives (incl. waiting for peers) {comm * 1e3:.0f} ms"
                ),
            )
        )
    return out
