"""Every notebook's cell ids are unique (nbformat silently renames a duplicate when it validates, so a slide, a
test or a link that names a cell by id would find another one)."""

import collections
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "lessons").glob("*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_cell_ids_are_unique(nb):
    ids = [c.get("id") for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]]
    twice = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not twice and None not in ids, f"{nb.name}: cell ids used twice {twice} or missing"
