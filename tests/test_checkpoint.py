"""Checkpoints: resume continues the same trajectory, across layouts, and after a killed rank."""
import json
import os
import subprocess
import sys

import pytest

from minipar import checkpoint as ckpt
from minipar import launch
from minipar.train import TrainConfig, train

SMALL = dict(steps=12, batch_size=8, block_size=32, n_layer=2, n_head=2, d_model=32, eval_every=6,
             log_every=1, eval_batches=2, sample_chars=10)
TOL = 1e-5  # fp32: the resumed run repeats the same arithmetic; DP reorders sums (see test_train)


def losses(hist, start=0):
    return {r["step"]: r["loss"] for r in hist if "loss" in r and r["step"] >= start}


def test_resume_equals_uninterrupted(tmp_path):
    """Run 12 steps straight; run 6 steps with a checkpoint, then resume to 12: same losses."""
    full = train(TrainConfig(**SMALL, out=None), progress="none")
    d = str(tmp_path / "ck")
    train(TrainConfig(**{**SMALL, "steps": 12}, out=None, ckpt_dir=d, ckpt_every=6), progress="none")
    # keep only the step-6 checkpoint, as if the job had died at step 9
    import shutil
    shutil.rmtree(ckpt.step_dir(d, 12))
    resumed = train(TrainConfig(**SMALL, out=None, ckpt_dir=d, resume=True), progress="none")
    a, b = losses(full, 6), losses(resumed)
    assert sorted(b) == list(range(6, 12))
    assert max(abs(a[k] - b[k]) for k in b) < TOL


def test_saved_on_two_ranks_resumed_on_one(tmp_path):
    """Layout change: a checkpoint written by 2 data-parallel ranks loads on one device."""
    d = str(tmp_path / "ck")
    two = launch(train, world_size=2, args=(TrainConfig(**SMALL, out=None, ckpt_dir=d, ckpt_every=6), "none"))[0]
    import shutil
    shutil.rmtree(ckpt.step_dir(d, 12))
    one = train(TrainConfig(**SMALL, out=None, ckpt_dir=d, resume=True), progress="none")
    a, b = losses(two, 6), losses(one)
    assert max(abs(a[k] - b[k]) for k in b) < TOL


def test_partial_checkpoint_is_never_loaded(tmp_path):
    d = tmp_path / "ck"
    (d / "step_00000099.partial").mkdir(parents=True)
    (d / "step_00000098").mkdir()  # no .metadata: incomplete
    assert ckpt.latest(str(d)) is None


def test_torchrun_restarts_a_killed_rank_and_resumes(tmp_path):
    """SIGKILL rank 1 at step 8 on the first attempt; torchrun --max-restarts 1 restarts the job,
    which resumes from the step-6 checkpoint and ends with the same losses as a clean run."""
    out = tmp_path / "run"
    args = ["--steps", "12", "--batch-size", "8", "--block-size", "32", "--n-layer", "2", "--n-head", "2",
            "--d-model", "32", "--eval-every", "6", "--log-every", "1", "--out", str(out), "--ckpt-every", "3",
            "--resume"]
    env = {**os.environ, "MINIPAR_FAULT": "1:8", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "-m", "minipar.train"] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from step_00000006" in p.stdout
    got = {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    clean = losses(train(TrainConfig(**SMALL, out=None), progress="none"))
    assert sorted(got) == list(range(12))
    assert max(abs(got[k] - clean[k]) for k in got) < TOL


def test_two_torchrun_nodes_on_loopback(tmp_path):
    """Two torchrun invocations act as two nodes (--nnodes 2, c10d rendezvous on 127.0.0.1):
    one 4-rank data-parallel job whose losses equal the single-device run's."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "mn"
    args = ["--steps", "4", "--batch-size", "8", "--block-size", "32", "--n-layer", "2", "--n-head", "2",
            "--d-model", "32", "--eval-every", "4", "--log-every", "1", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(n),
                               "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-id", "minipar-test",
                               "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "minipar.train"] + args,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    try:
        results = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], results[0][1][-2000:] + results[1][1][-2000:]
    got = {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    clean = losses(train(TrainConfig(**{**SMALL, "steps": 4, "eval_every": 4}, out=None), progress="none"))
    assert max(abs(got[k] - clean[k]) for k in got) < TOL
