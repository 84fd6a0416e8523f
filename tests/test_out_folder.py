"""The main job's folders under misuse (issue #27: nothing lost, nothing silent): one run per ``--out``,
outputs replaced all together or not at all, unusable folders refused before any rank starts, and a
failure in one line with its traceback kept.

Before: two runs on one ``--out`` both trained and crashed on an interleaved ``metrics.jsonl``; a run
that failed late left its ``metrics.jsonl`` beside the previous run's sample and config; an ``--out``
that is a file failed with a traceback after the ranks started; a rank's error was a full traceback.
"""

import importlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from minipar.job.outdir import LOCK, hold
from minipar.train import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--steps", "3", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2", "--d-model"]
TINY += ["16", "--eval-every", "100", "--eval-batches", "1", "--sample-chars", "5", "--log-every", "1"]
TINY += ["--threads", "1"]
OUTPUTS = ("metrics.jsonl", "loss.png", "sample.txt", "config.json")


def _previous_run(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 4.0}) + "\n" for i in range(6)))
    for name in OUTPUTS[1:]:
        (d / name).write_text("previous run\n")
    return {name: (d / name).read_bytes() for name in OUTPUTS}


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_second_run_on_a_live_runs_out_is_refused_with_its_pid(tmp_path, capsys):
    """A run in another process holds --out; a second one is refused naming its PID. Once the first is
    SIGKILLed, its lock file (with a dead PID) is stale: the next run takes it over and trains."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    first = subprocess.Popen(
        [sys.executable, "-m", "minipar.train"] + TINY + ["--steps", "100000", "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.time() + 120
        while not (out / "metrics.jsonl.partial").exists() and time.time() < end and first.poll() is None:
            time.sleep(0.2)
        assert (out / LOCK).exists()
        assert main(TINY + ["--seed", "2", "--out", str(out)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"--out {out} is in use by another run (PID {first.pid}" in line and "use another --out" in line
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert (out / LOCK).read_text().strip() == str(first.pid)  # left behind by the killed run
    assert main(TINY + ["--out", str(out)]) == 0
    assert not (out / LOCK).exists()  # released at the end
    assert all((out / name).exists() for name in OUTPUTS)


def test_the_lock_is_released_when_the_run_fails(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(TINY + ["--lr", "1e30", "--grad-clip", "0", "--out", str(out)]) == 2  # a non-finite loss
    assert not (out / LOCK).exists()
    with hold({"--out": str(out)}):  # free again
        assert (out / LOCK).read_text().strip() == str(os.getpid())


def test_a_separate_ckpt_dir_is_held_too(tmp_path, capsys):
    ck = tmp_path / "ck"
    with hold({"--ckpt-dir": str(ck)}):
        assert main(TINY + ["--out", str(tmp_path / "run"), "--ckpt-every", "1", "--ckpt-dir", str(ck)]) == 2
    assert f"--ckpt-dir {ck} is in use by another run (PID {os.getpid()}" in _one_line(capsys.readouterr().err)


def test_a_folder_inside_or_around_another_runs_folder_is_refused(tmp_path, capsys):
    """#36 item 1: run B's --ckpt-dir inside run A's --out overwrote A's checkpoints. A lock covers the tree."""
    a = tmp_path / "A"
    with hold({"--out": str(a)}):
        assert main(TINY + ["--out", str(tmp_path / "B"), "--ckpt-every", "1", "--ckpt-dir", str(a / "ckpt")]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"--ckpt-dir {a / 'ckpt'} lies inside {a}, which another run writes (PID {os.getpid()}" in line
        assert not (a / "ckpt").exists()
    with hold({"--ckpt-dir": str(a / "ckpt")}):  # the other way round: B's --out around A's --ckpt-dir
        assert main(TINY + ["--out", str(a)]) == 2
        assert f"--out {a} contains {a / 'ckpt'}, which another run writes" in _one_line(capsys.readouterr().err)
    with hold({"--out": str(a), "--ckpt-dir": str(tmp_path / "elsewhere" / "ck")}):  # one run's own folders
        pass
    with hold({"--out": str(a / "in"), "--ckpt-dir": str(a)}):  # its --ckpt-dir around its own --out
        pass
    assert not (a / LOCK).exists()


def test_a_failed_run_leaves_the_previous_outputs_as_they_were(tmp_path, capsys):
    """The run fails late (a non-finite loss): the previous run's four files are untouched, its own log
    is the live one (metrics.jsonl.partial). A good run then replaces all four and leaves no temporary."""
    out = tmp_path / "run"
    before = _previous_run(out)
    assert main(TINY + ["--lr", "1e30", "--grad-clip", "0", "--out", str(out)]) == 2
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    assert (out / "metrics.jsonl.partial").exists()
    assert main(TINY + ["--out", str(out)]) == 0
    assert all((out / name).read_bytes() != before[name] for name in OUTPUTS)
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]


def test_a_resume_keeps_the_records_of_the_run_that_wrote_its_checkpoint(tmp_path, capsys):
    """A complete run (checkpoint at step 4), then a fresh run on the same --out that fails at once (its
    live log has no step near 4), then a resume from step 4: steps 0-3 come from the complete run."""
    out = tmp_path / "run"
    assert main(TINY + ["--steps", "4", "--ckpt-every", "2", "--out", str(out)]) == 0
    first = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    failed = ["--lr", "1e30", "--grad-clip", "0", "--out", str(out), "--ckpt-dir", str(tmp_path / "other")]
    assert main(TINY + ["--steps", "4", "--ckpt-every", "2"] + failed) == 2
    assert main(TINY + ["--steps", "6", "--ckpt-every", "2", "--resume", "--out", str(out)]) == 0
    got = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [0, 1, 2, 3, 4, 5, 6]
    assert got[:4] == [r for r in first if r["step"] < 4]


def test_a_resume_never_takes_the_records_of_another_run_that_shared_the_out(tmp_path, capsys):
    """Issue #36: run A saves checkpoints; run B, fresh and without checkpoints, replaces --out's metrics
    (another seed); resuming A's checkpoint keeps no record of B's (it used to take B's steps 0-3, so
    the log mixed two runs). A's earlier records are gone with B's replacement: the log starts at 4."""
    out = tmp_path / "run"
    assert main(TINY + ["--steps", "4", "--ckpt-every", "2", "--out", str(out)]) == 0
    a_id = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["run_id"]
    assert main(TINY + ["--steps", "6", "--seed", "1", "--out", str(out)]) == 0
    assert main(TINY + ["--steps", "6", "--ckpt-every", "2", "--resume", "--out", str(out)]) == 0
    got = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [4, 5, 6]
    assert {r["run_id"] for r in got} == {a_id}


def _file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    return f


UNWRITABLE = "/proc/sys/minipar-out"  # /proc/sys is read-only, also for root (chmod is not, for root)
FOLDERS = [
    (lambda t: ["--out", str(_file(t))], "is a file, not a folder; use another --out"),
    (lambda t: ["--out", str(_file(t) / "run")], "which is a file, not a folder; use another --out"),
    (lambda t: ["--out", UNWRITABLE], "/proc/sys is not writable"),
    (
        lambda t: ["--out", "", "--ckpt-every", "1", "--ckpt-dir", str(_file(t))],
        "is a file, not a folder; use another --ckpt-dir",
    ),
    (lambda t: ["--out", "", "--ckpt-every", "1", "--ckpt-dir", UNWRITABLE], "use a --ckpt-dir you can write to"),
    # /proc passes the access check (root may write it) but refuses mkdir: caught where the folder is made
    (lambda t: ["--out", "/proc/minipar-out"], "cannot create it"),
]


@pytest.mark.parametrize(
    "args, text",
    FOLDERS,
    ids=["out-file", "out-under-file", "out-unwritable", "ckpt-file", "ckpt-unwritable", "out-uncreatable"],
)
def test_an_unusable_folder_is_refused_before_any_rank_starts(tmp_path, capsys, monkeypatch, args, text):
    if "/proc/" in str(args(tmp_path)) and not os.path.isdir("/proc/sys"):
        pytest.skip("no /proc here")

    def no_launch(*a, **k):
        raise AssertionError("ranks were started for an unusable folder")

    monkeypatch.setattr(importlib.import_module("minipar.train"), "launch", no_launch)  # the name main calls
    argv = args(tmp_path)
    assert main(TINY + ["--nproc", "2"] + argv) == 2
    line = _one_line(capsys.readouterr().err)
    path = argv[argv.index("--ckpt-dir" if "--ckpt-dir" in argv else "--out") + 1]
    assert line.startswith("error: ") and path in line and text in line


def test_a_failure_is_one_line_and_its_traceback_is_kept(tmp_path, capsys, monkeypatch):
    """Not a bad setting: a bug. One line (exception, message, where), the traceback in OUT/traceback.txt;
    MINIPAR_TRACEBACK=1 prints it. The next good run removes the stale traceback."""
    import minipar.train as job

    def lr_at_broken(step, cfg):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(job, "lr_at", lr_at_broken)
    out = tmp_path / "run"
    assert main(TINY + ["--out", str(out)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("error: RuntimeError: disk on fire (at tests/test_out_folder.py:")
    assert line.endswith(f"in lr_at_broken); full traceback in {out / 'traceback.txt'}")
    assert "Traceback (most recent call last)" in (out / "traceback.txt").read_text()
    monkeypatch.setenv("MINIPAR_TRACEBACK", "1")
    assert main(TINY + ["--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("error: RuntimeError")
    monkeypatch.undo()
    assert main(TINY + ["--out", str(out)]) == 0
    assert not (out / "traceback.txt").exists()


@pytest.mark.parametrize(
    "out, text",
    [
        ("/", "is the file system's root"),
        (".", "is the working directory itself"),
        (os.path.join(ROOT, "minipar", "tp"), "lies in the repository's source folder minipar/"),
        (os.path.join(ROOT, "lessons"), "lies in the repository's source folder lessons/"),
    ],
)
def test_a_folder_of_sources_or_the_root_is_refused(tmp_path, capsys, monkeypatch, out, text):
    """#36 item 10: --out minipar/tp wrote a run's four files among the package's sources."""
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(out))
    assert main(TINY + ["--out", out]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out {out} {text}" in line and "runs/x" in line
    assert sorted(os.listdir(out)) == before
