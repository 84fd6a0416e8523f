"""Lesson 00's experiment drivers: draw an autograd graph, and measure one training step's memory.

Only calls into ``torch`` and ``minipar``; the memory measurements run in a fresh process
started by ``minipar.launch`` (world_size=1) so that what one experiment freed cannot hide the
next one's peak (see :func:`step_memory`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tempfile
import time

import torch

from minipar.course.memory_timeline import profile_memory
from minipar.job.config import TrainConfig
from minipar.model.gpt import GPT, GPTConfig, num_params
from minipar.model.memory import measure_peak, release_freed_memory, saved_activation_bytes, state_bytes
from minipar.train import train


# ---------------------------------------------------------------- the main job, in-process
def train_and_sample(cfg: TrainConfig, progress: str = "plain") -> tuple[list[dict], str]:
    """Run :func:`minipar.train.train` with its outputs in a temporary folder.

    Returns ``(history, sample)``: the logged metrics and the text the trained model generated
    (``sample.txt``). ``train`` saves ``loss.png`` with matplotlib's Agg backend, which switches
    pyplot's backend for the whole process; we switch it back, so a notebook keeps showing figures.
    """
    import matplotlib
    import matplotlib.pyplot as plt

    backend = matplotlib.get_backend()
    with tempfile.TemporaryDirectory() as tmp:
        history = train(dataclasses.replace(cfg, out=tmp), progress=progress)
        sample = (pathlib.Path(tmp) / "sample.txt").read_text()
    plt.switch_backend(backend)
    return history, sample


# ---------------------------------------------------------------- memory of a training step
def _batch(vocab: int, batch: int, seq: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g))


def step_memory(cfg: GPTConfig, batch: int, dtype: str = "fp32", steps: int = 2) -> dict:
    """Counted and measured bytes of AdamW training of ``GPT(cfg)`` on (batch, block_size) inputs.

    Run it in a fresh process (``launch(step_memory, world_size=1, ...)``). Returns bytes:
    ``params``, ``grads``, ``optimizer`` (counted after a step, :func:`minipar.model.memory.state_bytes`),
    ``activations`` (saved for backward, :func:`saved_activation_bytes`), ``weight_copies`` (under
    bf16 autocast: the bf16 copies of the Linear weights autocast saves, 2 bytes each, included
    in ``activations``), ``peak`` (measured: peak RSS while building the model and optimizer and running ``steps``
    steps, above the RSS before), plus ``num_params``.
    """
    release_freed_memory()  # so RSS follows tensor lifetimes (see its docstring)
    x, y = _batch(cfg.vocab_size, batch, cfg.block_size)
    box = {}

    def run(cfg=cfg, x=x, y=y):
        torch.manual_seed(0)
        model = GPT(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for i in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                loss = model(x, y)[1]
            loss.backward()
            opt.step()
            if i < steps - 1:  # keep the last step's gradients, to count them
                opt.zero_grad(set_to_none=True)
        box.update(model=model, opt=opt)

    tiny = GPTConfig(vocab_size=cfg.vocab_size, block_size=8, n_layer=1, n_head=1, d_model=8)
    run(tiny, x[:1, :8], y[:1, :8])  # warm-up: load the kernels' code and buffers before measuring
    peak = measure_peak(run)
    model, opt = box["model"], box["opt"]

    def fwd():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x, y)[1]

    counted = state_bytes(model, opt)
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return dict(
        num_params=num_params(model),
        params=counted["params"],
        grads=counted["grads"],
        optimizer=counted["optimizer"],
        activations=saved_activation_bytes(fwd, exclude=model),
        weight_copies=2 * linear_weights if dtype == "bf16" else 0,
        peak=peak,
    )


def sweep_memory(cases: list[tuple[GPTConfig, int, str]]) -> list[dict]:
    """:func:`step_memory` for each ``(cfg, batch, dtype)``, one after another in this process.

    Sequential measurements do not disturb each other: after ``release_freed_memory``
    every block a step frees goes back to the OS, so the next peak starts from a clean level.
    """
    return [step_memory(*case) for case in cases]


def _adamw_step(cfg: GPTConfig, batch: int, dtype: str = "fp32", set_to_none: bool = True):
    """``GPT(cfg)`` (seed 0), its AdamW (lr 1e-3) and one training step on a fixed batch, ``dtype`` "bf16"
    under CPU autocast: ``(model, opt, step)``; ``step()`` runs forward, backward, ``opt.step()`` and
    ``zero_grad(set_to_none)`` (True as :func:`minipar.job.reference.train_single_device`)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = _batch(cfg.vocab_size, batch, cfg.block_size)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(x, y)[1]  # the logits die here, before backward
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)

    return model, opt, step


def step_time(cfg: GPTConfig, batch: int, dtype: str = "fp32", repeats: int = 3) -> float:
    """Median seconds of one AdamW training step (forward, backward, step) after one warm-up step."""
    step = _adamw_step(cfg, batch, dtype)[2]
    times = []
    for _i in range(repeats + 1):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return sorted(times[1:])[len(times[1:]) // 2]


def step_peaks(cfg: GPTConfig, batch: int, release: bool, repeats: int = 4) -> list[int]:
    """Peak RSS of ``repeats`` successive AdamW steps of ``GPT(cfg)``, each measured, bytes.

    Shows why :func:`minipar.model.memory.release_freed_memory` exists: without it glibc keeps what
    the first steps freed, the later steps reuse it, and their peaks read ~0.
    """
    if release:
        release_freed_memory()
    step = _adamw_step(cfg, batch)[2]
    return [measure_peak(step) for _ in range(repeats)]


# ---------------------------------------------------------------- memory over one step
def memory_timeline(cfg: GPTConfig, batch: int, set_to_none: bool = True) -> dict:
    """Live tensor bytes over one AdamW step of ``GPT(cfg)`` (the second: AdamW's moments exist), by
    category (:func:`minipar.course.memory_timeline.profile_memory`). ``set_to_none=False`` keeps the
    gradients' memory alive between steps (zeroed, not freed)."""
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
            ax.bar(
                i,
                parts / MiB,
                color="none",
                edgecolor="k",
                hatch="//",
                label=None if "peak" in seen else "measured peak RSS",
            )
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
    """Two panels: seconds per step against Ψ (measured, extrapolated at ``speed`` FLOP/s to ``big``
    parameters) and memory against Ψ (counted states and activations, measured peak, 16Ψ extrapolated),
    with an H100's 80 GB and this machine's RAM as lines."""
    import matplotlib.pyplot as plt

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    step = lambda p: 6 * p * 512 / speed  # noqa: E731  (6Ψ FLOPs per token, 512 tokens per step)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    a1.loglog(P, times, "o-", label="measured (1 CPU thread)")
    a1.loglog([P[0], big], [step(P[0]), step(big)], "--", color="0.5", label="6Ψ·tokens / FLOP/s")
    a1.plot([big], [step(big)], "r*", ms=12)
    a1.text(big / 300, step(big), f"7B: {step(big) / 60:.0f} min/step", fontsize=8, va="center")
    a1.set_xlabel("parameters Ψ")
    a1.set_ylabel("seconds per step (512 tokens)")
    a1.legend(fontsize=8)
    a1.set_title("time per step grows with Ψ")
    states = [(r["params"] + r["grads"] + r["optimizer"]) / 1e9 for r in mems]
    acts = [r["activations"] / 1e9 for r in mems]
    a2.loglog(P, states, "o-", label="model states 16Ψ (counted)")
    a2.loglog(P, acts, "s-", label="activations, batch 8×64 (counted)")
    a2.loglog(
        P, [s + a for s, a in zip(states, acts)], ":", color="k", label="states + activations (counted; above the peak)"
    )
    a2.loglog(P, [r["peak"] / 1e9 for r in mems], "x", color="k", label="measured peak RSS")
    a2.loglog([P[0], big], [16 * P[0] / 1e9, 16 * big / 1e9], "--", color="0.5", label="16Ψ extrapolated")
    for gb, name in ((80, "H100 80 GB"), (ram / 1e9, f"this machine {ram / 2**30:.0f} GiB")):
        a2.axhline(gb, color="r", lw=0.8)
        a2.text(P[0], gb * 1.15, name, fontsize=8, color="r")
    a2.plot([big], [16 * big / 1e9], "r*", ms=12)
    a2.text(big / 30, 16 * big / 1e9 * 0.35, f"7B: 16Ψ = {16 * big / 1e9:.0f} GB", fontsize=8)
    a2.set_xlabel("parameters Ψ")
    a2.set_ylabel("GB")
    a2.legend(fontsize=7, loc="lower right")
    a2.set_title("memory: 16Ψ outgrows any one device")
    fig.tight_layout()
    plt.show()
