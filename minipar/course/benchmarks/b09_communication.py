"""Lesson 09: compression and overlap against their PyTorch-native or un-optimised counterparts.

- minipar PowerSGD (rank 4) vs torch DDP + ``powerSGD_hook`` on the same GPT and batch: step time
  ratio (both pay for their matrix products on the same cores); and PowerSGD's bytes per step
  against :func:`minipar.dp.compression.compressed_bytes_formula` (exact).
- the overlapped TP all-gather + GEMM vs gather-then-GEMM (:mod:`minipar.tp.overlap`), 2 ranks.
- the synchronous parameter server (1 server + 2 workers) vs torch DDP on 2 ranks: step time,
  reported only (the server serialises W pushes through one rank: it is meant to be slower).
Timing blocks alternate between the two sides inside one launched job, medians of repeats.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from minipar.course.bench import Row
from minipar.dp.compression import compressed_bytes_formula, make_compressor
from minipar.model.gpt import GPT, GPTConfig
from minipar.runtime.launch import launch

CFG = dict(vocab_size=96, n_layer=4, n_head=4, d_model=128, block_size=64)


def _alternate(blocks: dict, repeats: int) -> dict:
    for f in blocks.values():  # warm-up
        f()
    times = {k: [] for k in blocks}
    for r in range(repeats):
        for k in list(blocks) if r % 2 == 0 else list(blocks)[::-1]:
            dist.barrier()
            t = time.perf_counter()
            blocks[k]()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _batch() -> torch.Tensor:
    """This rank's (4, block_size) int64 batch of random token ids (seeded by rank)."""
    g = torch.Generator().manual_seed(dist.get_rank())
    return torch.randint(0, CFG["vocab_size"], (4, CFG["block_size"]), generator=g, device="cpu")


def powersgd_times(repeats: int, steps: int, rank: int = 4) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    x = _batch()
    torch.manual_seed(0)
    mine = GPT(GPTConfig(**CFG))
    comp = make_compressor("powersgd", rank=rank, start_iter=0)
    torch.manual_seed(0)
    ref = torch.nn.parallel.DistributedDataParallel(
        GPT(GPTConfig(**CFG)), bucket_cap_mb=100
    )  # one bucket: see lesson 09
    ref.register_comm_hook(
        psgd.PowerSGDState(None, matrix_approximation_rank=rank, start_powerSGD_iter=2, min_compression_rate=0),
        psgd.powerSGD_hook,
    )
    opts = {"minipar": torch.optim.SGD(mine.parameters(), lr=1e-3), "torch": torch.optim.SGD(ref.parameters(), lr=1e-3)}
    handed = []

    def run(kind):
        for _ in range(steps):
            net = mine if kind == "minipar" else ref
            _, loss = net(x, x)
            loss.backward()
            if kind == "minipar":
                handed.append(comp.all_reduce_([p.grad for p in mine.parameters()]))
            opts[kind].step()
            opts[kind].zero_grad(set_to_none=True)

    t = _alternate({"minipar": lambda: run("minipar"), "torch": lambda: run("torch")}, repeats)
    shapes = [tuple(p.shape) for p in mine.parameters()]
    return {**t, "handed": handed[-1], "formula": compressed_bytes_formula(shapes, "powersgd", rank=rank)}


def overlap_times(repeats: int) -> dict:
    from minipar.tp.overlap import allgather_matmul

    _n, _me = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 256, 512, generator=g, device="cpu")
    w = torch.randn(512, 512, generator=g, device="cpu")
    return _alternate(
        {
            "overlap": lambda: allgather_matmul(x, w, overlap=True),
            "plain": lambda: allgather_matmul(x, w, overlap=False),
        },
        repeats,
    )


def ps_vs_ddp_times(repeats: int, steps: int) -> dict:
    """Rank 0 is the server in the parameter-server run; the DDP run uses ranks 1-2 (rank 0 idles)."""
    from minipar.dp.param_server import run_sync

    x = _batch()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    workers = dist.new_group([1, 2])
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=workers) if dist.get_rank() else None
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def grad_fn(m, wi, k):
        _, loss = m(x, x)
        loss.backward()
        return loss.detach()

    def ps():
        run_sync(model, grad_fn, steps, lambda p: torch.optim.SGD(p, lr=1e-3))

    def ddp_run():
        if ddp is None:
            return
        for _ in range(steps):
            _, loss = ddp(x, x)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return _alternate({"ps": ps, "ddp": ddp_run}, repeats)


def rows(quick: bool) -> list[Row]:
    repeats, steps = (3, 2) if quick else (7, 4)
    out = []
    t = launch(powersgd_times, world_size=2, args=(repeats, steps), prefix=False)[0]
    ratio = t["minipar"] / t["torch"]
    out.append(
        Row(
            "09",
            "minipar PowerSGD (rank 4) vs torch DDP powerSGD_hook, GPT 4x128 T=64, 2 gloo ranks",
            ratio,
            target="<= 1.20",
            ok=ratio <= 1.2,
            note=f"{t['minipar'] / steps * 1e3:.1f} ms vs {t['torch'] / steps * 1e3:.1f} ms per step",
        )
    )
    out.append(
        Row(
            "09",
            "PowerSGD bytes handed to all-reduce per step / formula",
            t["handed"] / t["formula"],
            target="== 1.00",
            ok=t["handed"] == t["formula"],
            note=f"{t['handed']:,} bytes vs 3,344,384 in fp32",
        )
    )
    o = launch(overlap_times, world_size=2, args=(repeats,), prefix=False)[0]
    r = o["overlap"] / o["plain"]
    out.append(
        Row(
            "09",
            "TP all-gather+GEMM overlapped vs gather-then-GEMM, (2,256,512)x(512,512), 2 ranks",
            r,
            target="<= 1.10",
            ok=r <= 1.10,
            note=f"{o['overlap'] * 1e3:.2f} ms vs {o['plain'] * 1e3:.2f} ms",
        )
    )
    p = launch(ps_vs_ddp_times, world_size=3, args=(repeats, steps), prefix=False)[1]
    out.append(
        Row(
            "09",
            "sync parameter server (1 server + 2 workers) vs torch DDP (2 ranks), step time",
            p["ps"] / p["ddp"],
            note=f"{p['ps'] / steps * 1e3:.1f} ms vs {p['ddp'] / steps * 1e3:.1f} ms per step (reported only)",
        )
    )
    return out
