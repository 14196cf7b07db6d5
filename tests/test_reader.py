"""What a reader expects of an executable book, checked in headless Chromium.

Each feature has a test: notation and glossary, citations, hidden exercise
solutions, copy buttons, executed-notebook downloads and launch links,
repository buttons and dates, dark mode, search, a phone-sized viewport,
accessibility basics, the 404 page, and the page budget.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from sitetools import (
    CHAPTERS,
    DRAW_EVERY_SECTION_JS,
    HTML,
    LOAD_ALL_IMAGES_JS,
    ROOT,
    WAIT_MATH_JS,
    RequestWatch,
    luminance,
    open_page,
    require_built_site,
)

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

CHAPTER_PAGES = [f"chapters/{c.stem}.html" for c in CHAPTERS]
# Every page of the built site, the search page and the general index included.
ALL_PAGES = sorted(
    p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
    if "_static" not in p.parts and "_sources" not in p.parts
) if (HTML / "index.html").is_file() else ["index.html"]
SHOTS = ROOT / "_build" / "screenshots"
# Page budget: first load of a chapter page, and time until its math is typeset.
PHONE_VIEW = {"width": 390, "height": 844}
DESKTOP_VIEW = {"width": 1280, "height": 1600}

MAX_PAGE_BYTES = 1_500_000
MAX_TYPESET_SECONDS = 1.5  # the aim is 1 s; margin for a loaded CI machine
BUDGET: dict[str, dict[str, float]] = {}


# --- notation, glossary, citations -------------------------------------------------

@pytest.mark.html
def test_notation_page_renders_the_books_table() -> None:
    require_built_site()
    html = (HTML / "notation.html").read_text(encoding="utf-8")
    for code_name in ("seq_len", "d_model", "head_dim", "num_heads", "scores", "weights", "mask"):
        assert f">{code_name}<" in html, f"notation table lacks {code_name}"


@pytest.mark.html
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_chapters_link_terms_to_the_glossary(rel: str) -> None:
    require_built_site()
    html = (HTML / rel).read_text(encoding="utf-8")
    assert re.search(r'href="\.\./glossary\.html#term-', html), f"{rel} links no glossary term"


@pytest.mark.html
def test_citations_resolve_to_the_bibliography() -> None:
    require_built_site()
    refs = (HTML / "references.html").read_text(encoding="utf-8")
    assert "attention is all you need" in refs.lower()
    assert "jointly learning to align" in refs.lower()
    cited = 0
    for rel in CHAPTER_PAGES:
        html = (HTML / rel).read_text(encoding="utf-8")
        assert "[?]" not in html, f"{rel} has an unresolved citation"
        cited += len(re.findall(r'href="(?:\.\./)?references\.html#id', html))
    assert cited >= len(CHAPTER_PAGES), "chapters cite too little"


# --- exercises, copy buttons -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_exercise_solution_hidden_until_clicked(browser: object, site: str, rel: str) -> None:
    context, page = open_page(browser, site, rel)
    try:
        hidden = page.locator("details.hide.above-input")
        assert hidden.count() >= 3, f"{rel}: expected >= 3 hidden solutions"
        first = hidden.first
        output = first.locator(".cell_input, .cell_output").first
        assert not output.is_visible(), "solution visible before the click"
        first.locator("summary").click()
        assert output.is_visible(), "solution still hidden after the click"
        assert first.evaluate("el => el.open") is True
    finally:
        context.close()


def test_copy_button_copies_code_only(browser: object, site: str) -> None:
    rel = CHAPTER_PAGES[0]
    context, page = open_page(
        browser, site, rel, whole=False, permissions=["clipboard-read", "clipboard-write"]
    )
    try:
        cell = page.locator("div.cell:not(.tag_remove-input) div.cell_input").first
        code = cell.locator("pre").inner_text()
        cell.hover()
        cell.locator("button.copybtn").click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.strip() == code.strip()
        assert not copied.lstrip().startswith((">>>", "In [")), "prompt copied"
        outputs = page.locator("div.cell_output").first.inner_text().strip()
        assert outputs == "" or outputs not in copied, "output copied with the code"
    finally:
        context.close()


# --- downloads, launch buttons, repository buttons, dates --------------------------

@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_download_and_launch_point_at_executed_notebooks(chapter: Path) -> None:
    require_built_site()
    rel = f"chapters/{chapter.stem}.html"
    html = (HTML / rel).read_text(encoding="utf-8")
    nb_rel = f"_sources/chapters/{chapter.stem}.ipynb"
    notebook = json.loads((HTML / nb_rel).read_text(encoding="utf-8"))
    outputs = sum(len(c.get("outputs", [])) for c in notebook["cells"] if c["cell_type"] == "code")
    assert outputs > 0, "downloadable notebook has no executed outputs"
    setup = [c for c in notebook["cells"] if c.get("id") == "selfattn-launch-setup"]
    assert setup and notebook["cells"].index(setup[0]) <= 1, "no install cell at the top"
    assert f'href="../{nb_rel}"' in html, "no .ipynb download link"
    for host in ("colab.research.google.com", "mybinder.org"):
        links = re.findall(rf'href="(https://{re.escape(host)}[^"]+)"', html)
        assert links, f"no {host} launch link"
        # Binder's link carries the notebook path inside nbgitpuller's (encoded) query
        target = unquote(unquote(links[0]))
        assert target.endswith(f"/{nb_rel}"), f"{host} link does not open the .ipynb: {target}"


@pytest.mark.html
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_repository_buttons_and_last_updated(rel: str) -> None:
    require_built_site()
    html = (HTML / rel).read_text(encoding="utf-8")
    repo = "https://github.com/selfattn-verified/self-attention-verified"
    assert f'href="{repo}"' in html
    assert f"{repo}/issues/new?title=Issue%20on%20page%20%2F{rel}" in html
    stem = Path(rel).stem
    assert f"{repo}/edit/main/chapters/{stem}.md" in html
    assert re.search(r"Last updated on\s+\d{4}-\d{2}-\d{2}", html), "no last-updated date"


# --- dark mode --------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_dark_mode_text_math_and_figures_readable(browser: object, site: str, rel: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        context, page = open_page(browser, site, rel, shared=True, color_scheme=scheme,
                                  viewport=DESKTOP_VIEW)
        try:
            assert page.evaluate("document.documentElement.dataset.theme") == scheme
            body = page.evaluate("getComputedStyle(document.querySelector('article')).color")
            math = page.evaluate(
                "Array.from(document.querySelectorAll('.katex'))"
                ".map(el => getComputedStyle(el).color)"
            )
            if scheme == "dark":
                assert luminance(body) > 0.6, f"dark mode body text too dark: {body}"
                assert all(luminance(c) > 0.6 for c in math), "math drawn dark on dark"
            else:
                assert luminance(body) < 0.4
            page.screenshot(path=str(SHOTS / f"{Path(rel).stem}-{scheme}.png"))
        finally:
            context.close()
    # Figures are drawn on an opaque light background, so they read in both modes.
    from PIL import Image

    page_html = (HTML / rel).read_text("utf-8")
    for src in re.findall(r'<img[^>]+src="([^"]*_images/[^"]+\.png)"', page_html):
        img = Image.open((HTML / rel).parent / src).convert("RGBA")
        w, h = img.size
        for corner in ((0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)):
            r, g, b, a = img.getpixel(corner)
            assert a == 255 and min(r, g, b) >= 235, f"{src}: figure corner not opaque light"
    # SVG figures: the first shape is the figure's background, an opaque white rectangle.
    # The diagrams of images/ are the exception: each has a dark twin shown in dark mode
    # instead (tests/test_diagrams.py checks the pairs and their classes).
    diagrams = {p.name for p in (Path(__file__).resolve().parents[1] / "images").glob("*.svg")}
    for src in re.findall(r'<img[^>]+src="([^"]*_images/[^"]+\.svg)"', page_html):
        if Path(src).name in diagrams:
            continue
        svg = ((HTML / rel).parent / src).read_text(encoding="utf-8")
        patch = re.search(r'<g id="patch_1">\s*<path[^>]*style="fill: (#[0-9a-f]{6})', svg)
        assert patch and patch.group(1) == "#ffffff", f"{src}: no opaque white background"


# --- search -----------------------------------------------------------------------

@pytest.mark.parametrize(("term", "page_stem"), [("softmax", "04-whys"),
                                                 ("perplexity", "06-perplexity")])
def test_search_finds_the_right_sections(browser: object, site: str, term: str,
                                         page_stem: str) -> None:
    """The search page lists the chapter, and a section result whose heading names the
    term; following it lands on a section that is about the term."""
    if not (HTML / "chapters" / f"{page_stem}.html").is_file():
        pytest.fail(f"chapter {page_stem} is not built")
    context, page = open_page(browser, site, f"search.html?q={term}", whole=False)
    try:
        page.wait_for_selector("ul.search li a", timeout=15000)
        results = page.eval_on_selector_all(
            "ul.search li a", "els => els.map(a => ({href: a.href, text: a.innerText}))"
        )
        hrefs = [r["href"] for r in results]
        assert any(f"chapters/{page_stem}.html" in h for h in hrefs), hrefs[:10]
        sections = [r for r in results if "#" in r["href"] and "chapters/" in r["href"]
                    and term in r["text"].lower()]
        assert sections, f"no chapter section titled with {term!r}: {results[:10]}"
        page.goto(sections[0]["href"])
        anchor = urlparse(sections[0]["href"]).fragment
        target = page.locator(f"[id='{anchor}']").first
        assert target.is_visible()
        heading = target.locator(":is(h1,h2,h3,h4)").first.inner_text().lower()
        assert term in heading, f"landed on #{anchor} headed {heading!r}"
        assert target.inner_text().lower().count(term) >= 2, "the section barely mentions it"
    finally:
        context.close()


# --- small screens, accessibility, 404, budget -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel", ALL_PAGES)
def test_phone_width_has_no_horizontal_page_scroll(browser: object, site: str, rel: str) -> None:
    context, page = open_page(browser, site, rel, shared=True, viewport=PHONE_VIEW)
    try:
        widths = page.evaluate(
            "({doc: document.documentElement.scrollWidth, view: window.innerWidth})"
        )
        assert widths["doc"] <= widths["view"], f"{rel} scrolls sideways at 390 px: {widths}"
        if rel == CHAPTER_PAGES[0]:
            page.screenshot(path=str(SHOTS / "phone-390.png"), full_page=False)
    finally:
        context.close()


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["index.html", "glossary.html", *CHAPTER_PAGES])
def test_accessibility_basics(browser: object, site: str, rel: str) -> None:
    context, page = open_page(browser, site, rel, shared=True, color_scheme="light",
                              viewport=DESKTOP_VIEW)
    try:
        report = page.evaluate("""() => {
          const imgs = Array.from(document.querySelectorAll('main img'))
            .filter(i => !(i.getAttribute('alt') || '').trim()).map(i => i.src);
          const levels = Array.from(
            document.querySelectorAll('main article :is(h1,h2,h3,h4,h5,h6)')
          ).map(h => Number(h.tagName[1]));
          const jumps = [];
          for (let i = 1; i < levels.length; i++) {
            if (levels[i] > levels[i - 1] + 1) jumps.push([levels[i - 1], levels[i]]);
          }
          const unnamed = Array.from(document.querySelectorAll('a[href]')).filter(a => {
            const name = (a.innerText || '').trim() || a.getAttribute('aria-label') ||
              a.getAttribute('title') ||
              Array.from(a.querySelectorAll('img')).map(i => i.alt).join('');
            return !name || !name.trim();
          }).map(a => a.outerHTML.slice(0, 120));
          return {imgs, levels, jumps, unnamed, h1: levels.filter(l => l === 1).length};
        }""")
        assert report["imgs"] == [], f"{rel}: images without alt text {report['imgs']}"
        assert report["h1"] == 1, f"{rel}: expected one h1, headings {report['levels']}"
        assert report["jumps"] == [], f"{rel}: heading levels skip {report['jumps']}"
        assert report["unnamed"] == [], f"{rel}: links without a name {report['unnamed'][:5]}"
    finally:
        context.close()


def test_404_page(browser: object, site: str) -> None:
    context = browser.new_context()
    page = context.new_page()
    try:
        response = page.goto(f"{site}/404.html")
        assert response is not None and response.ok
        assert "Page not found" in page.locator("h1").first.inner_text()
        css_ok = page.evaluate(
            "Array.from(document.styleSheets).some(s => (s.href || '').includes('theme.css'))"
        )
        assert css_ok, "404 page lost its styles"
    finally:
        context.close()


@pytest.mark.timing  # a time budget means nothing while other tests share the cores
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_page_budget(browser: object, site: str, rel: str) -> None:
    """First-load bytes (gzip, as hosts send them) and the time until math is typeset.

    The time is the median of three first loads, each in a fresh context (empty cache):
    one hiccup of a shared CI machine does not decide it, a page that is slow every time
    still fails."""
    wire: list[int] = []  # bytes over the wire (gzip where the server compresses, as hosts do)
    raw: list[int] = []  # bytes after decompression
    timings = []
    for attempt in range(3):
        context = browser.new_context()
        page = context.new_page()
        requests = RequestWatch(page)
        if attempt == 0:  # count bytes on the first load only: reading bodies costs time
            page.on("requestfinished", lambda req: wire.append(req.sizes()["responseBodySize"]))
            page.on("response", lambda r: raw.append(len(r.body()) if r.ok else 0))
        try:
            page.goto(f"{site}/{rel}", wait_until="load")
            timings.append(page.evaluate(WAIT_MATH_JS))
            requests.settle()
        finally:
            context.close()
    timing = sorted(timings, key=lambda t: t["typeset"])[1]  # the median load
    typeset_ms = timing["typeset"]
    total = sum(wire)
    BUDGET[rel] = {"bytes": total, "bytes_uncompressed": sum(raw),
                   **{f"{k}_s": round(v / 1000, 3) for k, v in timing.items()},
                   "typeset_s_each": [round(t["typeset"] / 1000, 3) for t in timings]}
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "page-budget.json").write_text(json.dumps(BUDGET, indent=1))
    assert total <= MAX_PAGE_BYTES, f"{rel}: first load {total} bytes"
    assert typeset_ms / 1000 <= MAX_TYPESET_SECONDS, (
        f"{rel}: math typeset at {typeset_ms} ms (median of {BUDGET[rel]['typeset_s_each']} s)")


# --- jumps to a section land on it ----------------------------------------------------

JUMP_PAGE = "chapters/04-whys.html"
TOP_JS = "id => document.getElementById(id).getBoundingClientRect().top"


def _settled_top(page: object, anchor: str) -> float:
    page.wait_for_timeout(1200)  # lazy figures near the target load, sections get drawn
    return page.evaluate(TOP_JS, anchor)


@pytest.mark.slow  # ~20 s a viewport: it waits for figures and sections to settle
@pytest.mark.parametrize("view", [PHONE_VIEW, DESKTOP_VIEW], ids=["phone", "desktop"])
def test_jumps_land_on_their_section(browser: object, site: str, view: dict) -> None:
    """Off-screen sections skip layout (custom.css) and count as 1000 px until drawn;
    a jump computed from those heights lands elsewhere (before _ext/offscreen_sections.py,
    #summary landed 1175 px below the top at 1280 px, #ch4-why-softmax 2187 px at 390 px).
    A link with a fragment and an in-page link must put the section's heading at the top
    of the window (below the sticky header); a reload and back must return to the same
    line (lazy figures without a size in the tag moved it by 600-1300 px)."""
    context = browser.new_context(viewport=view)
    page = context.new_page()
    try:
        for anchor in ("ch4-why-softmax", "summary", "exercises"):  # a link from elsewhere
            page.goto(f"{site}/{JUMP_PAGE}#{anchor}", wait_until="load")
            top = _settled_top(page, anchor)
            assert 0 <= top <= 120, f"#{anchor} at {top} px after loading the page with it"
        page.goto(f"{site}/{JUMP_PAGE}", wait_until="load")  # an in-page link
        page.evaluate("""() => { const a = document.createElement('a');
            a.href = '#exercises'; a.textContent = 'go'; document.body.prepend(a); a.click(); }""")
        top = _settled_top(page, "exercises")
        assert 0 <= top <= 120, f"#exercises at {top} px after an in-page link"
        page.goto(f"{site}/{JUMP_PAGE}", wait_until="load")  # reload and back keep the place
        for _ in range(12):  # a reader scrolls down a dozen screens
            page.mouse.wheel(0, view["height"])
            page.wait_for_timeout(150)
        page.wait_for_timeout(800)
        anchor = page.evaluate("""() => Array.from(document.querySelectorAll('section[id]'))
            .find(s => s.getBoundingClientRect().top >= 0).id""")
        before = page.evaluate(TOP_JS, anchor)
        page.reload(wait_until="load")
        after_reload = _settled_top(page, anchor)
        page.goto(f"{site}/index.html", wait_until="load")
        page.go_back(wait_until="load")
        after_back = _settled_top(page, anchor)
        assert abs(after_reload - before) <= 8, (anchor, before, after_reload)
        assert abs(after_back - before) <= 8, (anchor, before, after_back)
    finally:
        context.close()


# --- phones and tablets: sidebars ------------------------------------------------

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}


def test_sidebar_toggles_open_the_chapter_list_and_page_contents_on_a_phone(
    browser: object, site: str
) -> None:
    """At 390 px the ☰ button opens the chapter list (a chapter link in it works) and
    "On this page" opens the in-page contents."""
    rel = CHAPTER_PAGES[1]
    context, page = open_page(browser, site, rel, whole=False, **PHONE)
    try:
        primary = page.locator(".bd-header-article button.primary-toggle")
        assert primary.is_visible(), "no visible ☰ button in the article header"
        dialog = page.locator("#pst-primary-sidebar-modal")
        primary.tap()
        page.wait_for_timeout(300)
        assert dialog.evaluate("d => d.open"), "☰ did not open the chapter list"
        link = dialog.locator("nav.bd-docs-nav a.reference", has_text="Multi-head").first
        assert link.is_visible(), "chapter list opened but its links are not visible"
        link.tap()
        page.wait_for_url("**/chapters/03-multi-head.html*")

        secondary = page.locator(".bd-header-article button.secondary-toggle")
        assert secondary.is_visible(), "no visible 'On this page' button"
        toc = page.locator("#pst-secondary-sidebar-modal")
        secondary.tap()
        page.wait_for_timeout(300)
        assert toc.evaluate("d => d.open"), "'On this page' did not open the contents"
        entry = toc.locator("nav a.nav-link").first
        assert entry.is_visible(), "page contents opened but no entry is visible"
        page.screenshot(path=str(SHOTS / "phone-390-toc.png"))
    finally:
        context.close()


def test_sidebar_toggle_collapses_the_sidebar_on_a_desktop(browser: object, site: str) -> None:
    context, page = open_page(browser, site, CHAPTER_PAGES[1], whole=False,
                              viewport={"width": 1280, "height": 900})
    try:
        sidebar = page.locator("#pst-primary-sidebar")
        assert sidebar.is_visible()
        page.locator(".bd-header-article button.primary-toggle").click()
        page.wait_for_timeout(600)  # the theme animates the collapse
        assert not sidebar.is_visible(), "'Toggle primary sidebar' left the sidebar in place"
        page.locator(".bd-header-article button.primary-toggle").click()
        page.wait_for_timeout(600)
        assert sidebar.is_visible(), "a second click did not bring the sidebar back"
    finally:
        context.close()


# --- phones: display equations -----------------------------------------------------


# For each display equation: its box must lie inside the viewport, and the typeset
# formula must start at or right of the box's left edge when scrolled fully left and end
# at or left of its right edge when scrolled fully right (so every part can be seen).
DISPLAY_MATH_JS = """
() => Array.from(document.querySelectorAll('div.math')).map((box, i) => {
  const formula = box.querySelector('.katex-display > .katex') || box.querySelector('.katex');
  const b = box.getBoundingClientRect();
  box.scrollLeft = 0;
  const atStart = formula.getBoundingClientRect();
  box.scrollLeft = box.scrollWidth;
  const atEnd = formula.getBoundingClientRect();
  const bEnd = box.getBoundingClientRect();
  box.scrollLeft = 0;
  const tex = (box.querySelector('annotation') || {}).textContent || '';
  return {i, tex: tex.slice(0, 60), boxLeft: b.left, boxRight: b.right,
          view: window.innerWidth, startLeft: atStart.left, endRight: atEnd.right,
          endBoxRight: bEnd.right, overflowX: getComputedStyle(box).overflowX};
})
"""


@pytest.mark.slow
@pytest.mark.parametrize("rel", ALL_PAGES)
def test_display_math_fits_or_scrolls_in_its_own_box_on_a_phone(
    browser: object, site: str, rel: str
) -> None:
    context, page = open_page(browser, site, rel, shared=True, viewport=PHONE_VIEW)
    try:
        cut = []
        for m in page.evaluate(DISPLAY_MATH_JS):
            if m["boxLeft"] < -0.5 or m["boxRight"] > m["view"] + 0.5:
                cut.append(f"box outside the page {m}")
            elif m["startLeft"] < m["boxLeft"] - 0.5:
                cut.append(f"left part hidden by {m['boxLeft'] - m['startLeft']:.0f} px: {m}")
            elif m["endRight"] > m["endBoxRight"] + 0.5:
                cut.append(f"right part hidden by {m['endRight'] - m['endBoxRight']:.0f} px: {m}")
        assert cut == [], f"{rel}: {len(cut)} display equations cut off:\n" + "\n".join(cut)
    finally:
        context.close()


# --- phones: figure text ---------------------------------------------------------

MIN_FIGURE_TEXT_PX = 9.0
FIGURES_JS = """
() => Array.from(document.querySelectorAll('.cell_output img'))
  .filter(img => !img.closest('.selfattn-vega-fallback'))  // hidden once the chart is drawn
  .map(img => ({
  src: img.getAttribute('src'), width: img.getBoundingClientRect().width,
  boxRight: img.parentElement.getBoundingClientRect().right, view: window.innerWidth,
  scrolls: img.parentElement.scrollWidth > img.parentElement.clientWidth + 1,
  scrollWidth: img.parentElement.scrollWidth, clientWidth: img.parentElement.clientWidth,
}))
"""


def svg_text_metrics(path: Path) -> tuple[float, float]:
    """(viewBox width, smallest font size) of an SVG figure, both in SVG user units."""
    svg = path.read_text(encoding="utf-8")
    view_box = re.search(r'viewBox="([^"]+)"', svg)
    assert view_box, f"{path.name}: no viewBox"
    # a <tspan> holds the exponents and subscripts of math text (``$2^{10}$``)
    sizes = [float(s) for s in
             re.findall(r"<(?:text|tspan)[^>]*font(?:-size)?:[^;\"]*?([\d.]+)px", svg)]
    assert sizes, f"{path.name}: no text elements (text drawn as paths cannot be measured)"
    return float(view_box.group(1).split()[2]), min(sizes)


@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_figures_fit_a_phone_with_readable_text(browser: object, site: str, rel: str) -> None:
    """Rule: every figure is an SVG whose text is text, and at 390 px the whole figure fits
    the column (its box does not scroll sideways) with its smallest text drawn at >= 9 CSS
    px (smallest font-size x rendered width / viewBox width). Figures drawn at most 5.5 in
    wide with text of at least 10.5 pt (tests/test_build.py) meet both."""
    context, page = open_page(browser, site, rel, shared=True, viewport=PHONE_VIEW)
    try:
        page.evaluate(LOAD_ALL_IMAGES_JS)  # figures load lazily
        page.wait_for_timeout(300)  # figures.js sets the minimum widths after load
        small, not_svg, scrolls = [], [], []
        figures = page.evaluate(FIGURES_JS)
        assert figures, f"{rel}: no figures found"
        for fig in figures:
            if not fig["src"].endswith(".svg"):
                not_svg.append(fig["src"])
                continue
            vb_width, font = svg_text_metrics((HTML / rel).parent / fig["src"])
            rendered = font * fig["width"] / vb_width
            if rendered < MIN_FIGURE_TEXT_PX:
                small.append(f"{fig['src']}: {rendered:.1f} px")
            assert fig["boxRight"] <= fig["view"] + 0.5, f"{fig['src']} box leaves the page"
            if fig["scrolls"]:
                scrolls.append(f"{fig['src']}: {fig['scrollWidth']} px in a "
                               f"{fig['clientWidth']} px box")
        assert not_svg == [], f"{rel}: figures that are not SVG: {not_svg}"
        assert small == [], f"{rel}: figure text below {MIN_FIGURE_TEXT_PX} px: {small}"
        assert scrolls == [], f"{rel}: figures that scroll sideways at 390 px: {scrolls}"
    finally:
        context.close()


# --- API page: parameter types ------------------------------------------------------

@pytest.mark.html
def test_api_page_names_the_array_type_instead_of_any() -> None:
    """Array parameters read `Array` (linked to its definition), not `Any`."""
    from bs4 import BeautifulSoup

    require_built_site()
    soup = BeautifulSoup((HTML / "api.html").read_text(encoding="utf-8"), "html.parser")
    assert soup.find(id="selfattn.array_types.Array"), "the Array alias is not documented"

    def param_types(function_id: str) -> dict[str, str]:
        dl = soup.find(id=function_id).find_parent("dl")
        field = dl.find(lambda t: t.name == "dt" and t.get_text().startswith("Parameters"))
        field = field.find_next_sibling("dd")
        types = {}
        for li in field.find_all("li") or [field]:
            text = li.get_text(" ", strip=True)
            name, _, rest = text.partition(" ")
            types[name] = rest.split("–")[0]
        return types

    for function_id, params in {
        "selfattn.attention.scaled_dot_product_attention": ["query", "key", "value", "mask"],
        "selfattn.softmax.softmax": ["x"],
        "selfattn.perplexity.perplexity": ["logits", "targets"],
        "selfattn.masks.to_additive_mask": ["mask"],
        "selfattn.similarity.cosine_similarity": ["a", "b"],
    }.items():
        types = param_types(function_id)
        for p in params:
            assert "Array" in types[p] and "Any" not in types[p], f"{function_id}({p}): {types}"
        link = soup.find(id=function_id).find_parent("dl").find(
            "a", href=re.compile(r"#selfattn\.array_types\.Array$"))
        assert link is not None, f"{function_id}: Array does not link to its definition"


# --- phones: scroll hints, dark matrix tables ---------------------------------------

# The boxes that may scroll sideways (scroll-hints.js watches these and two table wrappers).
SCROLL_BOXES = "div.highlight pre, div.cell_output pre, .selfattn-matrix, div.math, " \
               ".selfattn-figure-scroll"
SCROLL_BOXES_JS = """
() => Array.from(document.querySelectorAll('{SCROLL_BOXES}'))
  .filter(box => box.scrollWidth > box.clientWidth + 1 && box.offsetParent !== null)
  .map(box => {
    box.scrollLeft = 0;
    box.dispatchEvent(new Event('scroll'));
    const cs = getComputedStyle(box);
    return {what: box.className.toString().slice(0, 40) || box.tagName,
            text: (box.innerText || '').slice(0, 40),
            mask: cs.maskImage || cs.webkitMaskImage || 'none',
            overflowX: cs.overflowX};
  })
""".replace("{SCROLL_BOXES}", SCROLL_BOXES)


@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_boxes_that_scroll_sideways_show_a_hint_on_a_phone(
    browser: object, site: str, rel: str
) -> None:
    """Every box with content hidden to the right fades that edge out (a CSS mask)."""
    context, page = open_page(browser, site, rel, shared=True, viewport=PHONE_VIEW)
    try:
        page.wait_for_timeout(400)
        boxes = page.evaluate(SCROLL_BOXES_JS)
        assert boxes, f"{rel}: nothing scrolls sideways at 390 px (test would prove nothing)"
        no_hint = [b for b in boxes if "gradient" not in b["mask"]]
        cut = [b for b in boxes if b["overflowX"] not in ("auto", "scroll")]
        assert cut == [], f"{rel}: boxes cut off without scrolling: {cut[:3]}"
        assert no_hint == [], f"{rel}: {len(no_hint)} of {len(boxes)} scrolling boxes have " \
                              f"no hint: {no_hint[:3]}"
    finally:
        context.close()


# Which boxes scroll sideways (measured by the test) and which carry the hint class.
HINT_STATE_JS = """
() => Array.from(document.querySelectorAll('{SCROLL_BOXES}'))
  .filter(box => box.checkVisibility())  // not in a closed "show code" toggle
  .map(box => ({scrolls: box.scrollWidth > box.clientWidth + 1,
                marked: box.classList.contains('sa-scrollable'),
                focusable: box.tabIndex === 0,
                top: box.getBoundingClientRect().top}))
""".replace("{SCROLL_BOXES}", SCROLL_BOXES)


@pytest.mark.slow  # scrolls a long chapter screen by screen at 390 px
def test_scroll_hints_follow_the_reader(browser: object, site: str) -> None:
    """scroll-hints.js measures a box when it comes within a screen of the window, not
    every box at load (that cost 0.3-0.5 s of main thread on 04-whys): a fresh page has
    marked none of the boxes far below; a reader who scrolls down finds every box that
    scrolls marked on arrival; a keyboard reader's first Tab marks and makes focusable
    every box that scrolls, all the way down."""
    rel = "chapters/04-whys.html"
    context = browser.new_context(viewport=PHONE_VIEW)
    page = context.new_page()
    try:
        page.goto(f"{site}/{rel}", wait_until="load")
        page.wait_for_timeout(500)
        marked_far = page.evaluate(
            "() => Array.from(document.querySelectorAll('.sa-scrollable'))"
            ".filter(b => b.getBoundingClientRect().top > 3 * window.innerHeight).length")
        assert marked_far == 0, f"{rel}: {marked_far} boxes far below measured at load"
        unmarked: list[int] = []
        height = page.evaluate("document.documentElement.scrollHeight")
        for y in range(0, height, PHONE_VIEW["height"]):  # a reader scrolling down
            page.evaluate("y => window.scrollTo(0, y)", y)
            page.wait_for_timeout(150)  # a few frames: the observer reports after a frame
            on_screen = [b for b in page.evaluate(HINT_STATE_JS)
                         if 0 <= b["top"] < PHONE_VIEW["height"]]
            unmarked += [y for b in on_screen if b["scrolls"] and not b["marked"]]
        assert unmarked == [], f"{rel}: boxes that scroll shown unmarked at y={unmarked[:5]}"

        page.goto(f"{site}/{rel}", wait_until="load")  # a keyboard reader, from the top
        page.keyboard.press("Tab")
        page.evaluate(DRAW_EVERY_SECTION_JS)
        boxes = page.evaluate(HINT_STATE_JS)
        scrolling = [b for b in boxes if b["scrolls"]]
        assert scrolling, f"{rel}: nothing scrolls sideways at 390 px (test would prove nothing)"
        missed = [b for b in scrolling if not (b["marked"] and b["focusable"])]
        assert missed == [], f"{rel}: after Tab, {len(missed)} of {len(scrolling)} not marked"
    finally:
        context.close()


@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_matrix_tables_follow_dark_mode(browser: object, site: str, rel: str) -> None:
    context, page = open_page(browser, site, rel, shared=True, color_scheme="dark",
                              viewport=DESKTOP_VIEW)
    try:
        tables = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.selfattn-matrix td')).slice(0, 400).map(td => {
          let el = td, bg = 'rgba(0, 0, 0, 0)';
          while (el && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
            bg = getComputedStyle(el).backgroundColor; el = el.parentElement;
          }
          return {bg, color: getComputedStyle(td).color};
        })""")
        if not tables:
            pytest.skip(f"{rel} prints no matrix table")
        light = [t for t in tables if luminance(t["bg"]) > 0.4 or luminance(t["color"]) < 0.6]
        assert light == [], f"{rel}: {len(light)} matrix cells drawn light-on-dark-text: " \
                            f"{light[:2]}"
    finally:
        context.close()


# --- copying snippets: API examples ---------------------------------------------------

def run_like_a_repl(code: str, namespace: dict) -> str:
    """Run ``code`` statement by statement as the interactive prompt does (an
    expression's value is printed) and return what it printed."""
    import ast
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for stmt in ast.parse(code).body:
            exec(compile(ast.Interactive([stmt]), "<copied>", "single"), namespace)  # noqa: S102
    return out.getvalue()


@pytest.mark.slow
def test_api_examples_copy_as_runnable_code(browser: object, site: str) -> None:
    """The copy button of every `>>>` example on the API page puts only the code on
    the clipboard; run in its module's namespace (as doctest does), it prints exactly
    the output the page shows."""
    import importlib

    context, page = open_page(browser, site, "api.html",
                              permissions=["clipboard-read", "clipboard-write"])
    try:
        blocks = page.locator("div.doctest")
        assert blocks.count() >= 8, f"expected the API's examples, found {blocks.count()}"
        for i in range(blocks.count()):
            block = blocks.nth(i)
            shown = block.locator("pre").inner_text()
            module = block.evaluate(
                "b => { const dl = b.closest('dl.py'); return dl.querySelector('dt.sig').id; }"
            )
            while module.count(".") > 1:  # selfattn.masks.causal_mask -> selfattn.masks
                module = module.rsplit(".", 1)[0]
            block.scroll_into_view_if_needed()
            block.hover()
            block.locator("button.copybtn").click()
            copied = page.evaluate("navigator.clipboard.readText()")
            assert ">>>" not in copied and "..." not in copied.replace("...,", ""), copied
            expected = "\n".join(
                line for line in shown.splitlines()
                if line.strip() and not line.startswith((">>> ", "... "))
            )
            namespace = dict(vars(importlib.import_module(module)))
            printed = run_like_a_repl(copied, namespace)
            norm = lambda s: " ".join(s.split())  # noqa: E731
            assert norm(printed) == norm(expected), (
                f"example {i} ({module}): copied\n{copied}\nprinted\n{printed}\n"
                f"page shows\n{expected}"
            )
    finally:
        context.close()


# --- keyboard focus and axe ---------------------------------------------------------

FOCUS_TARGETS = {
    "launch menu": ".bd-header-article button.dropdown-toggle[aria-label*='Launch']",
    "source menu": ".bd-header-article button.dropdown-toggle[aria-label*='Source']",
    "download menu": ".bd-header-article button.dropdown-toggle[aria-label*='Download']",
    "sidebar toggle": ".bd-header-article button.primary-toggle",
    "search field": ".bd-sidebar-primary .search-button-field",
}
RING_JS = """
el => { const cs = getComputedStyle(el);
  return {outline: cs.outlineStyle, width: parseFloat(cs.outlineWidth) || 0,
          shadow: cs.boxShadow, focused: document.activeElement === el}; }
"""


def ring_visible(style: dict) -> bool:
    outline = style["outline"] != "none" and style["width"] >= 2
    shadow = style["shadow"] not in ("none", "") and not re.fullmatch(
        r"(rgba?\([^)]*\)\s*)?(0px\s*){3,4}", style["shadow"].strip())
    return outline or shadow


@pytest.mark.parametrize("target", list(FOCUS_TARGETS))
def test_keyboard_focus_is_visible(browser: object, site: str, target: str) -> None:
    # one shared page for the five targets: each test moves the focus, nothing else
    context, page = open_page(browser, site, CHAPTER_PAGES[1], shared=True, whole=False,
                              viewport={"width": 1280, "height": 900})
    try:
        el = page.locator(FOCUS_TARGETS[target]).first
        assert el.is_visible(), f"{target} not visible"
        page.keyboard.press("Shift")  # keyboard modality: focus() then shows :focus-visible
        el.focus()
        style = el.evaluate(RING_JS)
        assert style["focused"], f"{target} cannot take focus"
        assert ring_visible(style), f"{target}: no visible focus ring {style}"
    finally:
        context.close()


def test_search_input_focus_is_visible(browser: object, site: str) -> None:
    context, page = open_page(browser, site, "search.html", whole=False,
                              viewport={"width": 1280, "height": 900})
    try:
        field = page.locator("article input[type=search], main input[name=q]").first
        page.keyboard.press("Shift")
        field.focus()
        style = field.evaluate(RING_JS)
        assert style["focused"] and ring_visible(style), f"search input: {style}"
    finally:
        context.close()


AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
AXE_RUN_JS = """
async () => {
  const r = await axe.run(document, {resultTypes: ['violations']});
  return r.violations.filter(v => ['serious', 'critical'].includes(v.impact)).map(v => ({
    id: v.id, impact: v.impact, count: v.nodes.length,
    targets: v.nodes.slice(0, 3).map(n => n.target.join(' ')),
  }));
}
"""
AXE_COUNTS: dict[str, int] = {}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("rel", ALL_PAGES)
def test_axe_finds_no_serious_or_critical_violations(
    browser: object, site: str, rel: str, scheme: str
) -> None:
    """axe-core (npm, injected from node_modules: nothing loaded from another host)."""
    assert AXE.is_file(), "axe-core missing: `make html` runs npm ci"
    context, page = open_page(browser, site, rel, shared=True, color_scheme=scheme,
                              viewport=DESKTOP_VIEW)
    try:
        # The theme animates colour changes; a contrast sample taken mid-transition (seen
        # once in dark mode, on the search button) reports a colour the page never rests at.
        page.add_style_tag(content="*, *::before, *::after { transition: none !important;"
                                   " animation: none !important; }")
        page.wait_for_timeout(100)
        if page.evaluate("typeof axe") == "undefined":
            page.add_script_tag(path=str(AXE))
        violations = page.evaluate(AXE_RUN_JS)
        AXE_COUNTS[f"{rel} {scheme}"] = sum(v["count"] for v in violations)
        (ROOT / "_build" / "axe-counts.json").write_text(json.dumps(AXE_COUNTS, indent=1))
        assert violations == [], f"{rel} ({scheme}): {json.dumps(violations, indent=1)}"
    finally:
        context.close()
