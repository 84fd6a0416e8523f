"""The package's import graph: no module imports one that imports it back (issue: package layout).

Edges are read from the source (every ``import`` / ``from ... import`` statement, at any depth,
relative imports resolved), so a lazy import inside a function counts too: a circle hidden in a
function is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
import pathlib

import minipar

ROOT = pathlib.Path(minipar.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        parts = ("minipar",) + p.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def import_graph() -> dict[str, set[str]]:
    """``{module: {minipar modules it imports}}`` (``from pkg import submodule`` resolves to the submodule)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:  # `import minipar.pp.trace.x` -> minipar.pp.trace
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("minipar"):
                    deps.add(t)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_checker_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_point_one_way():
    """Lower layers never import higher ones: dist/errors import no strategy; strategies no job;
    the plainest loop (reference) not the main job."""
    graph = import_graph()
    low = {"minipar.dist", "minipar.errors", "minipar.comm.comm_log", "minipar.comm.collectives"}
    strategies = ("minipar.dp", "minipar.zero", "minipar.tp", "minipar.pp")
    jobs = {
        "minipar.train",
        "minipar.config",
        "minipar.parallel3d",
        "minipar.reference",
        "minipar.bench",
        "minipar.plan",
    }
    jobs |= {"minipar.perf.model", "minipar.perf.search", "minipar.perf.published"}
    for m in low:
        bad = {d for d in graph[m] if d.startswith(strategies) or d in jobs}
        assert not bad, f"{m} (a low layer) imports {bad}"
    for m, deps in graph.items():
        if m.startswith(strategies):
            assert not deps & jobs, f"strategy {m} imports the job layer: {deps & jobs}"
        if m == "minipar.reference":
            assert "minipar.train" not in deps, "the plain reference loop imports the main job"
        if m.startswith("minipar.perf"):  # the model may read strategies' formulas; tp only uses perf.factors
            assert not any(d.startswith("minipar.tp") for d in deps), f"{m} imports tensor parallelism"


def test_no_old_flat_names():
    """One name per thing: the pre-subpackage modules are gone, not kept as aliases."""
    mods = _modules()
    for old in (
        "tensor_parallel",
        "tp_layers",
        "tp_gpt",
        "tp_dtensor",
        "pipeline",
        "pipeline_schedules",
        "pipeline_trace",
        "pipeline_native",
        "zero3",
        "planner",
        "perf_model",
        "overlap",
        "accounting",
        "collectives",
        "p2p",
        "data_parallel",
        "compression",
        "param_server",
    ):
        assert f"minipar.{old}" not in mods
