"""Launching ranks for a lesson's output: what they printed captured, run-to-run noise removed, the
environment set for one launch. Lessons show failures on purpose (a hang, a mismatched collective), and
a notebook's stored output must read the same on every run (``quiet_fds``: C++ log lines silenced;
``raised``: what a call raised, as text).

    with env(TORCH_DISTRIBUTED_DEBUG="DETAIL"):           # the ranks of this launch inherit it
        res = launch_quiet(fn, world_size=2, timeout=5)
    print(stable_message(res[0]))                        # no ports, source paths or milliseconds
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from contextlib import redirect_stdout


def launch_capture(fn, *args, raise_: bool = True, **kwargs):
    """:func:`minipar.launch` returning ``(results, what the ranks printed)`` (their replayed output).

    With ``raise_=False`` a failed job returns ``(the exception, output)`` instead of raising.
    """
    from minipar import launch

    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            return launch(fn, *args, **kwargs), buf.getvalue()
    except Exception as exc:  # noqa: BLE001
        if raise_:
            raise
        return exc, buf.getvalue()


def launch_quiet(fn, *args, **kwargs):
    """:func:`minipar.launch` with the ranks' replayed output swallowed (it may hold PIDs or timestamps)."""
    return launch_capture(fn, *args, **kwargs)[0]


def raised(call, catch: type[BaseException] = Exception, with_type: bool = True) -> str:
    """What ``call()`` raised: ``"Type: message"`` (or the message alone, ``with_type=False``), or "no error".
    An exception that is not a ``catch`` propagates. For the mistakes a lesson makes on purpose."""
    try:
        call()
    except catch as exc:
        return f"{type(exc).__name__}: {exc}" if with_type else str(exc)
    return "no error"


def stable_message(message: str) -> str:
    """An error message without the parts that change from run to run: C++ source paths, ports, timings."""
    message = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", message)
    message = re.sub(r"\[?127\.0\.0\.1\]?:\d+", "127.0.0.1:<port>", message)
    message = re.sub(r"\b\d{1,5}ms\b", "<N>ms", message)
    return message.split(" GLHF")[0].strip()


@contextlib.contextmanager
def quiet_fds(fds: tuple[int, ...] = (1, 2)):
    """Send these file descriptors (stdout, stderr) to /dev/null inside the ``with`` block: the C++ side of
    ``torch.profiler`` logs start/stop lines with a time stamp and a PID there, which a notebook would show."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved, null = [os.dup(fd) for fd in fds], os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(null, fd)
        yield
    finally:
        for fd, s in zip(fds, saved):
            os.dup2(s, fd)
            os.close(s)
        os.close(null)


@contextlib.contextmanager
def env(**values):
    """Set environment variables for the ranks launched inside the ``with`` block (restored after)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fingerprint_summary(msg: str) -> str:
    """The two collective fingerprints of a ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` mismatch error, in one line
    without device details: which rank runs which collective (sequence number, op, shape) and how they differ."""
    fps = re.findall(
        r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
        r"OpType=(\w+), TensorShape=(\[[^\]]*\])",
        msg,
    )
    aspects = re.search(r"differ in the following aspects:\s*(.*)", msg)
    if len(fps) != 2:
        return "unexpected error: " + msg.splitlines()[0][:200]
    (ra, sa, oa, ta), (rb, sb, ob, tb) = fps
    diff = re.sub(r"(\S)vs ", r"\1 vs ", re.sub(r"\s+", " ", aspects.group(1)).strip()) if aspects else "?"
    return f"I (rank {ra}) run collective #{sa} {oa} {ta}, rank {rb} runs #{sb} {ob} {tb} -> differ in: {diff}"
