"""``make check`` contains the learner's code (issue #36, item 7): ``sys.exit``/``os._exit`` at import or in an
exercise, an endless loop and a forked process are each reported as what they are, with a verdict and an exit
status that is not 0, and nothing the learner's code started outlives the check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = "from exercises.solutions.ex00_single_device import *  # noqa\n"


def _check(tmp_path, body: str, timeout: float = 150, limit: int = 60) -> subprocess.CompletedProcess:
    """Run the checker on ``body``; ``limit``: its MINIPAR_CHECK_TIMEOUT (seconds), short only where a loop is the
    case (under load, importing torch alone has taken more than 15 s)."""
    (tmp_path / "hostile_ex00.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", OMP_NUM_THREADS="1")
    env["MINIPAR_CHECK_TIMEOUT"] = str(limit)
    cmd = [sys.executable, "-m", "exercises.check", "--lesson", "00", "--module", "hostile_ex00"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "body, says",
    [
        ("import sys\nsys.exit(0)\n", "it called sys.exit(0) at import"),
        ("import os\nos._exit(0)\n", "ended (exit code 0) before it finished: your code ended the process"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed by signal 11 (SIGSEGV)"),
        ("while True:\n    pass\n", "stopped after 15 s: an endless loop"),
        (
            SOLUTION + "import sys\ndef adamw_step(*a, **k):\n    sys.exit(3)\n",
            "✗ adamw_step: your code called sys.exit(3)",
        ),
    ],
)
def test_an_exit_a_crash_or_a_loop_is_reported_not_obeyed(tmp_path, body, says):
    p = _check(tmp_path, body, limit=15 if "while True" in body else 60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert says in p.stdout, p.stdout
    last = p.stdout.splitlines()[-1]
    assert last.startswith("3 exercises: 0 pass") and last.endswith("wrong"), last


def test_a_forked_process_does_not_outlive_the_check(tmp_path):
    pid_file = tmp_path / "child.pid"
    body = SOLUTION + (
        "import os, time\n"
        "if os.fork() == 0:\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
        "    os._exit(0)\n"
    )
    p = _check(tmp_path, body)
    assert p.stdout.splitlines()[-1].startswith("3 exercises:"), p.stdout + p.stderr  # a verdict, then cleaned up
    pid = int(pid_file.read_text())
    for _ in range(50):  # killed with the check's session; gone once its parent reaps it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the learner's forked process {pid} outlived the check")


def test_a_check_timeout_that_is_no_bounded_number_is_one_line():
    """``MINIPAR_CHECK_TIMEOUT=abc`` was float()'s traceback and ``inf`` a check that could wait for ever (every wait
    is bounded): each is one line now, before any lesson runs (:func:`minipar.runtime.dist.env_seconds`)."""
    for raw, says in (("abc", "is not a number of seconds"), ("inf", "must be > 0 and at most 86400 seconds")):
        env = dict(os.environ, PYTHONPATH=ROOT, MINIPAR_CHECK_TIMEOUT=raw)
        cmd = [sys.executable, "-m", "exercises.check", "--lesson", "00"]
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert (
            out.returncode == 2
            and out.stdout.strip() == f"error: MINIPAR_CHECK_TIMEOUT='{raw}' {says}; set e.g. MINIPAR_CHECK_TIMEOUT=60"
            and not out.stderr
        ), (out.stdout, out.stderr)
