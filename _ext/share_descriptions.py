"""Every page's link preview says what the page is about, in plain words.

sphinxext-opengraph takes a page's description (``og:description`` and
``<meta name="description">``) from its first paragraph. Seven pages' first
paragraphs hold formulas, which a link preview shows as raw LaTeX
(``$\\sqrt{d_k}$``), and two chapters that open alike shared one description. So
each page states its own in its front matter, ``description: ...``, and this
extension hands it to sphinxext-opengraph before it runs (priority 400 < its 500):
as ``og:description``, and as the page's ``<meta name="description">``, whose
presence stops the extension from adding one of its own.

A page without one fails the build (the search page and the general indexes have
none and need none); so does one with TeX in it. tests/test_hosting.py checks the
built pages: plain text, and no two alike.
"""

from __future__ import annotations

import html
import re

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

# pages Sphinx writes without a source, and the 404 page (never shared, never indexed)
NO_DESCRIPTION = {"search", "genindex", "py-modindex", "404"}
TEX = re.compile(r"[$\\{}]")


def _describe(app: Sphinx, pagename: str, templatename: str, context: dict,
              doctree: object) -> None:
    if doctree is None or pagename in NO_DESCRIPTION:
        return
    meta = context.get("meta") or {}
    text = " ".join(str(meta.get("description", "")).split())
    if not text:
        raise ExtensionError(f"{pagename}: no 'description:' in its front matter "
                             "(the link preview's text; see _ext/share_descriptions.py)")
    if TEX.search(text):
        raise ExtensionError(f"{pagename}: its description holds TeX ($, \\ or braces), "
                             f"which a link preview shows raw: {text!r}")
    # a copy: env.metadata is the build environment's, kept between builds
    context["meta"] = {**meta, "og:description": text}
    context["metatags"] = context.get("metatags", "") + \
        f'\n<meta name="description" content="{html.escape(text, quote=True)}" />'


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", _describe, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
