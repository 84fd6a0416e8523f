"""Root cause of a failed launch: which rank failed on its own, and which only saw a peer go.

When one rank of a job fails, its peers fail too, a moment later, with symptoms ("Connection
closed by peer", a collective timing out). Reporting the first traceback to arrive would often
name a victim. :func:`collect` reads every rank's result file and ranks the failures:

1. a rank that raised (or died: signal, ``os._exit``) on its own, earliest first;
2. ranks whose error is only a peer symptom (:data:`_PEER_SYMPTOMS`);
3. ranks that ``launch`` stopped itself.

If every failure is a symptom, no rank raised: a rank skipped a collective or called one too
many. :func:`collect` then names the likely culprit from who returned, who was blocked and who
was still busy, and says when it cannot tell. The first real failure is re-raised with its
rank's traceback attached as ``__cause__`` (:class:`RemoteTraceback`); a rank that died without
a Python exception raises :class:`~minipar.errors.RankFailedError`. torchrun's elastic agent
reports a ``ChildFailedError`` "root cause" the same way (the first failure by time).

:func:`summary` says it in one line (rank, exception type and message, where it was raised), for
a terminal that needs no stack of frames; the full traceback stays on the exception.
"""

from __future__ import annotations

import os
import pickle
import re
import sysconfig
import traceback

from minipar.errors import RankFailedError

# Errors a rank sees when a *peer* died: symptoms, not causes.
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


def collect(procs, results, exit_time, job_timeout):
    """Every rank's return value, by rank; or raise the failure that caused the others.

    Args:
        procs: the ranks' finished ``multiprocessing`` processes (for exit codes).
        results: the ranks' result-file paths (see :mod:`minipar.runtime.rank_process`).
        exit_time: when the parent saw each rank exit (``inf``: stopped by ``launch``).
        job_timeout: ``launch``'s, to name a rank it stopped for running too long.
    """
    values, failures, finished = [], [], []
    for r, path in enumerate(results):
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
    last = tb.strip().splitlines()[-1] if tb.strip() else "no traceback"
    raise RankFailedError(f"rank {r} failed: {last}", rank=r, exitcode=procs[r].exitcode) from cause


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def summary(exc: BaseException, rank: int | None = None) -> str:
    """One line for ``exc``: ``rank R: Type: message (at file:line, in function)``.

    The rank comes from the ``[rank R]`` that :func:`collect` puts before the message (else
    ``rank``, if given); the place is the innermost frame of the rank's traceback (the
    ``__cause__`` :func:`collect` attaches, else ``exc``'s own) outside Python's and the installed
    packages' code, so it points at the code that raised, not at torch's internals. A
    :class:`RankFailedError` names its rank and has no Python frame of its own: only its message.
    """
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else ""
    m = re.match(r"\[rank (\d+)\] ?(.*)", msg)
    if m:
        rank, msg = int(m.group(1)), m.group(2)
    if isinstance(exc, RankFailedError):
        return msg
    cause = exc.__cause__
    tb = cause.args[0] if isinstance(cause, RemoteTraceback) else "".join(traceback.format_tb(exc.__traceback__))
    frames = _FRAME.findall(tb)
    libs = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})
    own = [f for f in frames if not f[0].startswith(libs) and not f[0].startswith("<")] or frames
    where = ""
    if own:
        path, line, fn = own[-1]
        rel = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
        where = f" (at {rel}:{line}, in {fn})"
    who = f"rank {rank}: " if rank is not None else ""
    return f"{who}{type(exc).__name__}: {msg}{where}"
