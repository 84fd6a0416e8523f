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
