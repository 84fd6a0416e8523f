"""Lesson 00's experiment drivers: train the main job, measure a training step's time and memory (the memory in a
fresh process, ``launch(..., world_size=1)``, so that what one experiment freed cannot hide the next one's peak)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tempfile

import torch

from minipar.course.bench import median_time
from minipar.course.loop import random_batch
from minipar.course.memory_timeline import profile_memory
from minipar.job.config import TrainConfig
from minipar.model.gpt import GPT, GPTConfig, num_params
from minipar.model.memory import measure_peak, release_freed_memory, saved_activation_bytes, state_bytes
from minipar.train import train


# ---------------------------------------------------------------- the main job, in-process
def train_and_sample(cfg: TrainConfig, progress: str = "plain") -> tuple[list[dict], str]:
    """:func:`minipar.train.train` with its outputs in a temporary folder: ``(history, generated sample text)``."""
    with tempfile.TemporaryDirectory() as tmp:
        history = train(dataclasses.replace(cfg, out=tmp), progress=progress)
        return history, (pathlib.Path(tmp) / "sample.txt").read_text()


# ---------------------------------------------------------------- memory and time of a training step
def _adamw_step(cfg: GPTConfig, batch: int, dtype: str = "fp32", set_to_none: bool = True):
    """``(model, opt, step, forward)``: ``GPT(cfg)`` (seed 0), its AdamW (lr 1e-3), ``forward()`` the loss on a fixed
    batch (under CPU autocast if ``dtype`` is "bf16"), ``step(zero_grad=True)`` forward, backward, ``opt.step()``,
    then ``zero_grad(set_to_none)`` (True, as :func:`minipar.job.reference.train_single_device`)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = random_batch(cfg.vocab_size, batch, cfg.block_size)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x, y)[1]  # the logits die here, before backward

    def step(zero_grad: bool = True):
        forward().backward()
        opt.step()
        if zero_grad:
            opt.zero_grad(set_to_none=set_to_none)

    return model, opt, step, forward


def step_memory(cfg: GPTConfig, batch: int, dtype: str = "fp32") -> dict:
    """Counted and measured bytes of two AdamW steps of ``GPT(cfg)`` on (batch, block_size) inputs; run it
    in a fresh process. Counted after the steps: ``params``, ``grads``, ``optimizer`` (:func:`state_bytes`),
    ``activations`` (saved for backward), ``weight_copies`` (bf16: the Linear weights' copies autocast
    saves, included in ``activations``); measured: ``peak`` RSS above the start; plus ``num_params``."""
    release_freed_memory()  # so RSS follows tensor lifetimes (see its docstring)
    box = {}

    def run(cfg=cfg, batch=batch):
        box["model"], box["opt"], step, box["forward"] = _adamw_step(cfg, batch, dtype)
        step()
        step(zero_grad=False)  # keep the last step's gradients, to count them

    run(dataclasses.replace(cfg, block_size=8, n_layer=1, n_head=1, d_model=8), 1)  # warm-up: load the kernels
    peak = measure_peak(run)
    model = box["model"]
    counted = state_bytes(model, box["opt"])
    states = {k: counted[k] for k in ("params", "grads", "optimizer")}
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    weight_copies = 2 * linear_weights if dtype == "bf16" else 0
    activations = saved_activation_bytes(box["forward"], exclude=model)
    return dict(states, num_params=num_params(model), activations=activations, weight_copies=weight_copies, peak=peak)


def sweep_memory(cases: list[tuple[GPTConfig, int, str]]) -> list[dict]:
    """:func:`step_memory` for each ``(cfg, batch, dtype)``, one after another (each starts clean)."""
    return [step_memory(*case) for case in cases]


def step_time(cfg: GPTConfig, batch: int, dtype: str = "fp32", repeats: int = 3) -> float:
    """Median seconds of one AdamW training step (forward, backward, step) after one warm-up step."""
    return median_time(_adamw_step(cfg, batch, dtype)[2], repeats)


def step_peaks(cfg: GPTConfig, batch: int, release: bool, repeats: int = 4) -> list[int]:
    """Peak RSS of ``repeats`` successive AdamW steps, each measured, bytes: without
    :func:`minipar.model.memory.release_freed_memory` glibc keeps what the first steps freed and later peaks read ~0."""
    if release:
        release_freed_memory()
    step = _adamw_step(cfg, batch)[2]
    return [measure_peak(step) for _ in range(repeats)]


# ---------------------------------------------------------------- memory over one step
def memory_timeline(cfg: GPTConfig, batch: int, set_to_none: bool = True) -> dict:
    """Live tensor bytes by category over the second AdamW step of ``GPT(cfg)`` (:func:`profile_memory`);
    ``set_to_none=False`` keeps the gradients' memory alive between steps (zeroed, not freed)."""
    step = _adamw_step(cfg, batch, set_to_none=set_to_none)[2]
    step()  # the first step creates AdamW's moments
    return profile_memory(step)


def draw_memory_bars(bars: dict, ax, title: str) -> None:
    """Stacked bars of ``{label: (weights, grads, optimizer, activations, bf16 weight copies)}``, or a
    single measured number (drawn hatched), in MiB."""
    MiB = 2**20
    names = ["weights", "gradients", "AdamW state", "activations", "bf16 weight copies"]
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]
    seen = set()
    for i, parts in enumerate(bars.values()):
        if not isinstance(parts, tuple):  # a measured peak: one hatched bar
            label = None if "peak" in seen else "measured peak RSS"
            ax.bar(i, parts / MiB, color="none", edgecolor="k", hatch="//", label=label)
            seen.add("peak")
            continue
        bottom = 0
        for j, v in enumerate(parts):
            ax.bar(i, v / MiB, bottom=bottom, color=colors[j], label=names[j] if v and j not in seen else None)
            if v:
                seen.add(j)
            bottom += v / MiB
    ax.set_xticks(range(len(bars)), bars.keys(), fontsize=8)
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def draw_growth(P: list, times: list, mems: list, speed: float, big: float = 7e9) -> None:
    """Seconds per step (measured, extrapolated at ``speed`` FLOP/s to ``big``) and memory (counted, measured
    peak, 16Ψ extrapolated; an H100's 80 GB and this machine's RAM as lines) against Ψ."""
    import matplotlib.pyplot as plt

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    step = lambda p: 6 * p * 512 / speed  # noqa: E731  (6Ψ FLOPs per token, 512 tokens per step)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    a1.loglog(P, times, "o-", label="measured (1 CPU thread)")
    a1.loglog([P[0], big], [step(P[0]), step(big)], "--", color="0.5", label="6Ψ·tokens / FLOP/s")
    a1.plot([big], [step(big)], "r*", ms=12)
    a1.text(big / 300, step(big), f"7B: {step(big) / 60:.0f} min/step", fontsize=8, va="center")
    a1.set(xlabel="parameters Ψ", ylabel="seconds per step (512 tokens)", title="time per step grows with Ψ")
    a1.legend(fontsize=8)
    states = [(r["params"] + r["grads"] + r["optimizer"]) / 1e9 for r in mems]
    acts = [r["activations"] / 1e9 for r in mems]
    a2.loglog(P, states, "o-", label="model states 16Ψ (counted)")
    a2.loglog(P, acts, "s-", label="activations, batch 8×64 (counted)")
    both = [s + a for s, a in zip(states, acts)]
    a2.loglog(P, both, ":", color="k", label="states + activations (counted; above the peak)")
    a2.loglog(P, [r["peak"] / 1e9 for r in mems], "x", color="k", label="measured peak RSS")
    a2.loglog([P[0], big], [16 * P[0] / 1e9, 16 * big / 1e9], "--", color="0.5", label="16Ψ extrapolated")
    for gb, name in ((80, "H100 80 GB"), (ram / 1e9, f"this machine {ram / 2**30:.0f} GiB")):
        a2.axhline(gb, color="r", lw=0.8)
        a2.text(P[0], gb * 1.15, name, fontsize=8, color="r")
    a2.plot([big], [16 * big / 1e9], "r*", ms=12)
    a2.text(big / 30, 16 * big / 1e9 * 0.35, f"7B: 16Ψ = {16 * big / 1e9:.0f} GB", fontsize=8)
    a2.set(xlabel="parameters Ψ", ylabel="GB", title="memory: 16Ψ outgrows any one device")
    a2.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    plt.show()
