"""Figures below the first screen load when the reader nears them.

Every ``<img>`` in a page's body that shows a file of ``_images/`` (the figures
the chapters draw and the diagrams of ``images/``) gets ``loading="lazy"`` and
``decoding="async"``. A chapter shows 8-20 SVG figures; before this the browser
fetched and parsed every one of them while it was still parsing the page
(04-whys: parsing done at 1.26 s with them, 0.90 s without; see
tests/test_reader.py::test_page_budget). The dark twin of a diagram, hidden in
light mode, is then not fetched at all. The browser starts a lazy image well
before it scrolls into view, and loads them all before printing.
"""

from __future__ import annotations

import re

from sphinx.application import Sphinx

# an <img> of a figure file without a loading attribute of its own
_FIGURE_IMG = re.compile(r'<img (?![^>]*\bloading=)(?=[^>]*\bsrc="[^"]*_images/)')


def _lazy(app: Sphinx, pagename: str, templatename: str, context: dict,
          doctree: object) -> None:
    if "body" in context:
        context["body"] = _FIGURE_IMG.sub('<img loading="lazy" decoding="async" ',
                                          context["body"])


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", _lazy)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
