"""The main job under faults: ranks die with a killed launcher, the loss rank's output is live,
bad settings fail before anything is started or overwritten, resume edge cases, the command line.

Every wait is bounded and generous (the machine may be loaded); nothing asserts a speed.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from minipar import ConfigError
from minipar.job.config import TrainConfig
from minipar.train import main, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--batch-size",
    "4",
    "--block-size",
    "16",
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--d-model",
    "16",
    "--eval-every",
    "1000",
    "--log-every",
    "1",
    "--eval-batches",
    "1",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


class Job:
    """``python -m minipar.train ARGS`` in its own session, its output read as it comes."""

    def __init__(self, args, cwd=ROOT):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "minipar.train"] + args,
            cwd=cwd,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.out = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for chunk in iter(lambda: os.read(self.p.stdout.fileno(), 4096), b""):
            self.out += chunk

    def text(self) -> str:
        return self.out.decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout: float = 180) -> bool:
        end = time.time() + timeout
        while time.time() < end and self.p.poll() is None:
            if needle in self.text():
                return True
            time.sleep(0.2)
        return needle in self.text()

    def session(self) -> list[str]:
        """``ps`` lines of every process still in the job's session (the launcher, ranks, fork server,
        resource tracker: none of them starts a session of its own)."""
        ps = subprocess.run(["ps", "-e", "-o", "pid=,sid=,args="], capture_output=True, text=True).stdout
        return [line for line in ps.splitlines() if line.split()[1] == str(self.p.pid)]

    def stop(self):
        for line in self.session():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait(timeout=30)


@pytest.fixture(scope="module")
def step2_ckpt(tmp_path_factory):
    """A checkpoint at step 2 of the tiny model (one process), to resume from."""
    d = tmp_path_factory.mktemp("ck")
    assert main(TINY + ["--steps", "2", "--ckpt-every", "2", "--out", str(d)]) == 0
    return d / "ckpt"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_launcher_takes_every_rank_with_it_and_output_is_live(tmp_path, step2_ckpt, sig):
    """A dp2 run that would train for hours: its loss rank's lines reach the terminal while it runs
    ("resumed from ..." and the progress bar), and once the launcher is killed, ``ps`` shows no
    process of the job left within a bounded wait (before: ranks trained on, writing into --out)."""
    job = Job(
        TINY
        + ["--dp", "2", "--steps", "100000", "--resume", "--ckpt-dir", str(step2_ckpt), "--out", str(tmp_path / "run")]
    )
    try:
        assert job.wait_for("resumed from step_00000002 (step 2)"), job.text()[-3000:]
        assert job.wait_for("train:"), job.text()[-3000:]  # the progress bar, live
        assert len(job.session()) >= 3, job.session()  # launcher + 2 ranks (+ fork server ...)
        os.kill(job.p.pid, sig)
        job.p.wait(timeout=60)
        end = time.time() + 60
        while job.session() and time.time() < end:
            time.sleep(0.5)
        assert job.session() == [], job.session()
        assert "resumed from step_00000002" in job.text()  # not lost with the job
    finally:
        job.stop()


def _outputs(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def _previous_run(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 4.0}) + "\n" for i in range(6)))
    for name in ("loss.png", "sample.txt", "config.json"):
        (d / name).write_text("previous run\n")
    return _outputs(d)


@pytest.mark.parametrize(
    "args, text",
    [
        (["--dtype", "fp16"], "--dtype fp16 needs a GPU"),
        (["--block-size", "60"], "the validation split"),  # val split of the 500-char text: 50 characters
    ],
)
def test_late_config_error_leaves_the_previous_run_alone(tmp_path, capsys, args, text):
    data = tmp_path / "text.txt"
    data.write_text("".join(chr(97 + i % 26) for i in range(500)))
    before = _previous_run(tmp_path / "run")
    assert (
        main(TINY + ["--steps", "2", "--batch-size", "1", "--data", str(data), "--out", str(tmp_path / "run")] + args)
        == 2
    )
    assert text in capsys.readouterr().err
    assert _outputs(tmp_path / "run") == before


def test_bad_batch_for_the_layout_starts_no_rank(monkeypatch, capsys):
    """dp2·tp2·pp2 with --batch-size 3: one line, before any of the 8 ranks is started."""
    import importlib

    def no_launch(*a, **k):
        raise AssertionError("ranks were started for an invalid setting")

    monkeypatch.setattr(importlib.import_module("minipar.train"), "launch", no_launch)  # the name main calls
    assert main(["--dp", "2", "--tp", "2", "--pp", "2", "--batch-size", "3", "--out", ""]) == 2
    assert "--batch-size 3 is not divisible by the 2 data-parallel ranks; use 2 or 4" in capsys.readouterr().err


def _advice(cfg) -> str:
    from minipar.job.config import check

    with pytest.raises(ConfigError) as e:
        check(cfg)
    return str(e.value)


def test_block_size_advice_fits_both_splits():
    """Following the advice works at once (before: --batch-size 4, then --block-size 46512, then ...)."""
    import re

    from minipar.job.config import check

    msg = _advice(TrainConfig(block_size=100000, out=None))
    t = int(re.search(r"use --block-size (\d+) or less", msg).group(1))
    check(TrainConfig(block_size=t, out=None))  # fits train and validation
    msg = _advice(TrainConfig(block_size=1000, batch_size=100000, out=None))
    b = int(re.search(r"--batch-size (\d+) or less", msg).group(1))
    t = int(re.search(r"--block-size (\d+) or less", msg).group(1))
    check(TrainConfig(block_size=1000, batch_size=b, out=None))
    check(TrainConfig(block_size=t, batch_size=100000, out=None))


def test_a_tiny_text_asks_for_a_longer_one(tmp_path):
    import re

    from minipar.job.config import check

    f = tmp_path / "ten.txt"
    f.write_text("0123456789")
    for block in (128, 1):  # before: "use --block-size 8", then "--batch-size 1", then "--block-size 1 or less"
        msg = _advice(TrainConfig(data=str(f), block_size=block, out=None))
        n = int(re.search(r"at least (\d+) characters", msg).group(1))
        f2 = tmp_path / "long.txt"
        f2.write_text("0123456789" * (n // 10 + 1))
        check(TrainConfig(data=str(f2), block_size=block, out=None))


def test_layout_error_lists_only_layouts_this_model_accepts(monkeypatch, capsys):
    """torchrun --nproc-per-node 3 --tp 2: tp3 does not divide 4 heads, dp3 does not divide the batch of 16."""
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    assert main(["--tp", "2", "--out", ""]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(
        "valid layouts for 3 ranks that fit this model (--n-layer 4, --n-head 4, "
        "--d-model 128) and --batch-size 16: pp3·dp1·tp1"
    ), err


def test_microbatches_error_suggests_a_fix(capsys):
    assert main(["--microbatches", "3", "--out", ""]) == 2
    assert "use --microbatches 1, 2, 4, 8, 16, or a --batch-size divisible by 3" in capsys.readouterr().err


def test_resume_past_steps_is_one_line(step2_ckpt, tmp_path, capsys):
    before = _previous_run(tmp_path / "run")
    assert main(TINY + ["--steps", "1", "--resume", "--ckpt-dir", str(step2_ckpt), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "at step 2, already past --steps 1; use --steps 2 or more" in err
    assert _outputs(tmp_path / "run") == before


@pytest.mark.parametrize(
    "args, text",
    [
        (["--d-model", "32"], "was saved with --d-model 16, this run has --d-model 32; resume with --d-model 16"),
        (["--block-size", "8"], "was saved with --block-size 16, this run has --block-size 8"),
        (["--data", "OTHER"], "was trained on another corpus"),
    ],
)
def test_resume_from_another_model_or_corpus_is_one_line(step2_ckpt, tmp_path, capsys, args, text):
    other = tmp_path / "other.txt"
    other.write_text("abc " * 2000)
    args = [str(other) if a == "OTHER" else a for a in args]
    assert main(TINY + ["--steps", "4", "--resume", "--ckpt-dir", str(step2_ckpt), "--out", ""] + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume: checkpoint") and text in err and "\n" not in err


def test_summary_after_resume_starts_at_the_resumed_step(step2_ckpt, tmp_path, capsys):
    assert main(TINY + ["--steps", "4", "--resume", "--ckpt-dir", str(step2_ckpt), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "resumed from step_00000002 (step 2)" in out
    assert "resumed at step 2: val loss" in out and "(step 2) ->" in out and "(step 4)" in out


def test_resume_with_an_empty_or_no_checkpoint_dir_says_so(tmp_path, capsys):
    """#12.5: it says which directory it searched; with no directory at all it is an error naming the flag."""
    assert main(TINY + ["--steps", "1", "--resume", "--out", str(tmp_path)]) == 0
    assert f"no complete checkpoint in {tmp_path / 'ckpt'}/" in capsys.readouterr().out
    assert main(TINY + ["--steps", "1", "--resume", "--out", ""]) == 2
    assert "--resume needs a checkpoint directory to look in: add --ckpt-dir DIR" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--ckpt-dir"):
        train(TrainConfig(steps=1, resume=True, out=None))


def test_help_every_flag_once():
    from minipar.job.cli import parser

    p = parser()
    for action in p._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, action.option_strings
            assert p.formatter_class(p.prog)._expand_help(action).count("default") <= 1, action.option_strings
    assert next(a for a in p._actions if a.dest == "schedule").choices
    text = p.format_help()
    assert text.count("(default: ") == sum("(default: " in line for line in text.splitlines())


def test_make_train_takes_args():
    out = subprocess.run(
        ["make", "-n", "train", "ARGS=--steps 50", f"VENV={os.path.dirname(os.path.dirname(sys.executable))}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "-m minipar.train --steps 50" in out


def test_script_without_main_guard_is_told_what_to_add(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("from minipar import launch\n\ndef work():\n    return 1\n\nprint(launch(work, world_size=2))\n")
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180
    )
    assert p.returncode != 0
    assert "job.py calls minipar.launch when it is imported" in p.stderr
    assert 'if __name__ == "__main__":' in p.stderr.splitlines()[-1]


def test_no_leaked_semaphore_warning_after_a_dp2_run(tmp_path):
    """tqdm's default lock is a multiprocessing semaphore; a rank ending with os._exit leaked it."""
    p = subprocess.run(
        [sys.executable, "-m", "minipar.train"] + TINY + ["--dp", "2", "--steps", "2", "--out", str(tmp_path)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "leaked" not in p.stderr, p.stderr
