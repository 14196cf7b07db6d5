"""The whole-book PDF (`make pdf`) and printing a page in dark mode.

* The PDF exists where the Makefile writes it and in the site, which links it.
* Its text (pdftotext) holds every chapter's title and every number the HTML
  pages paste in with glue: the PDF is the same executed book, not a stale copy.
* It has figures (embedded images), one per figure of the site at least.
* Printing a chapter in dark mode gives dark text on white: every text element
  of the article has a contrast of at least 4.5:1 against a near-white background
  (the page prints in the theme's light palette and returns to dark afterwards).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sitetools import CHAPTERS, HTML, ROOT, serve

PDF_NAME = "self-attention-verified.pdf"
PDF = ROOT / "_build" / "pdf" / PDF_NAME


def chapter_title(chapter: Path) -> str:
    return next(ln[2:].strip() for ln in chapter.read_text(encoding="utf-8").split("\n")
                if ln.startswith("# "))


def require_pdf() -> Path:
    if not PDF.is_file():
        raise AssertionError(f"{PDF} is missing: run `make pdf` (make test does) first")
    if not shutil.which("pdftotext"):
        raise AssertionError("pdftotext missing: install Debian's poppler-utils (make pdf does)")
    return PDF


@pytest.fixture(scope="module")
def pdf_text() -> str:
    out = subprocess.run(["pdftotext", str(require_pdf()), "-"], check=True,
                         capture_output=True, text=True).stdout
    return re.sub(r"\s+", " ", out)


@pytest.mark.slow
@pytest.mark.pdf
@pytest.mark.html
def test_pdf_is_in_the_site_and_linked_from_the_front_page() -> None:
    require_pdf()
    copy = HTML / PDF_NAME
    assert copy.is_file() and copy.read_bytes() == PDF.read_bytes(), "site has a stale PDF"
    index = (HTML / "index.html").read_text(encoding="utf-8")
    assert f'href="{PDF_NAME}"' in index, "index.html does not link the PDF"
    # every chapter's download menu offers it too (the theme's ".pdf" only prints the page)
    for chapter in CHAPTERS:
        page = (HTML / "chapters" / f"{chapter.stem}.html").read_text(encoding="utf-8")
        assert f'<a href="../{PDF_NAME}"' in page, f"{chapter.stem}: no book PDF in the menu"


@pytest.mark.slow
@pytest.mark.pdf
@pytest.mark.html
def test_pdf_has_pages_and_figures() -> None:
    info = subprocess.run(["pdfinfo", str(require_pdf())], check=True, capture_output=True,
                          text=True).stdout
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
    assert pages >= 50, f"only {pages} pages: chapters missing?"
    listing = subprocess.run(["pdfimages", "-list", str(PDF)], check=True, capture_output=True,
                             text=True).stdout.strip().split("\n")[2:]
    images = [row for row in listing if row.split()[2] == "image"]  # not their alpha masks
    # every figure of the site (a notebook output under _images/), in whatever format
    site_figures = sum(
        len(re.findall(r'<img [^>]*src="\.\./_images/',
                       (HTML / "chapters" / f"{c.stem}.html").read_text(encoding="utf-8")))
        for c in CHAPTERS)
    assert len(images) >= site_figures, f"PDF has {len(images)} images, site {site_figures}"


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_has_every_chapter_title_in_the_sites_order(pdf_text: str) -> None:
    """The PDF globs chapters/*; the site lists them in index.md: same set, same order."""
    index = (ROOT / "index.md").read_text(encoding="utf-8")
    listed = re.findall(r"^chapters/([\w-]+)\s*$", index, re.M)
    assert sorted(listed) == [c.stem for c in CHAPTERS], "index.md and chapters/ disagree"
    titles = [chapter_title(ROOT / "chapters" / f"{stem}.md") for stem in listed]
    # letters and digits only: pdftotext may splice a neighbouring symbol (a √ from
    # the table of contents' next line) into a title's text
    def key(s: str) -> str:
        return re.sub(r"[^a-z0-9]", "", s.lower())

    text = key(pdf_text)
    missing = [t for t in titles if key(t) not in text]
    assert not missing, f"chapter titles not in the PDF: {missing}"
    # the first occurrence of each title is its line in the table of contents
    positions = [text.index(key(t)) for t in titles]
    assert positions == sorted(positions), f"chapters out of order in the PDF: {titles}"


@pytest.mark.slow
@pytest.mark.pdf
@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_pdf_shows_the_glued_numbers_the_html_shows(chapter: Path, pdf_text: str) -> None:
    page = (HTML / "chapters" / f"{chapter.stem}.html").read_text(encoding="utf-8")
    shown = [html.unescape(v) for v in re.findall(r'<span class="pasted-text">([^<]*)</span>',
                                                  page)]
    numbers = [v for v in shown if re.search(r"\d", v)]
    assert numbers, "the page shows no glued numbers"
    # pdftotext joins a line broken after a hyphen ("3.1e-" / "15") without the hyphen
    missing = [v for v in numbers if v not in pdf_text and v.replace("-", "") not in pdf_text]
    assert not missing, f"{len(missing)} of {len(numbers)} numbers not in the PDF: {missing[:10]}"


# --- printing a page in dark mode ---------------------------------------------------

CONTRAST_JS = """
() => {
  const parse = c => { const m = c.match(/[\\d.]+/g) || [0, 0, 0, 0];
    return {r: +m[0], g: +m[1], b: +m[2], a: m.length > 3 ? +m[3] : 1}; };
  const lum = ({r, g, b}) => { const f = v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = el => { for (; el; el = el.parentElement) {
      const c = parse(getComputedStyle(el).backgroundColor); if (c.a > 0.5) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const bad = []; let checked = 0;
  const root = document.querySelector('.bd-article') || document.body;
  const bodyBg = lum(background(document.body));
  for (const el of root.querySelectorAll('*')) {
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') continue;
    if (el.closest('svg, button, .katex-mathml, .visually-hidden, .sr-only, .headerlink')) continue;
    if (el.getClientRects().length === 0) continue;  // not rendered
    const fg = lum(parse(style.color)), bg = lum(background(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    checked++;
    if (ratio < 4.5 || bg < 0.75) bad.push({tag: el.tagName, cls: el.className,
      text: el.textContent.trim().slice(0, 40), color: style.color, ratio: +ratio.toFixed(2),
      bg: +bg.toFixed(2)});
  }
  return {checked, bodyBg, bad: bad.slice(0, 20), nbad: bad.length,
          theme: document.documentElement.dataset.theme};
}
"""




@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.html
@pytest.mark.parametrize("rel", ["chapters/02-qkv.html", "chapters/04-whys.html", "index.html"])
def test_printing_in_dark_mode_gives_dark_text_on_white(browser: object, rel: str) -> None:
    with serve(HTML) as site:
        context = browser.new_context(color_scheme="dark", viewport={"width": 1000, "height": 900})
        page = context.new_page()
        page.goto(f"{site.rstrip('/')}/{rel}")
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        screen = page.evaluate(CONTRAST_JS)
        # as a browser prints: "beforeprint" (print-light.js switches to the light
        # palette), then the layout for paper, then "afterprint"
        page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
        page.emulate_media(media="print", color_scheme="dark")
        printed = page.evaluate(CONTRAST_JS)
        # paper gets every section: none stays skipped (custom.css skips them on screen)
        skipped = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.bd-article section section')).filter(
            s => getComputedStyle(s).contentVisibility !== 'visible').length""")
        page.evaluate("window.dispatchEvent(new Event('afterprint'))")
        page.emulate_media(media="screen", color_scheme="dark")
        after = page.evaluate("document.documentElement.dataset.theme")
        # printing to PDF fires both events too; the page prints light and returns dark
        page.evaluate("""() => { window.__themes = [];
            addEventListener('beforeprint', () => __themes.push(
                document.documentElement.dataset.theme)); }""")
        page.pdf()
        during = page.evaluate("window.__themes")
        after_pdf = page.evaluate("document.documentElement.dataset.theme")
        context.close()
    assert skipped == 0, f"{rel}: {skipped} sections would print skipped"
    assert screen["bodyBg"] < 0.1, "the page is not in dark mode on screen: test is vacuous"
    assert (printed["theme"], after, during, after_pdf) == ("light", "dark", ["light"], "dark")
    assert printed["checked"] > 20
    assert printed["bodyBg"] > 0.9, f"printed page background luminance {printed['bodyBg']}"
    assert printed["nbad"] == 0, printed["bad"]


# --- the PDF as a book (issue 26): fonts, references, numbering, paper wording, pages ---

LOG = ROOT / "_build" / "latex" / "self-attention-verified.log"


def _pages() -> list[str]:
    """The text of each page, in order (pdftotext keeps a form feed between pages)."""
    out = subprocess.run(["pdftotext", "-layout", str(require_pdf()), "-"], check=True,
                         capture_output=True, text=True).stdout
    return out.split("\f")[:-1]


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_has_every_character_it_prints(pdf_text: str) -> None:
    """XeLaTeX logs a glyph its font lacks and prints nothing (an empty box) in its place:
    DejaVu Sans Mono has no ℓ, the online softmax's running sum in code and outputs."""
    require_pdf()
    missing = [ln for ln in LOG.read_text(errors="replace").splitlines()
               if ln.startswith("Missing character")]
    assert missing == [], missing[:5]
    assert "running sum ℓ" in pdf_text


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_references_are_one_list_labelled_as_the_text_cites(pdf_text: str) -> None:
    """One chapter "References" holds the list (no "Bibliography", no References page
    that holds only its title), and its entries carry the author-year the text cites."""
    pages = _pages()
    titled = [i for i, p in enumerate(pages) if re.search(r"^\s*REFERENCES\s*$", p, re.M)]
    assert len(titled) == 1, f"pages headed REFERENCES: {titled}"
    assert "Bibliography" not in pdf_text and "BIBLIOGRAPHY" not in pdf_text
    assert "[Vaswani et al., 2017] Ashish Vaswani" in pdf_text
    assert not re.search(r"\[\d+\] [A-Z][a-z]+ [A-Z]", pdf_text), "a numbered entry"


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_figure_numbers_carry_their_chapter(pdf_text: str) -> None:
    """Fig. 2.3 in chapter 2, Fig. D.1 in appendix D: never a bare 3 that restarts in each
    chapter, never appendix D's figure numbered 4.1."""
    numbers = re.findall(r"Fig\. ([0-9A-Z]+)\.(\d+):", pdf_text)
    assert len(numbers) >= 30, numbers[:5]
    assert not re.search(r"Fig\. \d+: ", pdf_text), "a figure number without its chapter"
    chapters = [c for c, _ in numbers]
    assert chapters == sorted(chapters, key=lambda c: (c.isalpha(), int(c) if c.isdigit()
                                                      else c)), chapters
    assert "D" in chapters, "the benchmarks figure (appendix D) is not numbered D.n"


# sentences that ask the reader to move or tick something the page cannot offer
SCREEN_PHRASES = ("Move the dial yourself", "when their boxes are ticked",
                  "Slide through the head sizes", "For the temperature on the slider")


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_describes_the_static_figures_not_the_sliders(pdf_text: str) -> None:
    left = [p for p in SCREEN_PHRASES if p in pdf_text]
    assert left == [], f"the PDF asks the reader to {left}"
    assert pdf_text.count("On the book’s web page") == 4  # one per interactive figure


@pytest.mark.slow
@pytest.mark.pdf
def test_pdf_has_no_blank_or_near_blank_pages() -> None:
    """A page holds more than its running head and foot: no blank page before a chapter,
    no References title alone on a page, no three lines of code on an otherwise empty
    page before a tall figure. A chapter's last page may be short."""
    pages = _pages()
    near_blank = []
    for i, page in enumerate(pages[1:], start=1):  # the title page is short on purpose
        words = [w for w in page.split() if w not in ("Self-Attention,", "Verified")]
        if len(words) >= 25:
            continue
        ends_chapter = i + 1 < len(pages) and re.search(r"^\s*(CHAPTER|APPENDIX)\s*$",
                                                       pages[i + 1], re.M)
        if len(words) < 10 or not ends_chapter:
            near_blank.append((i + 1, " ".join(words)[:60]))
    assert near_blank == [], f"{len(near_blank)} near-blank pages: {near_blank}"
