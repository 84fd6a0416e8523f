"""Lesson 09's parameter-server runs (:mod:`minipar.dp.param_server`) next to what they are measured
against: PyTorch's DDP on the workers, ``torch.distributed.rpc``, and the cluster clock with a straggler.

Each function runs on every rank of a :func:`minipar.launch` (rank 0 the server, the others workers) on
the seeded float64 ``SMALL`` GPT; worker ``w`` of ``W`` trains on the ``w``-th share of the same global
batches of the built-in corpus, so a parameter-server run and its reference see the same data.

    res = launch(ps_sync_vs_ddp, world_size=3)            # [server's result, worker 1's, worker 2's]
"""

from __future__ import annotations

import socket
import time
import warnings

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.course.loop import train_steps
from minipar.data import builtin_corpus, make_loader
from minipar.dp.param_server import flat_grads, flat_params, gather_model, load_flat_, run_async, run_sync
from minipar.model.presets import SMALL, seeded_gpt

_LOADERS: dict = {}  # (worker, workers, global batch) -> [its loader, the batches drawn so far]


def worker_batch(worker: int, workers: int, k: int, global_batch: int = 8):
    """Worker ``worker``'s share of global batch ``k`` (``make_loader``'s order): the same batch every call."""
    key = (worker, workers, global_batch)
    if key not in _LOADERS:
        split = builtin_corpus().split("train", SMALL["block_size"])
        _LOADERS[key] = [make_loader(split, global_batch, worker, workers), []]
    loader, seen = _LOADERS[key]
    while len(seen) <= k:
        seen.append(next(loader))
    return seen[k]


def grad_fn(workers: int, global_batch: int = 8):
    """The gradient a worker computes for update ``k`` (the ``grad_fn`` of :mod:`minipar.dp.param_server`)."""

    def grad(model, worker, k):
        x, y = worker_batch(worker, workers, k, global_batch)
        _, loss = model(x, y)
        loss.backward()
        return loss.detach()

    return grad


def adamw(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.0)


def ps_sync_vs_ddp(steps: int = 4, n_servers: int = 1) -> dict:
    """Synchronous parameter server (ranks 0..S−1 servers) vs torch DDP on the workers' group, float64.

    Returns the final parameters of both on the first worker, and the bytes each role moved.
    """
    _LOADERS.clear()
    world = md.world_size()
    workers = world - n_servers
    model = seeded_gpt()
    with CommLog() as log:
        res = run_sync(model, grad_fn(workers), steps, adamw, n_servers)
    ps_final = gather_model(model, res)
    wgroup = dist.new_group(list(range(n_servers, world)))  # every rank calls new_group
    ddp_final = None
    if md.rank() >= n_servers:
        ref = seeded_gpt()
        ddp = torch.nn.parallel.DistributedDataParallel(ref, process_group=wgroup)
        w = md.rank() - n_servers
        train_steps(ddp, adamw(ref.parameters()), (worker_batch(w, workers, k) for k in range(steps)))
        ddp_final = flat_params(ref)
    return {
        "ps": ps_final,
        "ddp": ddp_final,
        "sent": log.total("sent"),
        "recv": log.total("recv"),
        "numel": flat_params(model).numel(),
        "role": "server" if md.rank() < n_servers else "worker",
    }


def ps_async(updates: int = 60, staleness: int = 0) -> dict:
    """Bounded-staleness asynchronous training, 1 server: losses per update (on the workers), the final
    parameters and their validation loss (on the first worker), and the wall time."""
    _LOADERS.clear()
    workers = md.world_size() - 1
    model = seeded_gpt()
    t = time.perf_counter()
    res = run_async(model, grad_fn(workers), updates, adamw, staleness)
    elapsed = time.perf_counter() - t
    final = gather_model(model, res)
    val = None
    if final is not None:  # validation loss of the final model, on the first worker
        load_flat_(model, final)
        vx, vy = next(make_loader(builtin_corpus().split("val", SMALL["block_size"]), 64, shuffle=False))
        with torch.no_grad():
            val = model(vx, vy)[1].item()
    return {"losses": res.get("losses"), "final": final, "val": val, "seconds": elapsed}


class _Store:
    """The rpc server's state: the flat parameters and their AdamW (lives on rank 0)."""

    def __init__(self, flat: torch.Tensor):
        self.flat = flat.clone()
        self.opt = adamw([self.flat])

    def pull(self) -> torch.Tensor:
        return self.flat.clone()

    def push(self, grad: torch.Tensor) -> None:
        self.flat.grad = grad
        self.opt.step()


def rpc_parameter_server(updates: int = 6) -> dict:
    """:func:`ps_async`'s τ = 0 loop with ``torch.distributed.rpc`` on 2 ranks: worker 1 calls the server's
    ``pull`` and ``push``. Returns the final parameters on the worker (rank 1); rank 0 only serves.
    The rpc port: rank 0 asks the OS for a free one once the job's own store holds its port, and broadcasts it (a
    port picked before ``launch`` could be the one the OS then gives the job's store)."""
    import torch.distributed.rpc as rpc

    warnings.filterwarnings("ignore", message="You are using a Backend")
    me = md.rank()
    port = [None]
    if me == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    dist.broadcast_object_list(port, src=0)
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port[0]}", rpc_timeout=60)
    rpc.init_rpc(f"r{me}", rank=me, world_size=2, rpc_backend_options=opts)
    final = None
    if me == 1:
        _LOADERS.clear()
        model = seeded_gpt()
        server = rpc.remote("r0", _Store, args=(flat_params(model),))
        for k in range(updates):
            load_flat_(model, server.rpc_sync().pull())
            model.zero_grad(set_to_none=True)
            x, y = worker_batch(0, 1, k)
            model(x, y)[1].backward()
            server.rpc_sync().push(flat_grads(model))
        final = server.rpc_sync().pull()
    rpc.shutdown()
    return {"final": final}


def ps_on_clock(mode: str, straggler: float = 1.0, gradients: int = 24, push: float = 0.1) -> dict:
    """A parameter server (rank 0) and W = world − 1 workers on the cluster clock, synchronous
    (``mode="sync"``: W gradients averaged per step) or asynchronous in arrival order (``"async"``),
    until ``gradients`` worker gradients are applied. The first worker (rank 1) is a straggler whose
    compute counts ``straggler`` times; pushing a gradient (or pulling the parameters) costs ``push`` ×
    one gradient's compute as measured here (the slowest rank's fastest of 3), so compute dominates; the
    server steps plain SGD, whose update is small next to a gradient (8 sequences of 64 per worker).
    Returns per rank its clock ``timeline`` and ``now``; on the server also ``c`` (one gradient's
    compute, s), ``order`` and ``staleness`` (async), on workers their ``losses``."""
    from minipar.clock import ClusterClock, compute_seconds
    from minipar.comm.links import Link
    from minipar.dp.param_server import run_async_arrival

    workers = md.world_size() - 1
    model = seeded_gpt()
    sgd = lambda params: torch.optim.SGD(params, lr=0.05)  # noqa: E731 (the server's update: cheap next to a gradient)
    grad = grad_fn(workers, global_batch=8 * workers)

    def one_gradient(k):
        grad(model, max(md.rank() - 1, 0), k)
        model.zero_grad(set_to_none=True)

    c = compute_seconds(one_gradient, 3)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    link = Link(f"push = {push:g} × a gradient's compute", 0.0, nbytes / (push * c))
    with ClusterClock(link, link, straggler={1: straggler}) as clk:
        if mode == "sync":
            res = run_sync(model, grad, gradients // workers, sgd)
        else:
            res = run_async_arrival(model, grad, gradients, sgd, clk)
    out = {"timeline": list(clk.timeline), "now": clk.now, "c": c}
    if md.rank() == 0:
        return out | {k: res[k] for k in ("order", "staleness") if k in res}
    return out | {"losses": res["losses"]}


def ps_formula(workers: int, straggler: float, push: float = 0.1) -> float:
    """Gradients per second, asynchronous ÷ synchronous, with one worker ``straggler`` times slower and
    a push and a pull of ``push`` × a gradient's compute c each (server's update and end effects left
    out): sync applies W gradients per (s + 2·push)·c, async (W − 1)/((1 + 2·push)·c) + 1/((s + 2·push)·c)."""
    cycle = lambda s: s + 2 * push  # noqa: E731
    return ((workers - 1) / cycle(1.0) + 1 / cycle(straggler)) / (workers / cycle(straggler))
