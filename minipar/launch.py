"""Run a function on N local processes, each a real rank of a real process group.

    results = launch(fn, world_size=4, args=(x,))   # [fn(x) on rank 0, ..., on rank 3]

What it does, top to bottom:

1. The parent opens a ``TCPStore`` on a free loopback port (port 0: the OS picks it, so two
   jobs never race for a port) and keeps it for the job's lifetime.
2. It starts ``world_size`` processes with the ``forkserver`` start method. The fork server
   imports torch once; every later rank is a fork of it, so a launch costs ~0.1 s instead of
   the ~3 s of ``spawn`` (measured on a 2-core machine, ``shared/CPU_GLOO_FACTS.md``).
3. Each rank redirects its stdout and stderr (file descriptors 1 and 2, so C++ warnings too)
   into one log file, sets one intra-op thread, joins the process group through the store with
   minipar's bounded timeout, and calls ``fn``.
4. The parent waits. If a rank fails, it waits a moment for the rest, stops them, and
   re-raises the *first* failure (by time) with that rank's traceback; a rank killed by a
   signal raises :class:`RankFailedError`. Children never outlive ``launch``: a
   ``KeyboardInterrupt``, a ``SIGTERM`` or any error kills them before it propagates, and if the
   parent itself is killed (``SIGKILL``), every rank notices and exits at once: each watches a
   pipe whose only writer is the parent (end of file = the parent is gone; portable), and on
   Linux also asks the kernel for ``SIGKILL`` when its parent dies (``prctl(PR_SET_PDEATHSIG)``).
5. It replays every rank's output in rank order, each line prefixed ``[rank k]``, so a notebook
   cell prints the same text on every run. ``stream=k`` shows rank k's output *live* instead (as
   ``torchrun`` does; the training job streams its progress bar this way), the other ranks'
   output is still replayed in rank order at the end, also when the job fails or is stopped.

The ``__main__`` pitfall: a child process finds ``fn`` by module and name. A function defined
in a notebook lives in ``__main__``, which a child cannot import, and plain multiprocessing
fails with ``Can't get attribute 'fn' on <module '__main__'>``. ``launch`` checks this up
front and says so: put workers in a ``.py`` module (minipar's own, or yours) and import them.
A function in the ``__main__`` of a *script* (``python my_job.py``) works: the child loads
the script file under the name ``__mp_main__``, as ``spawn`` does. So the script must start the
job under ``if __name__ == "__main__":``; a script that calls ``launch`` at import time would
start it again in every rank, and ``launch`` stops with a :class:`ConfigError` saying so.

For GPU nodes and multi-node jobs use ``torchrun`` instead (``minipar.dist.init`` reads its
environment); ``launch`` is the laptop/notebook launcher.
"""

from __future__ import annotations

import codecs
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.util
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Sequence

from minipar.errors import ConfigError, RankFailedError

_HOST = "127.0.0.1"
_GRACE_S = 1.0  # after a first failure, how long the other ranks get to exit on their own
# Errors a rank sees when a *peer* died: symptoms, not causes.
_NO_MAIN_GUARD = 86  # exit code of a rank whose script called launch() while being imported
_in_rank = False  # True inside _run_rank: launch() called while False in a rank = no __main__ guard
_PEER_SYMPTOMS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "timed out",
    "Timed out",
    "Timeout",
    "connectFullMesh",
)


class RemoteTraceback(Exception):
    """Carries a rank's formatted traceback as the ``__cause__`` of the re-raised exception."""

    def __str__(self):
        return self.args[0]


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


def _run_rank(
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
    _in_rank = True
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
        MASTER_ADDR=_HOST,
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=str(threads),
        MINIPAR_LAUNCHED="1",
    )
    sys.path[:] = parent_path
    os.chdir(parent_cwd)
    try:
        import torch
        import torch.distributed as dist

        from minipar import dist as mdist

        torch.set_num_threads(threads)
        # The fork server imported torch.distributed with the environment of the first launch; read
        # TORCH_DISTRIBUTED_DEBUG again from this job's, or setting it later in a notebook does nothing.
        dist.set_debug_level_from_env()
        fn = _resolve_fn(fn_spec)
        store = dist.TCPStore(_HOST, port, is_master=False, timeout=timedelta(seconds=timeout_s))
        mdist.init(backend=backend, timeout=timeout_s, store=store, rank=rank, world_size=world_size)
        value = fn(*args, **kwargs)
        payload = ("ok", value)
        try:
            mdist.destroy()
        except Exception:
            pass
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
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
    os._exit(0 if payload[0] == "ok" else 1)


def _fn_spec(fn):
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if module == "__main__":
        main = sys.modules["__main__"]
        path = getattr(main, "__file__", None)
        if "<" in name:
            raise ConfigError(f"launch() cannot run {name!r}: pass a module-level function, not a lambda or a closure")
        if path is None:
            raise ConfigError(
                f"launch() cannot run {name!r}: it is defined in a notebook (module __main__), which the "
                "child processes cannot import. Put the function in a .py module (e.g. lessons/workers.py "
                "or your own my_workers.py) and import it from there."
            )
        return ("script", (os.path.abspath(path), name))
    try:
        return ("pickle", pickle.dumps(fn))
    except Exception as exc:
        raise ConfigError(
            f"launch() cannot send {name!r} to the child processes ({exc}); "
            "pass a module-level function, not a lambda or a closure"
        ) from None


def _open_store(port: int | None, timeout_s: float):
    import torch.distributed as dist

    try:
        return dist.TCPStore(
            _HOST, port or 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
        )
    except Exception as exc:
        if port:
            raise ConfigError(
                f"port {port} on {_HOST} is already in use ({type(exc).__name__}); "
                "pass port=None (the default) to let minipar pick a free port"
            ) from None
        raise


class _Tail:
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


def _replay(logs: Sequence[str], prefix: bool, skip: int | None = None) -> None:
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


def _stop(procs) -> None:
    procs = [p for p in procs if p.pid is not None]  # a failed start() leaves unstarted processes
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.time() + 2.0
    for p in procs:
        p.join(max(0.0, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join()


def launch(
    fn: Callable,
    world_size: int = 2,
    args: Sequence[Any] = (),
    kwargs: dict | None = None,
    *,
    backend: str | None = None,
    timeout: float | None = None,
    threads: int = 1,
    port: int | None = None,
    prefix: bool = True,
    job_timeout: float | None = None,
    stream: int | None = None,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` local ranks and return their results by rank.

    The process group is initialised before ``fn`` runs (``minipar.dist.rank()`` etc. work
    inside it) and destroyed after.

    Args:
        fn: a module-level function (see the module doc for the ``__main__`` pitfall).
        world_size: number of processes (>= 1).
        args, kwargs: passed to ``fn`` on every rank (pickled once per rank).
        backend: ``"gloo"``, ``"nccl"`` or ``"auto"``; default: the ``MINIPAR_BACKEND`` environment
            variable, else ``"gloo"`` (local processes usually share no GPUs). ``make gpu-check``
            sets ``MINIPAR_BACKEND=auto`` to run the unit tests' ranks on NCCL.
        timeout: process-group timeout in seconds (default ``minipar.dist.default_timeout()``).
        threads: intra-op threads per rank (default 1: with more, ranks fight for cores).
        port: a fixed rendezvous port; default: a free one chosen by the OS.
        prefix: prefix replayed lines with ``[rank k]``.
        job_timeout: seconds after which the whole job is stopped (default: none; collectives
            are bounded by ``timeout`` anyway).
        stream: a rank whose output is shown live, as it is written (default: none, every rank's
            output is replayed in rank order when the job ends).

    Returns:
        ``[result of rank 0, ..., result of rank world_size-1]`` (values must be picklable).

    Raises:
        ConfigError: bad ``world_size``/``threads``/``stream``, a port in use, an unimportable ``fn``,
        a script that calls ``launch`` outside ``if __name__ == "__main__":``.
        The first failing rank's exception (its traceback attached as ``__cause__``), or
        :class:`RankFailedError` if a rank died without one (signal, ``os._exit``) or the job
        outlived ``job_timeout``.
    """
    from minipar import dist as mdist

    if mp.current_process().name.startswith("minipar-rank") and not _in_rank:
        os._exit(_NO_MAIN_GUARD)  # a rank importing a script that starts the job at import time
    if not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"world_size={world_size!r} must be an integer >= 1, e.g. world_size=2")
    if stream is not None and stream not in range(world_size):
        raise ConfigError(f"stream={stream!r} must be a rank in [0, {world_size})")
    if not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads={threads!r} must be an integer >= 1")
    if backend is None:
        backend = os.environ.get("MINIPAR_BACKEND", "gloo")
    if backend not in ("gloo", "nccl", "auto"):
        raise ConfigError(f"backend={backend!r} (or MINIPAR_BACKEND) is not supported; use 'gloo', 'nccl' or 'auto'")
    timeout_s = mdist.default_timeout().total_seconds() if timeout is None else float(timeout)
    fn_spec = _fn_spec(fn)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["torch", "torch.distributed", "torch._dynamo", "minipar.dist"]
    )  # _dynamo: torch.optim imports it (~2 s)
    store = _open_store(port, timeout_s)
    port = store.port
    tmp = tempfile.TemporaryDirectory(prefix="minipar-launch-")
    logs = [os.path.join(tmp.name, f"rank{r}.log") for r in range(world_size)]
    results = [os.path.join(tmp.name, f"rank{r}.pkl") for r in range(world_size)]
    env, path, cwd = dict(os.environ), list(sys.path), os.getcwd()
    watch, alive = ctx.Pipe(duplex=False)  # ranks read `watch`; only this process holds `alive`
    procs = [
        ctx.Process(
            target=_run_rank,
            name=f"minipar-rank{r}",
            args=(
                r,
                world_size,
                port,
                fn_spec,
                tuple(args),
                dict(kwargs or {}),
                logs[r],
                results[r],
                backend,
                timeout_s,
                threads,
                env,
                path,
                cwd,
                watch,
            ),
        )
        for r in range(world_size)
    ]
    tail = _Tail(logs[stream], f"[rank {stream}] " if prefix else "") if stream is not None else None
    old_sigterm = _stop_on_sigterm()
    try:
        for p in procs:
            p.start()
        watch.close()
        pending = {p.sentinel: r for r, p in enumerate(procs)}
        deadline = None if job_timeout is None else time.time() + job_timeout
        failed = False
        exit_time = [float("inf")] * world_size  # when the parent saw each rank exit
        while pending:
            wait_s = None if deadline is None else max(0.0, deadline - time.time())
            if tail is not None:
                tail.pump()
                wait_s = 0.2 if wait_s is None else min(wait_s, 0.2)
            ready = multiprocessing.connection.wait(list(pending), timeout=wait_s)
            if not ready:
                if deadline is None or time.time() < deadline:
                    continue
                break  # job_timeout
            for s in ready:
                r = pending.pop(s)
                procs[r].join()
                exit_time[r] = time.time()
                failed |= procs[r].exitcode != 0
            if failed:
                end = time.time() + _GRACE_S
                while pending and time.time() < end:
                    for s in multiprocessing.connection.wait(list(pending), timeout=max(0.0, end - time.time())):
                        r = pending.pop(s)
                        procs[r].join()
                        exit_time[r] = time.time()
                break
    except BaseException:
        exit_time = [float("inf")] * world_size
        raise
    finally:
        try:
            _stop(procs)
            alive.close()
            watch.close()
            del store
            if tail is not None:
                tail.pump()
                if not tail.line_start:
                    print()
            _replay(logs, prefix, skip=stream)  # also when stopped: what the ranks said is not lost
        finally:
            _restore_sigterm(old_sigterm)
    try:
        if any(p.exitcode == _NO_MAIN_GUARD for p in procs):
            script = getattr(sys.modules.get("__main__"), "__file__", None) or "your script"
            raise ConfigError(
                f"{os.path.basename(script)} calls minipar.launch when it is imported, and every rank imports it "
                "(to find your functions), so each would start the job again. Put the code that starts the "
                'job under `if __name__ == "__main__":` at the bottom of the script.'
            )
        return _collect(procs, results, exit_time, job_timeout)
    finally:
        tmp.cleanup()


def _stop_on_sigterm():
    """While ranks run, turn ``SIGTERM`` into ``SystemExit(143)`` so the ranks are stopped and their
    output replayed on the way out (main thread only; returns the previous handler)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):
        return None


def _restore_sigterm(old) -> None:
    if old is not None:
        signal.signal(signal.SIGTERM, old)


def _collect(procs, results, exit_time, job_timeout):
    values, failures, finished = [], [], []
    for r, (p, path) in enumerate(zip(procs, results)):
        try:
            with open(path, "rb") as f:
                payload = pickle.load(f)
        except FileNotFoundError:
            payload = None
        if payload is not None and payload[0] == "ok":
            values.append(payload[1])
            finished.append(r)
        elif payload is not None:
            secondary = any(m in payload[2] for m in _PEER_SYMPTOMS)
            failures.append(((1 if secondary else 0, payload[3]), r, payload))
        else:  # died without a Python exception: when the parent saw it go (inf if we stopped it)
            failures.append(((0 if exit_time[r] != float("inf") else 2, exit_time[r]), r, None))
    if not failures:
        return values
    # Report the root cause: the earliest exception or death of a rank on its own. Peers that
    # merely noticed a rank was gone ("Connection closed by peer", a timeout waiting for it)
    # come next, ranks that launch itself stopped last.
    failures.sort(key=lambda x: (x[0], x[1]))
    (kind, _), r, payload = failures[0]
    if kind == 1:  # every failing rank only saw a peer symptom: no rank raised on its own
        # Who did not join? A rank that returned while its peers were blocked skipped a collective;
        # failing that, a rank still busy (stopped by launch, no error of its own) when its peers
        # timed out never entered theirs. Otherwise minipar cannot know, and says so.
        waiting = sorted(x[1] for x in failures if x[0][0] == 1)
        busy = sorted(x[1] for x in failures if x[0][0] == 2)
        culprits = []
        if finished:  # the paths split here; the minority is the odd one out
            who = f"rank(s) {finished} returned while rank(s) {waiting} were still blocked in a collective: "
            if len(finished) < len(waiting):
                who += f"the likely culprit is {finished} (it skipped a collective)"
                culprits = finished
            elif len(finished) > len(waiting):
                who += f"the likely culprit is {waiting} (it called a collective the others did not)"
                culprits = waiting
            else:
                who += (
                    f"either {finished} skipped a collective or {waiting} called one the others did not "
                    "(minipar cannot tell which)"
                )
        elif busy:
            who = (
                f"rank(s) {busy} were still running, outside that collective, when rank(s) {waiting} "
                f"gave up: the likely culprit is {busy} (it never joined the collective)"
            )
            culprits = busy
        else:
            who = "minipar cannot tell which rank is at fault"
        raise RankFailedError(
            f"ranks {waiting} timed out or lost a peer inside a collective; {who}. Every rank must "
            "call the same collectives in the same order. Shorten the wait with MINIPAR_TIMEOUT and "
            "rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see the mismatched call.",
            rank=culprits[0] if culprits else waiting[0],
            exitcode=procs[r].exitcode,
        ) from (RemoteTraceback(f"\n\n--- traceback of rank {r} ---\n{payload[2]}") if payload else None)
    if payload is None:
        code = procs[r].exitcode
        if code is None or (job_timeout is not None and code == -15):
            raise RankFailedError(
                f"rank {r} was stopped: the job ran past job_timeout={job_timeout}s", rank=r, exitcode=code
            )
        why = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise RankFailedError(
            f"rank {r} {why} without a Python exception (see its output above)", rank=r, exitcode=code
        )
    _, exc_bytes, tb, _ = payload
    cause = RemoteTraceback(f"\n\n--- traceback of rank {r} ---\n{tb}")
    exc = pickle.loads(exc_bytes) if exc_bytes is not None else None
    if isinstance(exc, Exception):
        if not exc.args or not str(exc).startswith("[rank"):
            try:
                exc.args = (f"[rank {r}] {exc.args[0]}",) + tuple(exc.args[1:]) if exc.args else (f"[rank {r}]",)
            except Exception:
                pass
        raise exc from cause
    raise RankFailedError(f"rank {r} failed:\n{tb}", rank=r, exitcode=procs[r].exitcode) from cause
