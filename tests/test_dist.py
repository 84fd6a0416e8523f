"""minipar.runtime.dist without a launcher: one-process world, backend choice, bad configuration."""

import pytest
import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar import ConfigError


def test_single_process_world(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    md.init()
    try:
        assert (md.rank(), md.world_size(), md.backend()) == (0, 1, md.pick_backend("auto"))  # nccl on a GPU
        t = torch.ones(3, device=md.device())  # the rank's GPU under NCCL
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
        md.init()  # idempotent
    finally:
        md.destroy()
    assert not md.is_initialized()
    md.destroy()  # safe twice


def test_auto_backend_on_cpu_is_gloo():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert md.pick_backend("auto") == "gloo"
    with pytest.raises(ConfigError, match="nccl"):
        md.pick_backend("nccl")
    with pytest.raises(ConfigError, match="mpi"):
        md.pick_backend("mpi")


def test_bad_env(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ConfigError, match="torchrun or minipar.launch"):
        md.init()
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ConfigError, match="rank=5"):
        md.init()
    monkeypatch.setenv("MINIPAR_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="MINIPAR_TIMEOUT"):
        md.default_timeout()
    for raw in ("inf", "nan", "1e300", "0", "-5"):  # inf: a wait that never ends; nan and 1e300: timedelta's traceback
        monkeypatch.setenv("MINIPAR_TIMEOUT", raw)
        with pytest.raises(ConfigError, match=f"MINIPAR_TIMEOUT='{raw}' must be > 0 and at most 86400 seconds"):
            md.default_timeout()
    monkeypatch.setenv("MINIPAR_TIMEOUT", "86400")
    assert md.default_timeout().total_seconds() == md.MAX_WAIT_S == 86400


def test_older_pytorch_gets_the_single_collective_names():
    """On a PyTorch without ``all_gather_single`` / ``reduce_scatter_single`` (before 2.13, as on the GPU
    image), importing minipar makes them the older ``*_into_tensor`` / ``*_tensor`` functions, which work."""
    import subprocess
    import sys

    code = """
import torch, torch.distributed as d, torch.distributed.distributed_c10d as c10d
# what PyTorch 2.11 looks like: the implementations under the older names only (2.13's older names call the new)
gather = getattr(c10d, "all_gather_single", c10d.all_gather_into_tensor)  # on 2.11 itself: nothing to undo
scatter = getattr(c10d, "reduce_scatter_single", c10d.reduce_scatter_tensor)
for m in (d, c10d):
    for name in ("all_gather_single", "reduce_scatter_single"):
        if hasattr(m, name):
            delattr(m, name)
    m.all_gather_into_tensor, m.reduce_scatter_tensor = gather, scatter
import minipar.runtime.dist as md
from minipar.comm import intercept
assert d.all_gather_single is d.all_gather_into_tensor and d.reduce_scatter_single is d.reduce_scatter_tensor
assert {"all_gather_single", "reduce_scatter_single"} <= set(intercept.OPS)   # counted by CommLog too
md.init(backend="gloo")
out = torch.zeros(3)
d.all_gather_single(out, torch.arange(3.0))
mine = torch.zeros(3)
d.reduce_scatter_single(mine, torch.arange(3.0))
md.destroy()
print(out.tolist(), mine.tolist())
"""
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[0] == "[0.0, 1.0, 2.0] [0.0, 1.0, 2.0]"


def test_exit_process_flushes_and_skips_the_shutdown():
    """``exit_process(code)``: what was printed (unflushed, to a pipe) arrives, the exit code is ``code``, and no
    ``atexit`` handler runs: Python's shutdown, where gloo's threads can abort a rank (lesson 10), is skipped."""
    import subprocess
    import sys

    code = (
        "import atexit, sys, minipar.runtime.dist as md\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print('result', end=''); sys.stderr.write('err')\n"
        "md.exit_process(3)\n"
        "print('after')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout, run.stderr[-3:]) == (3, "result", "err"), run  # stderr: warnings may lead
