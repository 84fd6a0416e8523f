"""The main job's path, traced: ``python -m minipar.train --dp 2 --tp 2 --pp 2`` from the command line to rank
0's first optimizer step (issue #33: "a path that reads top to bottom", under 40 file-to-file hops and under 10
returns to a file already visited).

What is counted. ``tests/call_path/sitecustomize.py`` records every call into a function under ``minipar/``
in the CLI's process (from ``minipar.train.main`` to ``minipar.runtime.launch.launch``) and in rank 0 (from
``run_rank`` to AdamW's first ``step``). The path is the first call of each function that the main job's own
code makes (the caller's file is ``minipar/train.py`` or under ``minipar/job/``; module bodies, lambdas and
comprehensions left out), read as the sequence of the callees' files: a hop is a change of file, a return is
a hop into a file already on the path.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOB = ("minipar/train.py", "minipar/job/")


def job_path(events: list) -> list[str]:
    """The callees' files of the first call of each function made by the job's own code (see the module)."""
    start = next(i for i, (f, fn, _) in enumerate(events) if f == "minipar/train.py" and fn == "main")
    seen, files = set(), []
    for f, fn, caller in events[start:]:
        if fn.startswith("<") or not (caller.startswith(JOB) or f == "minipar/train.py") or (f, fn) in seen:
            continue
        seen.add((f, fn))
        files.append(f)
    return files


def hops_and_returns(files: list[str]) -> tuple[int, int]:
    hops = returns = 0
    visited, cur = set(), None
    for f in files:
        if f != cur:
            if cur is not None:
                hops += 1
                returns += f in visited
            visited.add(f)
            cur = f
    return hops, returns


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[int, int]:
    out, run = tmp_path_factory.mktemp("calls"), tmp_path_factory.mktemp("run")
    env = dict(os.environ, MINIPAR_CALL_PATH=str(out), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "call_path"), str(ROOT), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "minipar.train", "--dp", "2", "--tp", "2", "--pp", "2", "--steps", "1"]
    subprocess.run(cmd + ["--out", str(run / "out")], env=env, cwd=run, check=True, capture_output=True, timeout=300)
    runs = [json.loads(p.read_text()) for p in out.glob("*.json")]
    parent = next(r for r in runs if r["kind"] == "parent")
    rank0 = next(r for r in runs if r["kind"] == "rank" and r["rank"] == "0")
    return hops_and_returns(job_path(parent["events"] + rank0["events"]))


def test_hops_and_returns_counted_as_described():
    files = ["a", "b", "a", "a", "c", "b"]
    assert hops_and_returns(files) == (4, 2)


def test_path_under_40_hops(measured):
    assert measured[0] < 40, measured


def test_path_under_10_returns(measured):
    assert measured[1] < 10, measured
