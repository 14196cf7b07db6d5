"""The PDF's root document lists the chapters in the order the site does.

``_pdf/book.md`` (the LaTeX root, see conf.py) holds the lines
``@chapters@`` and ``@backmatter@`` inside its toctrees. When Sphinx reads it,
they are replaced by the entries of index.md's first and second toctree, made
relative to ``_pdf/``, so a chapter added to or moved in index.md moves in the
PDF too, and no list of chapters is kept twice.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

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


def setup(app: Sphinx) -> dict:
    app.connect("source-read", _fill)
    app.connect("env-get-outdated", _reread_root)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
