"""Functions the 3D tests run on 8 ranks (importable: child processes find them by name)."""

import os
import shutil

import torch.distributed as dist

# the float64 gradient proof is the lesson's own (lessons/workers_07.py), tested here on more layouts
from lessons.workers_07 import grads_float64, one_device_grads_float64  # noqa: F401
from minipar.checkpoint import dcp as ckpt
from minipar.job.config import TrainConfig
from minipar.train import train


def equivalence(base: dict) -> dict:
    """dp2·tp2·pp2 with 1F1B, without and with ZeRO-1, in one process group: {zero: history}."""
    return {z: train(TrainConfig(**base, dp=2, tp=2, pp=2, schedule="1f1b", zero=z), progress="none") for z in (0, 1)}


def save_and_resume(base: dict, ckpt_dir: str, steps: int, every: int) -> dict:
    """Save under dp2·tp2·pp2 (ZeRO-1), then resume the same layout and dp4·tp1·pp2 from step ``every``."""
    full = train(TrainConfig(**base, dp=2, tp=2, pp=2, zero=1, ckpt_dir=ckpt_dir, ckpt_every=every), progress="none")
    if dist.get_rank() == 0:  # as if the job had died after the first checkpoint
        for s in range(2 * every, steps + 1, every):
            shutil.rmtree(ckpt.step_dir(ckpt_dir, s), ignore_errors=True)
    dist.barrier()
    same = train(TrainConfig(**base, dp=2, tp=2, pp=2, zero=1, ckpt_dir=ckpt_dir, resume=True), progress="none")
    other = train(TrainConfig(**base, dp=4, tp=1, pp=2, zero=0, ckpt_dir=ckpt_dir, resume=True), progress="none")
    return {"full": full, "same": same, "other": other, "files": sorted(os.listdir(ckpt_dir))}


def zero3_job(base: dict, ckpt_dir: str, steps: int, every: int) -> dict:
    """The main job with --zero 3 (per-parameter ZeRO-3 over dp4): a full run saving every ``every``
    steps; then resumed from the first checkpoint by ZeRO-3 again and by dp2·tp2 without ZeRO (the
    checkpoint is layout-free); and a --dtype bf16 run (bf16 gathers and compute)."""
    full = train(TrainConfig(**base, dp=4, zero=3, ckpt_dir=ckpt_dir, ckpt_every=every), progress="none")
    if dist.get_rank() == 0:
        for s in range(2 * every, steps + 1, every):
            shutil.rmtree(ckpt.step_dir(ckpt_dir, s), ignore_errors=True)
    dist.barrier()
    same = train(TrainConfig(**base, dp=4, zero=3, ckpt_dir=ckpt_dir, resume=True), progress="none")
    other = train(TrainConfig(**base, dp=2, tp=2, zero=0, ckpt_dir=ckpt_dir, resume=True), progress="none")
    bf16 = train(TrainConfig(**base, dp=4, zero=3, dtype="bf16"), progress="none")
    return {"full": full, "same": same, "other": other, "bf16": bf16}
