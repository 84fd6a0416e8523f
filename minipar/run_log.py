"""What a run leaves behind: the progress bar, ``metrics.jsonl``, ``loss.png`` and ``sample.txt``.

Used by :mod:`minipar.train` on the one rank that owns the loss. ``metrics.jsonl`` is written line
by line as the run goes (so a killed job loses nothing logged) and, after a resume, keeps the
lines from before the checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch

from minipar.data import CharCorpus
from minipar.models import GPT


def progress_bar(kind: str, total: int):
    import threading

    from tqdm import tqdm

    # One bar per process, so a thread lock is enough. tqdm's default lock is a multiprocessing
    # RLock (a named semaphore): a rank that ends with os._exit never unlinks it, and the
    # resource tracker warned "leaked semaphore objects" at the end of multi-rank runs.
    tqdm.set_lock(threading.RLock())
    if kind == "none":
        return None
    if kind == "auto":
        kind = "bar" if sys.stderr.isatty() else "plain"
    if kind == "bar":
        return tqdm(total=total, desc="train", unit="step")
    # "plain": no timings, redraws every 10% of the run, so the text is the same on every run
    tqdm.monitor_interval = 0
    return tqdm(
        total=total,
        desc="train",
        file=sys.stdout,
        mininterval=0,
        miniters=max(1, total // 10),
        bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt}{postfix}",
        ascii=False,
    )


def open_metrics(cfg, start: int):
    """Open ``metrics.jsonl`` for appending (rank 0). A fresh run truncates it; a resumed run keeps
    the records before its checkpoint's step, so a killed job loses no logged line."""
    os.makedirs(cfg.out, exist_ok=True)
    path = os.path.join(cfg.out, "metrics.jsonl")
    old = []
    if start and os.path.exists(path):
        with open(path) as f:
            old = [line for line in f if line.strip() and json.loads(line)["step"] < start]
    f = open(path, "w")
    f.writelines(old)
    f.flush()
    return f


def write_outputs(cfg, model: GPT, corpus: CharCorpus, device) -> None:
    """Write ``config.json``, ``loss.png`` (from the whole ``metrics.jsonl``) and ``sample.txt`` into ``cfg.out``."""
    with open(os.path.join(cfg.out, "metrics.jsonl")) as f:
        history = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(cfg.out, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(cfg), f, indent=2)
    plot_losses(history, os.path.join(cfg.out, "loss.png"))
    g = torch.Generator().manual_seed(cfg.seed)
    first = "\n" if "\n" in corpus.chars else corpus.text[0]  # a text without a newline starts from its first character
    start = corpus.encode(first).view(1, 1).to(device)
    text = corpus.decode(model.generate(start, cfg.sample_chars, temperature=0.8, top_k=20, generator=g)[0, 1:].cpu())
    with open(os.path.join(cfg.out, "sample.txt"), "w") as f:
        f.write(text + "\n")


def plot_losses(history: list[dict], path: str | None = None, ax=None, label: str = ""):
    """Train and val loss against step (matplotlib); saved to ``path`` if given. Returns the axes.

    Without ``ax`` it draws on a standalone ``Figure`` (not pyplot), so saving a PNG neither needs a
    display nor changes the plotting backend of a notebook that called it.
    """
    from matplotlib.figure import Figure

    own = ax is None
    if own:
        ax = Figure(figsize=(6, 3.5)).subplots()
    tr = [(r["step"], r["loss"]) for r in history if "loss" in r]
    va = [(r["step"], r["val_loss"]) for r in history if "val_loss" in r]
    if tr:
        ax.plot(*zip(*tr), label=f"train {label}".strip(), lw=1)
    if va:
        ax.plot(*zip(*va), "o-", label=f"val {label}".strip())
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.legend()
    ax.grid(alpha=0.3)
    if own and path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=100)
    return ax
