"""Experiment drivers for lesson 07 (3D parallelism). They only call minipar; child processes import them."""

from __future__ import annotations

import shutil

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import minipar.runtime.dist as md
from minipar.checkpoint import dcp as ckpt
from minipar.checkpoint.full_state import full_state_dict, gather_stages
from minipar.comm.comm_log import CommLog
from minipar.course.loop import random_batch
from minipar.data import random_tokens
from minipar.job.config import TrainConfig
from minipar.job.parallelize import parallelize
from minipar.job.piece import average_grads_
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.memory import state_bytes
from minipar.model.presets import default_dtype, seeded_gpt
from minipar.runtime.mesh import init_mesh
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
    one = {}
    for zero in (0, 1):
        model = seeded_gpt({k: base[k] for k in ("block_size", "n_layer", "n_head", "d_model")}, torch.float32)
        piece = parallelize(model, mesh, TrainConfig(microbatches=base["microbatches"], zero=zero))
        x = random_tokens(base["batch_size"] // 2, base["block_size"])
        piece.step(x, x, 1e-3)  # first step creates AdamW's state
        piece.executor.count_memory = True
        with CommLog() as log:
            piece.step(x, x, 1e-3)
        st, sent = state_bytes(piece.stage, piece.optimizer), by_dimension(log.records, mesh)
        one[zero] = {"coords": mesh.coords, "state": st, "act": piece.last.peak_act_bytes, "sent": sent}
    return {"same_as_torch": same, "full": full, "other": other, "step": one}


_GROUPS: dict[tuple, object] = {}  # a sweep's process groups by ranks: each made once (init_mesh's group_cache)


def grads_float64(cfg_kw: dict, batch: int, microbatches: int, layout: tuple) -> dict | None:
    """float64: one forward + backward of the global batch on this (pp, dp, tp) layout, dp-averaged; the gradients
    as the single-device GPT's state dict on rank 0 (None elsewhere): TP slices, then stages, gathered."""
    with default_dtype(torch.float64):
        pp, dp, tp = layout
        mesh = init_mesh(pp=pp, dp=dp, tp=tp)
        cfg = GPTConfig(**cfg_kw)
        torch.manual_seed(0)
        piece = parallelize(GPT(cfg), mesh, TrainConfig(microbatches=microbatches))
        x, y = random_batch(cfg.vocab_size, batch, cfg.block_size, seed=1)
        share = batch // dp
        sl = slice(mesh.dp_rank * share, (mesh.dp_rank + 1) * share)
        piece.executor.step(x[sl], y[sl])
        average_grads_(piece.stage, mesh)
        grads = full_state_dict(piece.stage, grads=True, group=mesh.tp_group, remove_duplicate=False)
        return gather_stages(grads, mesh, 0)


def one_device_grads_float64(cfg_kw: dict, batch: int) -> dict:
    """The single-device GPT's float64 gradients for :func:`grads_float64`'s batch (same seeds)."""
    with default_dtype(torch.float64):
        cfg = GPTConfig(**cfg_kw)
        torch.manual_seed(0)
        model = GPT(cfg)
        model(*random_batch(cfg.vocab_size, batch, cfg.block_size, seed=1))[1].backward()
        return {k: p.grad for k, p in model.named_parameters()}


def sweep_on_clock(cfg_kw: dict, batch: int, m: int, steps: int, layouts, link) -> dict:
    """Each (pp, dp, tp) of ``layouts`` on the cluster clock (``minipar.clock``), every group on ``link``: per layout,
    one warm-up step, then the fastest of ``steps`` steps in virtual seconds (the slowest rank's).
    Also the planner's inputs in the clock's own terms (thread CPU time, slowest rank): a 512×512 matmul's
    FLOP/s, and one block's forward + backward on ``batch // 2 // m`` rows beyond its FLOPs; and this rank's
    tensor bytes after the warm-up step (``state_bytes`` + peak saved activations).
    Returns ``{"compute": (peak_flops, layer_overhead), "runs": {(pp, dp, tp): s}, "mem": {(pp, dp, tp): bytes}}``."""
    from minipar.clock import compute_seconds
    from minipar.course.clock_runs import fastest_on_clock
    from minipar.model.gpt import Block

    cfg = GPTConfig(**cfg_kw)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(512, 512, generator=g) for _ in range(2))
    peak = 2 * 512**3 / compute_seconds(lambda i: a @ b, 6)
    block, mb = Block(cfg), batch // 2 // m
    h = torch.randn(mb, cfg.block_size, cfg.d_model, generator=g, requires_grad=True)
    layer = compute_seconds(lambda i: block(h).sum().backward(), 6)
    overhead = max(0.0, layer - 6 * 12 * cfg.d_model**2 * mb * cfg.block_size / peak)  # beyond the block's FLOPs
    out = {"compute": (peak, overhead), "runs": {}, "mem": {}}
    for pp, dp, tp in layouts:
        mesh = init_mesh(pp=pp, dp=dp, tp=tp, group_cache=_GROUPS)
        torch.manual_seed(0)
        piece = parallelize(GPT(cfg), mesh, TrainConfig(microbatches=m))
        x = torch.randint(0, cfg.vocab_size, (batch // dp, cfg.block_size), generator=g)
        piece.executor.count_memory = True  # the warm-up step counts saved activations (not timed)
        piece.step(x, x, 1e-3)  # warm-up: buffers, AdamW's state, first messages
        piece.executor.count_memory = False
        out["mem"][(pp, dp, tp)] = state_bytes(piece.stage, piece.optimizer)["total"] + piece.last.peak_act_bytes
        best = fastest_on_clock(lambda _, clk: piece.step(x, x, 1e-3), ["step"], steps, (link, link), warmup=0)
        out["runs"][(pp, dp, tp)] = best["step"][0]
    return out


def plot_clock_vs_model(layouts, clock_t: dict, est: dict):
    """Left: each layout's step on the cluster clock next to minipar.perf's estimate (log scale);
    right: the estimate's terms (compute, bubble, tp, pp, dp) stacked."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = ["pp{}dp{}tp{}".format(*lay) for lay in layouts]
    x = np.arange(len(layouts))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.2))
    ax.bar(x - 0.2, [clock_t[lay] * 1e3 for lay in layouts], 0.4, label="cluster clock")
    ax.bar(x + 0.2, [est[lay].time["total"] * 1e3 for lay in layouts], 0.4, label="minipar.perf")
    ax.set(yscale="log", ylabel="step time (ms)")
    ax.set_title("every factorization of 8: one step", fontsize=9)
    bottom = np.zeros(len(layouts))
    for part in ("compute", "bubble", "tp", "pp", "dp"):
        v = np.array([est[lay].time[part] * 1e3 for lay in layouts])
        bx.bar(x, v, bottom=bottom, label=part)
        bottom += v
    bx.set_ylabel("ms")
    bx.set_title("minipar.perf's terms", fontsize=9)
    for a in (ax, bx):
        a.set_xticks(x, names, rotation=60, fontsize=7)
        a.legend(fontsize=7)
    plt.tight_layout()
    plt.show()


def groups_toy() -> str:
    """Every rank of 3 creates the groups [0, 1], [2] and [0, 1, 2], in that order, keeps those it is in, and sums
    its global rank over each: the collective rule of ``new_group``, a one-rank group, and ``group=None``."""
    me, mine = md.rank(), {}
    for ranks in ([0, 1], [2], [0, 1, 2]):  # every rank, every group, the same order
        g = md.new_group(ranks)
        if me in ranks:
            mine[tuple(ranks)] = g
    sums = []
    for ranks, g in mine.items():
        t = torch.tensor([float(me)])
        dist.all_reduce(t, group=g)
        sums.append(f"{list(ranks)}: {t.item():g}")
    t = torch.tensor([float(me)])
    dist.all_reduce(t)  # group=None: the whole world
    return f"rank {me} keeps {len(mine)} groups, sums of ranks " + ", ".join(sums) + f"; group=None: {t.item():g}"
