"""What every lesson's checks share: verdicts, running a worker on real gloo ranks, comparisons.

A check is a function ``check(mod) -> str``: ``mod`` is the learner's module (or the reference
solution, or a deliberately wrong one in the tests). It returns a one-line summary of what it
covered when everything holds, and raises:

- :class:`NotDone` when the learner's code still raises ``NotImplementedError("not implemented yet: ...")``;
- :class:`CheckFailed` with the *first* wrong value and a hint pointing at the lesson.

Workers run on real ranks through :func:`minipar.launch` under a short group timeout
(``MINIPAR_TIMEOUT``, default :data:`TIMEOUT_S` here), so a send without its matching receive
ends in seconds, and :func:`run_ranks` names the ranks that waited.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from exercises.checks.watch import Refuse

TIMEOUT_S = 10.0  # the checker's process-group timeout (seconds) unless MINIPAR_TIMEOUT is set
EXACT = 1e-12  # float64 bound for results that are the same arithmetic reordered (see minipar.course.verify)


@dataclass(frozen=True)
class Lesson:
    """One lesson's exercises: what ``exercises/checks/lessonNN.py`` defines once (as ``LESSON``) and
    the checker (``exercises/check.py``), ``make_stubs``, ``your_turn`` and the tests read.

    Attributes:
        number: the lesson's two digits, ``"02"`` (its notebook is ``lessons/02_*.ipynb``).
        title: the checker's heading for the lesson (``"data parallel"``).
        module: the exercise file's module name, ``"ex02_data_parallel"``: the learner's
            ``exercises/ex02_data_parallel.py``, the reference ``exercises/solutions/ex02_data_parallel.py``.
        checks: ``((exercise name, check), ...)`` in the order they run; ``check(mod) -> str`` takes
            the learner's module and returns a one-line summary, or raises NotDone / CheckFailed.
        rules: every :class:`~exercises.checks.watch.Refuse` its checks apply (what the exercises
            may not call); each resolved its names when built, so a moved module fails at import.
    """

    number: str
    title: str
    module: str
    checks: tuple[tuple[str, Callable[[object], str]], ...]
    rules: tuple[Refuse, ...]

    @property
    def file(self) -> str:
        """The exercise file's name, ``"ex02_data_parallel.py"`` (in ``exercises/`` and ``exercises/solutions/``)."""
        return f"{self.module}.py"


class NotDone(Exception):
    """The exercise still raises ``NotImplementedError`` (the untouched stub)."""


class CheckFailed(AssertionError):
    """The first wrong value, what was expected, and a hint."""


def timeout_s() -> float:
    """The ranks' group timeout: ``MINIPAR_TIMEOUT`` seconds (up to a day: checked first by ``exercises.check``), else
    :data:`TIMEOUT_S`."""
    from minipar.runtime.dist import env_seconds

    return env_seconds("MINIPAR_TIMEOUT", TIMEOUT_S)


def load(name: str):
    """Import a module by name (fresh enough: the learner edits files between runs, one process per run)."""
    return importlib.import_module(name)


def _where(tb_text: str) -> str:
    """The last frame of a traceback that lies in an exercise file (``file:line``), or ''; never the checker's own
    frames (``exercises/checks/``), which may run under the learner's code (the watch's dispatch mode)."""
    lines = [ln.strip() for ln in tb_text.splitlines() if ln.strip().startswith('File "')]
    for ln in reversed(lines):
        if "/exercises/checks/" in ln:
            continue
        if "/exercises/" in ln or "exercise" in ln or "/tests/" in ln:
            path = ln.split('"')[1]
            line = ln.split("line ")[1].split(",")[0] if "line " in ln else "?"
            return f"{os.path.relpath(path)}:{line}"
    return ""


def call(what: str, fn, *args, **kwargs):
    """Run the learner's ``fn`` in this process: NotImplementedError -> NotDone, any error -> CheckFailed."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        raise NotDone(str(exc) or what) from None
    except (NotDone, CheckFailed):
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's bug, reported as a failure
        where = _where(traceback.format_exc())
        raise CheckFailed(f"{what} raised {type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")) from None


# ----------------------------------------------------------------------------- real ranks
def _guard(worker, args):
    """Runs on every rank: call ``worker(*args)`` and turn any exception into a value, so the
    parent hears from every rank (who raised, who timed out) instead of only the first failure."""
    try:
        return ("ok", worker(*args))
    except NotImplementedError as exc:
        return ("todo", str(exc))
    except Exception as exc:  # noqa: BLE001
        text = re.sub(r"\[/[^\]]*\] ?", "", f"{type(exc).__name__}: {exc}")  # gloo's source paths
        timed_out = any(
            s in text
            for s in (
                "imed out",
                "Timeout",
                "timeout",
                "closed by peer",
                "reset by peer",
                "got no message",
                "could not deliver",
            )
        )
        cut = 700 if type(exc).__module__.startswith("exercises.checks") else 300  # a check's own words: keep them
        return ("timeout" if timed_out else "error", text.splitlines()[0][:cut], _where(traceback.format_exc()))


def run_ranks(worker, world_size: int, args=(), what: str = "") -> list:
    """Run ``worker(*args)`` on ``world_size`` gloo ranks; return every rank's value (rank order).

    Raises:
        NotDone: a rank hit the stub's NotImplementedError.
        CheckFailed: a rank raised (its message and the line in the exercise file), or ranks waited
            past the group timeout (named, with the likely cause), or the job did not end.
    """
    from minipar import launch
    from minipar.errors import RankFailedError

    t = timeout_s()
    os.environ["MINIPAR_TIMEOUT"] = f"{t:g}"  # sub-groups (minipar.runtime.dist.new_group) get the same short timeout
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            results = launch(
                _guard, world_size=world_size, args=(worker, tuple(args)), timeout=t, job_timeout=min(3 * t + 60, 86400)
            )
    except RankFailedError as exc:
        raise CheckFailed(
            f"{what}: the ranks did not end ({exc}); a rank that never returns is waiting "
            "for a message or a collective its peers never issue"
        ) from None
    todo = [r for r, v in enumerate(results) if v[0] == "todo"]
    if todo:
        raise NotDone(results[todo[0]][1])
    errors = [(r, v) for r, v in enumerate(results) if v[0] == "error"]
    if errors:
        r, v = errors[0]
        # a check's own words stand alone; anything else is what the rank raised
        said = v[1][len("CheckFailed: ") :] if v[1].startswith("CheckFailed: ") else f"raised {v[1]}"
        raise CheckFailed(f"{what}: rank {r}: {said}" + (f" (at {v[2]})" if v[2] else "") + _tail(out.getvalue()))
    waited = [r for r, v in enumerate(results) if v[0] == "timeout"]
    if waited:
        done = [r for r in range(world_size) if r not in waited]
        raise CheckFailed(
            f"{what}: rank(s) {waited} waited {t:g} s for a message or collective that never came"
            + (f" (rank(s) {done} had already returned)" if done else "")
            + f": every send needs the matching recv on the peer, and every rank of a group must make the same "
            f"calls in the same order. First message: rank {waited[0]}: {results[waited[0]][1]}"
        )
    return [v[1] for v in results]


def _tail(text: str, n: int = 8) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return ("\n      output of the ranks (last lines):\n      " + "\n      ".join(lines[-n:])) if lines else ""


# ----------------------------------------------------------------------------- comparisons
def max_diff(a, b) -> float:
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    if a.shape != b.shape:
        return float("inf")
    return (a - b).abs().max().item() if a.numel() else 0.0


def first_wrong(got: torch.Tensor, want: torch.Tensor, bound: float = EXACT):
    """Index (flat) of the first element of ``got`` off ``want`` by ``bound`` or more, or None."""
    g, w = got.reshape(-1).double(), want.reshape(-1).double()
    bad = ((g - w).abs() >= bound) | g.isnan()
    idx = bad.nonzero()
    return None if idx.numel() == 0 else int(idx[0])


def expect_close(what: str, got, want, bound: float = EXACT, hint: str = "") -> None:
    """Raise CheckFailed naming the first wrong element: shape first, then values (float64 bound)."""
    if got is None:
        raise CheckFailed(
            f"{what}: got None, expected a tensor of shape {tuple(torch.as_tensor(want).shape)}"
            + (f". {hint}" if hint else "")
        )
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    if tuple(got.shape) != tuple(want.shape):
        raise CheckFailed(
            f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}" + (f". {hint}" if hint else "")
        )
    i = first_wrong(got, want, bound)
    if i is not None:
        pos = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), want.shape)) if want.dim() > 1 else i
        raise CheckFailed(
            f"{what}: element {pos} is {got.reshape(-1)[i].item():.6g}, expected "
            f"{want.reshape(-1)[i].item():.6g} (bound {bound:g}, float64)" + (f". {hint}" if hint else "")
        )
