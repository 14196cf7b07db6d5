"""sitemap.xml lists every page after an incremental build too.

sphinx-sitemap collects a page's address when the page is written (its
``html-page-context`` handler) and writes sitemap.xml at ``build-finished`` from what
it collected in this run. After an edit to one chapter Sphinx writes only the pages
that changed, so the sitemap it wrote listed those alone (after editing one chapter:
4 of 20 pages), and a hosted build that reused its cache would publish it.

Before sphinx-sitemap writes the file, this extension hands it the pages this run did
not write, through sphinx-sitemap's own collector (same address, same last-modified
date). Registered in _ext/README.md; tests/test_hosting.py checks the effect after an
incremental build and tests/test_patches.py that sphinx-sitemap still collects only
written pages.
"""

from __future__ import annotations

from typing import Any


def _note_written(app: Any, pagename: str, *args: Any) -> None:
    app._sitemap_written.add(pagename)


def _add_unwritten_pages(app: Any, exception: BaseException | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from sphinx_sitemap import add_html_link

    for docname in sorted(app.env.found_docs - app._sitemap_written):
        add_html_link(app, docname, None, None, None)


def setup(app: Any) -> dict:
    app.setup_extension("sphinx_sitemap")
    app._sitemap_written = set()
    app.connect("html-page-context", _note_written)
    # sphinx-sitemap writes sitemap.xml at build-finished with the default priority 500
    app.connect("build-finished", _add_unwritten_pages, priority=400)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
