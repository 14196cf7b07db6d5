"""Off-screen sections skip layout, except when the reader jumps to a place.

custom.css gives the sections of a chapter ``content-visibility: auto``: the
browser lays out only those near the screen, so the first screen is drawn
sooner (04-whys, median of 5 loads: parsed at 1.6-1.85 s before, 1.2 s with this
rule, 0.87-1.06 s with it and lazy figures, _ext/lazy_images.py). A skipped section
counts as 1000 px tall until it has been drawn, so any jump computed from
heights would land in the wrong place. The small script below, inline in the
head (it runs before the body is parsed), turns the rule on by marking
``<html class="selfattn-skip-offscreen">``, and off again (or never on)
whenever the reader goes somewhere other than the top of the page:

* the address has a fragment (a link to a section, a search result);
* the browser restores a scroll position (back, forward, reload);
* a click on an in-page link, before the browser scrolls to it;
* printing (``beforeprint``; print.css also draws every section).

The page is then laid out in full, as it was without the rule. Only chapter
pages (``chapters/``) opt in: the script adds ``selfattn-skip-offscreen`` to
``<html>``, and the CSS rule needs it (so without JavaScript nothing is skipped).
tests/test_reader_nav.py::test_jumps_land_on_their_section checks each case.
"""

from __future__ import annotations

from sphinx.application import Sphinx

FULL_LAYOUT_JS = """(function () {
  var root = document.documentElement;
  function full() { root.classList.remove("selfattn-skip-offscreen"); }
  var nav = (performance.getEntriesByType && performance.getEntriesByType("navigation")[0]) || {};
  if (!(location.hash || nav.type === "back_forward" || nav.type === "reload")) {
    root.classList.add("selfattn-skip-offscreen");
  }
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[href*='#']");
    if (link && link.pathname === location.pathname) full();
  }, true);
  window.addEventListener("hashchange", full);
  window.addEventListener("beforeprint", full);
})();"""


def _add_script(app: Sphinx, pagename: str, templatename: str, context: dict,
                doctree: object) -> None:
    if pagename.startswith("chapters/"):
        context["metatags"] = (context.get("metatags", "")
                               + f"\n<script>{FULL_LAYOUT_JS}</script>\n")


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", _add_script)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
