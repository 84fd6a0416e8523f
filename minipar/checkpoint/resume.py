"""Which checkpoint ``--resume`` loads, and whether it fits this run: checked before any rank starts.

A checkpoint folder (:mod:`minipar.checkpoint.dcp`) holds DCP's ``.metadata`` (every tensor's global
shape, and where each piece lies in which shard file), the shard files ``__R_0.distcp`` and
``minipar.json`` (the model shape, vocabulary and layout it was written with).

- :func:`newest_good`: the newest checkpoint that is not damaged (:func:`damage`: an unreadable
  ``.metadata``, a shard file missing or shorter than the metadata says, a ``minipar.json`` that is
  not a JSON object). The damaged newer ones are returned too, to be reported by file name.
- :func:`check_resume`: the chosen checkpoint against this run: its ``minipar.json`` first (which
  names the flag that differs), then its tensors' names and shapes against this model's, also when
  ``minipar.json`` is missing: a checkpoint of another model is refused, never loaded in part.
"""

from __future__ import annotations

import os

import torch

from minipar.checkpoint import dcp as ckpt
from minipar.checkpoint.reader import read_metadata_file
from minipar.errors import ConfigError
from minipar.model.gpt import GPT, GPTConfig

SHAPE = ("n_layer", "n_head", "d_model", "block_size")  # the settings a checkpoint only fits


def _metadata(path: str):
    return read_metadata_file(os.path.join(path, ".metadata"))  # no code from the folder runs


def damage(path: str) -> str | None:
    """What is wrong with checkpoint folder ``path`` (``"FILE is …"``), or None if it looks whole.

    Reads the metadata and the sizes of the shard files only (not the tensors).
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
        ckpt.read_meta(path)
    except ValueError as e:
        return f"{ckpt.META} is not a JSON object ({str(e)[:80]})"
    return None


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
    for key in SHAPE:
        if saved and key in saved and saved[key] != mine[key]:
            flag = "--" + key.replace("_", "-")
            raise ConfigError(
                f"--resume: checkpoint {path} was saved with {flag} {saved[key]}, this run has "
                f"{flag} {mine[key]}; resume with {flag} {saved[key]}, or use another --ckpt-dir"
            )
    if saved and "vocab" in saved and saved["vocab"] != mine["vocab"]:
        raise ConfigError(
            f"--resume: checkpoint {path} was trained on another corpus (--data {saved.get('data') or 'default'}, "
            f"{len(saved['vocab'])} distinct characters; this one: {len(mine['vocab'])}); resume with "
            f"--data {saved.get('data') or '(none: the built-in corpus)'}, or use another --ckpt-dir"
        )
    _tensors_fit(path, cfg, corpus.vocab_size)
    return step
