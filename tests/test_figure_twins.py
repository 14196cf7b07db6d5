"""A diagram drawn twice, for light and for dark mode, is one figure to its reader.

Chapters show a diagram as two figures: ``:figclass: only-light`` and, right after it
inside ``{only} html``, a dark copy with ``:figclass: only-dark``; the theme hides one.
Sphinx numbered both, so a light-mode reader saw Fig. 7.1 then Fig. 7.3 and a
dark-mode reader saw the diagram as 7.2, and {numref} to later figures ran one ahead
of the captions. _ext/figure_twins.py gives the dark copy its twin's number.

The first tests read the built book (``make test`` builds it first); the others build a
small book of four pages with and without the extension, and again after an edit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import pytest

from sitetools import CHAPTER_PAGES, HTML, ROOT, built_pages, require_built_site

VENV_BIN = Path(sys.executable).parent


class _Figures(HTMLParser):
    """A page's figures in order, as (classes, id, caption number), and its {numref}
    links as (href, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[tuple[set[str], str, str | None]] = []
        self.numrefs: list[tuple[str, str]] = []
        self._in: str | None = None  # "number" or "numref": the span being read
        self._text = ""
        self._href = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag == "figure":
            self.figures.append((classes, a.get("id") or "", None))
        elif tag == "a":
            self._href = a.get("href") or ""
        elif tag == "span" and "caption-number" in classes and self.figures:
            self._in, self._text = "number", ""
        elif tag == "span" and "std-numref" in classes:
            self._in, self._text = "numref", ""

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag != "span" or not self._in:
            return
        if self._in == "number" and self.figures[-1][2] is None:
            classes, figure_id, _ = self.figures[-1]
            self.figures[-1] = (classes, figure_id, self._text.strip())
        elif self._in == "numref":
            self.numrefs.append((self._href, self._text.strip()))
        self._in = None


def _read(path: Path) -> _Figures:
    parser = _Figures()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _numbers(page: _Figures) -> list[tuple[str, str]]:
    """(classes as text, caption number) of each numbered figure, for messages."""
    return [(" ".join(sorted(c & {"only-light", "only-dark"})) or "-", n or "")
            for c, _, n in page.figures if n]


def check_twins_share_numbers(page: _Figures) -> None:
    """Figures other than the dark copies are numbered 1..n (one chapter prefix), and
    each dark copy carries the number of the only-light figure just before it."""
    shown = [(classes, number) for classes, _, number in page.figures if number]
    single = [number for classes, number in shown if "only-dark" not in classes]
    prefixes = {number.rsplit(".", 1)[0] for number in single}
    assert len(prefixes) <= 1, f"figures of one chapter under several prefixes: {single}"
    counts = [int(number.rsplit(".", 1)[-1]) for number in single]
    assert counts == list(range(1, len(counts) + 1)), (
        f"figure numbers a reader sees are not 1..n: {_numbers(page)}")
    for (classes, number), (before_classes, before) in zip(shown[1:], shown, strict=False):
        if "only-dark" in classes:
            assert "only-light" in before_classes and number == before, (
                f"dark copy {number!r} does not repeat its light twin's number: {_numbers(page)}")


# --- the built book ------------------------------------------------------------------

@pytest.mark.html
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_chapter_figures_are_numbered_as_a_reader_sees_them(rel: str) -> None:
    require_built_site()
    check_twins_share_numbers(_read(HTML / rel))


@pytest.mark.html
def test_the_book_has_dark_copies_to_check() -> None:
    """The test above checks something: chapters do draw diagrams twice."""
    require_built_site()
    darks = [rel for rel in CHAPTER_PAGES
             if any("only-dark" in c and n for c, _, n in _read(HTML / rel).figures)]
    assert len(darks) >= 5, darks


@pytest.mark.html
def test_numrefs_name_the_number_of_the_caption_they_point_at() -> None:
    require_built_site()
    pages = {p.relative_to(HTML).as_posix(): _read(p) for p in built_pages()}
    numbers = {f"{rel}#{figure_id}": number for rel, page in pages.items()
               for _, figure_id, number in page.figures if number}
    checked = 0
    for rel, page in pages.items():
        for href, text in page.numrefs:
            target = urljoin(rel, href) if not href.startswith("#") else rel + href
            if target in numbers:
                assert text == numbers[target], f"{rel}: {{numref}} {text!r} to {target}"
                checked += 1
    assert checked >= 1, "no {numref} to a figure found"


# --- a small book ----------------------------------------------------------------------

CHAPTER = """\
{title}
==========

.. figure:: pic.svg

   First.

.. figure:: pic.svg
   :figclass: only-light

   Diagram.

.. only:: html

   .. figure:: pic.svg
      :figclass: only-dark

      Diagram.

.. _fig-{name}-later:

.. figure:: pic.svg

   Later.

See :numref:`fig-{name}-later`.
"""


def _small_book(root: Path, twins: bool) -> Path:
    """Two numbered chapters (a, b: figures 1.1, 2.1, ...) and two unnumbered pages
    (c, d: one counter across both pages), each with a figure, a light/dark pair, a
    later figure and a {numref} to it."""
    src = root / "src"
    src.mkdir(parents=True)
    (src / "conf.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(ROOT / "_ext")!r})
        extensions = {["figure_twins"] if twins else []!r}
        numfig = True
        numfig_secnum_depth = 1
        """))
    (src / "pic.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                                 '<rect width="8" height="8"/></svg>')
    (src / "index.rst").write_text(
        "Book\n====\n\n.. toctree::\n   :numbered:\n\n   a\n   b\n\n.. toctree::\n\n   c\n   d\n")
    for name in "abcd":
        (src / f"{name}.rst").write_text(CHAPTER.format(title=f"Page {name}", name=name))
    return src


def _build(src: Path) -> list[str]:
    """Build src into src/../html; the pages this run wrote.

    Sphinx prints "writing output... [ 33%] c" a line per page, but where it thinks the
    terminal has colour (CI=true, as .ci/run sets, or FORCE_COLOR) it prefixes each line
    with an erase-line escape and ends it with a carriage return, even with -N. NO_COLOR
    turns that off; the escapes are stripped as well, so the list never comes back empty
    because of how a terminal was guessed."""
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run(
        [str(VENV_BIN / "sphinx-build"), "-N", "-W", "-b", "html", ".", "../html"],
        cwd=src, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = (re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line) for line in out.stdout.splitlines())
    written = sorted(line.split()[-1] for line in lines
                     if line.startswith("writing output... [") and "]" in line)
    assert written or "writing output" not in out.stdout, out.stdout[-2000:]
    return written


def _shown(src: Path, name: str) -> list[str]:
    page = _read(src.parent / "html" / f"{name}.html")
    return [number for _, _, number in page.figures] + [text for _, text in page.numrefs]


@pytest.mark.build
def test_sphinx_alone_still_numbers_the_hidden_dark_copy(tmp_path: Path) -> None:
    """Without the extension the dark copy takes a number of its own (the bug). When
    this fails, Sphinx learnt to skip it: _ext/figure_twins.py can go."""
    src = _small_book(tmp_path, twins=False)
    _build(src)
    assert _shown(src, "a") == ["Fig. 1.1", "Fig. 1.2", "Fig. 1.3", "Fig. 1.4", "Fig. 1.4"]
    assert _shown(src, "d") == ["Fig. 5", "Fig. 6", "Fig. 7", "Fig. 8", "Fig. 8"]


@pytest.mark.build
def test_small_book_dark_copies_share_numbers_also_after_an_edit(tmp_path: Path) -> None:
    src = _small_book(tmp_path, twins=True)
    _build(src)
    # page, its figures (first, light, dark, later) and its {numref} to the later one
    assert _shown(src, "a") == ["Fig. 1.1", "Fig. 1.2", "Fig. 1.2", "Fig. 1.3", "Fig. 1.3"]
    assert _shown(src, "b") == ["Fig. 2.1", "Fig. 2.2", "Fig. 2.2", "Fig. 2.3", "Fig. 2.3"]
    assert _shown(src, "c") == ["Fig. 1", "Fig. 2", "Fig. 2", "Fig. 3", "Fig. 3"]
    assert _shown(src, "d") == ["Fig. 4", "Fig. 5", "Fig. 5", "Fig. 6", "Fig. 6"]

    # An edit to one page: only it is read again. Page c loses its first figure, so
    # page d, which shares c's counter, must be written again with numbers one lower.
    text = (src / "c.rst").read_text()
    (src / "c.rst").write_text(text.replace(".. figure:: pic.svg\n\n   First.\n\n", "", 1))
    written = _build(src)
    assert _shown(src, "c") == ["Fig. 1", "Fig. 1", "Fig. 2", "Fig. 2"]
    assert _shown(src, "d") == ["Fig. 3", "Fig. 4", "Fig. 4", "Fig. 5", "Fig. 5"]
    assert written == ["c", "d", "index"], written

    # Sphinx's own numbers stay as they were when a figure becomes or stops being a
    # dark copy, but the numbers shown change: page d is written again all the same.
    text = (src / "c.rst").read_text()
    (src / "c.rst").write_text(text.replace(":figclass: only-dark", ":figclass: wide", 1))
    written = _build(src)
    assert _shown(src, "c") == ["Fig. 1", "Fig. 2", "Fig. 3", "Fig. 3"]
    assert _shown(src, "d") == ["Fig. 4", "Fig. 5", "Fig. 5", "Fig. 6", "Fig. 6"]
    assert written == ["c", "d", "index"], written

    # An edit that changes no number rewrites that page alone: Sphinx is not misled
    # into rewriting every page with a dark copy.
    (src / "a.rst").write_text((src / "a.rst").read_text() + "\nMore text.\n")
    assert _build(src) == ["a", "index"]
    assert _shown(src, "b") == ["Fig. 2.1", "Fig. 2.2", "Fig. 2.2", "Fig. 2.3", "Fig. 2.3"]


@pytest.mark.build
def test_a_dark_copy_without_its_light_twin_before_it_fails_the_build(tmp_path: Path) -> None:
    src = _small_book(tmp_path, twins=True)
    text = (src / "b.rst").read_text()
    (src / "b.rst").write_text(text.replace(":figclass: only-light\n", "", 1))
    out = subprocess.run(
        [str(VENV_BIN / "sphinx-build"), "-N", "-W", "-q", "-b", "html", ".", "../html"],
        cwd=src, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "b.rst" in out.stderr and "must follow its only-light twin" in out.stderr, out.stderr
