"""Shared helpers for the build and browser tests (not a test file)."""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


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

    def __init__(self, *args: object, prefix: str = "/", **kwargs: object) -> None:
        self.prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
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
def serve(directory: Path, prefix: str = "/") -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) under ``prefix`` and yield the base URL
    (without a trailing slash), as GitHub Pages serves a project site under /<repo>/.

    Paths outside ``prefix`` are 404. Nothing is written to disk, and the socket is
    closed when the block ends, also when it ends with an exception.
    """
    handler = functools.partial(_QuietHandler, directory=str(directory), prefix=prefix)
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
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            if self.pending:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return
            self.page.wait_for_timeout(50)  # lets Playwright deliver the request events
        urls = [r.url for r in self.pending.values()]
        raise AssertionError(f"requests still in flight after {timeout} s: {urls}")


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
