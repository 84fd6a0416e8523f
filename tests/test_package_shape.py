"""The package's shape (issue: one definition of each thing): every module one concept, short enough to
read top to bottom. (That no moved module left an alias behind: ``tests/test_imports.py``.)"""

from __future__ import annotations

import pathlib

import minipar

ROOT = pathlib.Path(minipar.__file__).parent
MAX_LINES = 350


def test_no_module_is_longer_than_350_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along their concepts): {long}"
