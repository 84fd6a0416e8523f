"""minipar.launch and minipar.runtime.dist on real gloo process groups (bounded timeouts: nothing can hang)."""

import os
import socket
import time

import pytest

from minipar import ConfigError, RankFailedError, launch
from minipar.runtime.rank_process import JobFolder
from minipar.runtime.root_cause import summary
from tests import _workers as w


def test_results_are_ordered_by_rank_and_group_is_ready():
    out = launch(w.rank_info, world_size=4)
    assert [r["rank"] for r in out] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 6.0 for r in out)
    assert all(r["threads"] == 1 for r in out)  # one intra-op thread per rank
    assert all(r["backend"] == "gloo" and r["device"] == "cpu" for r in out)
    assert len({r["pid"] for r in out}) == 4  # real, separate processes


def test_output_is_replayed_in_rank_order(capsys):
    launch(w.rank_info, world_size=3)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[rank {r}] {kind} {r}" for r in range(3) for kind in ("hello from", "stderr line")]


def test_failing_rank_reraises_its_own_exception_with_traceback():
    t = time.time()
    with pytest.raises(ValueError, match=r"\[rank 2\] boom on 2") as info:
        launch(w.fail_on, world_size=4, args=(2,))
    assert "traceback of rank 2" in str(info.value.__cause__)
    assert "fail_on" in str(info.value.__cause__)
    assert time.time() - t < 20  # peers are stopped, not left to time out
    # one line for a terminal (issue #27; the main job prints it, the traceback kept in a file):
    assert summary(info.value) == "rank 2: ValueError: boom on 2 (at tests/_workers.py:31, in fail_on)"


def test_rank_killed_without_exception_is_named():
    with pytest.raises(RankFailedError, match="rank 1 exited with code 3") as info:
        launch(w.exit_on, world_size=3, args=(1,))
    assert info.value.rank == 1 and info.value.exitcode == 3


def test_sys_exit_in_a_rank_keeps_its_exit_code():
    """Before: sys.exit(3) in a rank gave RankFailedError.exitcode 1 (issue: nothing lost, item 8)."""
    with pytest.raises(RankFailedError, match="rank 1 failed") as info:
        launch(w.sys_exit_on, world_size=2, args=(1,))
    assert info.value.rank == 1 and info.value.exitcode == 3
    assert str(info.value) == "rank 1 failed: SystemExit: 3"  # one line, the traceback is its __cause__
    assert "sys_exit_on" in str(info.value.__cause__)


def test_skipped_collective_times_out_instead_of_hanging():
    t = time.time()
    with pytest.raises(RuntimeError):  # RankFailedError naming the rank that skipped it
        launch(w.skip_collective, world_size=2, args=(1,), timeout=3)
    assert time.time() - t < 30


def test_job_timeout_stops_every_rank():
    with pytest.raises(RankFailedError, match="job_timeout"):
        launch(w.sleep_forever, world_size=2, job_timeout=2)


def test_no_process_survives_an_error(tmp_path):
    with pytest.raises(RankFailedError):
        launch(w.write_pid, world_size=2, args=(str(tmp_path / "pid"),), job_timeout=3)
    for r in range(2):
        pid = int((tmp_path / f"pid.{r}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_parent_environment_reaches_ranks(monkeypatch):
    monkeypatch.setenv("MINIPAR_TEST_VALUE", "42")
    assert launch(w.env_value, world_size=2, args=("MINIPAR_TEST_VALUE",)) == ["42", "42"]


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_world_size(bad):
    with pytest.raises(ConfigError, match="world_size"):
        launch(w.rank_info, world_size=bad)


def test_lambda_is_refused_with_advice():
    with pytest.raises(ConfigError, match="module-level function"):
        launch(lambda: 1, world_size=2)


def test_port_in_use_is_one_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} .* already in use"):
            launch(w.rank_info, world_size=2, port=port)


def test_a_killed_launchers_folder_is_removed_by_the_next_launch(tmp_path, monkeypatch):
    """Before: every SIGKILLed launcher left its /tmp/minipar-launch-* folder behind, for good (issue #27)."""
    import signal
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": root}
    code = "from minipar import launch; from tests import _workers as w; launch(w.sleep_forever, world_size=1)"
    p = subprocess.Popen([sys.executable, "-c", code], cwd=root, env=env)
    try:
        end = time.time() + 60
        while not list(tmp_path.glob(f"minipar-launch-{p.pid}-*/rank0.log")) and time.time() < end:
            time.sleep(0.2)
        assert list(tmp_path.glob(f"minipar-launch-{p.pid}-*")), "the launcher made no job folder"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert list(tmp_path.glob(f"minipar-launch-{p.pid}-*"))  # left behind: nobody could remove it
    alive = JobFolder(str(tmp_path))  # a live launcher's folder (this process) is kept
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert launch(w.env_value, world_size=1, args=("RANK",)) == ["0"]
    assert [f.name for f in tmp_path.glob("minipar-launch-*")] == [os.path.basename(alive.name)]
    alive.cleanup()
    assert not list(tmp_path.glob("minipar-launch-*"))


def test_a_wait_that_is_no_bounded_number_of_seconds_is_refused_before_any_rank():
    """``timeout`` and ``job_timeout`` were passed through ``float()``: ``inf`` a job that could wait for ever, a string
    or ``nan`` a traceback inside the store. Each is one :class:`ConfigError` now, before a rank starts."""
    for kw in ({"timeout": float("inf")}, {"timeout": "5"}, {"timeout": True}, {"job_timeout": float("nan")}):
        with pytest.raises(ConfigError, match="must be a number of seconds > 0 and at most 86400"):
            launch(w.write_pid, world_size=2, args=("/nonexistent/pid",), **kw)
