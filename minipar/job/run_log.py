"""What a run leaves behind: the progress bar, ``metrics.jsonl``, ``loss.png``, ``sample.txt`` and ``config.json``.

Used by :mod:`minipar.train` on the one rank that owns the loss. Never a mixed ``--out``: a run's
outputs replace the previous run's all together, as the run's last act, or not at all.

- The metrics are logged line by line as the run goes, so a killed job loses nothing logged, but
  into ``metrics.jsonl.partial`` (the live log: ``tail -f`` it). Appending to ``metrics.jsonl``
  itself would put a failed run's records beside the previous run's plot, sample and config.
- At the end, ``config.json``, ``loss.png`` and ``sample.txt`` are written under ``NAME.partial``,
  then all four are renamed to their names (:func:`minipar.job.outdir.publish`).
- So a run that fails or is killed leaves the previous run's four files as they were, plus its own
  ``metrics.jsonl.partial`` (and ``traceback.txt``, see :func:`minipar.train.main`) to read.
- A resumed run keeps the records before its checkpoint's step, from the log of the run that wrote
  the checkpoint: the live log of a run that was killed (``metrics.jsonl.partial``) or the last
  complete run's ``metrics.jsonl``, whichever reaches closer to that step. Every record names its
  run (``run_id``, also in the checkpoints), and only the checkpoint's run's records are kept: a
  run without checkpoints that shared the ``--out`` in between does not lend its steps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch

from minipar.data import CharCorpus
from minipar.job.outdir import PARTIAL, publish, write_atomically
from minipar.model.gpt import GPT
from minipar.runtime import dist as mdist

METRICS = "metrics.jsonl"
TRACEBACK = "traceback.txt"  # a failed run's full traceback (minipar.train.main), removed by the next good run


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


def _records(path: str) -> list[dict]:
    """The JSON records of a metrics file (none if it does not exist; a line that is not one, e.g.
    cut by a kill, is skipped)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return [r for r in out if isinstance(r, dict) and "step" in r]


def same_run_id(job):
    """The :class:`~minipar.job.config.Job` ``job`` with rank 0's run id on every rank: under torchrun each
    process checks the settings itself and a fresh run draws its own id, while the checkpoints (written by
    rank 0) and the metrics (the loss rank) must name one run."""
    if mdist.world_size() == 1:
        return job
    raw = job.run_id.encode()[:64]
    buf = torch.tensor([len(raw), *raw, *[0] * (64 - len(raw))], dtype=torch.uint8, device=mdist.device())
    torch.distributed.broadcast(buf, src=0)  # not job.piece.broadcast_from: one hop fewer on the job's call path
    return dataclasses.replace(job, run_id=bytes(buf[1 : 1 + int(buf[0])].tolist()).decode())


def open_metrics(cfg, start: int, run_id: str = ""):
    """Open the live log ``metrics.jsonl.partial`` (loss rank). A fresh run starts it empty; a resumed
    run (``start`` > 0, ``run_id`` its checkpoint's run) keeps that run's records before ``start``
    (see the module doc), so a killed job loses no logged line and no other run's line comes in."""
    os.makedirs(cfg.out, exist_ok=True)
    live = os.path.join(cfg.out, METRICS + PARTIAL)
    old = []
    if start:  # the log that reaches furthest toward the checkpoint (a tie: the live one, the newer)
        logs = [
            [r for r in _records(p) if r["step"] < start and r.get("run_id") == run_id]
            for p in (live, os.path.join(cfg.out, METRICS))
        ]
        old = max(logs, key=lambda rs: max((r["step"] for r in rs), default=-1))
    f = open(live, "w")
    f.writelines(json.dumps(r) + "\n" for r in old)
    f.flush()
    return f


def write_outputs(cfg, model: GPT, corpus: CharCorpus, device) -> None:
    """Write ``config.json``, ``loss.png`` (from the whole live log) and ``sample.txt`` into ``cfg.out``
    under temporary names, then rename them and the live log to their names (the run's last act)."""
    live = os.path.join(cfg.out, METRICS + PARTIAL)
    history = _records(live)
    g = torch.Generator().manual_seed(cfg.seed)
    first = "\n" if "\n" in corpus.chars else corpus.text[0]  # a text without a newline starts from its first character
    start = corpus.encode(first).view(1, 1).to(device)
    text = corpus.decode(model.generate(start, cfg.sample_chars, temperature=0.8, top_k=20, generator=g)[0, 1:].cpu())
    ax = plot_losses(history)
    ax.figure.tight_layout()
    at = lambda name: os.path.join(cfg.out, name)  # noqa: E731
    ready = [
        write_atomically(at("config.json"), lambda f: json.dump(dataclasses.asdict(cfg), f, indent=2)),
        write_atomically(at("loss.png"), lambda f: ax.figure.savefig(f, format="png", dpi=100), binary=True),
        write_atomically(at("sample.txt"), lambda f: f.write(text + "\n")),
    ]
    publish(ready + [live])
    for name in os.listdir(cfg.out):  # a failed run's traceback no longer describes this folder
        if name == TRACEBACK or (name.startswith("traceback.rank") and name.endswith(".txt")):
            os.remove(at(name))


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
