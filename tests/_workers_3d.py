"""Functions the 3D tests run on 8 ranks (importable: child processes find them by name)."""
import os
import shutil

import torch.distributed as dist

from minipar import checkpoint as ckpt
from minipar.train import TrainConfig, train


def equivalence(base: dict) -> dict:
    """dp2·tp2·pp2 with 1F1B, without and with ZeRO-1, in one process group: {zero: history}."""
    return {z: train(TrainConfig(**base, dp=2, tp=2, pp=2, schedule="1f1b", zero=z), progress="none") for z in (0, 1)}


def save_and_resume(base: dict, ckpt_dir: str, steps: int, every: int) -> dict:
    """Save under dp2·tp2·pp2 (ZeRO-1), then resume the same layout and dp4·tp1·pp2 from step ``every``."""
    full = train(TrainConfig(**base, dp=2, tp=2, pp=2, zero=1, ckpt_dir=ckpt_dir, ckpt_every=every), progress="none")
    if dist.get_rank() == 0:                       # as if the job had died after the first checkpoint
        for s in range(2 * every, steps + 1, every):
            shutil.rmtree(ckpt.step_dir(ckpt_dir, s), ignore_errors=True)
    dist.barrier()
    same = train(TrainConfig(**base, dp=2, tp=2, pp=2, zero=1, ckpt_dir=ckpt_dir, resume=True), progress="none")
    other = train(TrainConfig(**base, dp=4, tp=1, pp=2, zero=0, ckpt_dir=ckpt_dir, resume=True), progress="none")
    return {"full": full, "same": same, "other": other, "files": sorted(os.listdir(ckpt_dir))}


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
    all_reduce_grads_flat(piece.stage, piece.groups["dp"], mesh.dp_size)
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
