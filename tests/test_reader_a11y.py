"""Accessibility, checked in headless Chromium: alt text, one h1 and no skipped heading
level, named links, a visible keyboard focus ring on the header's controls and the search
field, and no serious or critical axe-core violation in light or dark mode.
"""

from __future__ import annotations

import json
import re

import pytest

from sitetools import ALL_PAGES, CHAPTER_PAGES, DESKTOP_VIEW, ROOT, open_page

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it


# --- headings, alt text, link names -------------------------------------------------

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


# --- keyboard focus ---------------------------------------------------------------

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


# --- axe ---------------------------------------------------------------------------

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
        page.wait_for_function(  # transitions cancelled, nothing mid-animation
            "() => document.getAnimations().every(a => a.playState !== 'running')")
        if page.evaluate("typeof axe") == "undefined":
            page.add_script_tag(path=str(AXE))
        violations = page.evaluate(AXE_RUN_JS)
        AXE_COUNTS[f"{rel} {scheme}"] = sum(v["count"] for v in violations)
        (ROOT / "_build" / "axe-counts.json").write_text(json.dumps(AXE_COUNTS, indent=1))
        assert violations == [], f"{rel} ({scheme}): {json.dumps(violations, indent=1)}"
    finally:
        context.close()
