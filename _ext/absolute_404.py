"""The 404 page's links to other pages are absolute.

GitHub Pages and Read the Docs serve 404.html for any missing address, at that
address: from ``/<site>/chapters/gone/page.html`` a relative ``index.html`` is
``/<site>/chapters/gone/index.html``, another 404. sphinx-notfound-page makes the
page's styles, scripts, images and sidebar absolute (``notfound_urls_prefix``), not the
links in its text; this makes those absolute too, with the same prefix (the site's
path, from _ext/hosting.py through conf.py). tests/test_reader_nav.py follows the
link from a nested missing address.
"""

from __future__ import annotations

import posixpath

from docutils import nodes
from sphinx.application import Sphinx


def _absolute_links(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if docname != app.config.notfound_pagename:
        return
    prefix = app.config.notfound_urls_prefix or "/"
    base = posixpath.dirname(docname)
    for ref in doctree.findall(nodes.reference):
        uri = ref.get("refuri", "")
        if not uri or uri.startswith(("#", "/", "mailto:")) or "://" in uri:
            continue
        ref["refuri"] = prefix.rstrip("/") + "/" + posixpath.normpath(
            posixpath.join(base, uri)).lstrip("/")


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("doctree-resolved", _absolute_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
