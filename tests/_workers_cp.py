"""Functions the context-parallel tests run on several ranks (importable by child processes)."""

from __future__ import annotations

import torch

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.cp.all_gather import all_gather_attention
from minipar.cp.ring import ring_attention
from minipar.cp.split import contiguous_ranges, load_balanced_ranges, shard


def inputs(T: int, B: int = 2, H: int = 2, D: int = 4, seed: int = 0):
    """The same full q, k, v and output gradient on every rank (float64)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, dtype=torch.float64, generator=g) for _ in range(4)]


def attend_cases(cases: list) -> dict:
    """Every ``(n, T, split, variant)`` case on the group of the first n ranks (one launch for all N; the
    ring runs on a sub-group, as in the main job): {case: :func:`attend`'s result} on ranks < n."""
    out = {}
    for case in cases:
        n = case[0]
        group = md.new_group(list(range(n))) if n < md.world_size() else None
        if md.rank() < n:
            out[case] = attend(*case[1:], group=group, n=n)
    return out


def attend(
    T: int, split: str = "balanced", variant: str = "ring", seed: int = 0, group=None, n: int | None = None
) -> dict:
    """This rank's output and q/k/v gradients for a sequence of T tokens, with the bytes it sent."""
    n, r = n or md.world_size(), md.rank()
    ranges = (load_balanced_ranges if split == "balanced" else contiguous_ranges)(T, n)
    q, k, v, g = (shard(t, ranges[r], dim=2) for t in inputs(T, seed=seed))
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    fn = ring_attention if variant == "ring" else all_gather_attention
    with CommLog() as fwd:
        out = fn(q, k, v, ranges, group)
    with CommLog() as bwd:
        out.backward(g)
    return dict(
        ranges=ranges,
        out=out.detach(),
        dq=q.grad,
        dk=k.grad,
        dv=v.grad,
        sent=(fwd.total("sent"), bwd.total("sent")),
        recv=(fwd.total("recv"), bwd.total("recv")),
        p2p=[(rec.op, rec.peer, rec.bytes) for rec in fwd.records + bwd.records],
    )


def job_grads_float64(cfg_kw: dict, batch: int, layout: tuple, block_size: int) -> dict | None:
    """float64: one forward + backward of the global batch on a (pp, dp, cp, tp) layout with the main job's
    machinery (``Piece``: cp sharding, ring attention, weighted loss, dp × cp average), gradients assembled
    as the single-device GPT's state dict on rank 0 (None elsewhere), with this rank's token count and
    the number of ring messages it sent to its cp group. ``block_size`` T need not divide by 2·cp."""
    from minipar.checkpoint.full_state import full_state_dict, gather_stages
    from minipar.job.config import TrainConfig
    from minipar.job.parallelize import parallelize
    from minipar.job.piece import average_grads_
    from minipar.model.gpt import GPT, GPTConfig
    from minipar.model.presets import default_dtype
    from minipar.runtime.mesh import init_mesh

    with default_dtype(torch.float64):
        pp, dp, cp, tp = layout
        mesh = init_mesh(pp=pp, dp=dp, tp=tp, cp=cp)
        cfg = GPTConfig(**{**cfg_kw, "block_size": block_size})
        torch.manual_seed(0)
        piece = parallelize(GPT(cfg), mesh, TrainConfig())
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, cfg.vocab_size, (batch, block_size), generator=g)
        y = torch.randint(0, cfg.vocab_size, (batch, block_size), generator=g)
        share = batch // dp
        sl = slice(mesh.dp_rank * share, (mesh.dp_rank + 1) * share)
        with CommLog() as log:
            piece.executor.step(*piece.cp.shard(x[sl], y[sl]))
        average_grads_(piece.stage, mesh)
        grads = full_state_dict(piece.stage, grads=True, group=mesh.tp_group, remove_duplicate=False)
        ring = [r for r in log.records if r.op == "isend" and r.peer in mesh.ranks["cp"]]
        return gather_stages(grads, mesh, 0), sum(e - s for s, e in piece.cp.mine), len(ring)


def train_cp(base: dict, ckpt_dir: str | None = None) -> dict:
    """The main job with --cp 2 --tp 2 (4 ranks); with ``ckpt_dir``: saved at step 2, then resumed from
    step 2 by --cp 2 --tp 2 again and by --dp 2 --tp 2 (no context parallelism)."""
    import shutil

    from minipar.checkpoint import dcp as ckpt
    from minipar.job.config import TrainConfig
    from minipar.train import train

    if ckpt_dir is None:
        return {"cp2tp2": train(TrainConfig(**base, cp=2, tp=2), progress="none")}
    full = train(TrainConfig(**base, cp=2, tp=2, ckpt_dir=ckpt_dir, ckpt_every=2), progress="none")
    if md.rank() == 0:
        shutil.rmtree(ckpt.step_dir(ckpt_dir, 4), ignore_errors=True)
    torch.distributed.barrier()
    same = train(TrainConfig(**base, cp=2, tp=2, ckpt_dir=ckpt_dir, resume=True), progress="none")
    other = train(TrainConfig(**base, dp=2, tp=2, ckpt_dir=ckpt_dir, resume=True), progress="none")
    return {"cp2tp2": full, "same": same, "other": other}


def job_grads_layouts(cfg_kw: dict, batch: int, layouts: list, block_size: int) -> list:
    """:func:`job_grads_float64` for every layout, in one launch (starting ranks is the slow part)."""
    return [job_grads_float64(cfg_kw, batch, layout, block_size) for layout in layouts]
