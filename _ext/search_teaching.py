"""Where the book teaches each glossary term, for the search page.

The chapters link a glossary term on first use (glossary.md says so). So the first
``{term}`` reference in reading order (index.md's chapter toctree) is where a reader
meets the term: its chapter, and the section that holds the reference (none when it
is in the chapter's objectives, which come before the first section). The search
(_ext/search_scorer.js) ranks that chapter's sections first for a query naming the
term, where Sphinx's own order put the glossary, the API reference and chapters
that only mention the term first.

Written as ``_static/search-teaching.js`` (``window.SELFATTN_TEACHING``) at the end of
the build, and loaded by the search page only. tests/test_reader_search.py checks the
ranking over a list of queries.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

FILE = "search-teaching.js"


def reading_order(app: Sphinx) -> list[str]:
    """The chapters in the order index.md's numbered toctree lists them."""
    env = app.env
    root = env.get_doctree(app.config.root_doc)
    for toctree in root.findall(addnodes.toctree):
        if toctree.get("numbered"):
            return [doc for _title, doc in toctree["entries"]]
    return []


def first_uses(app: Sphinx) -> dict[str, list[str]]:
    """{term (lower case): [docname, section id or ""]} of each term's first link."""
    found: dict[str, list[str]] = {}
    for doc in reading_order(app):
        doctree = app.env.get_doctree(doc)
        for ref in doctree.findall(addnodes.pending_xref):
            if ref.get("reftype") != "term":
                continue
            term = ref["reftarget"].lower()
            if term in found:
                continue
            section = ref.parent
            while section is not None and not isinstance(section, nodes.section):
                section = section.parent
            # the chapter's own section (its title) stands for the whole page
            anchor = ""
            if section is not None and isinstance(section.parent, nodes.section):
                anchor = section["ids"][0]
            found[term] = [doc, anchor]
    return found


def _write(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    data = {"order": reading_order(app), "firstUse": first_uses(app)}
    static = Path(app.outdir, "_static")
    static.mkdir(parents=True, exist_ok=True)
    (static / FILE).write_text(
        "window.SELFATTN_TEACHING = " + json.dumps(data, sort_keys=True) + ";\n",
        encoding="utf-8")


def _on_page(app: Sphinx, pagename: str, templatename: str, context: dict,
             doctree: object) -> None:
    if pagename == "search":
        app.add_js_file(FILE, priority=100)  # this page only, before the search scripts


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", _on_page)
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
