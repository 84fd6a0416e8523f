"""Homework (a): train the GPT on your own text with a 3D layout you pick; report loss, memory, plan.

    python -m homework.a_train_your_text.job --data my_book.txt --world 4 --steps 200
    python -m homework.a_train_your_text.check              # checks runs/homework_a/

Given: the training itself (``minipar.train.train``, the main job, on a (pp, dp, tp) mesh of
``minipar.launch`` ranks), each rank's resident memory after training, and the evidence the checker
recomputes your claims from, all in ``--out``: ``metrics.jsonl`` (the loss of every step) and
``config.json`` (the layout) from the main job, ``ckpt/step_NNNNNNNN/`` (the trained model, which
the checker reloads to evaluate the validation loss itself) and ``evidence.json`` (the data file's
SHA-256 and size, each rank's memory counters, your :func:`predict` output). You write the three TODOs:

1. :func:`choose_layout` — your (pp, dp, tp, microbatches) for ``world`` ranks, valid for the model.
2. :func:`predict` — the planner's memory per rank and step time for that layout
   (``minipar.perf.model.estimate`` with a ``cpu_device`` you measured or assumed: say which).
3. :func:`report` — the JSON the checker reads (fields in its docstring).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil

from minipar import launch
from minipar.job.config import TrainConfig


def run_rank(cfg: TrainConfig) -> dict:
    """Runs on every rank (given): train with the main job, then read this rank's memory counters."""
    from minipar.model.memory import rss_bytes
    from minipar.runtime import dist as mdist
    from minipar.train import train

    rss_idle = rss_bytes()  # torch imported, nothing built yet
    history = train(cfg, progress="none")
    with open("/proc/self/status") as f:  # Linux: the process's peak resident set
        hwm = next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:")), 0)
    return {"rank": mdist.rank(), "history": history, "rss_idle_bytes": rss_idle, "peak_rss_bytes": hwm}


def choose_layout(world: int, cfg: TrainConfig) -> tuple[int, int, int, int]:
    """TODO: return ``(pp, dp, tp, microbatches)`` with pp·dp·tp = world, valid for ``cfg``'s model.

    Rules: tp divides n_head and d_model; pp <= n_layer (both: ``minipar.job.config.check_model_fits``);
    dp·microbatches divides batch_size (all three: ``cfg.accepts(pp, dp, tp)``). Use at least two of
    the three dimensions. Say in your write-up why (e.g. the planner's ranking:
    ``minipar.perf.search.plan``, lesson 07 "Plan it").
    """
    raise NotImplementedError("not implemented yet: choose_layout")


def predict(cfg: TrainConfig, vocab_size: int, layout: tuple[int, int, int, int]) -> dict:
    """TODO: the planner's prediction: ``{"mem_bytes": total per rank, "step_s": seconds, "hardware": "...",
    "cpu_device": {the keyword arguments you gave cpu_device}}`` (the checker recomputes the estimate from them).

    ``minipar.perf.model.estimate(shape_of(cfg.gpt(vocab_size)), hw, Layout(dp=dp, tp=tp, pp=pp,
    micro_batch=cfg.batch_size // (dp * m), zero=cfg.zero, recompute="none"), cfg.batch_size)`` with
    ``hw = minipar.perf.hardware.cpu_device(peak_flops=..., ...)`` (``shape_of`` and ``Layout`` from
    ``minipar.perf.layout``) returns an ``Estimate`` with ``.mem["total"]`` (bytes) and
    ``.time["total"]`` (seconds).
    """
    raise NotImplementedError("not implemented yet: predict")


def report(cfg: TrainConfig, layout, prediction: dict, results: list[dict]) -> dict:
    """TODO: the report the checker reads (``python -m homework.a_train_your_text.check``). Fields:

    ``data`` (your text file), ``layout`` {"pp", "dp", "tp", "microbatches"}, ``world_size``,
    ``steps``, ``loss_first``, ``loss_last``, ``val_loss_last`` (from ``results[r]["history"]``),
    ``mem_measured_bytes`` (one number per rank, e.g. peak RSS minus idle RSS),
    ``mem_predicted_bytes``, ``step_s_predicted``, ``hardware``, ``cpu_device`` (from ``prediction``), and
    ``notes``: why the measurement and the prediction differ (what does the planner leave out? what does RSS count?).
    """
    raise NotImplementedError("not implemented yet: report")


def evidence(data: str, prediction: dict, results: list[dict]) -> dict:
    """Given: what the checker recomputes the report from, beside ``metrics.jsonl``, ``config.json`` and ``ckpt/``."""
    with open(data, "rb") as f:
        raw = f.read()
    return {
        "data": os.path.abspath(data),
        "data_sha256": hashlib.sha256(raw).hexdigest(),
        "data_bytes": len(raw),
        "prediction": prediction,
        "ranks": [{k: r[k] for k in ("rank", "rss_idle_bytes", "peak_rss_bytes")} for r in results],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a UTF-8 text file of your choice")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="runs/homework_a")
    for flag in ("batch-size", "block-size", "n-layer", "n-head", "d-model"):  # the model, if you change it
        ap.add_argument(f"--{flag}", type=int, default=getattr(TrainConfig, flag.replace("-", "_")))
    a = ap.parse_args(argv)
    cfg = TrainConfig(
        steps=a.steps,
        data=a.data,
        out=a.out,
        eval_every=max(1, a.steps // 4),
        log_every=1,  # evidence: the loss of every step in metrics.jsonl
        ckpt_every=a.steps,  # evidence: the trained model, reloaded by the checker
        ckpt_dir=os.path.join(a.out, "ckpt"),
        **{k: getattr(a, k) for k in ("batch_size", "block_size", "n_layer", "n_head", "d_model")},
    )
    from minipar.data import CharCorpus, load_text

    vocab = CharCorpus(load_text(a.data)).vocab_size
    layout = choose_layout(a.world, cfg)
    cfg = dataclasses.replace(cfg, **dict(zip(("pp", "dp", "tp", "microbatches"), layout)))  # TrainConfig is frozen
    prediction = predict(cfg, vocab, layout)
    ckpt_dir, previous = cfg.ckpt_dir, cfg.ckpt_dir + ".previous"
    if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):  # a fresh run is refused another run's checkpoints
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(ckpt_dir, previous)
        print(f"the previous run's checkpoints moved to {previous}/ (this run writes its own to {ckpt_dir}/)")
    results = launch(run_rank, world_size=a.world, args=(cfg,), prefix=False)
    rep = report(cfg, layout, prediction, results)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "evidence.json"), "w") as f:
        json.dump(evidence(a.data, prediction, results), f, indent=2)
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
