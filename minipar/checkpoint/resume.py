"""Which checkpoint ``--resume`` loads, and whether it fits this run: checked before any rank starts.

A checkpoint folder (:mod:`minipar.checkpoint.dcp`) holds DCP's ``.metadata`` (every tensor's global
shape, and where each piece lies in which shard file), the shard files ``__R_0.distcp`` and
``minipar.json`` (the model shape, vocabulary and layout it was written with).

- :func:`newest_good`: the newest checkpoint that is not damaged (:func:`damage`: an unreadable
  ``.metadata``, a shard file missing or shorter than the metadata says, a ``minipar.json`` missing or
  not a JSON object, a file whose size or SHA-256 differs from the one recorded at save). The damaged
  newer ones are returned too, to be reported by file name.
- :func:`check_run`: the step a run starts at and its run id. A fresh run (no ``--resume``) is refused a
  ``--ckpt-dir`` that already holds checkpoints (they would mix with its own); ``--resume`` is refused a
  folder holding checkpoints of two runs, and continues the id of the one it loads.
- :func:`check_resume`: the chosen checkpoint against this run: its ``minipar.json`` first (which
  names the flag that differs), then its tensors' names and shapes against this model's, also when
  ``minipar.json`` is missing: a checkpoint of another model is refused, never loaded in part.
"""

from __future__ import annotations

import os
import re
import uuid

import torch

from minipar.checkpoint import dcp as ckpt
from minipar.checkpoint.manifest import mismatch
from minipar.checkpoint.reader import read_metadata_file
from minipar.errors import ConfigError
from minipar.model.gpt import GPT, GPTConfig

SHAPE = ("n_layer", "n_head", "d_model", "block_size")  # the settings a checkpoint only fits


def _metadata(path: str):
    return read_metadata_file(os.path.join(path, ".metadata"))  # no code from the folder runs


def damage(path: str) -> str | None:
    """What is wrong with checkpoint folder ``path`` (``"FILE is …"``), or None if it looks whole.

    Reads the metadata and the sizes of the shard files, then checks every file against the size and
    SHA-256 recorded in ``minipar.json`` at save (:mod:`minipar.checkpoint.manifest`); a checkpoint without
    ``minipar.json`` (or its checksums) is damaged too: nothing could say which run it belongs to.
    """
    try:
        meta = _metadata(path)
    except Exception as e:  # empty, cut or garbage: unpickling fails in many ways
        return f".metadata is unreadable ({type(e).__name__}: {str(e)[:80] or 'empty'})"
    need: dict[str, int] = {}
    for info in meta.storage_data.values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(need.items()):
        try:
            have = os.path.getsize(os.path.join(path, name))
        except OSError:
            return f"{name} is missing"
        if have < size:
            return f"{name} is truncated ({have} of {size} bytes)"
    try:
        meta = ckpt.read_meta(path)
    except (ValueError, UnicodeDecodeError) as e:
        return f"{ckpt.META} is not a JSON object ({str(e)[:80]})"
    if meta is None:
        return f"{ckpt.META} is missing (the record of the run and of its files' checksums)"
    if "files" not in meta:
        return f"{ckpt.META} holds no checksums of the files (saved by an older minipar)"
    return mismatch(path, meta["files"])


def newest_good(ckpt_dir: str | None) -> tuple[str | None, list[str]]:
    """``(the newest undamaged checkpoint or None, ["step_NNNNNNNN/FILE is …" for each newer damaged one])``."""
    found, path = [], ckpt.latest(ckpt_dir)
    while path is not None:
        why = damage(path)
        if why is None:
            return path, found
        found.append(f"{os.path.basename(path)}/{why}")
        path = ckpt.latest(ckpt_dir, before=ckpt.step_of(path))
    return None, found


def expected_tensors(gpt: GPTConfig) -> dict[str, tuple[int, ...]]:
    """The logical model tensors a checkpoint of this model holds, ``{name: shape}`` (no memory used):
    the single-device GPT's parameters, ``qkv`` as its ``.q``/``.k``/``.v`` thirds."""
    with torch.device("meta"):
        model = GPT(gpt)
    out = {}
    for name, p in model.named_parameters():
        if name.endswith(("attn.qkv.weight", "attn.qkv.bias")):
            out.update({f"{name}.{k}": (p.shape[0] // 3, *p.shape[1:]) for k in "qkv"})
        else:
            out[name] = tuple(p.shape)
    return out


def _tensors_fit(path: str, cfg, vocab_size: int) -> None:
    """Raise :class:`ConfigError` naming the first setting (or tensor) of checkpoint ``path`` that differs."""
    saved = {
        k[len("model.") :]: tuple(v.size)
        for k, v in _metadata(path).state_dict_metadata.items()
        if k.startswith("model.") and hasattr(v, "size")
    }
    mine = expected_tensors(cfg.gpt(vocab_size))
    if saved == mine:
        return
    fix = "or use another --ckpt-dir"
    layers = 1 + max((int(k.split(".")[1]) for k in saved if k.startswith("blocks.")), default=-1)
    wte, wpe = saved.get("wte.weight"), saved.get("wpe.weight")
    inferred = [("--n-layer", layers, cfg.n_layer)]
    if wpe:
        inferred += [("--block-size", wpe[0], cfg.block_size), ("--d-model", wpe[1], cfg.d_model)]
    for flag, theirs, ours in inferred:
        if theirs != ours:
            raise ConfigError(
                f"--resume: the tensors of checkpoint {path} are of a model with {flag} {theirs}, this run has "
                f"{flag} {ours}; resume with {flag} {theirs}, {fix}"
            )
    if wte and wte[0] != vocab_size:
        raise ConfigError(
            f"--resume: checkpoint {path} was trained on a corpus of {wte[0]} distinct characters, this --data has "
            f"{vocab_size}; resume with the --data it was trained on, {fix}"
        )
    name = sorted(set(saved) ^ set(mine) or {k for k in mine if saved[k] != mine[k]})[0]
    theirs = saved.get(name, "no such tensor")
    raise ConfigError(
        f"--resume: checkpoint {path} does not fit this model: tensor {name} is {theirs} there, "
        f"{mine.get(name, 'no such tensor')} here; resume with the settings it was saved with, {fix}"
    )


def check_resume(cfg, corpus) -> int:
    """The step ``--resume`` starts at (0 when ``cfg.ckpt_dir`` holds no complete checkpoint).

    ``cfg``: a :class:`minipar.job.config.TrainConfig`; ``corpus``: its :class:`minipar.data.CharCorpus`.
    Raises:
        ConfigError: every checkpoint there is damaged; the newest good one is already past
        ``--steps``, or was saved by a run with another model shape or corpus (the message names
        the setting; without ``minipar.json``, read from the tensors' shapes).
    """
    path, damaged = newest_good(cfg.ckpt_dir)
    if path is None:
        if damaged:
            raise ConfigError(
                f"--resume: no undamaged checkpoint in {cfg.ckpt_dir} ({'; '.join(damaged)}); delete "
                "the damaged step folders to start from step 0, or use another --ckpt-dir"
            )
        return 0
    step = ckpt.step_of(path)
    if step > cfg.steps:
        raise ConfigError(
            f"--resume: the newest checkpoint in {cfg.ckpt_dir} is at step {step}, already past "
            f"--steps {cfg.steps}; use --steps {step} or more to go on from it, or another --ckpt-dir"
        )
    saved, mine = ckpt.read_meta(path), cfg.meta(corpus)
    for key in (*SHAPE, "moe_experts"):
        if key in saved and saved[key] != mine[key]:
            _differs(path, key, saved[key], mine[key])
    if saved and "vocab" in saved and saved["vocab"] != mine["vocab"]:
        raise ConfigError(
            f"--resume: checkpoint {path} was trained on another corpus (--data {saved.get('data') or 'default'}, "
            f"{len(saved['vocab'])} distinct characters; this one: {len(mine['vocab'])}); resume with "
            f"--data {saved.get('data') or '(none: the built-in corpus)'}, or use another --ckpt-dir"
        )
    _tensors_fit(path, cfg, corpus.vocab_size)
    for key in RECORD + (("moe_top_k",) if cfg.moe_experts else ()):
        if key not in saved:
            raise ConfigError(
                f"--resume: checkpoint {path} does not record its {_flag(key)} (saved by an older minipar, or its "
                f"{ckpt.META} edited), so this run cannot be checked against it; start afresh with another --ckpt-dir"
            )
        if saved[key] != mine[key]:
            _differs(path, key, saved[key], mine[key])
    return step


RECORD = ("seed", "batch_size", "data_sha256")  # with SHAPE: what decides the run's trajectory (--resume keeps it)


def _flag(key: str) -> str:
    return "--data" if key == "data_sha256" else "--" + key.replace("_", "-")


def _differs(path: str, key: str, theirs, ours) -> None:
    """Raise :class:`ConfigError`: checkpoint ``path`` was saved with another value of ``key``'s flag."""
    if key == "data_sha256":
        raise ConfigError(
            f"--resume: checkpoint {path} was trained on other text (a --data file whose contents have SHA-256 "
            f"{str(theirs)[:12]}…, this run's has {ours[:12]}…); resume with the --data it was trained on, "
            "or use another --ckpt-dir"
        )
    flag = _flag(key)
    raise ConfigError(
        f"--resume: checkpoint {path} was saved with {flag} {theirs}, this run has {flag} {ours}; "
        f"resume with {flag} {theirs}, or use another --ckpt-dir"
    )


_ANY_STEP = re.compile(r"^step_\d{8}(\.nonfinite)?$")  # a checkpoint folder, complete or moved aside


def _runs(ckpt_dir: str) -> dict[str, list[str]]:
    """``{run id: [its checkpoint folders' names]}`` of the complete checkpoints in ``ckpt_dir`` that record one."""
    runs: dict[str, list[str]] = {}
    for name in sorted(os.listdir(ckpt_dir)):
        if ckpt._STEP_DIR.match(name):
            try:
                run = (ckpt.read_meta(os.path.join(ckpt_dir, name)) or {}).get("run_id")
            except (OSError, ValueError, UnicodeDecodeError):
                continue  # damaged: newest_good names it
            if isinstance(run, str):
                runs.setdefault(run, []).append(name)
    return runs


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check_run(cfg, corpus) -> tuple[int, str]:
    """``(the step the run starts at, its run id)``, recorded in every checkpoint it saves.

    A fresh run gets a new id; ``--resume`` continues the id of the checkpoint it loads
    (:func:`check_resume`). ``cfg``, ``corpus``: as :func:`check_resume`.
    Raises:
        ConfigError: a fresh run that saves checkpoints (``--ckpt-every``) into a ``--ckpt-dir`` that already
        holds some (another run's: they would be overwritten or mixed with this one's); ``--resume`` in a
        folder holding checkpoints of two runs; anything :func:`check_resume` raises.
    """
    folder = cfg.ckpt_dir
    if not cfg.resume:
        held = (
            sorted(n for n in os.listdir(folder) if _ANY_STEP.match(n))
            if cfg.ckpt_every and os.path.isdir(folder)
            else []
        )
        if held:
            raise ConfigError(
                f"--ckpt-dir {folder} already holds another run's checkpoints ({_names(held)}), which this fresh run "
                "would overwrite or mix with its own; add --resume to go on from them, use another --ckpt-dir "
                "(or --out), or remove them"
            )
        return 0, uuid.uuid4().hex[:12]
    runs = _runs(folder) if os.path.isdir(folder) else {}
    if len(runs) > 1:
        which = "; ".join(f"run {r}: {_names(n)}" for r, n in sorted(runs.items(), key=lambda x: x[1]))
        raise ConfigError(
            f"--resume: --ckpt-dir {folder} holds checkpoints of {len(runs)} different runs ({which}); "
            "move the other runs' step folders away, or use another --ckpt-dir"
        )
    start = check_resume(cfg, corpus)
    return start, next(iter(runs)) if runs and start else uuid.uuid4().hex[:12]
