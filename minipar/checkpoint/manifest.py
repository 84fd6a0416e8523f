"""What a checkpoint's files were when they were written: their sizes and SHA-256 checksums (issue #36, item 6).

:func:`minipar.checkpoint.dcp.save` records :func:`checksums` of every file of the checkpoint folder in its
``minipar.json`` (``"files": {name: [bytes, sha256]}``); :func:`minipar.checkpoint.resume.damage` compares
the folder with them (:func:`mismatch`), so a shard overwritten by another run's file of the same size, or
bytes changed inside one, is named and the previous checkpoint used, instead of loading silently or
tracing back deep inside DCP.
"""

from __future__ import annotations

import hashlib
import os

CHUNK = 1 << 20  # bytes read at a time


def digest(path: str) -> str:
    """The SHA-256 of file ``path``'s bytes, as 64 hex digits (read in 1 MiB pieces: no file is held whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """The SHA-256 of ``text`` encoded as UTF-8 (what a run's ``--data`` held), as 64 hex digits."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def checksums(folder: str, skip: tuple[str, ...] = ()) -> dict[str, list]:
    """``{file name: [size in bytes, sha256]}`` of every regular file directly in ``folder`` but ``skip``."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name not in skip and os.path.isfile(path) and not os.path.islink(path):
            out[name] = [os.path.getsize(path), digest(path)]
    return out


def mismatch(folder: str, files: object) -> str | None:
    """What differs between ``folder`` and ``files`` (as :func:`checksums` recorded them): ``"NAME is …"``, or None.

    ``files`` comes from a JSON file, so anything that is not ``{name: [size, sha256]}`` is reported too.
    """
    if not isinstance(files, dict):
        return "minipar.json's checksums are not a JSON object"
    for name, want in sorted(files.items()):
        if os.sep in name or name in ("", ".", "..") or not (isinstance(want, list) and len(want) == 2):
            return f"minipar.json's checksum entry {name!r} is malformed"
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return f"{name} is missing"
        size = os.path.getsize(path)
        if size != want[0]:
            return f"{name} is {size} bytes, {want[0]} when it was saved"
        if digest(path) != want[1]:
            return f"{name} does not match its checksum (changed since it was saved, or another run's file)"
    return None
