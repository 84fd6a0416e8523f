"""Check your exercises on real ranks:  python -m exercises.check [--lesson NN] [--solutions]

(or ``make check`` / ``make check LESSON=02``). For each lesson NN it imports your file
``exercises/exNN_<topic>.py`` (``--solutions``: the reference in ``exercises/solutions/``),
runs the lesson's checks (``exercises/checks/lessonNN.py``) and prints one line per exercise:

    ✓ name: what was covered          the exercise passes every case
    · name: not implemented yet ...   the stub is untouched
    ✗ name: the first wrong value, what was expected, and a hint

Exit status 0 only when every exercise checked passes. Output holds no timings or paths of this
machine, so the reference solutions print the same text everywhere.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
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
        except Exception as exc:  # noqa: BLE001 - never crash: report and go on
            out(
                f"  ✗ {ex}: the check stopped on {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exc().splitlines(True)[-4:])
            )
            status[ex] = "fail"
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exercises.check", description=__doc__.splitlines()[0])
    ap.add_argument("--lesson", "-l", action="append", help="lesson number, e.g. 02 (repeatable; default: all)")
    ap.add_argument("--solutions", action="store_true", help="check the reference solutions instead of your files")
    ap.add_argument("--module", help="check this module instead (one lesson; used by the checker's own tests)")
    a = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    known = lessons()
    chosen = [n.zfill(2) for n in (a.lesson or known)]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        print(f"no checks for lesson(s) {unknown}; use --lesson with one of {list(known)}")
        return 2
    counts = {"pass": 0, "todo": 0, "fail": 0}
    for nn in chosen:
        for s in check_lesson(nn, a.module, a.solutions).values():
            counts[s] += 1
        sys.stdout.flush()
    total = sum(counts.values())
    print(f"{total} exercises: {counts['pass']} pass, {counts['todo']} not implemented yet, {counts['fail']} wrong")
    return 0 if counts["pass"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
