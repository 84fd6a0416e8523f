"""One launched rank's process: its body in the child, and the files the parent reads back.

:func:`minipar.runtime.launch.launch` starts every rank as a fork of a *fork server* (``forkserver``
start method): a process that imported torch once, so a rank starts in ~0.1 s instead of the
~3 s of ``spawn`` (2-core machine). :func:`run_rank` is what that fork runs:

1. exit with the parent, even when the parent is killed (:func:`_die_with_parent`);
2. write fd 1 and 2 (Python's and C++'s output) into the rank's log file;
3. take the parent's environment, ``sys.path`` and working directory (the fork server's are
   those of the *first* launch), plus ``RANK``/``WORLD_SIZE``/``MASTER_*`` as torchrun sets them;
4. join the process group through the parent's ``TCPStore``, run ``fn``, and write
   ``("ok", value)`` or ``("err", exception, traceback, time)`` to the rank's result file, which
   :func:`minipar.runtime.root_cause.collect` reads.

The parent shows the log files with :class:`Tail` (live, ``stream=k``) and :func:`replay` (in
rank order, at the end). The files live in a :class:`JobFolder` (``$TMPDIR/minipar-launch-PID-…``),
removed when ``launch`` returns; one that a ``SIGKILL``ed launcher could not remove is removed by
the next launch, so such folders do not pile up.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import multiprocessing.util
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta
from typing import Sequence

HOST = "127.0.0.1"
_in_rank = False  # True inside run_rank (see in_rank)


def in_rank() -> bool:
    """True in a process running :func:`run_rank`: there, a call of ``launch`` is a job started twice
    (a script without an ``if __name__ == "__main__":`` guard, imported by the rank)."""
    return _in_rank


def _resolve_fn(spec):
    kind, payload = spec
    if kind == "pickle":
        return pickle.loads(payload)
    path, qualname = payload  # a function in a script's __main__: load the script as __mp_main__
    import runpy

    namespace = runpy.run_path(path, run_name="__mp_main__")
    obj = namespace[qualname.split(".")[0]]
    for part in qualname.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _die_with_parent(watch) -> None:
    """Exit when the launching process dies, even by ``SIGKILL`` (runs in the child).

    ``watch`` is the read end of a pipe whose only write end the parent holds: reading it returns
    end-of-file as soon as the parent is gone, however it died. On Linux the kernel is also asked
    to ``SIGKILL`` this process when its parent (the fork server, which exits with the launcher)
    dies: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except Exception:
            pass

    def wait_for_eof():
        try:
            watch.recv_bytes()
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait_for_eof, name="minipar-parent-watch", daemon=True).start()


def _all_connected(store, world_size: int, timeout_s: float) -> None:
    """Wait (bounded by ``timeout_s``) until every rank has its process group: a rank whose ``fn`` returns at once
    would otherwise close its sockets while a slower peer is still connecting, and that peer would die with
    gloo's raw "connectFullMesh failed" instead of minipar's blame. A store counter, not a collective."""
    deadline = time.monotonic() + timeout_s
    n = store.add("minipar/connected", 1)
    while n < world_size and time.monotonic() < deadline:
        time.sleep(0.002)
        n = store.add("minipar/connected", 0)


def run_rank(
    rank,
    world_size,
    port,
    fn_spec,
    args,
    kwargs,
    log_path,
    result_path,
    backend,
    timeout_s,
    threads,
    parent_env,
    parent_path,
    parent_cwd,
    watch,
):
    """Body of one rank (runs in the child process)."""
    global _in_rank
    _in_rank = True  # see in_rank()
    _die_with_parent(watch)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(parent_env)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR=HOST,
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=str(threads),
        MINIPAR_LAUNCHED="1",
    )
    sys.path[:] = parent_path
    os.chdir(parent_cwd)
    try:
        import torch
        import torch.distributed as dist

        from minipar.runtime import dist as mdist

        torch.set_num_threads(threads)
        # The fork server imported torch.distributed with the environment of the first launch; read
        # TORCH_DISTRIBUTED_DEBUG again from this job's, or setting it later in a notebook does nothing.
        dist.set_debug_level_from_env()
        fn = _resolve_fn(fn_spec)
        store = dist.TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=timeout_s))
        mdist.init(backend=backend, timeout=timeout_s, store=store, rank=rank, world_size=world_size)
        _all_connected(store, world_size, timeout_s)
        from torch.utils._pytree import tree_map_only

        # the parent reads CPU tensors: a rank on cuda:LOCAL_RANK returns its results moved to the CPU
        value = tree_map_only(torch.Tensor, lambda t: t.cpu(), fn(*args, **kwargs))
        payload = ("ok", value)
        try:
            mdist.destroy()
        except Exception:
            pass
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        # sys.exit(n) in fn: the rank exits with n, as a script would (RankFailedError.exitcode)
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code else 1
        tb = traceback.format_exc()
        try:
            exc_bytes = pickle.dumps(exc)
            pickle.loads(exc_bytes)
        except Exception:
            exc_bytes = None
        payload = ("err", exc_bytes, tb, time.time())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        data = pickle.dumps(payload)
    except Exception as exc:
        data = pickle.dumps(
            (
                "err",
                None,
                f"rank {rank}: the return value of fn cannot be pickled: {exc!r}\n"
                "return plain Python values or CPU tensors",
                time.time(),
            )
        )
    with open(result_path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(result_path + ".tmp", result_path)
    try:
        multiprocessing.util._run_finalizers(0)  # what a normal exit runs: unlink fn's semaphores (no leak warning)
    except Exception:
        pass
    # dist.exit_process's flush and _exit, by hand: this line must run when torch (and so minipar.runtime.dist)
    # failed to import, and the import failure is what the parent needs to read
    os._exit(0 if payload[0] == "ok" else code)


class Tail:
    """Copies what one rank has written to its log so far onto the parent's stdout (live output)."""

    def __init__(self, path: str, label: str):
        self.path, self.label, self.pos, self.line_start = path, label, 0, True
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self.pos += len(data)
        text = self.decoder.decode(data)
        if self.label:
            lines = text.split("\n")
            text = "\n".join((self.label + ln) if (i or self.line_start) and ln else ln for i, ln in enumerate(lines))
        self.line_start = text.endswith("\n")
        sys.stdout.write(text)
        sys.stdout.flush()


def replay(logs: Sequence[str], prefix: bool, skip: int | None = None) -> None:
    for r, path in enumerate(logs):
        if r == skip:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            print(f"[rank {r}] {line}" if prefix else line)
    sys.stdout.flush()


class JobFolder:
    """A fresh folder for one launch's log and result files, owned by this process until :meth:`cleanup`.

    Ownership is an exclusive ``flock`` on ``owner.lock`` inside it, which the kernel drops when the
    process dies, however it dies. So before making its own, a launch removes every
    ``minipar-launch-*`` folder in ``root`` whose lock it can take: their launchers are gone
    (``SIGKILL`` leaves its folder behind). The folder is made under a hidden name and renamed once
    locked, so another launch never sees it unlocked. Folders without an ``owner.lock`` (another
    program's) are left alone.
    """

    PREFIX = "minipar-launch-"

    def __init__(self, root: str | None = None):
        root = root or tempfile.gettempdir()
        self.swept = sweep(root, self.PREFIX)
        tmp = tempfile.mkdtemp(prefix=".minipar-new-", dir=root)
        self._lock = open(os.path.join(tmp, "owner.lock"), "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()
        self.name = os.path.join(root, f"{self.PREFIX}{os.getpid()}-{os.path.basename(tmp)[len('.minipar-new-') :]}")
        os.rename(tmp, self.name)

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)
        self._lock.close()


def sweep(root: str, prefix: str) -> list[str]:
    """Remove the folders ``root/prefix*`` whose ``owner.lock`` no live process holds; return their paths."""
    gone = []
    try:
        names = os.listdir(root)
    except OSError:
        return gone
    for name in names:
        path = os.path.join(root, name)
        if not name.startswith(prefix):
            continue
        try:
            f = open(os.path.join(path, "owner.lock"))
        except OSError:
            continue
        with f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its launcher is alive
            with contextlib.suppress(OSError):
                shutil.rmtree(path)
                gone.append(path)
    return gone
