"""Errors minipar raises for bad input, so a learner sees one clear line instead of a deep stack.

Every message names the offending value and the fix (``tests/test_faults.py`` checks them).
"""


class ConfigError(ValueError):
    """A bad setting: wrong world size, a shape not divisible by a parallel degree, a bad path...

    Subclasses ``ValueError`` so ``except ValueError`` in user code still catches it.
    """


class NonFiniteLossError(ConfigError):
    """The training loss became inf or NaN: the run stops at that step, before it is logged or
    checkpointed, naming the step, the last finite loss and what to change (a setting: hence a
    :class:`ConfigError`, reported in one line by ``python -m minipar.train``).
    """


class RankFailedError(RuntimeError):
    """A launched rank died without a Python exception we could re-raise (killed, segfault, exit code).

    Attributes:
        rank: the rank that failed first.
        exitcode: its process exit code (negative = killed by that signal).
    """

    def __init__(self, message: str, rank: int, exitcode: int | None):
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read (a damaged shard, a read-only folder, a crafted file).

    PyTorch's DCP raises ``CheckpointException``, a ``BaseException`` that ``except Exception`` misses;
    :mod:`minipar.checkpoint.dcp` turns it into this, naming the folder and each failing rank's error in
    one line each (the whole DCP report stays on ``__cause__``).
    """


# The largest integer setting a command line takes (--gpus, --hidden, --moe-experts, --d-model, ...): more than any run
# or model has, and small enough that a divisor list or a count over it (O(√n) steps: minipar.runtime.mesh.divisors)
# answers at once; a fuzzer's --gpus 99999999999999999999 ran for ever before this bound.
MAX_SETTING = 10**10


def check_magnitudes(settings: dict, skip: tuple[str, ...] = ()) -> None:
    """Raise :class:`ConfigError` (one line) for an integer setting beyond ±:data:`MAX_SETTING`; ``settings`` maps a
    flag's name (``gpus_per_node``) to its parsed value, ``skip`` names those with no such bound (``python -m
    minipar.plan`` after parsing; ``python -m minipar.train`` checks the same bound as argparse parses each value,
    :func:`minipar.job.cli.parser`)."""
    for name, v in settings.items():
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_SETTING and name not in skip:
            raise ConfigError(
                f"--{name.replace('_', '-')} {v}: beyond {MAX_SETTING:,}, more than any run or model has; "
                f"give a value up to {MAX_SETTING:,}"
            )
