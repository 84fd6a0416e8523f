"""Rank functions for tests/test_compression.py, test_param_server.py, test_overlap.py (lesson 09)."""

from __future__ import annotations

import torch
import torch.nn as nn

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.dp.compression import BF16Compression, make_compressor
from minipar.dp.param_server import flat_params, gather_model, run_async, run_async_arrival, run_sync
from minipar.tp.overlap import allgather_matmul, matmul_reducescatter

SHAPES = [(5, 7), (7,), (3, 4, 2)]


def rank_grads(r: int, step: int, dtype=torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + r)
    return [torch.randn(s, generator=g, dtype=dtype) for s in SHAPES]


def _make(method, kw):
    return make_compressor(method, **({"start_iter": 0, **kw} if method == "powersgd" else kw))


def compress(method: str, steps: int = 3, **kw) -> list[list[torch.Tensor]]:
    """Each step: this rank's seeded gradients through the compressor; returns the estimates per step."""
    comp, out = _make(method, kw), []
    for step in range(steps):
        grads = rank_grads(md.rank(), step)
        comp.all_reduce_(grads)
        out.append(grads)
    return out


def compress_errors(method: str, steps: int = 3, **kw):
    """(estimates per step, this rank's final error buffers)."""
    comp, out = _make(method, kw), []
    for step in range(steps):
        grads = rank_grads(md.rank(), step)
        comp.all_reduce_(grads)
        out.append(grads)
    errs = [
        comp.errors.get(i, torch.zeros(1)).reshape(s) if i in comp.errors else torch.zeros(s, dtype=torch.float64)
        for i, s in enumerate(SHAPES)
    ]
    return out, errs


def tiny_model(dtype=torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype)


def batch(worker: int, step: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(10_000 + 100 * step + worker)
    return torch.randn(4, 6, generator=g, dtype=dtype), torch.randint(0, 3, (4,), generator=g)


def grad_fn(model, worker, step):
    x, y = batch(worker, step)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def ps_sync(steps: int = 3, n_servers: int = 1):
    model = tiny_model()
    with CommLog() as log:
        res = run_sync(model, grad_fn, steps, sgd, n_servers)
    final = gather_model(model, res)
    return {"losses": res.get("losses"), "final": final, "recv": log.total("recv"), "sent": log.total("sent")}


def ps_async(updates: int = 6, staleness: int = 1, n_servers: int = 1):
    model = tiny_model()
    res = run_async(model, grad_fn, updates, sgd, staleness, n_servers)
    return {"losses": res.get("losses"), "final": gather_model(model, res)}


def ps_arrival(updates: int = 10, straggler: float = 4.0, n_servers: int = 1, clocked: bool = True):
    """Asynchronous in arrival order on the cluster clock; the first worker computes ``straggler``× slower
    (each gradient also runs a fixed ~ms matmul loop, so compute dominates the clock's noise)."""
    from minipar.clock import ClusterClock
    from minipar.comm.links import Link

    model = tiny_model()
    a = torch.randn(96, 96, generator=torch.Generator().manual_seed(0))

    def slow_grad(m, worker, step):
        for _ in range(30):
            a @ a
        return grad_fn(m, worker, step)

    link = Link("test", 1e-6, 1e12)
    with ClusterClock(link, link, straggler={n_servers: straggler}, enabled=clocked) as clk:
        res = run_async_arrival(model, slow_grad, updates, sgd, clk, n_servers)
    return {"final": gather_model(model, res), "order": res.get("order"), "staleness": res.get("staleness")}


def ddp_fp16_vs_manual(steps: int = 3):
    """torch DDP + fp16_compress_hook vs local backward + BF16Compression(float16): final parameters.

    (PyTorch's bf16_compress_hook refuses to run without CUDA+NCCL; the fp16 hook is the same code.)
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    r = md.rank()
    out = []
    for native in (True, False):
        model = tiny_model(torch.float32)
        net = DDP(model) if native else model
        if native:
            net.register_comm_hook(None, fp16_compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        comp = BF16Compression(torch.float16)
        for step in range(steps):
            x, y = batch(r, step, torch.float32)
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            if not native:
                comp.all_reduce_([p.grad for p in model.parameters()])
            opt.step()
        out.append(flat_params(model))
    return out


def overlap_matmul(T_local: int = 3, d_in: int = 8, d_out: int = 5):
    n, me = md.world_size(), md.rank()
    g = torch.Generator().manual_seed(7)
    full = torch.randn(2, n * T_local, d_in, generator=g, dtype=torch.float64)
    w = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    x = full[:, me * T_local : (me + 1) * T_local]
    trace = []
    a = allgather_matmul(x, w, overlap=True, trace=trace)
    b = allgather_matmul(x, w, overlap=False)
    return a, b, full @ w.t(), sorted({(s, k) for s, k, *_ in trace})


def overlap_reducescatter(T_local: int = 3, d_in_local: int = 4, d_out: int = 5):
    """Each rank's columns of a row-parallel GEMM; returns both modes, the reference rows of Σ x·Wᵀ, and
    the elements this rank sent (CommLog) against a ring reduce-scatter's (N−1)/N · B·T·d_out."""
    n, me = md.world_size(), md.rank()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, n * T_local, n * d_in_local, generator=g, dtype=torch.float64)
    w = torch.randn(d_out, n * d_in_local, generator=g, dtype=torch.float64)
    cols = slice(me * d_in_local, (me + 1) * d_in_local)
    with CommLog() as log:
        a = matmul_reducescatter(x[..., cols].contiguous(), w[:, cols].contiguous(), overlap=True)
    b = matmul_reducescatter(x[..., cols].contiguous(), w[:, cols].contiguous(), overlap=False)
    ref = (x @ w.t())[:, me * T_local : (me + 1) * T_local]
    return a, b, ref, log.total("sent") / 8, (n - 1) * 2 * T_local * d_out


def train_losses(cfg):
    from minipar.train import train

    return [r["loss"] for r in train(cfg, progress="none") if "loss" in r]
