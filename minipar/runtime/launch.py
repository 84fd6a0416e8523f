"""Run a function on N local processes, each a real rank of a real process group.

    results = launch(fn, world_size=4, args=(x,))   # [fn(x) on rank 0, ..., on rank 3]

What it does, top to bottom:

1. The parent opens a ``TCPStore`` on a free loopback port (port 0: the OS picks it, so two
   jobs never race for a port) and keeps it for the job's lifetime.
2. It starts ``world_size`` processes with the ``forkserver`` start method. The fork server
   imports torch once; every later rank is a fork of it, so a launch costs ~0.1 s instead of
   the ~3 s of ``spawn`` (measured on a 2-core machine: ``make bench``, lesson 00's
   "minipar.launch vs torch.multiprocessing.spawn" row).
3. Each rank (:func:`minipar.runtime.rank_process.run_rank`) redirects its stdout and stderr (file
   descriptors 1 and 2, so C++ warnings too) into one log file, sets one intra-op thread, joins
   the process group through the store with minipar's bounded timeout, and calls ``fn``.
4. The parent waits. If a rank fails, it waits a moment for the rest, stops them, and
   re-raises the root cause (:mod:`minipar.runtime.root_cause`): the *first* failure (by time), with
   that rank's traceback; a rank killed by a signal raises :class:`RankFailedError`. Children
   never outlive ``launch``: a ``KeyboardInterrupt``, a ``SIGTERM`` or any error kills them
   before it propagates, and if the parent itself is killed (``SIGKILL``), every rank notices
   and exits at once: each watches a pipe whose only writer is the parent (end of file = the
   parent is gone; portable), and on Linux also asks the kernel for ``SIGKILL`` when its
   parent dies (``prctl(PR_SET_PDEATHSIG)``).
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

For GPU nodes and multi-node jobs use ``torchrun`` instead (``minipar.runtime.dist.init`` reads its
environment); ``launch`` is the laptop/notebook launcher.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Sequence

from minipar.errors import ConfigError
from minipar.runtime.rank_process import HOST, JobFolder, Tail, in_rank, replay, run_rank
from minipar.runtime.root_cause import collect

_GRACE_S = 1.0  # after a first failure, how long the other ranks get to exit on their own
_NO_MAIN_GUARD = 86  # exit code of a rank whose script called launch() while being imported


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
            HOST, port or 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
        )
    except Exception as exc:
        if port:
            raise ConfigError(
                f"port {port} on {HOST} is already in use ({type(exc).__name__}); "
                "pass port=None (the default) to let minipar pick a free port"
            ) from None
        raise


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

    The process group is initialised before ``fn`` runs (``minipar.runtime.dist.rank()`` etc. work
    inside it) and destroyed after.

    Args:
        fn: a module-level function (see the module doc for the ``__main__`` pitfall).
        world_size: number of processes (>= 1).
        args, kwargs: passed to ``fn`` on every rank (pickled once per rank).
        backend: ``"gloo"``, ``"nccl"`` or ``"auto"``; default: the ``MINIPAR_BACKEND`` environment
            variable, else ``"gloo"`` (local processes usually share no GPUs). ``make gpu-check``
            sets ``MINIPAR_BACKEND=auto`` to run the unit tests' ranks on NCCL.
        timeout: process-group timeout in seconds (default ``minipar.runtime.dist.default_timeout()``).
        threads: intra-op threads per rank (default 1: with more, ranks fight for cores).
        port: a fixed rendezvous port; default: a free one chosen by the OS.
        prefix: prefix replayed lines with ``[rank k]``.
        job_timeout: seconds after which the whole job is stopped (default: none; collectives
            are bounded by ``timeout`` anyway).
        stream: a rank whose output is shown live, as it is written (default: none, every rank's
            output is replayed in rank order when the job ends).

    Returns:
        ``[result of rank 0, ..., result of rank world_size-1]`` (values must be picklable; tensors in
        dicts, lists and tuples come back on the CPU, wherever the rank computed them).

    Raises:
        ConfigError: bad ``world_size``/``threads``/``stream``, a ``timeout``/``job_timeout`` that is no number of
        seconds in (0, a day], a port in use, an unimportable ``fn``,
        a script that calls ``launch`` outside ``if __name__ == "__main__":``.
        The first failing rank's exception (its traceback attached as ``__cause__``), or
        :class:`RankFailedError` if a rank died without one (signal, ``os._exit``) or the job
        outlived ``job_timeout``.
    """
    from minipar.runtime import dist as mdist

    if mp.current_process().name.startswith("minipar-rank") and not in_rank():
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
    timeout_s = mdist.default_timeout().total_seconds() if timeout is None else timeout
    for name, v in (("timeout", timeout_s), ("job_timeout", job_timeout)):  # every wait: a bounded number of seconds
        if v is not None and not mdist.is_wait(v):
            raise ConfigError(f"{name}={v!r} must be a number of seconds > 0 and at most {mdist.MAX_WAIT_S:g}")
    fn_spec = _fn_spec(fn)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["torch", "torch.distributed", "torch._dynamo", "minipar.runtime.dist"]
    )  # _dynamo: torch.optim imports it (~2 s)
    store = _open_store(port, timeout_s)
    port = store.port
    tmp = JobFolder()  # removes the folders of launchers that were killed
    logs = [os.path.join(tmp.name, f"rank{r}.log") for r in range(world_size)]
    results = [os.path.join(tmp.name, f"rank{r}.pkl") for r in range(world_size)]
    env, path, cwd = dict(os.environ), list(sys.path), os.getcwd()
    watch, alive = ctx.Pipe(duplex=False)  # ranks read `watch`; only this process holds `alive`
    procs = [
        ctx.Process(
            target=run_rank,
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
    tail = Tail(logs[stream], f"[rank {stream}] " if prefix else "") if stream is not None else None
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
            replay(logs, prefix, skip=stream)  # also when stopped: what the ranks said is not lost
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
        return collect(procs, results, exit_time, job_timeout)
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
