"""Figures below the first screen load when the reader nears them.

Every ``<img>`` of the built pages that shows a file of ``_images/`` (the
figures the chapters draw, the diagrams of ``images/``, the still images behind
the interactive figures) gets ``loading="lazy" decoding="async"`` and its
``width`` and ``height`` in CSS px, read from the file (an SVG's width and
height, in pt or px, or its viewBox; a PNG's header). A chapter shows 2-7 SVG
figures of up to 140 KB each; the browser used to fetch and parse all of them
while it was still parsing the page (360 ms of 02-qkv's first load). With the
size written in the tag, the space of a figure not yet loaded is already
reserved (custom.css: ``height: auto`` keeps the aspect ratio), so nothing
below it moves when it arrives: a reload or the back button still returns to
the same line. An image whose size cannot be read is left as
it was. The dark twin of a diagram, hidden in light mode, is not fetched at all.

It rewrites the HTML files when the build has finished (by then ``_images/``
holds every file); tags it has already rewritten are skipped.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from sphinx.application import Sphinx

# an <img> of a figure file, not yet rewritten (no loading attribute)
_FIGURE_IMG = re.compile(r'<img (?![^>]*\bloading=)([^>]*\bsrc="([^"]*_images/[^"]+)"[^>]*)>')
_LENGTH = re.compile(r"^\s*([\d.]+)\s*(pt|px)?\s*$")
PT_TO_PX = 4 / 3  # CSS: 1 pt = 1/72 in, 1 px = 1/96 in


def _svg_size(text: str) -> tuple[float, float] | None:
    root = re.search(r"<svg\b[^>]*>", text)
    if not root:
        return None
    attrs = dict(re.findall(r'([\w:-]+)="([^"]*)"', root.group(0)))
    lengths = [_LENGTH.match(attrs.get(k, "")) for k in ("width", "height")]
    if all(lengths):
        return tuple(float(m.group(1)) * (PT_TO_PX if m.group(2) == "pt" else 1)
                     for m in lengths)
    box = attrs.get("viewBox", "").replace(",", " ").split()
    return (float(box[2]), float(box[3])) if len(box) == 4 else None


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) in CSS px of an SVG or PNG file, or None if unknown."""
    try:
        if path.suffix == ".svg":
            size = _svg_size(path.read_text(encoding="utf-8", errors="replace")[:4000])
        elif path.suffix == ".png":
            head = path.read_bytes()[:24]
            size = struct.unpack(">II", head[16:24]) if head[12:16] == b"IHDR" else None
        else:
            return None
    except (OSError, ValueError):
        return None
    if not size or min(size) <= 0:
        return None
    return round(size[0]), round(size[1])


def lazy_figures(html: str, page_dir: Path) -> str:
    """The page with each figure <img> lazy and sized (see the module docstring)."""
    def rewrite(match: re.Match) -> str:
        size = image_size(page_dir / match.group(2))
        if size is None:
            return match.group(0)
        return (f'<img loading="lazy" decoding="async" width="{size[0]}" '
                f'height="{size[1]}" {match.group(1)}>')
    return _FIGURE_IMG.sub(rewrite, html)


def _rewrite_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        if "_static" in page.parts or "_sources" in page.parts:
            continue
        html = page.read_text(encoding="utf-8")
        new = lazy_figures(html, page.parent)
        if new != html:
            page.write_text(new, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", _rewrite_pages)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
