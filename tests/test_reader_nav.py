"""Finding one's way, checked in headless Chromium: search results land on a section
about the term, a jump to a section lands on it (also after reload and back), the
sidebars open and close on a phone and a desktop, and the 404 page keeps its styles.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from sitetools import (
    CHAPTER_PAGES,
    DESKTOP_VIEW,
    HTML,
    PHONE_VIEW,
    SHOTS,
    RequestWatch,
    open_page,
)

pytestmark = pytest.mark.browser
# the fixtures (conftest.py) drive Chromium with it; expect() waits for a condition
expect = pytest.importorskip("playwright.sync_api").expect


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


# --- jumps to a section land on it ----------------------------------------------------

JUMP_PAGE = "chapters/04-whys.html"
TOP_JS = "id => document.getElementById(id).getBoundingClientRect().top"
# Resolves once the fonts have loaded and `id`'s top (the scroll position when `id` is
# null) has not moved for `frames` frames in a row: sections drawn, fonts applied, the
# page at rest. Fails if it is still moving after `limit` ms.
STILL_JS = """
async ([id, frames, limit]) => {
  const where = () => id === null ? window.scrollY
    : document.getElementById(id).getBoundingClientRect().top;
  await document.fonts.ready;
  const start = performance.now();
  let last = where(), still = 0;
  while (still < frames) {
    await new Promise(resolve => requestAnimationFrame(resolve));
    const now = where();
    still = Math.abs(now - last) < 0.5 ? still + 1 : 0;
    last = now;
    if (performance.now() - start > limit) {
      throw new Error(`${id || 'scroll position'} still moving after ${limit} ms (${now})`);
    }
  }
  return last;
}
"""
STILL_FRAMES = 10


def _settle(page: object, requests: RequestWatch, anchor: str | None) -> float:
    """Wait until the page is at rest and return `anchor`'s top (or the scroll position):
    no request in flight (the lazy figures near the target have loaded) and nothing
    moving for STILL_FRAMES frames, again until no figure started loading meanwhile."""
    for _ in range(10):
        requests.settle()
        where = page.evaluate(STILL_JS, [anchor, STILL_FRAMES, 15_000])
        if not requests.pending:
            return where
    raise AssertionError(f"{JUMP_PAGE}: still loading after 10 rounds: {list(requests.pending)}")


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
    requests = RequestWatch(page)
    try:
        for anchor in ("ch4-why-softmax", "summary", "exercises"):  # a link from elsewhere
            page.goto(f"{site}/{JUMP_PAGE}#{anchor}", wait_until="load")
            top = _settle(page, requests, anchor)
            assert 0 <= top <= 120, f"#{anchor} at {top} px after loading the page with it"
        page.goto(f"{site}/{JUMP_PAGE}", wait_until="load")  # an in-page link
        page.evaluate("""() => { const a = document.createElement('a');
            a.href = '#exercises'; a.textContent = 'go'; document.body.prepend(a); a.click(); }""")
        top = _settle(page, requests, "exercises")
        assert 0 <= top <= 120, f"#exercises at {top} px after an in-page link"
        page.goto(f"{site}/{JUMP_PAGE}", wait_until="load")  # reload and back keep the place
        for _ in range(12):  # a reader scrolls down a dozen screens
            y = page.evaluate("window.scrollY")
            page.mouse.wheel(0, view["height"])
            page.wait_for_function(  # the wheel has moved the page (unless at the bottom)
                """y => window.scrollY !== y || window.scrollY + window.innerHeight
                   >= document.documentElement.scrollHeight - 1""", arg=y)
        _settle(page, requests, None)
        anchor = page.evaluate("""() => Array.from(document.querySelectorAll('section[id]'))
            .find(s => s.getBoundingClientRect().top >= 0).id""")
        before = page.evaluate(TOP_JS, anchor)
        page.reload(wait_until="load")
        after_reload = _settle(page, requests, anchor)
        page.goto(f"{site}/index.html", wait_until="load")
        page.go_back(wait_until="load")
        after_back = _settle(page, requests, anchor)
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
        expect(dialog, "☰ did not open the chapter list").to_have_js_property("open", True)
        link = dialog.locator("nav.bd-docs-nav a.reference", has_text="Multi-head").first
        expect(link, "chapter list opened but its links are not visible").to_be_visible()
        link.tap()
        page.wait_for_url("**/chapters/03-multi-head.html*")

        secondary = page.locator(".bd-header-article button.secondary-toggle")
        assert secondary.is_visible(), "no visible 'On this page' button"
        toc = page.locator("#pst-secondary-sidebar-modal")
        secondary.tap()
        expect(toc, "'On this page' did not open the contents").to_have_js_property("open", True)
        entry = toc.locator("nav a.nav-link").first
        expect(entry, "page contents opened but no entry is visible").to_be_visible()
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
        # the theme animates the collapse: wait for its end state
        expect(sidebar, "'Toggle primary sidebar' left the sidebar in place").to_be_hidden()
        page.locator(".bd-header-article button.primary-toggle").click()
        expect(sidebar, "a second click did not bring the sidebar back").to_be_visible()
    finally:
        context.close()


# --- the 404 page -----------------------------------------------------------------

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


def test_404_page_leads_home_from_a_nested_missing_address(browser: object) -> None:
    """GitHub Pages answers any missing address with 404.html, at that address: from
    /<site>/chapters/gone/page.html a relative "index.html" was another 404. The page's
    link to the contents page leads to the site's front page from anywhere."""
    from sitetools import HTML, PREFIX, require_built_site, serve

    require_built_site()
    with serve(HTML, PREFIX, not_found_page=True) as base:
        context = browser.new_context()
        page = context.new_page()
        try:
            response = page.goto(f"{base}/chapters/gone/missing.html")
            assert response is not None and response.status == 404
            assert "Page not found" in page.locator("h1").first.inner_text()
            link = page.get_by_role("link", name="contents page")
            with page.expect_navigation():
                link.click()
            assert page.url == f"{base}/index.html", page.url
            assert page.title().startswith("Self-Attention, Verified"), page.title()
        finally:
            context.close()
