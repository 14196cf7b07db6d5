"""The built site in a real browser (headless Chromium), with the network cut off.

Every request to a host other than the local test server is blocked and
recorded. Each page must: load nothing from another host, raise no page or
console error, typeset every math element, load every image, and link only to
pages and anchors that exist.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from sitetools import (
    HTML,
    LOAD_ALL_IMAGES_JS,
    PREFIX,
    OfflinePage,
    built_pages,
    require_built_site,
    serve,
)

pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

# Math is typeset at build time by KaTeX (see _ext/katex_local.py): every math
# element must hold KaTeX's output, none an error box, and the KaTeX fonts the
# formulas use must have loaded from the site itself.
MATH_READY_JS = """
async () => {
  await document.fonts.ready;
  const math = document.querySelectorAll('span.math, div.math');
  let untypeset = 0;
  math.forEach(el => { if (!el.querySelector('.katex')) untypeset += 1; });
  const faces = Array.from(document.fonts)
    .map(f => ({family: f.family.replace(/"/g, ''), status: f.status, style: f.style}))
    .filter(f => f.family.startsWith('KaTeX'));
  const first = document.querySelector('.katex');
  return {
    math: math.length,
    typeset: document.querySelectorAll('.katex').length,
    untypeset: untypeset,
    errors: document.querySelectorAll('.katex-error').length,
    fonts_loaded: faces.filter(f => f.status === 'loaded').map(f => f.family),
    fonts_failed: faces.filter(f => f.status === 'error').map(f => f.family),
    faces_loaded: faces.filter(f => f.status === 'loaded').map(f => f.family + ' ' + f.style),
    preloaded: Array.from(document.querySelectorAll('link[rel=preload][as=font]'))
      .map(l => l.href.split('/').pop()),
    font_family: first ? getComputedStyle(first).fontFamily : null,
  };
}
"""

# Read before LOAD_ALL_IMAGES_JS, which makes every image eager.
IMAGES_JS = """
() => Array.from(document.images).map(img => ({
  src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth,
  alt: img.getAttribute('alt'), lazy: img.getAttribute('loading') === 'lazy',
}))
"""


PAGES = (
    [p.relative_to(HTML).as_posix() for p in built_pages()]
    if (HTML / "index.html").is_file() else []
)


# `make test` opens one page of each kind: the front page, the API reference (autodoc)
# and the heaviest chapter (math, interactive and lazy figures, preloaded fonts); the
# slow tier (`make test-slow`, CI) opens every page. The static check below reads
# every page and stylesheet in `make test` for a resource on another host.
EVERYDAY_PAGES = {"index.html", "api.html", "chapters/04-whys.html"}


@pytest.mark.browser
@pytest.mark.parametrize("rel", [
    pytest.param(rel, marks=() if rel in EVERYDAY_PAGES else pytest.mark.slow)
    for rel in PAGES or ["index.html"]
])
def test_page_offline_clean_typeset(browser: object, site: str, rel: str) -> None:
    visit = OfflinePage(browser, site, rel)
    try:
        assert visit.response is not None and visit.response.ok, f"{rel}: HTTP error"
        math = visit.page.evaluate(MATH_READY_JS)
        lazy = [img["lazy"] for img in visit.page.evaluate(IMAGES_JS)]  # document order
        visit.page.evaluate(LOAD_ALL_IMAGES_JS)
        images = visit.page.evaluate(IMAGES_JS)
        visit.requests.settle()
        assert visit.external == [], f"{rel} requested other hosts: {visit.external}"
        assert visit.page_errors == [], f"{rel} page errors: {visit.page_errors}"
        assert visit.console_errors == [], f"{rel} console errors: {visit.console_errors}"
        assert visit.failed == [], f"{rel} failed requests: {visit.failed}"
        assert math["untypeset"] == 0 and math["errors"] == 0, f"{rel}: {math}"
        assert math["fonts_failed"] == [], f"{rel}: KaTeX fonts failed: {math}"
        if math["math"]:
            assert math["typeset"] >= math["math"], f"{rel}: {math}"
            assert "KaTeX_Main" in math["font_family"], f"{rel}: KaTeX CSS not applied: {math}"
            assert {"KaTeX_Main", "KaTeX_Math"} & set(math["fonts_loaded"]), f"{rel}: {math}"
            # the fonts _ext/katex_local.py preloads are fonts this page draws with:
            # a preloaded face that is never used would be bytes for nothing
            assert "KaTeX_Main-Regular.woff2" in math["preloaded"], f"{rel}: {math}"
            for font in math["preloaded"]:
                family, variant = font.removesuffix(".woff2").split("-")
                face = f"{family} {'italic' if 'Italic' in variant else 'normal'}"
                assert face in math["faces_loaded"], f"{rel}: preloads {font}, draws no {face}"
        else:
            html = (HTML / rel).read_text(encoding="utf-8")
            assert 'class="math' not in html, f"{rel}: math found by the page but not by the test"
        for img, was_lazy in zip(images, lazy, strict=True):
            assert img["complete"] and img["width"] > 0, f"{rel}: image not loaded: {img['src']}"
            if "/_images/" in img["src"]:
                assert was_lazy, f"{rel}: figure not loading=lazy: {img['src']}"
    finally:
        visit.close()


# A resource the browser loads by itself: a script, stylesheet, image, font, frame,
# preload or icon in HTML, a url() or @import in CSS. A link (<a href>) is not one.
_LOADED_HTML = re.compile(
    r"<(?:script|img|iframe|source|audio|video|embed)\b[^>]*\ssrc=[\"']([^\"']+)"
    r"|<link\b(?=[^>]*\srel=[\"'][^\"']*(?:stylesheet|preload|icon|modulepreload|manifest))"
    r"[^>]*\shref=[\"']([^\"']+)", re.I)
_LOADED_CSS = re.compile(r"url\(\s*[\"']?([^\"')]+)|@import\s+[\"']([^\"']+)", re.I)


def _other_host(url: str) -> bool:
    return url.startswith("//") or bool(re.match(r"(?:https?|wss?):", url, re.I))


@pytest.mark.html
def test_no_page_or_stylesheet_loads_from_another_host() -> None:
    """Every page of the site and every stylesheet it ships name only local resources
    (the browser test above proves it for three pages in `make test`, every page in
    the slow tier; this reads them all in a second)."""
    require_built_site()
    found = []
    for page in built_pages():
        urls = [m.group(1) or m.group(2)
                for m in _LOADED_HTML.finditer(page.read_text(encoding="utf-8"))]
        assert any(u.endswith(".css") or ".css?" in u for u in urls), \
            f"{page.relative_to(HTML)}: no stylesheet found (the pattern would prove nothing)"
        found += [f"{page.relative_to(HTML)}: {u}" for u in urls if _other_host(u)]
    for sheet in (HTML / "_static").rglob("*.css"):
        for match in _LOADED_CSS.finditer(sheet.read_text(encoding="utf-8", errors="replace")):
            url = match.group(1) or match.group(2)
            if _other_host(url):
                found.append(f"{sheet.relative_to(HTML)}: {url}")
    assert found == [], f"resources from other hosts: {found[:10]}"


def _ids(html_path: Path) -> set[str]:
    html = html_path.read_text(encoding="utf-8")
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    return ids | set(re.findall(r'<a\s[^>]*name="([^"]+)"', html))


class _Hrefs(HTMLParser):
    """The href of every <a> of a page (the standard library's parser: no tree, fast)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href is not None:
                self.hrefs.append(href)


# `make pdf` writes the PDF into the site; `make html` alone does not. tests/test_pdf.py
# (the slow tier, which builds the PDF first) checks that the front page links to it.
PDF_FROM_MAKE_PDF = "self-attention-verified.pdf"


@pytest.mark.html
def test_internal_links_and_anchors_resolve() -> None:
    """Every link to a page of the site names a file that exists and an anchor on it."""
    require_built_site()
    broken: list[str] = []
    id_cache: dict[Path, set[str]] = {}
    for page in built_pages():
        parser = _Hrefs()
        parser.feed(page.read_text(encoding="utf-8"))
        for href in parser.hrefs:
            url = urlparse(href)
            if url.scheme or url.netloc or href.startswith(("mailto:", "javascript:")):
                continue
            if url.path.startswith(PREFIX):  # absolute links (the 404 page)
                target = HTML / unquote(url.path[len(PREFIX):])
            elif url.path.startswith("/"):
                broken.append(f"{page.relative_to(HTML)} -> {href} (absolute, outside the site)")
                continue
            else:
                target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                if target.name == PDF_FROM_MAKE_PDF and target.parent == HTML:
                    continue
                broken.append(f"{page.relative_to(HTML)} -> {href} (no file)")
                continue
            if url.fragment and target.suffix == ".html":
                if target not in id_cache:  # parse each page once
                    id_cache[target] = _ids(target)
                ids = id_cache[target]
                if unquote(url.fragment) not in ids:
                    broken.append(f"{page.relative_to(HTML)} -> {href} (no anchor)")
    assert broken == [], "broken internal links:\n" + "\n".join(broken[:40])


@pytest.mark.browser
def test_blocker_catches_requests_to_other_hosts(browser: object, tmp_path: Path) -> None:
    """The offline check itself can fail: a page that loads a script from another host
    is recorded as external and the request is aborted."""
    (tmp_path / "index.html").write_text(
        "<html><body><script src='http://cdn.example.invalid/x.js'></script>"
        "<img src='http://img.example.invalid/y.png' alt='remote'></body></html>"
    )
    with serve(tmp_path) as base:
        visit = OfflinePage(browser, base, "index.html")
        try:
            visit.page.wait_for_load_state("load")
            assert sorted(urlparse(u).netloc for u in visit.external) == [
                "cdn.example.invalid", "img.example.invalid",
            ]
        finally:
            visit.close()
