"""Shared helpers for the build and browser tests (not a test file)."""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import json
import os
import re
import shutil
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
CHAPTER_PAGES = [f"chapters/{c.stem}.html" for c in CHAPTERS]


def conf_hosting() -> object:
    """The repository and site conf.py gives the book in this environment: its defaults
    (the ``hosted(repository=..., site=...)`` call, read without running conf.py), or a
    hosted build's own (_ext/hosting.py), as the build that made the site saw them."""
    import ast

    if str(ROOT / "_ext") not in sys.path:
        sys.path.append(str(ROOT / "_ext"))
    from hosting import hosted

    tree = ast.parse((ROOT / "conf.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "hosted")
    return hosted(**{k.arg: ast.literal_eval(k.value) for k in call.keywords})


HOSTING = conf_hosting()
REPOSITORY = HOSTING.repository_url  # https://github.com/OWNER/REPO
# GitHub Pages serves the site under /<repository>/ (conf.py's notfound_urls_prefix).
PREFIX = HOSTING.site_path


def require_built_site() -> Path:
    """The built site; fail (not skip) when it is missing: `make test` builds it first."""
    if not (HTML / "index.html").is_file():
        raise AssertionError(f"{HTML} has no index.html: run `make html` (make test does) first")
    return HTML


def built_pages() -> list[Path]:
    """Every HTML page of the book (not the search page or generated index)."""
    skip = {"search.html", "genindex.html", "py-modindex.html"}
    return sorted(
        p for p in HTML.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


def _all_pages() -> list[str]:
    """Every page of the built site, the search page and the general index included
    (``["index.html"]`` before the site is built, so that collection still works)."""
    if not (HTML / "index.html").is_file():
        return ["index.html"]
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if "_static" not in p.parts and "_sources" not in p.parts)


ALL_PAGES = _all_pages()
# Screenshots the browser tests leave for a human to look at.
SHOTS = ROOT / "_build" / "screenshots"
PHONE_VIEW = {"width": 390, "height": 844}
DESKTOP_VIEW = {"width": 1280, "height": 1600}


def luminance(css_color: str) -> float:
    """Relative luminance (0 black, 1 white) of a CSS ``rgb()``/``rgba()`` or hex colour."""
    if css_color.startswith("#"):
        h = css_color.lstrip("#")
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    else:
        r, g, b = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@functools.lru_cache(maxsize=512)
def _gzipped(path: str, mtime_ns: int) -> bytes:
    """Compress a file once per version (the key includes its mtime)."""
    return gzip.compress(Path(path).read_bytes(), compresslevel=6, mtime=0)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that gzips text, as GitHub Pages and Read the Docs do,
    so the page-budget test measures the bytes a reader really downloads."""

    GZIP_TYPES = (".html", ".js", ".css", ".json", ".svg", ".txt", ".ipynb", ".inv")

    def __init__(self, *args: object, prefix: str = "/", not_found_page: bool = False,
                 **kwargs: object) -> None:
        self.prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
        self.not_found_page = not_found_page
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        """Map ``<prefix>/x`` to ``<directory>/x``; anything else to a path that is not there."""
        if path.split("?", 1)[0].split("#", 1)[0] + "/" == self.prefix:
            path = "/"  # the prefix without its trailing slash: its index page
        elif path.startswith(self.prefix):
            path = "/" + path[len(self.prefix):]
        else:
            return str(Path(self.directory) / "__outside_the_site_prefix__")
        return super().translate_path(path)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def send_head(self):  # noqa: ANN201
        path = Path(self.translate_path(self.path))
        page_404 = Path(self.directory) / "404.html"
        if self.not_found_page and not path.exists() and page_404.is_file():
            # as GitHub Pages answers a missing address: its 404.html, at that address
            body = page_404.read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)
        wants_gzip = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (wants_gzip and path.is_file() and path.suffix in self.GZIP_TYPES):
            return super().send_head()
        body = _gzipped(str(path), path.stat().st_mtime_ns)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A page that navigates away closes its connections, sometimes mid-response:
        that is the browser's choice, not a fault of the site (no traceback for it)."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


@contextmanager
def serve(directory: Path, prefix: str = "/", not_found_page: bool = False) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) under ``prefix`` and yield the base URL
    (without a trailing slash), as GitHub Pages serves a project site under /<repo>/.

    Paths outside ``prefix`` are 404. With ``not_found_page``, a missing file is answered
    as GitHub Pages answers it: status 404 with the site's 404.html. Nothing is written
    to disk, and the socket is closed when the block ends, also when it ends with an
    exception.
    """
    handler = functools.partial(_QuietHandler, directory=str(directory), prefix=prefix,
                                not_found_page=not_found_page)
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix.rstrip('/')}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


# Figures load lazily (_ext/lazy_images.py). Tests that look at every image ask for all
# of them now, as scrolling down the page would (the dark twins hidden in light mode
# too), and wait until each is decoded or broken.
LOAD_ALL_IMAGES_JS = """() => Promise.all(Array.from(document.images).map(img => {
  img.loading = 'eager'; return img.decode().catch(() => null); }))"""


class RequestWatch:
    """The requests a page has started and not yet finished, followed from before goto.

    Playwright's ``wait_for_load_state("networkidle")`` sometimes never resolves on a
    page whose requests have all finished (seen on api.html: Chromium reports
    networkIdle, every request seen has finished, Playwright still waits 30 s).
    ``settle`` waits for what the tests mean by it: no request in flight for
    ``quiet`` seconds, so a late request (an external one, say) is still seen."""

    def __init__(self, page: object) -> None:
        self.page = page
        self.pending: dict[int, object] = {}
        page.on("request", lambda r: self.pending.__setitem__(id(r), r))
        page.on("requestfinished", lambda r: self.pending.pop(id(r), None))
        page.on("requestfailed", lambda r: self.pending.pop(id(r), None))

    def settle(self, quiet: float = 0.5, timeout: float = 30.0) -> None:
        """Return once no request has been in flight for ``quiet`` seconds.

        Woken by the page's own request events, not by polling: while requests are in
        flight it waits for the next to finish (a failed one ends the wait by its own
        event too, at the latest after ``quiet``); once none is, it waits ``quiet``
        seconds for a new one to start, and returns if none did."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            wait_ms = 1000 * min(quiet, left)
            if self.pending:
                event = "requestfinished"  # the handlers above also see requestfailed meanwhile
            else:
                event = "request"
            try:
                self.page.wait_for_event(event, timeout=wait_ms)
            except PlaywrightTimeout:
                if event == "request" and not self.pending and wait_ms >= 1000 * quiet:
                    return  # quiet for `quiet` seconds: nothing started, nothing in flight
        urls = [r.url for r in self.pending.values()]
        raise AssertionError(f"requests still in flight after {timeout} s: {urls}")


class OfflinePage:
    """One page of the site in a browser context of its own, as a reader without a
    network sees it: every request to another host is aborted and recorded.

    Also collected from before the first request: uncaught page errors, console
    errors, failed requests, and the requests in flight (``requests.settle()``).
    ``close()`` (or leaving a ``with`` block) closes the context."""

    def __init__(self, browser: object, base: str, rel: str, **context_args: object) -> None:
        self.context = browser.new_context(**context_args)
        self.page = self.context.new_page()
        self.external: list[str] = []
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.failed: list[str] = []
        host = urlparse(base).netloc

        def route(route, request) -> None:  # noqa: ANN001
            url = urlparse(request.url)
            if url.scheme in ("data", "blob", "about") or url.netloc == host:
                route.continue_()
            else:
                self.external.append(request.url)
                route.abort()

        self.context.route("**/*", route)
        self.page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        self.page.on("console", lambda m: self.console_errors.append(m.text)
                     if m.type == "error" else None)
        self.page.on("requestfailed", lambda req: self.failed.append(req.url))
        self.requests = RequestWatch(self.page)
        self.response = self.page.goto(f"{base}/{rel}", wait_until="load")

    @property
    def errors(self) -> list[str]:
        """Page errors and console errors."""
        return self.page_errors + self.console_errors

    def close(self) -> None:
        self.context.close()

    def __enter__(self) -> OfflinePage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Math arrives typeset in the HTML (KaTeX at build time). A formula is drawn in its
# final form once the document is parsed (domInteractive) and the KaTeX fonts it uses
# have arrived. Sections below the first screen are laid out only when they near it
# (content-visibility in custom.css), and so are the fonts only they use (AMS, Size1-4,
# bold: they arrive when the reader scrolls or a script measures the section). So the
# fonts that count are those asked for while the page was being parsed: the preloaded
# KaTeX_Main and KaTeX_Math plus any the first screen needs. The later of parsing and
# those fonts, in ms from navigation start, is the page's "math typeset" time.
WAIT_MATH_JS = """
async () => {
  await document.fonts.ready;
  const nav = performance.getEntriesByType('navigation')[0];
  const fonts = performance.getEntriesByType('resource')
    .filter(r => r.name.includes('/_static/katex/fonts/') && r.startTime < nav.domInteractive);
  const fontsEnd = Math.max(0, ...fonts.map(f => f.responseEnd));
  return {typeset: Math.max(nav.domInteractive, fontsEnd),
          parsed: nav.domInteractive, fonts: fontsEnd, load: nav.loadEventEnd};
}
"""
# Lay out every section of a chapter, as the jump script of _ext/offscreen_sections.py does.
DRAW_EVERY_SECTION_JS = "document.documentElement.classList.remove('selfattn-skip-offscreen')"

# Pages that read-only tests share: opening a chapter costs more than most checks on it,
# so the tests that only measure (phone width, figures, math boxes, dark-mode colours,
# axe) reuse one page per (page, viewport, colour scheme), across the test_reader_*
# files. conftest.py sends all browser tests of a page to one xdist worker, so the pool
# stays small.
_POOL: OrderedDict[tuple, OfflinePage] = OrderedDict()
POOL_SIZE = 6


class _Kept:
    """The context handed out with a pooled page: close() leaves it open for the next test."""

    def close(self) -> None:
        pass


def open_page(browser: object, site: str, rel: str, *, shared: bool = False,
              whole: bool = True, **ctx: object) -> tuple[object, object]:
    """A loaded page with other hosts blocked (an ``OfflinePage``): (context, page).

    whole=True (the sweeps): every section is laid out, its math fonts loaded and
    every box that scrolls sideways measured, as for a reader who has scrolled
    through it. whole=False (a test of the header, a menu or one cell): the page as
    a reader first sees it, which is cheaper to open.
    shared=True: the page may have been opened by an earlier test with the same
    arguments, and stays open afterwards; only for tests that do not change it.
    Call ``close()`` on the context when done (a no-op for a shared page).
    """
    if shared:
        key = (id(browser), site, rel, whole, json.dumps(ctx, sort_keys=True))
        if key in _POOL:
            _POOL.move_to_end(key)
            return _Kept(), _POOL[key].page
        _POOL[key] = _open(browser, site, rel, whole, ctx)
        while len(_POOL) > POOL_SIZE:
            _POOL.popitem(last=False)[1].close()
        return _Kept(), _POOL[key].page
    visit = _open(browser, site, rel, whole, ctx)
    return visit, visit.page


def _open(browser: object, site: str, rel: str, whole: bool, ctx: dict) -> OfflinePage:
    visit = OfflinePage(browser, site, rel, **ctx)
    if whole:
        # The checks look at the whole page, as a reader who scrolls through it sees it:
        # sections off screen are drawn too (a skipped section has no colours or boxes
        # to check; _ext/offscreen_sections.py), then its fonts are awaited, then every
        # box that scrolls sideways is measured (scroll-hints.js measures a box when the
        # reader nears it; test_scroll_hints_follow_the_reader checks that it does).
        visit.page.evaluate(DRAW_EVERY_SECTION_JS)
        visit.page.evaluate(WAIT_MATH_JS)
        visit.page.evaluate("window.selfattnScrollHints && window.selfattnScrollHints()")
    return visit


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def code_cells(markdown: str) -> list[tuple[list[str], str]]:
    """(tags, source) of every ``{code-cell}`` in a MyST text notebook.

    Cell options may be ``:key: value`` lines or a ``---`` YAML block.
    """
    import yaml

    cells = []
    pattern = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
    for match in pattern.finditer(markdown):
        lines = match.group(2).splitlines()
        options: dict = {}
        if lines and lines[0].strip() == "---":
            end = lines.index("---", 1)
            options = yaml.safe_load("\n".join(lines[1:end])) or {}
            lines = lines[end + 1:]
        else:
            while lines and lines[0].startswith(":"):
                key, _, value = lines.pop(0)[1:].partition(":")
                options[key.strip()] = yaml.safe_load(value.strip())
        tags = [str(t) for t in options.get("tags", []) or []]
        cells.append((tags, "\n".join(lines).strip("\n")))
    return cells


def processes_with_env(marker: str) -> list[str]:
    """``pid cmdline`` of every live process whose environment contains ``marker``.

    Children inherit the environment (also across ``setsid``, which Playwright uses to
    start Chromium in a process group of its own), so a unique variable set for one
    command finds every process that command left behind, and nothing else.
    """
    found = []
    needle = marker.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle not in (proc / "environ").read_bytes():
                continue
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone already, or not ours to read
            continue
        if state != "Z":  # a zombie is already dead; its parent just has not reaped it
            found.append(f"{proc.name} {cmd.strip()}")
    return found
