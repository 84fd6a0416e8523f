"""The folders a run writes (``--out``, ``--ckpt-dir``): checked before any rank starts, locked while
the run writes them, and written so that a failed run never leaves a mix of two runs' files.

- :func:`check_folder`: a folder that is a file, lies under a file or cannot be written is a
  :class:`~minipar.errors.ConfigError` (one line: the path and the fix), raised by
  :func:`minipar.job.config.check` before any rank starts, not a traceback at the first save.
- :func:`hold`: one run per folder. The run holds an exclusive ``flock`` on ``FOLDER/.minipar.lock``
  (which also holds its PID, for the message) until it ends; a second run on the folder is refused
  naming that PID. The kernel drops the lock when its process dies, however it dies (``SIGKILL``
  too), so the file a dead run left behind is a stale lock that the next run simply takes over.
  A lock covers the folder's whole tree: a run is also refused a folder inside one another run
  holds (``--ckpt-dir A/ckpt`` while a run writes ``--out A``), or one that contains such a folder.
- :func:`write_atomically` and :data:`PARTIAL`: an output is written under ``NAME.partial`` in the same
  folder and renamed to ``NAME`` (``os.replace``: atomic on one file system) as the run's last act.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Callable, Iterator

from minipar.errors import ConfigError

LOCK = ".minipar.lock"
PARTIAL = ".partial"  # suffix of a file being written; renamed to its real name when complete


def check_folder(path: str, flag: str, write: bool = True) -> None:
    """Raise :class:`ConfigError` if folder ``path`` (the value of ``flag``) cannot be used.

    It may not exist yet (it is created), but then its nearest existing parent must be a folder
    (and writable, with ``write``). Nothing is created or touched.

    Raises:
        ConfigError: ``path`` is a file, lies under a file, or (``write``) cannot be written; or (``write``)
        it is ``/``, the working directory itself, or one of this repository's source folders or a folder in
        one (:data:`SOURCE_FOLDERS`): a run would write its outputs among files it did not make.
    """
    full = os.path.abspath(path)
    if write:
        _check_not_a_source_folder(path, full, flag)
    if os.path.exists(full) and not os.path.isdir(full):
        raise ConfigError(f"{flag} {path} is a file, not a folder; use another {flag} (or move that file away)")
    parent = full
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{flag} {path} lies under {parent}, which is a file, not a folder; use another {flag}")
    if write and not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {path}: {parent} is not writable (permission denied or a read-only file system); "
            f"use a {flag} you can write to"
        )


# The repository's own folders (beside the package) that no run writes into; runs/ is where runs go.
SOURCE_FOLDERS = ("minipar", "lessons", "exercises", "homework", "tests", "slides", "examples", ".git")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # minipar/job/ -> the repository


def _check_not_a_source_folder(path: str, full: str, flag: str) -> None:
    real = os.path.realpath(full)
    if real == os.path.dirname(real):
        raise ConfigError(f"{flag} {path} is the file system's root; use a folder of its own, e.g. {flag} runs/x")
    if real == os.path.realpath(os.getcwd()):
        raise ConfigError(
            f"{flag} {path} is the working directory itself, whose files the run would mix with its own; "
            f"use a folder of its own, e.g. {flag} runs/x"
        )
    for name in SOURCE_FOLDERS:
        src = os.path.realpath(os.path.join(REPO, name))
        if os.path.isdir(src) and (real == src or real.startswith(src + os.sep)):
            raise ConfigError(
                f"{flag} {path} lies in the repository's source folder {name}/; use a folder of its own, "
                f"e.g. {flag} runs/x"
            )


def _lock(folder: str, flag: str) -> int:
    """Take ``folder``'s lock (creating the folder); return the open descriptor that holds it."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # check_folder passed, yet the file system refuses (/proc, a full disk, a race)
        raise ConfigError(f"{flag} {folder}: cannot create it ({e.strerror}); use a {flag} you can write to") from None
    path = os.path.join(folder, LOCK)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                f"{flag} {folder} is in use by another run (PID {pid}, lock file {path}); "
                f"wait for it to end, or use another {flag}"
            ) from None
        except OSError:  # a file system without flock: run unlocked rather than not at all
            return fd
        try:  # the holder we waited out may have removed the file: then lock the new one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


MAX_SCAN = 10_000  # folders looked at below a locked folder for other runs' locks (bounded: --out may be big)


def _held_by_other(lock_path: str) -> str | None:
    """The PID written in ``lock_path`` if another live run holds it, else None (a stale or absent lock)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 64).decode(errors="replace").strip() or "unknown"
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops the shared lock just taken
    return None


def _check_tree(folder: str, flag: str, own: set[str]) -> None:
    """Raise :class:`ConfigError` if another run holds a folder above ``folder`` or below it.

    ``own``: the real paths of the lock files this run holds (they do not count).
    """
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    while True:
        lock = os.path.join(parent, LOCK)
        pid = None if lock in own else _held_by_other(lock)
        if pid is not None:
            raise ConfigError(
                f"{flag} {folder} lies inside {parent}, which another run writes (PID {pid}, lock file {lock}); "
                f"use a {flag} outside it, or wait for that run to end"
            )
        if parent == os.path.dirname(parent):
            break
        parent = os.path.dirname(parent)
    for n, (here, _, files) in enumerate(os.walk(real)):
        if n >= MAX_SCAN:
            break
        lock = os.path.join(here, LOCK)
        if here != real and LOCK in files and lock not in own and (pid := _held_by_other(lock)) is not None:
            raise ConfigError(
                f"{flag} {folder} contains {here}, which another run writes (PID {pid}, lock file {lock}); "
                f"use another {flag}, or wait for that run to end"
            )


def _unlock(folder: str, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, LOCK))  # while still held: no other run can have taken it
    os.close(fd)


@contextlib.contextmanager
def hold(folders: dict[str, str | None]) -> Iterator[None]:
    """Hold the lock of every folder in ``{flag: path}`` (None/empty paths skipped) for the ``with`` block.

    Released when the block ends, also by an exception; by the kernel if the process dies.
    Raises:
        ConfigError: a folder, a folder above it or a folder below it is held by another live run (its
        PID and the lock file named).
    """
    for flag, folder in folders.items():  # before creating anything: another run's tree is not touched
        if folder:
            _check_tree(folder, flag, set())
    with contextlib.ExitStack() as stack:
        seen, own = [], set()
        for flag, folder in folders.items():
            if not folder:
                continue
            real = os.path.realpath(folder)
            if any(real == s or real.startswith(s + os.sep) for s in seen):
                continue  # under a folder already held (the default --ckpt-dir is OUT/ckpt)
            seen.append(real)
            fd = _lock(folder, flag)  # first take it, then look around: of two runs racing, one sees the other
            stack.callback(_unlock, folder, fd)
            own.add(os.path.join(real, LOCK))
        for flag, folder in folders.items():
            if folder:
                _check_tree(folder, flag, own)
        yield


def write_atomically(path: str, write: Callable, binary: bool = False) -> str:
    """Call ``write(f)`` on ``path + PARTIAL`` opened for writing; return that temporary path.

    The caller renames it with :func:`publish` once every output is written, so either all of a
    run's outputs change or none does.
    """
    tmp = path + PARTIAL
    with open(tmp, "wb" if binary else "w") as f:
        write(f)
    return tmp


def publish(paths: list[str]) -> None:
    """Rename every ``NAME.partial`` in ``paths`` to ``NAME`` (``os.replace``: atomic), in order."""
    for tmp in paths:
        os.replace(tmp, tmp[: -len(PARTIAL)])
