"""The front page sells the book it has become, on its first screen (issue 35).

Checked in headless Chromium at 1280 x 800 and 390 x 844: above the fold a reader
finds the five parts, each with a link to every one of its chapters (all sixteen, in
the toctree's numbering), where to start, and what is verified and how. The text
above the fold is written to _build/screenshots/landing-<width>.txt for a human to read.
"""

from __future__ import annotations

import re

import pytest

from sitetools import CHAPTERS, SHOTS, OfflinePage

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

PARTS = ["Attention itself", "The block and training", "Generation and memory",
         "Scale and stability", "Inside a trained model"]
VIEWS = {"desktop": {"viewport": {"width": 1280, "height": 800}},
         "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True,
                   "has_touch": True}}

# What lies wholly inside the first screen, read after the fonts have arrived.
FOLD_JS = """async () => {
  await document.fonts.ready;
  const inView = el => { const r = el.getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight && el.checkVisibility(); };
  const article = document.querySelector('article.bd-article');
  const parts = Array.from(article.querySelectorAll('.landing-parts dt')).map(dt => ({
    name: dt.textContent.trim(), shown: inView(dt),
    links: Array.from(dt.nextElementSibling.querySelectorAll('a')).map(a => ({
      href: a.getAttribute('href'), text: a.textContent.trim(), shown: inView(a)}))}));
  const paras = Array.from(article.querySelectorAll('p')).map(p => ({
    text: p.textContent.replace(/\\s+/g, ' ').trim(), shown: inView(p),
    links: Array.from(p.querySelectorAll('a')).map(a => a.getAttribute('href'))}));
  const fold = Array.from(article.querySelectorAll('h1, p, dt')).filter(inView)
    .map(el => el.textContent.replace(/\\s+/g, ' ').replace(/¶/g, '').trim());
  return {parts, paras, fold};
}"""


def _sidebar_numbers(page: object) -> dict[str, str]:
    """{chapter page: its number} as the sidebar's numbered toctree shows it."""
    return page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
        '.bd-sidebar-primary nav a.reference.internal')).map(a => [a.getAttribute('href'),
        (a.textContent.trim().match(/^(\\d+)\\./) || [])[1]]).filter(([, n]) => n))""")


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_first_screen_shows_the_parts_where_to_start_and_what_is_verified(
    browser: object, site: str, view: str
) -> None:
    with OfflinePage(browser, site, "index.html", **VIEWS[view]) as visit:
        page = visit.page
        found = page.evaluate(FOLD_JS)
        SHOTS.mkdir(parents=True, exist_ok=True)
        width = VIEWS[view]["viewport"]["width"]
        (SHOTS / f"landing-{width}.txt").write_text("\n".join(found["fold"]) + "\n")
        assert [p["name"] for p in found["parts"]] == PARTS
        hidden = [p["name"] for p in found["parts"] if not p["shown"]]
        hidden += [f"{p['name']}: {a['text']}" for p in found["parts"] for a in p["links"]
                   if not a["shown"]]
        assert hidden == [], f"{view}: below the first screen: {hidden}"
        # every chapter, once, numbered as the sidebar numbers it
        links = [a for p in found["parts"] for a in p["links"]]
        hrefs = [a["href"].split("#")[0] for a in links]
        assert sorted(hrefs) == sorted(f"chapters/{c.stem}.html" for c in CHAPTERS), hrefs
        numbers = _sidebar_numbers(page)
        for a in links:
            number = re.match(r"(\d+)\s", a["text"])
            assert number and numbers.get(a["href"].split("#")[0]) == number.group(1), (
                f"{a['text']!r} links {a['href']}, numbered {numbers.get(a['href'])} "
                "in the sidebar")
        start = [p for p in found["paras"] if p["text"].startswith("Start")]
        assert start and start[0]["shown"], f"{view}: where to start is not on screen"
        assert "chapters/01-concept.html" in start[0]["links"], start
        verified = [p for p in found["paras"] if p["text"].startswith("Verified, and how")]
        assert verified and verified[0]["shown"], f"{view}: how it is verified is not on screen"
        assert re.search(r"tested against PyTorch", verified[0]["text"]), verified
        assert "a short book" not in " ".join(found["fold"]).lower()
