"""The README's API table ("Use minipar in your homework") is true (issue 33): every line of its
"import" column imports, each public name is listed once, and every minipar name the homework's
starter code and the exercises' files import is in it."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"^from (minipar(?:\.\w+)*) import (\w+(?:, \w+)*)$")


def api_table() -> list[tuple[str, list[str]]]:
    """``[(what, ["from minipar.x import a, b", ...]), ...]``: the rows of the README's API table (the
    table whose header is ``| what | import | use |``, under "Use minipar in your homework")."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("| what | import | use |")
    out = []
    for ln in lines[start + 2 :]:  # after the header and its |---| line
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return out


def listed() -> dict[tuple[str, str], str]:
    """``{(module, name): row}`` for every name the table imports."""
    names = {}
    for what, stmts in api_table():
        for stmt in stmts:
            m = IMPORT.match(stmt)
            assert m, f"row {what!r}: {stmt!r} is not 'from minipar.x import a, b'"
            for name in m.group(2).split(", "):
                assert (m.group(1), name) not in names, f"{m.group(1)}.{name} is listed twice"
                names[(m.group(1), name)] = what
    return names


def test_the_table_has_its_rows():
    rows = api_table()
    assert len(rows) >= 10 and all(stmts for _, stmts in rows), rows


@pytest.mark.parametrize("what,stmts", api_table(), ids=[w for w, _ in api_table()])
def test_every_row_imports(what, stmts):
    for stmt in stmts:
        exec(stmt, {})  # noqa: S102 - the README's own import lines


def test_every_name_is_listed_once():
    names = [name for _, name in listed()]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"listed under two modules: {twice}"


def _learner_imports() -> set[tuple[str, str, str]]:
    """``(file, module, name)`` of every ``from minipar... import name`` in the homework's starter code
    (not its checkers) and the exercises' files (stubs and solutions)."""
    files = [p for p in (ROOT / "homework").rglob("*.py") if p.name not in ("check.py", "__init__.py")]
    files += sorted((ROOT / "exercises").glob("ex[0-9][0-9]_*.py"))
    out = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "minipar":
                out |= {(str(path.relative_to(ROOT)), node.module, a.name) for a in node.names}
    return out


def test_what_homework_and_exercises_import_is_in_the_table():
    names = listed()
    modules = {mod for mod, _ in names}
    missing = [
        f"{f}: from {mod} import {name}"
        for f, mod, name in sorted(_learner_imports())
        if (mod, name) not in names and f"{mod}.{name}" not in modules  # a module imported whole: its row
    ]
    assert not missing, "not in the README's API table:\n" + "\n".join(missing)
