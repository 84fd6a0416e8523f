"""Lesson 07: the main job on a (pp, dp, tp) mesh of 8 ranks equals one device, and resumes across layouts.

Every 8-rank test is one ``minipar.launch`` (or one pair of torchrun "nodes") that runs several
trainings inside the same world, because starting 8 processes is the expensive part on 2 cores.

Two kinds of bound, each derived, none fitted to one CPU:

- **Exactness, float64 gradients** (:func:`test_3d_gradients_equal_one_device_float64`): one
  forward + backward of the global batch on each layout, before any optimizer, against one device.
  A layout adds the same terms in another order; in float64 a sum of n terms moves by at most
  ~n·ε·Σ|terms| with ε = 1.1e-16, i.e. < 1e-13 for these gradients (|g| ≤ 0.2, n ≤ 1e3), so the
  bound is 1e-12. A real bug (a missing micro-batch, a wrong 1/m or 1/dp, a TP shard summed twice)
  changes a gradient by ~|g|/m ≥ 1e-3.
- **The whole trainer in fp32** (losses over a few AdamW steps, checkpoints, torchrun restarts):
  1e-5 absolute on losses of ~4.6 nats. Reordered fp32 sums differ by ~1e-7 relative per
  operation; over ≤ 16 AdamW steps that moves the loss by < 1e-6 on any CPU (AVX2 or AVX-512,
  MKL or not), while a real bug moves it by 1e-3 or more after one step. These runs use fp32
  because the trainer does (ZeRO-1's start check hashes fp32 bits).
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from minipar import ConfigError, launch
from minipar.course import gpu_check
from minipar.job.config import TrainConfig, check
from minipar.train import main, train
from tests import _workers_3d as w

TINY = {**gpu_check.TINY, "out": None}  # one config for the CPU tests and the GPU check-list
TOL = gpu_check.TOL


def as_flags(cfg: dict) -> list[str]:
    """``{"batch_size": 8, ...}`` -> ``["--batch-size", "8", ...]`` (the main job's flags; None left out)."""
    return [x for k, v in cfg.items() if v is not None for x in (f"--{k.replace('_', '-')}", str(v))]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def losses(hist, start=0):
    return {r["step"]: r[k] for r in hist for k in ("loss",) if k in r and r["step"] >= start}


def vals(hist):
    return {r["step"]: r["val_loss"] for r in hist if "val_loss" in r}


def close(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(abs(a[k] - b[k]) for k in a)


CFG64 = dict(vocab_size=64, block_size=16, n_layer=4, n_head=4, d_model=32)


@pytest.mark.parametrize("layout, microbatches", [((2, 2, 2), 2), ((4, 1, 2), 4), ((1, 2, 4), 2)])
def test_3d_gradients_equal_one_device_float64(layout, microbatches):
    """float64, before the optimizer: the dp-averaged gradients of a (pp, dp, tp) layout, assembled as
    the single-device GPT's tensors, equal one device's to 1e-12 (bound derived in the module doc)."""
    from minipar.course.verify import check_close

    got = launch(w.grads_float64, world_size=8, args=(CFG64, 8, microbatches, layout))[0]
    want = w.one_device_grads_float64(CFG64, 8)
    check_close(
        f"pp{layout[0]}·dp{layout[1]}·tp{layout[2]} m={microbatches} gradients vs one device",
        {k: got[k] for k in want},
        want,
        bound=1e-12,
        why="float64",
        show=False,
    )


@pytest.fixture(scope="module")
def one_device():
    return train(TrainConfig(**TINY), progress="none")


def test_8_ranks_dp2_tp2_pp2_equal_one_device(one_device):
    """dp2·tp2·pp2, 1F1B, 2 micro-batches per dp share, ZeRO-1 off and on: same losses as one device
    (which runs the same global batch of 8 as 2 accumulated micro-batches). Every rank returns the
    broadcast losses, so rank 0 (a first-stage rank, which never sees the loss itself) checks them."""
    out = launch(w.equivalence, world_size=8, args=(TINY,))
    for zero in (0, 1):
        hist = out[0][zero]
        assert close(losses(hist), losses(one_device)) < TOL
        assert close(vals(hist), vals(one_device)) < TOL
        assert {r["step"] for r in hist if "mfu" in r} == {0, 1, 2, 3}


def test_checkpoint_resumes_same_and_other_layout(tmp_path, one_device):
    """Saved by dp2·tp2·pp2 with ZeRO-1 at step 2 (of 4); resumed (a) under the same layout,
    (b) under dp4·tp1·pp2 without ZeRO, (c) on one device: steps 2-3 equal the uninterrupted run's."""
    d = str(tmp_path / "ck")
    out = launch(w.save_and_resume, world_size=8, args=(TINY, d, 4, 2))[0]
    assert out["files"] == ["step_00000002"]  # no .partial left behind
    ref = losses(out["full"], 2)
    assert close(losses(out["full"]), losses(one_device)) < TOL
    assert close(losses(out["same"]), ref) < TOL
    assert close(losses(out["other"]), ref) < TOL
    single = train(TrainConfig(**TINY, ckpt_dir=d, resume=True), progress="none")
    assert close(losses(single), ref) < TOL
    assert abs(vals(single)[4] - vals(out["full"])[4]) < TOL


def test_two_torchrun_nodes_run_one_8_rank_3d_job(tmp_path, one_device):
    """Two torchrun invocations (--nnodes 2, --node-rank 0/1, c10d rendezvous on 127.0.0.1), 4 ranks
    each, form one dp2·tp2·pp2 job. Rank 5 is SIGKILLed as it reaches step 3 (``tests._fault_train``);
    ``--max-restarts 1`` restarts the workers on both nodes, which agree on the attempt number
    (``minipar.runtime.dist._elastic_store``), resume from the step-2 checkpoint without manual action and end
    with the uninterrupted single-device losses, every step logged once. (It is also the restart test
    of a single node: the same restart, resume and log, with one more node; one run covers both.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "mn"
    args = as_flags(TINY) + [
        "--dp",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--schedule",
        "1f1b",
        "--out",
        str(out),
        "--ckpt-every",
        "2",
        "--resume",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MINIPAR_TIMEOUT": os.environ.get("MINIPAR_TIMEOUT", "60")}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(n),
                "--nproc-per-node",
                "4",
                "--max-restarts",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-id",
                "minipar-3d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "-m",
                "tests._fault_train",
                "5:3",
            ]
            + args,
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (0, 1)
    ]
    try:
        results = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:  # SIGTERM first: torchrun then stops its workers (each in its own session)
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], results[0][1][-2000:] + results[1][1][-2000:]
    assert "resumed from step_00000002" in results[0][0] + results[1][0]  # c10d may give node 0 ranks 4-7
    got = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [0, 1, 2, 3, 4]
    assert close(losses(got), losses(one_device)) < TOL
    assert (out / "sample.txt").exists() and (out / "loss.png").exists()


def test_cli_starts_its_own_ranks(tmp_path, one_device):
    """``python -m minipar.train --tp 2`` outside torchrun: minipar's launcher starts the 2 ranks."""
    out = tmp_path / "cli"
    args = [
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--block-size",
        "16",
        "--n-layer",
        "2",
        "--n-head",
        "2",
        "--d-model",
        "32",
        "--eval-every",
        "4",
        "--log-every",
        "1",
        "--eval-batches",
        "1",
        "--microbatches",
        "2",
        "--tp",
        "2",
        "--out",
        str(out),
    ]
    p = subprocess.run(
        [sys.executable, "-m", "minipar.train"] + args,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert close(losses(got), {k: v for k, v in losses(one_device).items() if k < 2}) < TOL


@pytest.mark.parametrize(
    "args, text",
    [
        (["--nproc", "8", "--tp", "4", "--pp", "3"], "not divisible by tp·pp = 4·3 = 12; valid layouts for 8 ranks"),
        (["--dp", "2", "--tp", "2", "--pp", "2", "--nproc", "4"], "pp·dp·tp = 2·2·2 = 8 but there are 4 ranks"),
        (["--schedule", "zb"], "--schedule: invalid choice: 'zb'"),
        (["--zero", "2"], "--zero: invalid choice: 2 (choose from 0, 1, 3)"),
        (["--grad-clip", "-1"], "--grad-clip -1"),
        (["--pp", "3", "--n-layer", "2"], "--pp 3 stages but the model has only --n-layer 2"),
        (
            ["--tp", "8", "--nproc", "8"],
            "--tp 8 must divide --n-head 4 and --d-model 128 (whole heads and columns per rank); use --tp 1, 2, 4",
        ),
    ],
)
def test_cli_bad_layout_is_one_line(capsys, args, text):
    assert main(args + ["--out", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and text in err and "\n" not in err


def test_layout_errors_name_the_fix():
    """In-process (one device): a pipeline longer than the model, a tp that does not divide the heads."""
    with pytest.raises(ConfigError, match="--pp 3 stages but the model has only --n-layer 2"):
        check(TrainConfig(n_layer=2, n_head=2, d_model=32, pp=3), world_size=3)
    with pytest.raises(
        ConfigError,
        match=r"--tp 4 must divide --n-head 2 and --d-model 32 \(whole heads and columns per rank\); use --tp 1, 2$",
    ):
        check(TrainConfig(n_layer=2, n_head=2, d_model=32, tp=4), world_size=4)


def test_main_job_zero3_equals_one_device_and_checkpoints_across_layouts(tmp_path, one_device):
    """--zero 3 (minipar.zero.fully_shard over dp4): the same losses as one device; its checkpoint at
    step 2 resumes under ZeRO-3 and under dp2·tp2 without ZeRO with the uninterrupted run's steps 2-3;
    --dtype bf16 trains too (gathers and computes in bf16; its losses within bf16's reach of fp32's)."""
    out = launch(w.zero3_job, world_size=4, args=(TINY, str(tmp_path / "ck"), 4, 2))[0]
    assert close(losses(out["full"]), losses(one_device)) < TOL
    assert close(vals(out["full"]), vals(one_device)) < TOL
    ref = losses(out["full"], 2)
    assert close(losses(out["same"]), ref) < TOL
    assert close(losses(out["other"]), ref) < TOL
    assert close(losses(out["bf16"]), losses(one_device)) < 0.05  # bf16: 8 mantissa bits, ~4e-3 relative per op


def test_zero3_needs_tp1_pp1():
    with pytest.raises(ConfigError, match="--zero 3 with --tp 2 --pp 1"):
        check(TrainConfig(**TINY, dp=1, tp=2, zero=3), world_size=2)
