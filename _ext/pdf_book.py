"""The PDF's root document lists the chapters in the order the site does.

``_pdf/book.md`` (the LaTeX root, see conf.py) holds the lines
``@chapters@`` and ``@backmatter@`` inside its toctrees. When Sphinx reads it,
they are replaced by the entries of index.md's first and second toctree, made
relative to ``_pdf/``, so a chapter added to or moved in index.md moves in the
PDF too, and no list of chapters is kept twice.

The back matter's page ``references`` holds only the bibliography directive. The
LaTeX builder moves every citation to one list at the end of the book (titled
"References" by conf.py's preamble), which left that page a chapter heading and a
blank page: :class:`DropEmptyReferencesChapter` removes it once the list has moved.

A chapter's ``:::{container} screen-only`` blocks (prose that asks the reader to move a
slider or tick a box) are left out of the PDF; their ``print-only`` twins, hidden on
screen by custom.css, say what the printed figure shows.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.transforms.post_transforms import SphinxPostTransform

ROOT_DOC = "_pdf/book"


def toctree_entries(index_md: str) -> list[list[str]]:
    """The document entries of each ``{toctree}`` block of a MyST page, in order."""
    blocks = re.findall(r"```\{toctree\}\n(.*?)```", index_md, flags=re.S)
    entries = []
    for block in blocks:
        lines = [ln.strip() for ln in block.split("\n")]
        entries.append([ln for ln in lines if ln and not ln.startswith(":")])
    return entries


def _fill(app: Sphinx, docname: str, source: list[str]) -> None:
    if docname != ROOT_DOC:
        return
    index = Path(app.srcdir, "index.md").read_text(encoding="utf-8")
    trees = toctree_entries(index)
    if len(trees) < 2:
        raise ExtensionError("pdf_book: index.md must have a chapter and a back-matter toctree")
    text = source[0]
    for marker, entries in (("@chapters@", trees[0]), ("@backmatter@", trees[1])):
        if marker not in text:
            raise ExtensionError(f"pdf_book: {ROOT_DOC}.md has no {marker} line")
        text = text.replace(marker, "\n".join(f"../{e}" for e in entries))
    source[0] = text


def _reread_root(app: Sphinx, env: object, added: set, changed: set, removed: set) -> list[str]:
    """index.md is not part of the PDF build, so its edits would not make Sphinx
    re-read the root: re-read it every time (it is a few lines)."""
    return [ROOT_DOC] if ROOT_DOC in getattr(env, "found_docs", ()) else []


SCREEN_ONLY = "screen-only"


def drop_screen_only(doctree: nodes.Node) -> int:
    """Remove every container of class ``screen-only``; return how many."""
    found = [n for n in doctree.findall(nodes.container) if SCREEN_ONLY in n["classes"]]
    for node in found:
        node.parent.remove(node)
    return len(found)


def _drop_screen_only(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder.format == "latex":
        drop_screen_only(doctree)


class DropEmptyReferencesChapter(SphinxPostTransform):
    """Remove the references page from the PDF once its citations have moved out.

    Runs after Sphinx's BibliographyTransform (priority 750), which gathers every
    citation into one list at the end. The page must then hold nothing but its title;
    if it holds more, it stays (and the PDF test of its title fails).
    """

    default_priority = 760
    formats = ("latex",)

    def run(self, **kwargs: object) -> None:
        name = self.app.config.pdf_references_doc
        for start in list(self.document.findall(addnodes.start_of_file)):
            if start.get("docname") != name:
                continue
            text = [n for n in start.findall(nodes.Text)
                    if not isinstance(n.parent, nodes.title) and n.astext().strip()]
            if not text:
                start.parent.remove(start)


def setup(app: Sphinx) -> dict:
    app.add_config_value("pdf_references_doc", "references", "env")
    app.add_post_transform(DropEmptyReferencesChapter)
    app.connect("source-read", _fill)
    app.connect("doctree-resolved", _drop_screen_only)
    app.connect("env-get-outdated", _reread_root)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
