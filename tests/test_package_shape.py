"""The package's shape (issue: one definition of each thing): every module one concept, short enough to
read top to bottom, and no module or alias left at a name the layout moved away from."""

from __future__ import annotations

import pathlib

import minipar

ROOT = pathlib.Path(minipar.__file__).parent
MAX_LINES = 350

# Old homes of moved modules: nothing may come back there (the course keeps no aliases).
MOVED = {
    "accounting.py": "minipar/comm/comm_log.py",
    "collectives.py": "minipar/comm/collectives.py",
    "p2p.py": "minipar/comm/p2p.py",
    "data_parallel.py": "minipar/dp/ddp.py",
    "compression.py": "minipar/dp/compression.py",
    "param_server.py": "minipar/dp/param_server.py",
    "planner.py": "minipar/perf/",
    "perf_model.py": "minipar/perf/",
    "overlap.py": "minipar/perf/timeline.py",
}


def test_no_module_is_longer_than_350_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along their concepts): {long}"


def test_moved_modules_have_no_alias_left():
    back = [f"minipar/{old} (now {new})" for old, new in MOVED.items() if (ROOT / old).exists()]
    assert not back, f"an old module name is back: {back}"
