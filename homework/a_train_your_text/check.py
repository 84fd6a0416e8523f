"""Check homework (a) from its evidence:  python -m homework.a_train_your_text.check [runs/homework_a]

The report (``report.json``) is a set of claims; the checker recomputes each one from what the run
left in its folder (``job.py`` writes all of it) instead of trusting it:

- the data: ``evidence.json``'s SHA-256 and size are those of the file now; it is at least
  ``MIN_BYTES`` (10 kB: a few pages; below that the 10 % validation split is a few hundred
  characters and its loss measures nothing); it is not a file of this repository (its hash is
  compared with every tracked file's) nor the built-in corpus;
- the layout: ``config.json`` (written by ``minipar.train``) is a 2D/3D layout of the world size,
  the report says the same, and the checkpoint was saved under it;
- the losses: ``metrics.jsonl`` holds a finite, non-negative loss for every step; the first is ln V within
  ``init_tolerance`` (derived below: a freshly initialised GPT predicts nearly uniformly); the mean
  of the last quarter of the steps is below the mean of the first; the report's first and last
  losses are those of the log;
- the validation loss: the checker reloads the checkpoint on one device and evaluates it itself on
  the same validation windows (``minipar.train.train``'s val loss); the report's ``val_loss_last`` and the
  log's last one must equal it within ``VAL_BOUND`` (done last, once every check before it passes);
- the planner: ``minipar.perf.model.estimate`` for the layout and the ``cpu_device`` arguments you
  gave, recomputed; ``mem_predicted_bytes`` and ``step_s_predicted`` must be its numbers;
- memory: one positive number per rank, none above that rank's peak RSS (``evidence.json``);
- the notes explain the gap between measurement and prediction.

One line per item: ✓, or ✗ with what to fix. Exit status 0 when all pass.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_BYTES = 10_000  # the smallest text accepted (see the module doc)
VAL_BOUND = 1e-3  # |reported − recomputed| validation loss: fp32 sums in another order (another layout) move
# it by ~1e-6; a number made up or taken from another run misses by far more
REL = 1e-9  # the planner's numbers are recomputed by the same code: they agree to rounding of the JSON
MAX_JSON_BYTES = 1 << 20  # report.json, evidence.json, config.json: a few kB when job.py writes them
MAX_METRICS_BYTES = 64 << 20  # metrics.jsonl: one short line per step
MAX_STEPS, MAX_RANKS = 1_000_000, 64  # what a laptop run of this homework can have done


class Malformed(ValueError):
    """The evidence is not what job.py writes (a file too big, not JSON, a field of the wrong type)."""


def _malformed(out_dir, e: Malformed) -> tuple[bool, str]:
    """The one failed check that malformed evidence makes: what is wrong, and the fix."""
    return False, f"evidence in {out_dir}/ is malformed: {e} — run python -m homework.a_train_your_text.job again"


def _json_object(path: Path) -> dict:
    """The JSON object in ``path`` (at most :data:`MAX_JSON_BYTES`); else :class:`Malformed`."""
    if path.stat().st_size > MAX_JSON_BYTES:
        raise Malformed(f"{path.name} is {path.stat().st_size} bytes, more than job.py ever writes")
    try:
        obj = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise Malformed(f"{path.name} is not JSON ({str(e)[:60]})") from None
    if not isinstance(obj, dict):
        raise Malformed(f"{path.name} holds a JSON {type(obj).__name__}, not an object")
    return obj


def _need(where: str, d: dict, key: str, kind, low=None, high=None):
    """``d[key]`` if it is a ``kind`` (bool is no int) within [low, high]; else :class:`Malformed`."""
    v = d.get(key)
    if (
        not isinstance(v, kind)
        or isinstance(v, bool)
        or (low is not None and v < low)
        or (high is not None and v > high)
    ):
        bounds = f" in [{low}, {high}]" if low is not None else ""
        raise Malformed(f"{where}: {key} = {v!r} is not a {getattr(kind, '__name__', 'number')}{bounds}")
    return v


def shard_files(ckpt: str) -> int | None:
    """How many ranks wrote checkpoint folder ``ckpt``: the shard files its DCP metadata names (read without
    running code, :mod:`minipar.checkpoint.reader`); None if it cannot be read."""
    from minipar.checkpoint.reader import read_metadata_file

    try:
        meta = read_metadata_file(os.path.join(ckpt, ".metadata"))
    except Exception:  # noqa: BLE001 — any damage: the caller reports the checkpoint as unusable
        return None
    return len({info.relative_path for info in meta.storage_data.values()})


def init_tolerance(d_model: int) -> float:
    """How far a freshly initialised GPT's loss may be from ln V (nats).

    At initialisation ``lm_head`` has N(0, 0.02²) weights and ``ln_f`` gives rows of unit RMS, so each
    logit is ≈ N(0, σ²) with σ = 0.02·√d_model, independent of the target: E[loss] ≈ ln V + σ²/2
    (logsumexp of V Gaussians). The target's logit does not average out over a batch (a text repeats
    the same few characters, whose logits are fixed by one draw of the weights): allow it one σ.
    Tolerance σ + σ²/2 (0.25 at d_model = 128; measured offsets 0.01–0.09). A loss that starts far
    from ln V (1e9, or an already trained model's) was not a fresh model.
    """
    sigma = 0.02 * math.sqrt(d_model)
    return sigma + sigma**2 / 2


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def repository_file_with(size: int, digest: str, own: str = "") -> str | None:
    """The tracked file of this repository with this content (by size, then SHA-256), or None.
    ``own``: the learner's file; without git (every file under the repository walked, tracked or
    not) it is not compared with itself."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout.split(b"\0")
        files = [ROOT / n.decode() for n in names if n]
    except (OSError, subprocess.SubprocessError):  # no git: every file under the repository but the venv
        files = [p for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts]
        files = [p for p in files if str(p.resolve()) != own]
    for p in files:
        if p.is_file() and p.stat().st_size == size and sha256(p) == digest:
            return str(p.relative_to(ROOT))
    from minipar.data import builtin_text

    if hashlib.sha256(builtin_text().encode()).hexdigest() == digest:
        return "the built-in corpus (pydoc_data.topics)"
    return None


def _records(path) -> list[dict]:
    """metrics.jsonl's records (JSON objects with an integer ``step``); else :class:`Malformed`."""
    if os.path.getsize(path) > MAX_METRICS_BYTES:
        raise Malformed(
            f"{os.path.basename(path)} is {os.path.getsize(path)} bytes, more than a run of this homework logs"
        )
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise Malformed(f"metrics.jsonl line {n} is not JSON") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise Malformed(f"metrics.jsonl line {n} is not a record with an integer step")
            if any(not isinstance(rec.get(k), (int, float)) for k in ("loss", "val_loss") if k in rec):
                raise Malformed(f"metrics.jsonl line {n}: a loss that is not a number")
            out.append(rec)
    return out


def revalidate(cfg_dict: dict, ckpt_dir: str) -> list[dict]:
    """Runs on one rank: reload the checkpoint at step ``steps`` and evaluate it (``minipar.train``'s
    resume path with pp = dp = tp = 1: the loop starts at the last step, evaluates, stops)."""
    from minipar.job.config import TrainConfig
    from minipar.train import train

    keep = {k: v for k, v in cfg_dict.items() if k in TrainConfig.__dataclass_fields__}
    one = {"pp": 1, "dp": 1, "tp": 1, "microbatches": 1, "zero": 0, "schedule": "gpipe"}
    cfg = TrainConfig(**{**keep, **one, "out": None, "ckpt_dir": ckpt_dir, "ckpt_every": 0, "resume": True})
    return train(cfg, progress="none")


def check_run(out_dir) -> list[tuple[bool, str]]:
    """Every check, as (passed, what) pairs; the first missing piece of evidence ends the list."""
    out_dir = Path(out_dir)
    files = {n: out_dir / n for n in ("report.json", "evidence.json", "config.json", "metrics.jsonl")}
    missing = [n for n, p in files.items() if not p.is_file()]
    if missing:
        return [
            (
                False,
                f"evidence in {out_dir}/: {', '.join(missing)} missing — the report is checked against what "
                "job.py's run leaves there: run python -m homework.a_train_your_text.job --data YOUR_TEXT.txt",
            )
        ]
    try:
        rep, ev, cfg = (_json_object(files[n]) for n in ("report.json", "evidence.json", "config.json"))
        for k in ("pp", "dp", "tp", "microbatches"):
            _need("config.json", cfg, k, int, 1, MAX_RANKS)
        _need("config.json", cfg, "steps", int, 1, MAX_STEPS)
        _need("config.json", cfg, "d_model", int, 1, 1 << 16)
        ranks = ev.get("ranks")
        if not isinstance(ranks, list) or len(ranks) > MAX_RANKS:
            raise Malformed(f"evidence.json: ranks is not a list of at most {MAX_RANKS} entries")
        for r in ranks:
            _need("evidence.json's ranks", r if isinstance(r, dict) else {}, "peak_rss_bytes", (int, float), 0)
    except Malformed as e:
        return [_malformed(out_dir, e)]
    out: list[tuple[bool, str]] = []

    # the data
    data = ev.get("data")
    named = cfg.get("data") or ""  # as given to job.py: maybe relative to where it ran
    ok = bool(data and named) and os.path.isfile(data) and os.path.basename(data) == os.path.basename(named)
    out.append((ok, f"the text file the run trained on exists ({data}; config.json: {cfg.get('data')})"))
    if not ok:
        return out
    size, digest = os.path.getsize(data), sha256(data)
    out.append(
        (
            (size, digest) == (ev.get("data_bytes"), ev.get("data_sha256")),
            f"{data} is the file the run hashed (SHA-256 and size as in evidence.json): not changed since",
        )
    )
    said = str(rep.get("data") or "")
    out.append((os.path.basename(said) == os.path.basename(data), f"the report names that file (data: {said!r})"))
    out.append((size >= MIN_BYTES, f"your text is at least {MIN_BYTES} bytes ({size})"))
    same = repository_file_with(size, digest, os.path.realpath(data))
    out.append((same is None, f"your text is not a file of this course ({same or 'no match'}): train on your own"))

    # the layout
    pp, dp, tp, m = (cfg.get(k) for k in ("pp", "dp", "tp", "microbatches"))
    world = len(ev.get("ranks") or [])
    lay = {"pp": pp, "dp": dp, "tp": tp, "microbatches": m}
    out.append(
        (
            all(isinstance(v, int) for v in lay.values()) and pp * dp * tp == world and rep.get("world_size") == world,
            f"layout pp·dp·tp = world size ({lay}, {world} ranks measured, report: {rep.get('world_size')})",
        )
    )
    out.append((sum((v or 0) > 1 for v in (pp, dp, tp)) >= 2, "at least two of pp, dp, tp are > 1"))
    out.append((rep.get("layout") == lay, f"the report's layout is the run's ({rep.get('layout')} vs {lay})"))

    # the losses
    from minipar.data import CharCorpus, load_text

    V = CharCorpus(load_text(data)).vocab_size
    steps = cfg.get("steps")
    recs = _records(files["metrics.jsonl"])
    loss = {r["step"]: r["loss"] for r in recs if "loss" in r}
    every = sorted(loss) == list(range(steps or 0)) and all(math.isfinite(v) for v in loss.values())
    out.append((every, f"metrics.jsonl: a finite loss for each of the {steps} steps ({len(loss)} logged)"))
    if not every:
        return out
    tol = init_tolerance(cfg["d_model"])
    first, last = loss[0], loss[steps - 1]
    out.append(
        (
            abs(first - math.log(V)) <= tol,
            f"the first loss {first:.4f} is ln V = {math.log(V):.4f} within {tol:.3f} (a fresh model, V = {V})",
        )
    )
    q = max(1, steps // 4)
    head, tail = sum(loss[s] for s in range(q)) / q, sum(loss[s] for s in range(steps - q, steps)) / q
    low = min(loss.values())
    out.append((low >= 0, f"every loss is >= 0, as a cross-entropy is (lowest: {low:.4g})"))
    out.append((tail < head, f"the loss fell: mean of the first {q} steps {head:.4f}, of the last {q} {tail:.4f}"))
    out.append(
        (
            rep.get("loss_first") == first and rep.get("loss_last") == last and rep.get("steps") == steps,
            f"the report's loss_first, loss_last, steps are the log's ({first}, {last}, {steps})",
        )
    )

    # the validation loss, recomputed from the checkpoint on one device
    from minipar import launch
    from minipar.checkpoint.dcp import read_meta, step_dir

    ckpt_dir = cfg.get("ckpt_dir") or str(out_dir / "ckpt")
    meta = read_meta(step_dir(ckpt_dir, steps)) if os.path.isdir(step_dir(ckpt_dir, steps)) else None
    logged_val = next((r["val_loss"] for r in reversed(recs) if "val_loss" in r and r["step"] == steps), None)
    if not meta:
        out.append((False, f"the trained model: no checkpoint {step_dir(ckpt_dir, steps)} (job.py saves it)"))
        return out
    out.append(
        (
            meta.get("layout") == f"pp{pp}·dp{dp}·tp{tp}"
            and meta.get("vocab") == "".join(CharCorpus(load_text(data)).chars),
            f"the checkpoint was saved under pp{pp}·dp{dp}·tp{tp} from this text ({meta.get('layout')})",
        )
    )
    wrote = shard_files(step_dir(ckpt_dir, steps))  # the checkpoint's own files, not a JSON anyone can edit
    out.append(
        (
            wrote == world,
            f"the checkpoint's own shard files were written by {wrote} rank(s), the {world} ranks claimed",
        )
    )
    claims = {"report's val_loss_last": rep.get("val_loss_last"), "metrics.jsonl's last val_loss": logged_val}
    if all(ok for ok, _ in out):  # the one expensive check (a rank reloads the model), once the rest holds
        val = launch(revalidate, world_size=1, args=(cfg, ckpt_dir), prefix=False)[0][-1]["val_loss"]
        ok = all(isinstance(v, (int, float)) and abs(v - val) <= VAL_BOUND for v in claims.values())
        out.append((ok, f"validation loss recomputed from the checkpoint on one device: {val:.4f} ({claims})"))
    else:
        out.append((False, f"validation loss {claims}: recomputed from the checkpoint once the checks above pass"))

    # the planner, recomputed
    from minipar.job.config import TrainConfig
    from minipar.perf.hardware import cpu_device
    from minipar.perf.layout import Layout, shape_of
    from minipar.perf.model import estimate

    kw = (ev.get("prediction") or {}).get("cpu_device")
    try:
        tcfg = TrainConfig(**{k: v for k, v in cfg.items() if k in TrainConfig.__dataclass_fields__})
        layout = Layout(dp=dp, tp=tp, pp=pp, micro_batch=tcfg.batch_size // (dp * m), zero=tcfg.zero, recompute="none")
        e = estimate(shape_of(tcfg.gpt(V)), cpu_device(**kw), layout, tcfg.batch_size)
        want = {"mem_predicted_bytes": e.mem["total"], "step_s_predicted": e.time["total"]}
        ok = all(
            isinstance(rep.get(k), (int, float)) and abs(rep[k] - v) <= REL * abs(v) for k, v in want.items()
        ) and bool(rep.get("hardware"))
        what = f"the planner's prediction recomputed for this layout and cpu_device({kw}): {want}"
    except Exception as exc:  # noqa: BLE001 — a missing or bad cpu_device dict
        ok, what = False, f"the planner's prediction: cannot recompute it from cpu_device = {kw!r} ({exc})"
    out.append((ok, what + " — predict() returns its numbers and the cpu_device arguments, report() copies them"))

    # memory, notes
    mem, ranks = rep.get("mem_measured_bytes"), ev.get("ranks") or []
    out.append(
        (
            isinstance(mem, list)
            and len(mem) == world
            and all(isinstance(v, (int, float)) and 0 < v <= r["peak_rss_bytes"] for v, r in zip(mem, ranks)),
            "memory measured on every rank (mem_measured_bytes: one positive number per rank, at most its peak RSS)",
        )
    )
    out.append(
        (len(str(rep.get("notes", ""))) >= 40, "notes: why measurement and prediction differ (a sentence or two)")
    )
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0] if argv else "runs/homework_a")
    out_dir = path.parent if path.suffix == ".json" else path
    if not (out_dir / "report.json").exists():
        print(f"✗ no report in {out_dir}/: run python -m homework.a_train_your_text.job --data YOUR_TEXT.txt first")
        return 1
    try:
        results = check_run(out_dir)
    except Malformed as e:  # metrics.jsonl, read late
        results = [_malformed(out_dir, e)]
    for ok, what in results:
        print(f"{'✓' if ok else '✗'} {what}")
    print(f"{sum(ok for ok, _ in results)}/{len(results)} checks pass")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
