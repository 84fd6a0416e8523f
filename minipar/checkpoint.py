"""Checkpoints that lose nothing: sharded per rank with PyTorch Distributed Checkpoint (DCP).

Why DCP (``torch.distributed.checkpoint``): every rank writes only what it holds, in parallel,
and a checkpoint saved under one layout loads under another — DCP records each tensor's
*global* shape and each shard's offsets, and at load time every rank reads exactly the pieces
its new shards overlap. Replicated tensors (the same on every data-parallel rank) are written
once. It is the ecosystem's format (torchtitan, FSDP2), so a learner's checkpoint is a real one.

What a training checkpoint holds (see ``minipar.train``): model parameters, optimizer state
(per parameter, keyed by its name, so it survives a change of layout), the data-loader
position, the step, and the RNG state.

Never a half-written checkpoint: every rank writes into ``step_NNNNNNNN.partial/``; only after
all ranks have finished (a barrier) does rank 0 rename it to ``step_NNNNNNNN/`` — an atomic
``rename`` on one file system — so :func:`latest` only ever sees complete checkpoints. A job
killed mid-save leaves a ``.partial`` directory, which is ignored and overwritten next time.
On a multi-node job ``ckpt_dir`` must be on a file system every node sees.
"""
from __future__ import annotations

import os
import re
import shutil
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn

_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"step_{step:08d}")


def latest(ckpt_dir: str | None) -> str | None:
    """The newest *complete* checkpoint directory under ``ckpt_dir`` (None if there is none)."""
    if not ckpt_dir or not os.path.isdir(ckpt_dir):
        return None
    steps = [int(m.group(1)) for d in os.listdir(ckpt_dir) if (m := _STEP_DIR.match(d))
             and os.path.exists(os.path.join(ckpt_dir, d, ".metadata"))]
    return step_dir(ckpt_dir, max(steps)) if steps else None


def _barrier():
    if dist.is_initialized():
        dist.barrier()


def save(ckpt_dir: str, step: int, state: dict) -> str:
    """Write ``state`` (nested dicts of tensors, DTensors and plain values) as checkpoint ``step``.

    Collective: every rank calls it. Returns the final directory.
    """
    final = step_dir(ckpt_dir, step)
    partial = final + ".partial"
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    if rank0:
        os.makedirs(ckpt_dir, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
    _barrier()
    with warnings.catch_warnings():  # one process: DCP warns that it assumes so, which is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, checkpoint_id=partial, no_dist=not dist.is_initialized())
    _barrier()  # every rank's shard file and rank 0's metadata are written
    if rank0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
    _barrier()
    return final


def load(path: str, state: dict) -> None:
    """Fill ``state``'s tensors in place from checkpoint ``path`` (resharding as needed). Collective."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The optimizer's per-parameter state keyed by parameter name: ``{name: {"exp_avg": ..., ...}}``.

    Keys by name (not by position in ``param_groups``) so a model cut differently — another
    pipeline stage, another shard — finds its entries. Tensors are the live state (loading into
    this dict writes into the optimizer).
    """
    out = {}
    for name, p in model.named_parameters():
        st = opt.state.get(p)
        if st:
            out[name] = {k: v for k, v in st.items()}
    return out


def init_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Create AdamW's state tensors (zeros, step 0) so :func:`load` has somewhere to write."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p not in opt.state or not opt.state[p]:
                opt.state[p] = {"step": torch.zeros((), dtype=torch.float32),
                                "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
