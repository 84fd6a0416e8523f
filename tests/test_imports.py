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
                while t and t not in mods:  # `import minipar.course.pipeline_trace.x` -> minipar.course.pipeline_trace
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


# The layers of the package, bottom to top (minipar/__init__.py draws them). A folder (or a root module)
# may import from its own layer's other folders and from layers below, never from one above; no two
# folders import each other in a circle (test_no_circle_between_folders).
LAYERS = [
    ("errors",),
    ("data",),
    ("runtime",),
    ("comm",),
    ("model", "optim"),
    ("dp", "zero", "tp", "pp", "cp", "ep"),  # one folder per parallelism
    ("checkpoint",),
    ("perf",),
    ("clock",),
    ("job",),
    ("train", "plan"),
    ("course",),  # beside the library: nothing outside it imports it
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def folder_of(module: str) -> str | None:
    """``minipar.zero.stage12`` -> ``zero``; ``minipar.train`` -> ``train``; ``minipar`` -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def folder_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """``{(folder, folder it imports): [the module edges behind it]}``, edges inside one folder left out."""
    edges: dict[tuple[str, str], list[str]] = {}
    for m, deps in graph.items():
        for d in deps:
            a, b = folder_of(m), folder_of(d)
            if a and b and a != b:
                edges.setdefault((a, b), []).append(f"{m} -> {d}")
    return edges


def test_every_folder_has_a_layer():
    """A new folder or root module must be placed in LAYERS (and in minipar/__init__.py's drawing)."""
    missing = {folder_of(m) for m in import_graph() if folder_of(m)} - set(LAYER_OF)
    assert not missing, f"place these in tests/test_imports.py's LAYERS: {sorted(missing)}"


def test_imports_point_down_the_layers():
    """No folder imports one above it: runtime imports no parallelism, a parallelism no job, nothing the course."""
    up = {
        (a, b): why
        for (a, b), why in folder_graph(import_graph()).items()
        if LAYER_OF.get(a, len(LAYERS)) < LAYER_OF.get(b, len(LAYERS))
    }
    assert not up, "imports that point up the layers: " + "; ".join(f"{a} -> {b} ({w[0]})" for (a, b), w in up.items())


def test_no_circle_between_folders():
    """No circle between subpackages, although each module-level graph is acyclic: zero -> ep -> zero would be one."""
    edges = folder_graph(import_graph())
    folders: dict[str, set[str]] = {}
    for a, b in edges:
        folders.setdefault(a, set()).add(b)
    cycle = find_cycle(folders)
    assert cycle is None, "circle between folders: " + " -> ".join(cycle)


def test_the_layer_checker_sees_an_upward_import():
    graph = {"minipar.runtime.dist": {"minipar.zero.flat"}, "minipar.zero.flat": set()}
    assert folder_graph(graph) == {("runtime", "zero"): ["minipar.runtime.dist -> minipar.zero.flat"]}
    assert LAYER_OF["runtime"] < LAYER_OF["zero"]


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
        # issue #33: the flat root of 26 modules became layers (runtime/, model/, optim/, job/, course/ ...)
        "dist",
        "launch",
        "rank_process",
        "root_cause",
        "mesh",
        "models",
        "presets",
        "recompute",
        "memory",
        "amp",
        "offload",
        "clip_grads",
        "config",
        "parallel3d",
        "outdir",
        "run_log",
        "reference",
        "resume_check",
        "bench",
        "benchmarks",
        "gpu_check",
        "verify",
        "moe",
        "pp.trace",
        "perf.factors",
    ):
        assert f"minipar.{old}" not in mods
