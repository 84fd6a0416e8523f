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


MAX_ROOT_MODULES = 8


def test_the_root_holds_few_modules():
    """The root of minipar/ holds the package's entry points, not its parts (issue #33: at most 8 modules)."""
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, (
        f"{len(root)} modules at the root of minipar/ (move them into a layer): {root}"
    )


def test_course_tooling_is_imported_by_no_library_module():
    """minipar.course (verify, bench, gpu_check, traces) sits beside the library: nothing outside it imports it."""
    from tests.test_imports import import_graph

    bad = {
        m: sorted(d for d in deps if d.startswith("minipar.course"))
        for m, deps in import_graph().items()
        if not m.startswith("minipar.course") and any(d.startswith("minipar.course") for d in deps)
    }
    assert not bad, f"library modules importing the course's tooling: {bad}"
