"""Experiment drivers for lesson 07 (3D parallelism). They only call minipar; child processes import them."""

from __future__ import annotations

import os
import shutil

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import minipar.dist as md
from minipar import checkpoint as ckpt
from minipar.bench import median_time
from minipar.comm.comm_log import CommLog
from minipar.config import TrainConfig
from minipar.data import CharCorpus, load_text
from minipar.memory import state_bytes
from minipar.mesh import init_mesh
from minipar.models import GPTConfig
from minipar.parallel3d import build_piece
from minipar.perf.hardware import measured_peak_flops
from minipar.train import train


def by_dimension(records, mesh) -> dict[str, float]:
    """Bytes this rank sent, per mesh dimension (``world``: the loss broadcast)."""
    out = {"tp": 0.0, "pp": 0.0, "dp": 0.0, "world": 0.0}
    for r in records:
        ranks = sorted(r.group_ranks)
        dim = next((d for d in ("tp", "dp", "pp") if mesh.size(d) > 1 and ranks == sorted(mesh.ranks[d])), None)
        if r.peer is not None and dim is None:
            dim = "pp"
        out[dim or "world"] += r.sent
    return out


def demo(base: dict, ckpt_dir: str) -> dict:
    """On 8 ranks: the mesh vs init_device_mesh, dp2·tp2·pp2 training with a checkpoint, a resume
    under dp4·tp1·pp2, and one measured step per rank (memory and bytes sent by dimension)."""
    mesh = init_mesh(pp=2, dp=2, tp=2)
    tm = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
    same = all(
        sorted(mesh.ranks[d]) == sorted(dist.get_process_group_ranks(tm.get_group(d))) for d in ("pp", "dp", "tp")
    )
    every = base["steps"] // 2
    full = train(TrainConfig(**base, dp=2, tp=2, pp=2, zero=1, ckpt_dir=ckpt_dir, ckpt_every=every), progress="none")
    if md.rank() == 0:
        shutil.rmtree(ckpt.step_dir(ckpt_dir, base["steps"]), ignore_errors=True)
    dist.barrier()
    other = train(TrainConfig(**base, dp=4, tp=1, pp=2, ckpt_dir=ckpt_dir, resume=True), progress="none")
    cfg = GPTConfig(
        vocab_size=CharCorpus(load_text(None)).vocab_size,
        block_size=base["block_size"],
        n_layer=base["n_layer"],
        n_head=base["n_head"],
        d_model=base["d_model"],
    )
    one = {}
    for zero in (0, 1):
        piece = build_piece(cfg, mesh, microbatches=base["microbatches"], zero=zero)
        x = torch.randint(
            0, cfg.vocab_size, (base["batch_size"] // 2, cfg.block_size), generator=torch.Generator().manual_seed(0)
        )
        piece.step(x, x, 1e-3)  # first step creates AdamW's state
        piece.executor.count_memory = True
        with CommLog() as log:
            piece.step(x, x, 1e-3)
        st = piece.optimizer.held_bytes() if zero else state_bytes(piece.stage, piece.optimizer)
        one[zero] = {
            "coords": mesh.coords,
            "state": st,
            "act": piece.last.peak_act_bytes,
            "sent": by_dimension(log.records, mesh),
        }
    return {"same_as_torch": same, "full": full, "other": other, "step": one}


_GROUPS: dict[tuple, object] = {}  # a sweep's process groups by ranks: each made once (init_mesh's group_cache)


ALL_REDUCE_SIZES = [4, 4 * 1024, 64 * 1024, 1024 * 1024, 4 * 1024 * 1024]  # bytes


def sweep(cfg_kw: dict, batch: int, m: int, steps: int, layouts) -> dict:
    """For every (pp, dp, tp) in ``layouts``, on this world: build the piece, time ``steps`` steps,
    measure memory and bytes sent per dimension. Also measures the hardware the planner needs: a
    rank's matmul FLOP/s and the all-reduce time of ``ALL_REDUCE_SIZES`` (for lesson 01's α–β fit)."""
    hw = {
        "peak_flops": measured_peak_flops(md.device()) if md.rank() == 0 else 0.0,
        "sizes": ALL_REDUCE_SIZES,
        "times": [],
    }
    for nbytes in ALL_REDUCE_SIZES:  # lesson 01's α–β sweep, on this world
        t = torch.ones(nbytes // 4)
        hw["times"].append(median_time(lambda: dist.all_reduce(t), repeats=5, warmup=0, barrier=True))
    out = {"hw": hw, "runs": {}}
    cfg = GPTConfig(**cfg_kw)
    g = torch.Generator().manual_seed(0)
    for pp, dp, tp in layouts:
        mesh = init_mesh(pp=pp, dp=dp, tp=tp, group_cache=_GROUPS)
        piece = build_piece(cfg, mesh, microbatches=m)
        x = torch.randint(0, cfg.vocab_size, (batch // dp, cfg.block_size), generator=g)
        warmup = 1 if steps > 1 else 0  # the first step (buffers, first messages) is not timed
        step_time = median_time(
            lambda: piece.step(x, x, 1e-3), repeats=steps - warmup, warmup=warmup, barrier=True, slowest=True
        )  # a step ends when the slowest rank ends
        piece.executor.count_memory = True
        with CommLog() as log:
            piece.step(x, x, 1e-3)
        mem = state_bytes(piece.stage, piece.optimizer)
        mem["activations"] = piece.last.peak_act_bytes
        out["runs"][(pp, dp, tp)] = {"time": step_time, "mem": mem, "sent": by_dimension(log.records, mesh)}
    return out


def cpu_count() -> int:
    return os.cpu_count() or 1


def layer_overhead(cfg_kw: dict, micro_batch: int, repeats: int = 20) -> float:
    """Seconds for one transformer block's forward + backward on this process, minus its FLOPs at
    the measured matmul peak: the per-layer cost that does not shrink with the model (planner input)."""
    from minipar.models import Block

    cfg = GPTConfig(**cfg_kw)
    block = Block(cfg)
    x = torch.randn(
        micro_batch, cfg.block_size, cfg.d_model, generator=torch.Generator().manual_seed(0), requires_grad=True
    )
    t = median_time(lambda: block(x).sum().backward(), repeats=repeats, warmup=2)
    flops = 6 * (12 * cfg.d_model**2) * micro_batch * cfg.block_size
    return max(0.0, t - flops / measured_peak_flops(torch.device("cpu")))


def grads_float64(cfg_kw: dict, batch: int, microbatches: int, layout: tuple) -> dict | None:
    """float64: one forward + backward of the global batch on this (pp, dp, tp) layout, dp-averaged, and
    the gradients assembled as the single-device GPT's state dict on rank 0 (None elsewhere).

    The gradients are gathered with the parameters' own machinery: each parameter's ``.data`` is
    replaced by its gradient, then :func:`minipar.parallel3d.gather_full_state` all-gathers the TP
    slices and the stages exactly as it does for weights.
    """
    import torch

    from minipar.mesh import init_mesh
    from minipar.models import GPTConfig
    from minipar.parallel3d import all_reduce_grads_flat, build_piece, gather_full_state

    torch.set_default_dtype(torch.float64)
    pp, dp, tp = layout
    mesh = init_mesh(pp=pp, dp=dp, tp=tp)
    cfg = GPTConfig(**cfg_kw)
    piece = build_piece(cfg, mesh, microbatches=microbatches)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    share = batch // dp
    sl = slice(mesh.dp_rank * share, (mesh.dp_rank + 1) * share)
    piece.executor.step(x[sl], y[sl])
    all_reduce_grads_flat(piece.stage, mesh.dp_group, mesh.dp_size)
    with torch.no_grad():
        for p in piece.stage.parameters():
            p.copy_(p.grad if p.grad is not None else torch.zeros_like(p))
    return gather_full_state(piece, 0)


def one_device_grads_float64(cfg_kw: dict, batch: int) -> dict:
    """The single-device GPT's float64 gradients for :func:`grads_float64`'s batch (same seeds)."""
    import torch

    from minipar.models import GPT, GPTConfig

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        cfg = GPTConfig(**cfg_kw)
        torch.manual_seed(0)
        model = GPT(cfg)
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
        y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
        model(x, y)[1].backward()
        return {k: p.grad for k, p in model.named_parameters()}
    finally:
        torch.set_default_dtype(old)


def sweep_on_clock(cfg_kw: dict, batch: int, m: int, steps: int, layouts, link) -> dict:
    """:func:`sweep`'s layouts on the cluster clock (``minipar.clock``): every rank's compute is its own
    thread's CPU time, every torch.distributed call costs α–β on ``link`` (one node: the same link
    for every group). Per layout: one warm-up step, then ``steps`` steps on the clock; a step's time
    is the slowest rank's virtual seconds (all_reduce MAX), and the fastest step is kept.
    Also measures, on every rank and in the clock's own terms (thread CPU time, best of 5), the
    compute the planner needs: a 512×512 matmul's FLOP/s and one block's forward + backward on
    ``batch // (dp·m)`` = ``batch // 2 // m`` rows beyond its FLOPs (the mean over ranks).
    Returns ``{"compute": (peak_flops, layer_overhead), "runs": {(pp, dp, tp): virtual seconds}}``."""
    import time

    from minipar.clock import ClusterClock
    from minipar.models import Block

    def cpu_best(fn, repeats=5):
        best = float("inf")
        for _ in range(repeats + 1):
            c0 = time.thread_time()
            fn()
            best = min(best, time.thread_time() - c0)
        return best

    cfg = GPTConfig(**cfg_kw)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(512, 512, generator=g) for _ in range(2))
    peak = 2 * 512**3 / cpu_best(lambda: a @ b)
    block, mb = Block(cfg), batch // 2 // m
    h = torch.randn(mb, cfg.block_size, cfg.d_model, generator=g, requires_grad=True)
    layer = cpu_best(lambda: block(h).sum().backward())
    c = torch.tensor(
        [peak, max(0.0, layer - 6 * 12 * cfg.d_model**2 * mb * cfg.block_size / peak)], dtype=torch.float64
    )
    dist.all_reduce(c)
    out = {"compute": tuple((c / dist.get_world_size()).tolist()), "runs": {}}
    for pp, dp, tp in layouts:
        mesh = init_mesh(pp=pp, dp=dp, tp=tp, group_cache=_GROUPS)
        piece = build_piece(cfg, mesh, microbatches=m)
        x = torch.randint(0, cfg.vocab_size, (batch // dp, cfg.block_size), generator=g)
        piece.step(x, x, 1e-3)  # warm-up: buffers, AdamW's state, first messages
        best = float("inf")
        for _ in range(steps):
            with ClusterClock(link, link) as clk:
                piece.step(x, x, 1e-3)
            t = torch.tensor([clk.now], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank ends
            best = min(best, t.item())
        out["runs"][(pp, dp, tp)] = best
    return out
