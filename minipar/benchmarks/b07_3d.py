"""Lesson 07: one 3D training step (dp2·tp2·pp2, 1F1B) vs PyTorch DDP on 8 ranks, ZeRO-1's cost,
and how well the planner ranks every factorization of 8 (8 gloo ranks on this machine's cores)."""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

from minipar import dist as mdist
from minipar.bench import Row
from minipar.launch import launch

CFG = dict(vocab_size=96, block_size=32, n_layer=4, n_head=4, d_model=64)
BATCH, M = 16, 2


def _timed(fn, reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` runs after one warm-up, the slowest rank's (MAX)."""
    fn()
    ts = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(ts)], device=mdist.device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def job(layouts, reps: int) -> dict:
    from minipar.mesh import init_mesh
    from minipar.models import GPT, GPTConfig
    from minipar.parallel3d import build_piece

    cfg = GPTConfig(**CFG)
    g = torch.Generator().manual_seed(0)
    out = {}
    for pp, dp, tp, zero in layouts:
        piece = build_piece(cfg, init_mesh(pp=pp, dp=dp, tp=tp), microbatches=M, zero=zero)
        x = torch.randint(0, cfg.vocab_size, (BATCH // dp, cfg.block_size), generator=g, device="cpu")
        out[(pp, dp, tp, zero)] = _timed(lambda: piece.step(x, x, 1e-3), reps)
    # PyTorch-native reference: DDP over all 8 ranks, the same global batch as M accumulated micro-batches
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GPT(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab_size, (BATCH // dist.get_world_size(), cfg.block_size), generator=g, device="cpu")

    def ddp_step():
        for i, xm in enumerate(x.chunk(M)):
            if i < M - 1:
                with model.no_sync():
                    (model(xm, xm)[1] / M).backward()
            else:
                (model(xm, xm)[1] / M).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["ddp"] = _timed(ddp_step, reps)
    return out


def rows(quick: bool) -> list[Row]:
    from minipar.mesh import factorizations
    from minipar.models import GPTConfig
    from minipar.planner import Hardware, estimate, rank_correlation

    reps = 2 if quick else 5
    lays = [(1, 8, 1, 0), (2, 2, 2, 0), (2, 2, 2, 1)] + [
        (*f, 0)
        for f in factorizations(8)
        if f not in ((1, 8, 1), (2, 2, 2)) and f[0] <= CFG["n_layer"] and CFG["n_head"] % f[2] == 0
    ]
    r = launch(job, world_size=8, args=(lays, reps), prefix=False)[0]
    t3, t3z, tdp, tddp = r[(2, 2, 2, 0)], r[(2, 2, 2, 1)], r[(1, 8, 1, 0)], r["ddp"]
    out = [
        Row(
            "07",
            "3D step dp2·tp2·pp2 (1F1B, m=2) vs PyTorch DDP on 8 ranks (same global batch)",
            t3 / tddp,
            note=f"{t3 * 1e3:.0f} ms vs {tddp * 1e3:.0f} ms; 8 ranks on {os.cpu_count()} cores, reported only",
        ),
        Row(
            "07",
            "minipar dp8 step (one flat all-reduce) vs PyTorch DDP dp8",
            tdp / tddp,
            target="<= 1.5",
            ok=tdp / tddp <= 1.5,
            note=f"{tdp * 1e3:.0f} ms vs {tddp * 1e3:.0f} ms",
        ),
        Row(
            "07",
            "ZeRO-1 vs all-reduce inside dp2·tp2·pp2",
            t3z / t3,
            target="<= 1.3",
            ok=t3z / t3 <= 1.3,
            note=f"{t3z * 1e3:.0f} ms vs {t3 * 1e3:.0f} ms",
        ),
    ]
    # the planner with this machine's nominal numbers; its ranking vs the measured step times
    hw = Hardware(
        peak_flops=5e10,
        mem_bytes=2**30,
        bw={"tp": 5e7, "dp": 5e7, "pp": 5e7},
        latency=2.5e-4,
        compute_share=(os.cpu_count() or 1) / 8,
        layer_overhead=1e-3,
    )
    keys = [k for k in r if k != "ddp" and k[3] == 0]
    pred = [estimate(GPTConfig(**CFG), BATCH, k[0], k[1], k[2], M, hw).time["total"] for k in keys]
    rho = rank_correlation(pred, [r[k] for k in keys])
    out.append(
        Row(
            "07",
            f"planner vs measured step time, rank correlation over {len(keys)} layouts of 8",
            rho,
            unit="ρ",
            target=">= 0.7",
            ok=rho >= 0.7,
            note="Spearman; the lesson calibrates the planner's inputs",
        )
    )
    return out
