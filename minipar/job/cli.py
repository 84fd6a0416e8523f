"""The command line of ``python -m minipar.train``, made from :class:`~minipar.job.config.TrainConfig`'s fields.

Every setting is written once, as a field of ``TrainConfig`` with its default and, in the field's metadata,
its help text (and choices): :func:`parser` builds the argparse parser from ``dataclasses.fields(TrainConfig)``
(torchtitan's ``ConfigManager`` does the same from its job-config dataclasses), so a new setting is one new field.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing

from minipar.errors import MAX_SETTING, ConfigError
from minipar.job.config import SECTIONS, TrainConfig, fields_of


class _Help(argparse.HelpFormatter):
    """Appends ``(default: X)`` to a flag's help unless the help already speaks of its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            action.option_strings
            and not any(action.default is v for v in (None, False, argparse.SUPPRESS))
            and "default" not in text
        ):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like every other bad setting (see minipar.train.main)
        raise ConfigError(f"{message} (see python -m minipar.train --help)")


DESCRIPTION = "The main job: train the small GPT on real text, on one device or a (pp, dp, tp) mesh of ranks."
LAUNCH_FLAGS = {  # how to start the ranks: flags of the command, not settings of the run
    "nproc": "ranks started with minipar.launch (default dp·tp·pp; ignored under torchrun)",
    "threads": "intra-op threads per rank (default: all cores for one rank, 1 per rank otherwise)",
}


def _bounded(text: str) -> int:
    """An integer flag's value within ±:data:`minipar.errors.MAX_SETTING` (argparse's ``type``: its message is one line,
    ``argument --n-head: ...``); beyond it a divisor list of the value would run for ever."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if abs(v) > MAX_SETTING:
        raise argparse.ArgumentTypeError(f"{v} is beyond {MAX_SETTING:,}, more than any run or model has")
    return v


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m minipar.train``: one flag per :class:`TrainConfig` field
    (``--n-layer`` for ``n_layer``; type, default, help and choices from the field), listed by section
    (:data:`~minipar.job.config.SECTIONS`), then :data:`LAUNCH_FLAGS` (integers, default None)."""
    p = _Parser(prog="python -m minipar.train", description=DESCRIPTION, formatter_class=_Help)
    hints = typing.get_type_hints(TrainConfig)
    for section in SECTIONS:
        group = p.add_argument_group(section)
        for f in fields_of(section):
            flag, kw = "--" + f.name.replace("_", "-"), {"default": f.default, "help": f.metadata["help"]}
            if hints[f.name] is bool:
                group.add_argument(flag, action="store_true", **kw)
                continue
            kind = next(t for t in (int, float, str) if t in (hints[f.name], *typing.get_args(hints[f.name])))
            kind = _bounded if kind is int and f.name != "seed" else kind  # a seed: its own bound, 2³²−1
            group.add_argument(flag, type=kind, choices=f.metadata.get("choices"), **kw)
    launch = p.add_argument_group("launch")
    for name, help in LAUNCH_FLAGS.items():
        launch.add_argument(f"--{name}", type=_bounded, default=None, help=help)
    return p


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """``(TrainConfig, namespace)`` from a command line (the namespace also holds :data:`LAUNCH_FLAGS`).

    ``--ckpt-dir`` defaults to ``OUT/ckpt`` when ``--ckpt-every`` or ``--resume`` is given. The settings are
    checked by :func:`minipar.job.config.check` (all of them, once), not here.
    Raises:
        ConfigError: an unknown flag, a value of the wrong type or not among a flag's choices (one line,
        argparse's message); an integer beyond :data:`minipar.errors.MAX_SETTING`; a launch flag < 1; ``--threads``
        above this machine's cores.
    """
    a = parser().parse_args(argv)
    for name in LAUNCH_FLAGS:
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise ConfigError(
                f"--{name} {getattr(a, name)}: must be an integer >= 1 (or left out: {LAUNCH_FLAGS[name]})"
            )
    cores = os.cpu_count() or 1
    if a.threads is not None and a.threads > cores:
        raise ConfigError(
            f"--threads {a.threads}: more intra-op threads per rank than this machine's {cores} cores; "
            f"use --threads {cores} or less"
        )
    cfg = TrainConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(TrainConfig)})
    if not cfg.ckpt_dir:
        ckpt_dir = os.path.join(cfg.out, "ckpt") if cfg.out and (cfg.ckpt_every or cfg.resume) else None
        cfg = dataclasses.replace(cfg, ckpt_dir=ckpt_dir)
    return cfg, a
