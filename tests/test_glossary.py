"""lessons/GLOSSARY.md: every term is defined (in bold) where its lesson first uses it, and not used before.

The reading rule of the lessons (shape v2): a term is defined before its first use, in words a newcomer
knows, or the text links to where it is defined. GLOSSARY.md lists each term under the lesson that defines
it. For a term of lesson NN this test checks, over the markdown cells a reader sees (speaker notes excluded,
fenced code excluded):
- in lesson NN, the first cell that mentions the term holds its definition: the term inside `**bold**`;
- in every lesson before NN, a cell that mentions the term links to GLOSSARY.md or to lesson NN's notebook.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
GLOSSARY = LESSONS / "GLOSSARY.md"


def glossary() -> dict[str, list[tuple[tuple[str, ...], str]]]:
    """{lesson number: [((spelling, ...), definition), ...]} from GLOSSARY.md's tables."""
    out: dict[str, list] = {}
    lesson = None
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        m = re.match(r"## Lesson (\d\d)\b", line)
        if m:
            lesson = m.group(1)
            out.setdefault(lesson, [])
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if (
            lesson is None
            or not line.startswith("|")
            or len(cols) < 2
            or cols[0] in ("Term", "")
            or set(cols[0]) <= set("-: ")
        ):
            continue
        spellings = tuple(s.strip().strip("`*") for s in cols[0].split(" / ") if s.strip())
        out[lesson].append((spellings, cols[1]))
    return out


def notebook(nn: str) -> Path:
    (path,) = LESSONS.glob(f"{nn}_*.ipynb")
    return path


def reading_cells(nn: str) -> list[str]:
    """The markdown a reader sees in lesson `nn`, one string per cell (speaker notes and fenced code removed)."""
    cells = []
    for c in json.loads(notebook(nn).read_text(encoding="utf-8"))["cells"]:
        meta = c.get("metadata", {})
        if c["cell_type"] != "markdown" or meta.get("slideshow", {}).get("slide_type") == "notes":
            continue
        if "notes" in meta.get("tags", []):
            continue
        cells.append(re.sub(r"```.*?```", "", "".join(c["source"]), flags=re.S))
    return cells


def pattern(spelling: str) -> re.Pattern:
    """The spelling as a whole word; case-sensitive when it has capitals after its first letter (ZeRO is not zero)."""
    flags = 0 if any(ch.isupper() for ch in spelling[1:]) else re.I
    return re.compile(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", flags)


def mentions(text: str, spellings) -> bool:
    # link targets are not prose: "(01_collectives.ipynb#rank)" mentions nothing
    prose = re.sub(r"\]\([^)]*\)", "]", text)
    return any(pattern(s).search(prose) for s in spellings)


def defines(text: str, spellings) -> bool:
    return any(pattern(s).search(bold) for bold in re.findall(r"\*\*(.+?)\*\*", text, flags=re.S) for s in spellings)


TERMS = [(nn, spellings) for nn, rows in sorted(glossary().items()) for spellings, _ in rows]


def test_glossary_has_a_section_per_lesson_and_terms_for_the_first_five():
    sections = glossary()
    numbers = sorted(p.name[:2] for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))
    assert sorted(sections) == numbers, f"GLOSSARY.md sections {sorted(sections)} vs lessons {numbers}"
    empty = [nn for nn in ("00", "01", "02", "03", "04") if not sections[nn]]
    assert not empty, f"lessons {empty} define no glossary term"
    seen: dict[str, str] = {}
    for nn, spellings in TERMS:
        for s in spellings:
            assert s.lower() not in seen, f"{s!r} is listed under lesson {seen[s.lower()]} and lesson {nn}"
            seen[s.lower()] = nn


@pytest.mark.parametrize("nn,spellings", TERMS, ids=[f"{nn}:{s[0]}" for nn, s in TERMS])
def test_term_defined_at_first_use_and_linked_before(nn, spellings):
    cells = reading_cells(nn)
    first = next((i for i, text in enumerate(cells) if mentions(text, spellings)), None)
    assert first is not None, f"lesson {nn} never uses {spellings[0]!r}, which GLOSSARY.md says it defines"
    assert defines(cells[first], spellings), (
        f"lesson {nn}: the first markdown cell that uses {spellings[0]!r} does not define it in bold "
        f"(**{spellings[0]}**): {cells[first][:160]!r}"
    )
    target = notebook(nn).name
    for earlier in sorted(p.name[:2] for p in LESSONS.glob("[0-9][0-9]_*.ipynb")):
        if earlier >= nn:
            break
        for text in reading_cells(earlier):
            if mentions(text, spellings):
                assert "GLOSSARY.md" in text or target in text, (
                    f"lesson {earlier} uses {spellings[0]!r} (defined in lesson {nn}) without linking "
                    f"GLOSSARY.md or {target}: {text[:160]!r}"
                )
