"""Dark mode, checked in headless Chromium: text and math are light on dark, figures
sit on an opaque light background (the diagrams have dark twins), matrix tables follow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sitetools import CHAPTER_PAGES, DESKTOP_VIEW, HTML, SHOTS, luminance, open_page

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it


# --- text, math, figures ------------------------------------------------------------

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


# --- matrix tables ------------------------------------------------------------------

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
