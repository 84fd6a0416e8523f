"""Write the learner's files ``exercises/exNN_*.py`` from the reference solutions (maintainers only).

    python -m exercises.make_stubs          # rewrite every stub from exercises/solutions/
    python -m exercises.make_stubs --check  # exit 1 if a stub is out of date (tests run this)

Every function or method whose docstring contains ``Hint:`` is an exercise: its body after the
docstring becomes ``raise NotImplementedError("not implemented yet: <name>")``. Everything else
(imports, given helpers, class skeletons) is copied as is, so stub and solution share one API.
Do not run it after editing a stub by hand: it overwrites the stubs. ``--check`` also fails when a
lesson's ``Lesson.module`` (``exercises/checks/lessonNN.py``) has no solution, or a solution no lesson.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def stub_source(src: str) -> str:
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    cuts = []  # (first line, last line, indent, name), 1-based inclusive

    def visit(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(child) or ""
                if "Hint:" in doc and len(child.body) > 1:
                    first, last = child.body[1], child.body[-1]
                    indent = " " * first.col_offset
                    cuts.append((first.lineno, last.end_lineno, indent, prefix + child.name))
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(tree)
    for first, last, indent, name in sorted(cuts, reverse=True):
        lines[first - 1 : last] = [f'{indent}raise NotImplementedError("not implemented yet: {name}")\n']
    return "".join(lines)


def main(argv=None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for sol in sorted((HERE / "solutions").glob("ex[0-9][0-9]_*.py")):
        stub = HERE / sol.name
        text = stub_source(sol.read_text(encoding="utf-8"))
        if check:
            if not stub.exists() or stub.read_text(encoding="utf-8") != text:
                stale.append(stub.name)
        else:
            stub.write_text(text, encoding="utf-8")
    if stale:
        print(f"stubs out of date with their solutions: {stale}; run python -m exercises.make_stubs")
        return 1
    if check:
        from exercises.check import lessons

        solutions = {p.stem for p in (HERE / "solutions").glob("ex[0-9][0-9]_*.py")}
        modules = {lesson.module for lesson in lessons().values()}
        if solutions != modules:
            print(
                f"solutions without a lesson: {sorted(solutions - modules)}; lessons without a solution: "
                f"{sorted(modules - solutions)} (each exercises/checks/lessonNN.py names its module in LESSON)"
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
