"""Check your exercises on real ranks:  python -m exercises.check [--lesson NN] [--solutions]

(or ``make check`` / ``make check LESSON=02``). For each lesson NN it imports your file
``exercises/exNN_<topic>.py`` (``--solutions``: the reference in ``exercises/solutions/``),
runs the lesson's checks (``exercises/checks/lessonNN.py``) and prints one line per exercise:

    ✓ name: what was covered          the exercise passes every case
    · name: not implemented yet ...   the stub is untouched
    ✗ name: the first wrong value, what was expected, and a hint

Exit status 0 only when every exercise checked passes. Output holds no timings or paths of this
machine, so the reference solutions print the same text everywhere.

Your code runs contained: each lesson's checks run in a child process of their own session
(:func:`run_contained`), so a ``sys.exit``/``os._exit`` in your file, a crash, an endless loop
(stopped after :data:`LESSON_TIMEOUT` seconds, or ``MINIPAR_CHECK_TIMEOUT``) or a process your code
forks is reported as what it is, and nothing your code started outlives the check.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
import traceback

from exercises.checks import common
from exercises.checks.common import Lesson


def lessons() -> dict[str, Lesson]:
    """``{"00": Lesson(...), ...}``: the ``LESSON`` of every ``exercises/checks/lessonNN.py``.

    Raises:
        LookupError: a ``lessonNN.py`` defines no ``LESSON``, or one whose number is not NN; or a rule
            of a lesson names a module that does not exist (raised when the file is imported).
    """
    import exercises.checks as pkg

    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("lesson") and info.name[6:].isdigit():
            lesson = getattr(importlib.import_module(f"exercises.checks.{info.name}"), "LESSON", None)
            if not isinstance(lesson, Lesson) or lesson.number != info.name[6:]:
                raise LookupError(
                    f"exercises/checks/{info.name}.py must define LESSON = Lesson(number={info.name[6:]!r}, ...)"
                )
            found[lesson.number] = lesson
    return dict(sorted(found.items()))


def check_lesson(
    nn: str, module: str | None = None, solutions: bool = False, out=print, only: str | None = None
) -> dict[str, str]:
    """Run lesson ``nn``'s checks on ``module`` (default: the learner's file, or the solution); ``only``:
    just that exercise's (the checker's own tests use it: a mutant is wrong in one exercise).

    Returns ``{exercise name: "pass" | "todo" | "fail"}``; prints one line per exercise via ``out``.
    """
    lesson = lessons()[nn]
    name = module or (f"exercises.solutions.{lesson.module}" if solutions else f"exercises.{lesson.module}")
    out(f"lesson {nn} · {lesson.title}  ({'reference solution' if solutions else name.replace('.', '/') + '.py'})")
    status = {}
    try:
        mod = importlib.import_module(name)
    except SystemExit as exc:
        out(f"  ✗ cannot import {name}: it called sys.exit({exc.code!r}) at import; remove that call")
        return {ex: "fail" for ex, _ in lesson.checks}
    except Exception as exc:  # noqa: BLE001 - a syntax error in the learner's file
        out(f"  ✗ cannot import {name}: {type(exc).__name__}: {exc}")
        return {ex: "fail" for ex, _ in lesson.checks}
    for ex, fn in lesson.checks:
        if only is not None and ex != only:
            continue
        try:
            summary = fn(mod)
            out(f"  ✓ {ex}: {summary}")
            status[ex] = "pass"
        except common.NotDone as exc:
            msg = str(exc)
            out(f"  · {ex}: {msg if msg.startswith('not implemented yet') else 'not implemented yet: ' + msg}")
            status[ex] = "todo"
        except common.CheckFailed as exc:
            out(f"  ✗ {ex}: {exc}")
            status[ex] = "fail"
        except SystemExit as exc:  # a BaseException: the learner's function called sys.exit
            out(f"  ✗ {ex}: your code called sys.exit({exc.code!r}); return a value or raise an exception instead")
            status[ex] = "fail"
        except Exception as exc:  # noqa: BLE001 - never crash: report and go on
            out(
                f"  ✗ {ex}: the check stopped on {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exc().splitlines(True)[-4:])
            )
            status[ex] = "fail"
    return status


LESSON_TIMEOUT = 900.0  # seconds for one lesson's checks, all cases (the slowest takes about a minute)
STATUS = "@@minipar-check-status "  # the contained child's last line: its {exercise: status} as JSON


def _why_it_ended(code: int) -> str:
    """Why a contained check process that printed no status ended, from its exit code."""
    if code >= 0:
        return (
            f"the check process ended (exit code {code}) before it finished: your code ended the process "
            "(os._exit, or sys.exit in a rank or a thread); remove that call"
        )
    return f"the check process was killed by signal {-code} ({signal.Signals(-code).name}): a crash in your code?"


def run_contained(nn: str, module: str | None, solutions: bool, names: list[str], timeout: float) -> dict[str, str]:
    """Run lesson ``nn``'s checks in a child process in a session of its own; stream its lines; return its status.

    The child is this module with ``--in-process``. If it ends without its status line (your code called
    ``os._exit``, or crashed) or outlives ``timeout`` seconds (an endless loop), every exercise of the lesson
    not yet reported is ``"fail"``, with the reason printed. Then the whole session is killed: a process
    your code forked, and the ranks' fork server, do not outlive the check.
    """
    cmd = [sys.executable, "-m", "exercises.check", "--in-process", "--lesson", nn]
    cmd += (["--solutions"] if solutions else []) + (["--module", module] if module else [])
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, bufsize=1
    )
    status: dict[str, str] = {}

    def pump():
        for line in proc.stdout:
            if line.startswith(STATUS):
                status.update(json.loads(line[len(STATUS) :]))
            else:
                print(line, end="", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
        why = None if status else _why_it_ended(code)
    except subprocess.TimeoutExpired:
        why = f"stopped after {timeout:g} s: an endless loop, or a wait that never ends, in your code?"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the child, what it forked, its ranks: the whole session
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        reader.join(timeout=5)
    if why is not None:
        print(f"  ✗ lesson {nn}: {why}", flush=True)
        status = {ex: status.get(ex, "fail") for ex in names}
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exercises.check", description=__doc__.splitlines()[0])
    ap.add_argument("--lesson", "-l", action="append", help="lesson number, e.g. 02 (repeatable; default: all)")
    ap.add_argument("--solutions", action="store_true", help="check the reference solutions instead of your files")
    ap.add_argument("--module", help="check this module instead (one lesson; used by the checker's own tests)")
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # the contained child itself
    a = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    known = lessons()
    chosen = [n.zfill(2) for n in (a.lesson or known)]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        print(f"no checks for lesson(s) {unknown}; use --lesson with one of {list(known)}")
        return 2
    if a.in_process:  # the child of run_contained: one lesson, its status as the last line
        status = check_lesson(chosen[0], a.module, a.solutions)
        print(STATUS + json.dumps(status), flush=True)
        os._exit(0)  # nothing the learner's code left behind (threads, atexit) may hold the child
    from minipar.errors import ConfigError
    from minipar.runtime.dist import env_seconds

    try:
        timeout = env_seconds("MINIPAR_CHECK_TIMEOUT", LESSON_TIMEOUT)  # a number of seconds, bounded
        env_seconds("MINIPAR_TIMEOUT", common.TIMEOUT_S)  # the ranks' group timeout, read again in each lesson
    except ConfigError as e:
        print(f"error: {e}")
        return 2
    counts = {"pass": 0, "todo": 0, "fail": 0}
    for nn in chosen:
        names = [ex for ex, _ in known[nn].checks]
        for s in run_contained(nn, a.module, a.solutions, names, timeout).values():
            counts[s] += 1
    total = sum(counts.values())
    print(f"{total} exercises: {counts['pass']} pass, {counts['todo']} not implemented yet, {counts['fail']} wrong")
    return 0 if counts["pass"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
