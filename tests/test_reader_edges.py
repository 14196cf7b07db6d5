"""Reader rough edges (issue 26), each checked in headless Chromium over the built site.

* Phone: a tapped "On this page" entry closes the drawer and shows its section.
* Desktop: the contents' highlight follows the section being read, at any scroll
  position reached in any way (a jump, a scroll back up, the end of the page).
* Search: the desktop header has no second search button; a section about a term
  ranks above pages that only define or document it.
* The temperature slider has ticks at the values the text discusses, and snaps to them.
"""

from __future__ import annotations

import html
import re

import pytest

from sitetools import OfflinePage  # noqa: E402

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
DESKTOP = {"viewport": {"width": 1280, "height": 900}}
CONTENTS_PAGE = "chapters/02-qkv.html"


def open_offline(browser: object, site: str, rel: str, **ctx: object) -> tuple[object, object]:
    """(context, page): ``rel`` loaded offline by the suite's one helper (sitetools.OfflinePage)."""
    visit = OfflinePage(browser, site, rel, **ctx)
    return visit.context, visit.page


# --- "On this page" -------------------------------------------------------------------

def test_tapping_a_contents_entry_on_a_phone_closes_the_drawer_on_its_section(
    browser: object, site: str
) -> None:
    context, page = open_offline(browser, site, CONTENTS_PAGE, **PHONE)
    try:
        page.locator(".bd-header-article button.secondary-toggle").tap()
        dialog = page.locator("#pst-secondary-sidebar-modal")
        page.wait_for_function("() => document.getElementById("
                               "'pst-secondary-sidebar-modal').open", timeout=5000)
        entry = dialog.locator("nav a.nav-link").nth(5)
        anchor = entry.get_attribute("href").lstrip("#")
        entry.tap()
        try:
            page.wait_for_function("() => !document.getElementById("
                                   "'pst-secondary-sidebar-modal').open", timeout=3000)
        except Exception as exc:  # playwright's TimeoutError
            raise AssertionError(f"the drawer stayed open over #{anchor}") from exc
        page.wait_for_function("""id => { const h = document.getElementById(id)
            .querySelector('h1,h2,h3,h4'); const top = h.getBoundingClientRect().top;
            return top >= 0 && top <= 120; }""", arg=anchor, timeout=5000)
        # the heading is what the reader sees there: nothing lies over it
        covered = page.evaluate("""id => { const h = document.getElementById(id)
            .querySelector('h1,h2,h3,h4'); const r = h.getBoundingClientRect();
            const hit = document.elementFromPoint(r.left + 10, r.top + r.height / 2);
            return hit && !h.contains(hit) ? hit.outerHTML.slice(0, 80) : null; }""", anchor)
        assert covered is None, f"#{anchor}'s heading is covered by {covered}"
    finally:
        context.close()


# The entry the reader expects lit: the last contents entry whose heading is at or above
# the reading line (30% down the window); at the very bottom of the page, the last entry
# whose heading is on screen. Headings here, not sections: a second way to the answer.
CONTENTS_STATE_JS = """() => {
  const nav = document.querySelector('nav.page-toc');
  const ids = Array.from(nav.querySelectorAll("a[href^='#']")).map(a => a.hash.slice(1));
  const top = id => { const el = document.getElementById(decodeURIComponent(id));
    return (el.querySelector('h1,h2,h3,h4,h5,h6') || el).getBoundingClientRect().top; };
  const root = document.documentElement;
  const bottom = scrollY + innerHeight >= root.scrollHeight - 2;
  let expected = null;
  for (const id of ids) {
    const t = top(id);
    if (bottom ? t < innerHeight : t <= innerHeight * 0.3) expected = id;
  }
  const lit = Array.from(nav.querySelectorAll('a.active')).map(a => a.hash.slice(1));
  const litItems = Array.from(nav.querySelectorAll('li.active > a')).map(a => a.hash.slice(1));
  return {expected, lit, litItems, y: scrollY, bottom};
}"""
SETTLED_JS = f"""() => {{ const s = ({CONTENTS_STATE_JS})();
  return s.expected === null ? s.lit.length === 0
                             : s.lit.length === 1 && s.lit[0] === s.expected; }}"""
# put the heading of entry i at a fraction of the window height (negative: above it)
PUT_HEADING_JS = """([i, frac]) => {
  const a = document.querySelectorAll("nav.page-toc a[href^='#']")[i];
  const el = document.getElementById(decodeURIComponent(a.hash.slice(1)));
  const h = el.querySelector('h1,h2,h3,h4,h5,h6') || el;
  window.scrollTo(0, scrollY + h.getBoundingClientRect().top - frac * innerHeight);
}"""


# scroll to the end; sections drawn on the way may lengthen the page, so until it stays
TO_THE_END_JS = """async () => { for (let i = 0; i < 20; i++) {
  window.scrollTo(0, document.documentElement.scrollHeight);
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  if (scrollY + innerHeight >= document.documentElement.scrollHeight - 2) return; } }"""


def _expect_followed(page: object, where: str) -> dict:
    try:
        page.wait_for_function(SETTLED_JS, timeout=3000)
    except Exception as exc:  # playwright's TimeoutError
        state = page.evaluate(CONTENTS_STATE_JS)
        raise AssertionError(f"{where}: highlight {state['lit']}, reading "
                             f"{state['expected']!r} (scrollY {state['y']})") from exc
    return page.evaluate(CONTENTS_STATE_JS)


def test_contents_highlight_follows_the_section_being_read(browser: object, site: str) -> None:
    context, page = open_offline(browser, site, CONTENTS_PAGE, **DESKTOP)
    try:
        assert page.locator("nav.page-toc").first.is_visible(), "no contents beside the page"
        n = page.evaluate("document.querySelectorAll(\"nav.page-toc a[href^='#']\").length")
        assert n >= 6, f"only {n} contents entries"
        _expect_followed(page, "top of the page (the introduction)")
        # long jumps down (heading just above the line, or far above: mid-section),
        # a heading just below the line (the previous section is still being read),
        # then back up, then the end of the page
        steps = [(2, 0.1), (n - 3, 0.25), (n // 2, -1.5), (n // 2, 0.5), (1, 0.1), (1, -0.8),
                 (3, 0.6), (0, 0.1)]
        seen = set()
        for i, frac in steps:
            for _ in range(2):  # sections drawn on arrival may shift the heading once
                page.evaluate(PUT_HEADING_JS, [i, frac])
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
            state = _expect_followed(page, f"entry {i}'s heading at {frac:+.0%} of the window")
            seen.add(state["expected"])
            if state["expected"]:  # its entry and the entries above it are unfolded and lit
                assert state["expected"] in state["litItems"], state
        page.evaluate(TO_THE_END_JS)
        state = _expect_followed(page, "the end of the page")
        assert state["bottom"], state
        assert len(seen) >= 5, f"the steps read only {sorted(seen, key=str)}"
    finally:
        context.close()


def test_contents_entry_followed_stays_lit_after_the_jump(browser: object, site: str) -> None:
    """A short section jumped to from the contents ends above the reading line; its entry
    (not the next one's) is lit until the reader scrolls on."""
    context, page = open_offline(browser, site, CONTENTS_PAGE, **DESKTOP)
    try:
        last = page.locator("nav.page-toc a[href^='#']").last
        target = last.get_attribute("href")
        entry = page.locator("nav.page-toc a[href^='#']").nth(2)
        entry.click()
        page.wait_for_function("h => { const a = document.querySelector("
                               "`nav.page-toc a[href='${h}']`); return a.classList.contains("
                               "'active'); }", arg=entry.get_attribute("href"), timeout=3000)
        assert page.locator("nav.page-toc a.active").count() == 1
        last.click()
        page.wait_for_function("h => document.querySelector(`nav.page-toc a[href='${h}']`)"
                               ".classList.contains('active')", arg=target, timeout=3000)
    finally:
        context.close()


def test_the_theme_still_looks_up_its_contents_by_the_id_page_contents_renames() -> None:
    """_static/page-contents.js turns the theme's contents syncing off by renaming
    #pst-page-toc-nav before the theme's script runs. If the theme looks the nav up
    otherwise, both would light entries: revisit the patch (see _ext/README.md)."""
    import pydata_sphinx_theme

    from sitetools import HTML, require_built_site

    require_built_site()
    theme_js = (HTML / "_static" / "scripts" / "pydata-sphinx-theme.js").read_text()
    assert theme_js.count("#pst-page-toc-nav") == 1, "the theme's contents lookup changed"
    assert pydata_sphinx_theme.__version__ == "0.20.0", (
        "pydata-sphinx-theme upgraded: check whether #1965/#1724/#2240 are fixed and "
        "_static/page-contents.js is still needed, then update this version")
    page = (HTML / CONTENTS_PAGE).read_text(encoding="utf-8")
    # deferred scripts run in the order of their <script> tags
    order = re.findall(r'<script defer(?:="defer")? src="[^"]*?(page-contents|'
                       r'scripts/pydata-sphinx-theme)\.js', page)
    assert order == ["page-contents", "scripts/pydata-sphinx-theme"], (
        f"page-contents.js must run before the theme's script: {order}")


# --- search ---------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "section"), [
    ("online softmax", "chapters/attention-at-scale.html#the-online-softmax"),
    ("multi-head attention", "chapters/03-multi-head.html"),
])
def test_search_ranks_the_section_about_the_query_first(browser: object, site: str,
                                                        query: str, section: str) -> None:
    context, page = open_offline(browser, site, f"search.html?q={query}", **DESKTOP)
    try:
        page.wait_for_selector("ul.search li a", timeout=15000)
        page.wait_for_function("() => !document.querySelector('#search-progress')"
                               " || !/Preparing|Searching/.test("
                               "document.querySelector('#search-progress').textContent)",
                               timeout=15000)
        hrefs = page.eval_on_selector_all("ul.search li > a", "els => els.map(a =>"
                                          " a.getAttribute('href'))")
        assert hrefs and hrefs[0].split("?")[0] == section, f"{query!r} ranks {hrefs[:5]}"
    finally:
        context.close()


def test_search_page_field_shows_what_is_typed(browser: object, site: str) -> None:
    """The magnifier sits left of the typed text, not over its first letters."""
    context, page = open_offline(browser, site, "search.html?q=online", **DESKTOP)
    try:
        gap = page.evaluate("""async () => { await document.fonts.ready;
            const f = document.querySelector('.bd-search-container form.bd-search');
            const input = f.querySelector('input'), icon = f.querySelector('i');
            const text = input.getBoundingClientRect().left
                + parseFloat(getComputedStyle(input).paddingLeft);
            return text - icon.getBoundingClientRect().right; }""")
        assert gap >= 2, f"the magnifier overlaps the typed text by {-gap:.0f} px"
    finally:
        context.close()


def test_desktop_header_has_one_search_field(browser: object, site: str) -> None:
    """The sidebar's search field is the only search control a desktop reader sees."""
    context, page = open_offline(browser, site, CONTENTS_PAGE, **DESKTOP)
    try:
        shown = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.search-button-field, .search-button')).filter(b => b.checkVisibility())
            .map(b => b.closest('[id], [class]').className)""")
        assert len(shown) == 1, f"{len(shown)} search controls shown: {shown}"
        assert page.locator(".bd-sidebar-primary .search-button-field").is_visible()
        # Ctrl+K still opens the search dialog
        page.keyboard.press("Control+k")
        page.wait_for_function("() => document.getElementById('pst-search-dialog').open",
                               timeout=3000)
    finally:
        context.close()


# --- the temperature slider -------------------------------------------------------------

TEMPERATURE_PAGE = "chapters/04-whys.html"
SLIDER_JS = """() => {
  const el = Array.from(document.querySelectorAll('div.selfattn-vega')).find(d =>
    JSON.parse(d.querySelector('script.selfattn-vega-spec').textContent).description
      .startsWith('softmax of a score row'));
  const input = el.querySelector('input[type=range]');
  const list = input.list;
  return {list: list ? Array.from(list.options).map(o => Number(o.value)) : [],
          min: Number(input.min), max: Number(input.max), step: Number(input.step),
          width: input.getBoundingClientRect().width, T: el.vegaView.signal('T')};
}"""


def _temperature_slider(page: object) -> dict:
    page.wait_for_function("() => Array.from(document.querySelectorAll('div.selfattn-vega'))"
                           ".every(el => el.classList.contains('selfattn-vega-ready'))",
                           timeout=30_000)
    return page.evaluate(SLIDER_JS)


def _drag_to(page: object, slider: object, value: float, info: dict, off_px: float) -> None:
    """Drag the thumb with the pointer to ``value``'s place plus ``off_px`` pixels."""
    slider.scroll_into_view_if_needed()
    box = slider.bounding_box()
    thumb = 16  # Chromium's range thumb; its centre travels width - thumb px
    frac = (value - info["min"]) / (info["max"] - info["min"])
    x = box["x"] + thumb / 2 + frac * (box["width"] - thumb) + off_px
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] - 2, y)
    page.mouse.down()
    page.mouse.move(x, y, steps=6)
    page.mouse.up()


@pytest.mark.parametrize("off_px", [-4, 3])
def test_temperature_slider_ticks_and_snaps_to_one_on_a_phone(
    browser: object, site: str, off_px: float
) -> None:
    context, page = open_offline(browser, site, TEMPERATURE_PAGE, **PHONE)
    try:
        page.evaluate("document.documentElement.classList.remove('selfattn-skip-offscreen')")
        info = _temperature_slider(page)
        slider = page.locator("div.selfattn-vega input[type=range][name=T]").first
        steps = (info["max"] - info["min"]) / info["step"]
        assert info["width"] / steps < 2, f"the test needs a fine slider: {info}"
        assert 1.0 in info["list"], f"no tick at T = 1: {info['list']}"
        _drag_to(page, slider, 1.0, info, off_px)
        t = page.evaluate(SLIDER_JS)["T"]
        assert t == 1.0, f"dragged {off_px:+} px from T = 1, the slider says T = {t}"
        # the keyboard still takes one step off the tick
        slider.focus()
        page.keyboard.press("ArrowRight")
        assert page.evaluate(SLIDER_JS)["T"] == pytest.approx(1.0 + info["step"])
    finally:
        context.close()


# --- captions of the interactive figures and the benchmarks figure -------------------

INTERACTIVE_PAGES = {"chapters/03-multi-head.html": 1, "chapters/04-whys.html": 2,
                     "chapters/06-perplexity.html": 1}


@pytest.mark.parametrize("rel", sorted(INTERACTIVE_PAGES))
def test_interactive_figures_have_numbered_captions(rel: str) -> None:
    from bs4 import BeautifulSoup

    from sitetools import HTML, require_built_site

    require_built_site()
    soup = BeautifulSoup((HTML / rel).read_text(encoding="utf-8"), "html.parser")
    figures = soup.select("div.selfattn-vega")
    assert len(figures) == INTERACTIVE_PAGES[rel]
    chapter = soup.select_one("h1 .section-number").get_text().strip().rstrip(".")
    for div in figures:
        figure = div.find_parent("figure")
        assert figure is not None and figure.get("id"), f"{rel}: an interactive figure "\
            "is not a figure with an id (no caption, no number, no link to it)"
        number = figure.select_one("figcaption .caption-number")
        assert number and number.get_text().strip().startswith(f"Fig. {chapter}."), (
            f"{rel}: caption number {number}")
        text = figure.select_one("figcaption .caption-text").get_text(" ", strip=True)
        assert len(text.split()) >= 6, f"{rel}: caption {text!r}"


def test_benchmarks_figure_has_a_caption_and_alt_text() -> None:
    from bs4 import BeautifulSoup

    from sitetools import HTML, require_built_site

    require_built_site()
    soup = BeautifulSoup((HTML / "benchmarks.html").read_text(encoding="utf-8"),
                         "html.parser")
    images = soup.select(".cell_output img")
    assert len(images) == 1, f"{len(images)} figures on the benchmarks page"
    img = images[0]
    alt = img.get("alt", "")
    assert alt != "Figure drawn by the code above" and "sequence length" in alt, alt
    figure = img.find_parent("figure")
    assert figure is not None and figure.get("id") == "fig-benchmarks-attention"
    caption = figure.select_one("figcaption").get_text(" ", strip=True)
    assert "Fig." in caption and "wall time" in caption, caption


# --- prose written for paper ---------------------------------------------------------

# sentences that only make sense with the live figure in front of the reader
SCREEN_PHRASES = ("Move the dial yourself", "when their boxes are ticked",
                  "Slide through the head sizes", "For the temperature on the slider")


@pytest.mark.parametrize("rel", sorted(INTERACTIVE_PAGES))
def test_printed_page_describes_the_static_figure(browser: object, site: str,
                                                  rel: str) -> None:
    context, page = open_offline(browser, site, rel, **DESKTOP)
    try:
        page.evaluate("document.documentElement.classList.remove('selfattn-skip-offscreen')")
        page.wait_for_function("() => Array.from(document.querySelectorAll("
                               "'div.selfattn-vega')).every(el => el.classList.contains("
                               "'selfattn-vega-ready'))", timeout=30_000)
        shown = "() => document.querySelector('.bd-article').innerText"
        on_screen = page.evaluate(shown)
        assert any(p in on_screen for p in SCREEN_PHRASES), "no interactive prose on screen"
        # docutils' smart quotes turn the apostrophe of "book's" into ’
        assert "On the book" not in on_screen, "print prose shown on screen"
        page.emulate_media(media="print")
        printed = page.evaluate(shown)
        left = [p for p in SCREEN_PHRASES if p in printed]
        assert not left, f"{rel} prints {left}"
        assert printed.count("On the book") == INTERACTIVE_PAGES[rel], "no print prose"
        # paper shows the static figure the print prose describes, not the live chart
        visible = page.evaluate("""() => Array.from(document.querySelectorAll(
            'div.selfattn-vega')).map(el => [
              el.querySelector('.selfattn-vega-fallback img').checkVisibility(),
              el.querySelector('.selfattn-vega-chart').checkVisibility()])""")
        assert visible == [[True, False]] * INTERACTIVE_PAGES[rel], visible
    finally:
        context.close()


# --- references: the list reads as the text cites --------------------------------------

def test_reference_list_is_labelled_and_sorted_as_the_text_cites() -> None:
    """A citation "Vaswani et al., 2017" leads to the entry labelled [Vaswani et al., 2017]
    (not [2]); the list runs in the order of its labels."""
    from bs4 import BeautifulSoup

    from sitetools import CHAPTERS, HTML, require_built_site

    require_built_site()
    refs = BeautifulSoup((HTML / "references.html").read_text(encoding="utf-8"),
                         "html.parser")
    labels = {c["id"]: c.select_one(".label").get_text().strip("[]")
              for c in refs.select("div.citation")}
    assert labels and not any(v.isdigit() for v in labels.values()), labels
    order = list(labels.values())
    assert order == sorted(order, key=str.lower), order
    checked = 0
    link = re.compile(r'<a [^>]*href="\.\./references\.html#([^"]+)"[^>]*>(.*?)</a>', re.S)
    for chapter in CHAPTERS:
        page = (HTML / "chapters" / f"{chapter.stem}.html").read_text(encoding="utf-8")
        for target, inner in link.findall(page):
            text = html.unescape(re.sub(r"<[^>]+>", "", inner)).strip()
            if not re.fullmatch(r".+, \d{4}[a-z]?", text):
                continue  # a textual citation, Xu et al. [2015]: its year links alone
            assert labels[target] == text, f"{chapter.stem}: cites {text!r}, list says "\
                f"{labels[target]!r}"
            checked += 1
    assert checked >= 20, checked


def test_benchmarks_figure_follows_the_figure_rule() -> None:
    """The chapters' rule (tests/test_build.py): at most 5.5 in wide, no text below
    10.5 pt, so a 390 px phone draws its text at >= 9 px with no script resizing it
    (figures.js did that and is gone). The benchmarks figure had legends at 7 pt: 5.9 px."""
    from sitetools import HTML, require_built_site

    require_built_site()
    page = (HTML / "benchmarks.html").read_text(encoding="utf-8")
    (src,) = re.findall(r'<img[^>]+src="(_images/[^"]+\.svg)"', page)
    svg = (HTML / src).read_text(encoding="utf-8")
    inches = float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', svg).group(1)) / 72
    sizes = [float(s) for s in
             re.findall(r"<(?:text|tspan)[^>]*font(?:-size)?:[^;\"]*?([\d.]+)px", svg)]
    assert inches <= 5.5 + 1e-6 and min(sizes) >= 10.5 - 1e-6, (inches, min(sizes))
