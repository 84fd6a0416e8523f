"""Build one reveal.js deck per lesson: ``lessons/NN_topic.ipynb`` -> ``slides/NN_topic.html``.

    python slides/build.py            # every lesson            (= make slides)
    python slides/build.py 04         # lessons/04_*.ipynb only (= make slides LESSON=04)
    python slides/build.py --out /tmp/decks path/to/99_demo.ipynb

A deck is exactly the cells a lesson marks as slides (``metadata.slideshow.slide_type``, see
lessons/CONVENTIONS.md), exported by nbconvert's ``SlidesExporter`` (the same exporter as
``jupyter nbconvert --to slides``) with its stored outputs: markdown, printed results, figures.
Code inputs are left out (a slide shows what the code found, not the code; put a key line in a
markdown cell to show it). Nothing is executed here: run ``make execute`` first.

Offline: every script and style sheet the deck loads comes from ``slides/vendor/`` (pinned npm
packages, see slides/vendor/README.md), never a CDN:
reveal.js 4.0.2 (the line nbconvert's reveal template targets) through ``reveal_url_prefix``,
require.js and MathJax 2.7.9 (the template calls MathJax 2's ``MathJax.Hub`` API) through
``HTMLExporter.require_js_url`` / ``mathjax_url``. The template ``slides/template/minipar_reveal``
drops the three scripts a deck never needs (jQuery, Mermaid, widgets) that nbconvert would
otherwise load from a CDN. After writing a deck, :func:`external_loads` double-checks the HTML;
tests/test_slides.py opens the decks in headless Chromium with networking off.

Each deck carries ``<meta name="minipar-slides-source" content="sha256:...">``, a digest of the
lesson's slide cells (:func:`source_digest`), so a test can tell when a deck is out of date.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
SLIDES = ROOT / "slides"
VENDOR = SLIDES / "vendor"
TEMPLATES = SLIDES / "template"
MATHJAX_CONFIG = "TeX-AMS_CHTML-full,Safe"  # the configuration nbconvert's default URL names
DIGEST_META = "minipar-slides-source"


def slide_type(cell) -> str:
    """The cell's ``metadata.slideshow.slide_type``; ``"-"`` (continue the slide) when unset."""
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def count_slides(nb) -> int:
    """Slides reveal.js will show (``Reveal.getTotalSlides()``): one per ``slide`` or
    ``subslide`` cell, plus one when the first shown cell is neither (nbconvert makes it a
    slide, see ``nbconvert.exporters.slides._RevealMetadataPreprocessor``)."""
    shown = [slide_type(c) for c in nb.cells if slide_type(c) not in ("skip", "notes")]
    if not shown:
        return 0
    return sum(t in ("slide", "subslide") for t in shown) + (shown[0] not in ("slide", "subslide"))


def source_digest(nb) -> str:
    """sha256 over (cell type, slide type, source) of every cell shown on a slide; changes when
    a slide's text or a cell's slide type changes, not when a re-run changes an output."""
    h = hashlib.sha256()
    for c in nb.cells:
        if slide_type(c) != "skip":
            h.update(json.dumps([c.cell_type, slide_type(c), c.source]).encode())
    return "sha256:" + h.hexdigest()


def external_loads(html: str) -> list[str]:
    """Every resource the page would load from outside the repository: ``src=`` and
    ``<link href=>`` values, CSS ``url()``/``@import`` and JS ``import`` that are not relative
    paths or ``data:`` URIs. Links a reader may click (``<a href>``) are not loads."""
    found = re.findall(r"""\bsrc\s*=\s*["']([^"']*)["']""", html)
    found += re.findall(r"""<link\b[^>]*\bhref\s*=\s*["']([^"']*)["']""", html)
    found += re.findall(r"""(?:url\(|@import\s+)["']?((?:https?:)?//[^"')\s]+)""", html)
    found += re.findall(r"""\bimport\b[^;'"]*['"]((?:https?:)?//[^'"]+)['"]""", html)
    return sorted({u for u in found if re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", u, re.I) and not u.startswith("data:")})


def _linked_css_exporter_class():
    """SlidesExporter whose templates *link* nbconvert's style sheets instead of inlining them.

    nbconvert pastes its ~7,000 lines of notebook CSS (``index.css``, ``theme-light.css``,
    ``custom_reveal.css``) into every deck; here each sheet is copied once into
    ``slides/vendor/nbconvert/`` (from the installed, pinned nbconvert, whose BSD licence sits
    beside it) and every deck links that copy. The sheets use only ``data:`` URLs, so nothing
    else has to travel with them.
    """
    from nbconvert import SlidesExporter

    class LinkedCss(SlidesExporter):
        css_href = "vendor/nbconvert"

        def _init_resources(self, resources):
            resources = super()._init_resources(resources)

            def include_css(name: str):
                import markupsafe

                source = self.environment.loader.get_source(self.environment, name)[0]
                target = VENDOR / "nbconvert" / Path(name).name
                if not target.exists() or target.read_text(encoding="utf-8") != source:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(source, encoding="utf-8")
                return markupsafe.Markup(f'<link rel="stylesheet" href="{self.css_href}/{target.name}"/>')

            resources["include_css"] = include_css
            return resources

    return LinkedCss


def exporter(out_dir: Path):
    """nbconvert's SlidesExporter with every URL pointing into slides/vendor (relative to
    ``out_dir``, so a deck opens from disk with ``file://``)."""
    from traitlets.config import Config

    _LinkedCssSlidesExporter = _linked_css_exporter_class()
    vendor = Path(os.path.relpath(VENDOR, out_dir)).as_posix()
    c = Config()
    c.SlidesExporter.reveal_url_prefix = f"{vendor}/reveal.js"
    c.SlidesExporter.reveal_theme = "white"
    c.SlidesExporter.reveal_transition = "none"
    c.SlidesExporter.reveal_number = "c/t"  # "3/12" in the corner
    c.HTMLExporter.require_js_url = f"{vendor}/require.js/require.js"
    c.HTMLExporter.mathjax_url = f"{vendor}/mathjax/MathJax.js?config={MATHJAX_CONFIG}"
    c.TemplateExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.TemplateExporter.template_name = "minipar_reveal"
    c.TemplateExporter.exclude_input = True
    c.TemplateExporter.exclude_input_prompt = True
    c.TemplateExporter.exclude_output_prompt = True
    ex = _LinkedCssSlidesExporter(config=c)
    ex.css_href = f"{vendor}/nbconvert"
    # nbconvert warns when a figure has no alt text (matplotlib output has none) and fills in a
    # default; the warning would repeat for every deck, so it is dropped.
    ex.log.addFilter(lambda rec: not str(rec.msg).startswith("Alternative text is missing"))
    return ex


def _prepare(nb):
    """Drop what would make the deck load scripts from a CDN; title the deck after the
    lesson's first heading."""
    nb.metadata.pop("widgets", None)
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "text/vnd.mermaid" in o.get("data", {}):
                raise ValueError(
                    "a Mermaid output would load mermaid.js from a CDN; draw the picture with matplotlib instead"
                )
    if "title" not in nb.metadata:
        for c in nb.cells:
            m = re.search(r"^#\s+(.+)$", c.source, re.M) if c.cell_type == "markdown" else None
            if m and slide_type(c) != "skip":
                nb.metadata["title"] = m.group(1).strip()
                break
    return nb


def build(notebook: Path, out_dir: Path = SLIDES) -> Path:
    """Write ``out_dir/<notebook stem>.html`` and return its path.

    Raises ValueError when the notebook has no slide cells, or when the deck would load
    anything from outside the repository (the message lists the URLs)."""
    notebook, out_dir = Path(notebook), Path(out_dir)
    nb = _prepare(nbformat.read(notebook, as_version=4))
    if count_slides(nb) == 0:
        raise ValueError(
            f"{notebook.name} has no cell to show: give its cells "
            "metadata.slideshow.slide_type (see lessons/CONVENTIONS.md)"
        )
    html, _ = exporter(out_dir).from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
    html = html.replace("<head>", f'<head>\n<meta name="{DIGEST_META}" content="{source_digest(nb)}" />', 1)
    bad = external_loads(html)
    if bad:
        raise ValueError(f"{notebook.name}: the deck would load from outside the repository: {bad}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{notebook.stem}.html"
    out.write_text(html, encoding="utf-8")
    return out


def find_lessons(which: list[str]) -> list[Path]:
    """``[]`` -> every ``lessons/NN_*.ipynb``; ``"04"`` -> ``lessons/04_*.ipynb``; a path -> itself."""
    if not which:
        return sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))
    found = []
    for w in which:
        if w.endswith(".ipynb"):
            found.append(Path(w))
            continue
        hits = sorted(LESSONS.glob(f"{int(w):02d}_*.ipynb")) if w.isdigit() else []
        if not hits:
            have = ", ".join(p.name[:2] for p in sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))) or "none"
            raise SystemExit(
                f"no lesson {w!r} in {LESSONS.relative_to(ROOT)}/ (lessons: {have}); "
                "use LESSON=NN, e.g. make slides LESSON=04"
            )
        found += hits
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lessons", nargs="*", help="NN (lesson number) or a notebook path; none = all")
    ap.add_argument("--out", type=Path, default=SLIDES, help="output folder (default slides/)")
    args = ap.parse_args(argv)
    notebooks = find_lessons(args.lessons)
    if not notebooks:
        print("no lessons/NN_*.ipynb yet: nothing to build")
        return 0
    for nb in notebooks:
        t = time.perf_counter()
        try:
            out = build(nb, args.out)
        except ValueError as e:
            raise SystemExit(f"slides/build.py: {e}") from None
        n = count_slides(nbformat.read(nb, as_version=4))
        print(f"{os.path.relpath(out)}  {n} slides, {out.stat().st_size / 1e3:.0f} kB, {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
