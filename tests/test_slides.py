"""Slides: every lesson has a deck in slides/ that is in step with it, and every deck works
offline in a real browser (headless Chromium, networking off).

The browser tests are skipped, with the reason, where Chromium is absent (.ci/run installs the
Debian package `chromium`). Screenshots of each deck's first slide and first figure slide go to
runs/test-output/slides/ for a person to look at.
"""

import base64
import io
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from slides import browser, build

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "runs" / "test-output" / "slides"
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
LESSON_PARAMS = [pytest.param(p, id=p.stem) for p in LESSONS] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no lessons/NN_*.ipynb yet: no deck to check"))
]


@pytest.fixture(scope="module")
def chromium():
    exe = browser.find_chromium()
    if exe is None:
        pytest.skip(
            "Chromium not found, so decks are not checked in a browser: install it "
            "(Debian: apt-get install chromium; .ci/run does) or set CHROMIUM=/path/to/chrome"
        )
    with browser.Chromium(exe) as b:
        yield b


def slide_cells(nb) -> int:
    """What the notebook marks as slides: one per `slide` or `subslide` cell."""
    return sum(build.slide_type(c) in ("slide", "subslide") for c in nb.cells)


def assert_works_offline(r: dict, nb, allowed: list[Path]):
    """reveal.js ready; one slide per slide cell; every image decoded; formulas typeset; no
    request other than files under `allowed` or data: URIs; no failed load; no JS error."""
    assert r["ready"]
    assert r["total"] == slide_cells(nb), (
        f"deck shows {r['total']} slides, notebook marks {slide_cells(nb)} slide/subslide cells "
        "(is the first cell, the title, marked 'slide'? is the deck stale? run make slides)"
    )
    assert r["images_broken"] == [], f"images that did not load: {r['images_broken']}"
    assert r["math_errors"] == 0, f"{r['math_errors']} formulas MathJax could not typeset"
    assert r["math_raw"] == 0, f"{r['math_raw']} slides still show TeX delimiters"
    for url in r["requests"]:
        u = urlparse(url)
        assert u.scheme in ("file", "data"), f"a request left the machine: {url}"
        if u.scheme == "file":
            path = Path(unquote(u.path)).resolve()
            assert any(path.is_relative_to(a) for a in allowed), f"loaded from outside: {path}"
    assert r["failed"] == [], f"failed loads: {r['failed']}"
    assert r["exceptions"] == [], f"JavaScript errors: {r['exceptions']}"


def demo_notebook() -> nbformat.NotebookNode:
    """A lesson in miniature, outputs stored: title, an idea with inline math, a display
    formula, a matplotlib figure with a printed result, and a set-up cell marked skip.
    4 slide cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 2))
    ax.bar(["params", "grads", "optimizer"], [4, 4, 8])
    ax.set_ylabel("bytes per parameter")
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)

    def cell(kind, src, slide_type, **kw):
        c = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(src, **kw)
        c.metadata["slideshow"] = {"slide_type": slide_type}
        return c

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        cell("md", "# 99 · Demo: memory of one replica\n\nWhat a replica holds.", "slide"),
        cell("code", "import torch", "skip"),
        cell("md", "## The idea\n\nAdam keeps $2$ extra floats per parameter: $16\\Psi$ bytes.", "slide"),
        cell("md", "$$M = (2 + 2 + 12)\\,\\Psi$$", "subslide"),
        cell(
            "code",
            "plot()",
            "subslide",
            outputs=[
                nbformat.v4.new_output(
                    "display_data", {"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure>"}
                )
            ],
        ),
        cell("code", "print(16)", "-", outputs=[nbformat.v4.new_output("stream", name="stdout", text="16\n")]),
    ]
    return nb


def test_build_writes_an_offline_deck_with_its_source_digest(tmp_path):
    nb_path = tmp_path / "99_demo.ipynb"
    nbformat.write(demo_notebook(), nb_path)
    deck = build.build(nb_path, tmp_path)
    html = deck.read_text(encoding="utf-8")
    assert build.external_loads(html) == []
    assert f'content="{build.source_digest(nbformat.read(nb_path, as_version=4))}"' in html
    assert "import torch" not in html and "plot()" not in html  # code inputs left out
    assert "<title>99 · Demo: memory of one replica slides</title>" in html


def test_external_loads_finds_cdn_scripts_but_not_links():
    html = (
        '<script src="https://unpkg.com/reveal.js"></script><a href="https://arxiv.org/abs/1910.02054">'
        '<link rel="stylesheet" href="//cdn.example/x.css"><img src="data:image/png;base64,AA">'
        "<script type=module>import m from 'https://cdn/mermaid.mjs';</script>"
    )
    assert build.external_loads(html) == [
        "//cdn.example/x.css",
        "https://cdn/mermaid.mjs",
        "https://unpkg.com/reveal.js",
    ]


def test_unknown_lesson_number_names_the_lessons_there():
    with pytest.raises(SystemExit, match="use LESSON=NN"):
        build.find_lessons(["77"])


def test_demo_deck_works_offline_in_chromium(tmp_path, chromium):
    nb_path = tmp_path / "99_demo.ipynb"
    nbformat.write(demo_notebook(), nb_path)
    deck = build.build(nb_path, tmp_path)
    r = browser.check_deck(chromium, deck, SHOTS)
    assert_works_offline(r, nbformat.read(nb_path, as_version=4), [tmp_path.resolve(), build.VENDOR])
    assert r["total"] == 4 and r["images"] == 1 and r["math"] >= 2
    assert all(p.stat().st_size > 5000 for p in r["shots"]) and len(r["shots"]) == 2


def test_browser_check_sees_a_request_leave_the_machine(tmp_path, chromium):
    """The check itself: a deck that asks a CDN for a script is caught (offline, it fails)."""
    nb_path = tmp_path / "99_demo.ipynb"
    nbformat.write(demo_notebook(), nb_path)
    deck = build.build(nb_path, tmp_path)
    html = deck.read_text(encoding="utf-8")
    deck.write_text(html.replace("</body>", '<script src="https://cdn.example.com/x.js"></script></body>'))
    r = browser.check_deck(chromium, deck)
    assert "https://cdn.example.com/x.js" in r["requests"]
    assert any("cdn.example.com" in f for f in r["failed"])
    with pytest.raises(AssertionError, match="left the machine"):
        assert_works_offline(r, nbformat.read(nb_path, as_version=4), [tmp_path.resolve(), build.VENDOR])


@pytest.mark.parametrize("lesson", LESSON_PARAMS)
def test_deck_is_in_step_with_its_lesson(lesson):
    deck = build.SLIDES / f"{lesson.stem}.html"
    assert deck.exists(), f"no deck for {lesson.name}: run make slides LESSON={lesson.name[:2]}"
    html = deck.read_text(encoding="utf-8")
    digest = build.source_digest(nbformat.read(lesson, as_version=4))
    assert f'name="{build.DIGEST_META}" content="{digest}"' in html, (
        f"{deck.name} is out of date with {lesson.name}: run make slides LESSON={lesson.name[:2]}"
    )
    assert build.external_loads(html) == []


@pytest.mark.parametrize("lesson", LESSON_PARAMS)
def test_deck_works_offline_in_chromium(lesson, chromium):
    deck = build.SLIDES / f"{lesson.stem}.html"
    if not deck.exists():
        pytest.fail(f"no deck for {lesson.name}: run make slides LESSON={lesson.name[:2]}")
    nb = nbformat.read(lesson, as_version=4)
    r = browser.check_deck(chromium, deck, SHOTS)
    assert_works_offline(r, nb, [build.SLIDES])
    assert r["shots"], "no screenshot taken"


# Decks whose lessons still have slides taller than the slide area (measured 2026-11-22 with
# slides/browser.py: 960×700 logical px, shown in a 1280×720-class window). The notebooks belong to
# other work in flight; once a deck is fixed and rebuilt, drop it from this set.
# 30 of 128 slides then: 00: 1, 02: 6, 03: 6, 04: 7, 05: 1, 06: 3, 07: 6 (01: none); all fixed
# 2026-11-23 (speaker notes, subslides). Keep it empty: a new deck that scrolls fails.
OVERFLOW_TODO: set[str] = set()


def _overflow_param(p):
    if p.stem in OVERFLOW_TODO:
        return pytest.param(
            p,
            id=p.stem,
            marks=pytest.mark.xfail(
                reason="slides taller than the viewport: move detail into speaker notes (issue 13), "
                "then rebuild the deck and drop the lesson from OVERFLOW_TODO",
                strict=False,
            ),
        )
    return pytest.param(p, id=p.stem)


@pytest.mark.parametrize("lesson", [_overflow_param(p) for p in LESSONS] or LESSON_PARAMS)
def test_no_slide_is_taller_than_the_viewport(lesson, chromium):
    """A slide that scrolls hides its bottom in a talk: every slide must fit the slide area."""
    deck = build.SLIDES / f"{lesson.stem}.html"
    if not deck.exists():
        pytest.fail(f"no deck for {lesson.name}: run make slides LESSON={lesson.name[:2]}")
    r = browser.check_deck(chromium, deck)
    detail = "; ".join(
        f"slide {i} {title!r}: {sh} px of content in {ch} px" for i, sh, ch, title in r["overflow_detail"]
    )
    assert r["overflow"] == [], (
        f"{deck.name}: {len(r['overflow'])} of {r['total']} slides scroll ({detail}); move "
        "detail into speaker notes (a cell with slide_type 'notes') or split the slide"
    )
