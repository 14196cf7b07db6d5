"""Math typeset at build time with KaTeX, served from the build: no CDN, no runtime JS.

``sphinxcontrib.katex`` with ``katex_prerender = True`` turns every math node
into HTML + MathML while Sphinx writes the page, using Node and the KaTeX that
``npm ci`` put in ``node_modules/`` (pinned in ``package-lock.json``). This
extension adds the two things the reader's browser still needs, taken from
that same KaTeX so the versions always match:

* ``_static/katex/katex.min.css`` and ``_static/katex/fonts/``;
* strict rendering: a formula KaTeX cannot parse fails the build instead of
  showing red source text on the page;
* a ``<link rel="preload">`` for the two fonts nearly every formula is drawn in
  (KaTeX_Main, KaTeX_Math italic) on each page with math: otherwise the browser
  asks for them only once it has styled the first formula, after the CSS.

It sets ``katex_css_path`` and ``katex_js_path`` itself. Configuration
(``conf.py``): ``katex_local_dist``, the ``katex/dist`` folder.
"""

from __future__ import annotations

import atexit
import re
import shutil
import socket
import time
from pathlib import Path
from subprocess import PIPE, Popen

import sphinxcontrib.katex as sphinx_katex
from sphinx.application import Sphinx
from sphinx.errors import ConfigError, ExtensionError

# KaTeX options for every formula. throwOnError: a parse error raises (the
# build fails); strict: LaTeX that KaTeX would only guess at is an error too.
STRICT_OPTIONS = {"throwOnError": True, "strict": "error"}


def _dist(app: Sphinx) -> Path:
    dist = Path(app.confdir, app.config.katex_local_dist)
    if not (dist / "katex.min.js").is_file():
        raise ConfigError(
            f"KaTeX not found at {dist}: run `npm ci` in the repository root "
            "(`make html` does it) to install the pinned KaTeX from npm."
        )
    return dist


def _stage_assets(app: Sphinx) -> None:
    """Copy KaTeX's stylesheet and fonts where Sphinx copies static files from."""
    dist = _dist(app)
    stage = Path(app.outdir).parent / ".katex-static"
    target = stage / "katex"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(dist / "fonts", target / "fonts")
    shutil.copy2(dist / "katex.min.css", target / "katex.min.css")
    if str(stage) not in app.config.html_static_path:
        app.config.html_static_path.append(str(stage))
    app.config.katex_css_path = "katex/katex.min.css"  # the copy above, not a CDN
    # Prerender with the same KaTeX whose CSS and fonts the page loads
    # (sphinxcontrib.katex hands katex_js_path to its Node server).
    app.config.katex_js_path = str(dist / "katex.min.js")
    sphinx_katex.KATEX_DEFAULT_OPTIONS.update(STRICT_OPTIONS)


# The fonts of the first screen of math: KaTeX_Main (digits, operators, upright
# letters) for every formula, KaTeX_Math italic for variables (class "mathnormal").
# Other faces (AMS, Size1-4, bold) are used by a few formulas further down and
# load when their section is drawn.
PRELOAD_FONTS = {"katex": "KaTeX_Main-Regular.woff2", "mathnormal": "KaTeX_Math-Italic.woff2"}


def _preload_fonts(app: Sphinx, pagename: str, templatename: str, context: dict,
                   doctree: object) -> None:
    """Add preload links for the KaTeX fonts the page's formulas start with."""
    body = context.get("body", "")
    links = [
        f'<link rel="preload" href="{context["pathto"]("_static/katex/fonts/" + font, 1)}"'
        ' as="font" type="font/woff2" crossorigin>'
        for css_class, font in PRELOAD_FONTS.items()
        if re.search(rf'class="(?:[^"]* )?{css_class}(?: [^"]*)?"', body)
    ]
    if links:
        context["metatags"] = context.get("metatags", "") + "\n".join(links) + "\n"


def _stop_server(app: Sphinx, exception: Exception | None) -> None:
    """Stop KaTeX's Node render server when the build ends, failed builds included.

    sphinxcontrib.katex stops it only from an ``atexit`` hook, which a failing
    build does not always reach: the orphaned ``node`` then holds the build's
    stdout and stderr open, so whoever waits on them (a terminal pipe, a test's
    ``subprocess.run``) waits forever.
    """
    server = sphinx_katex.KaTeXServer.katex_server
    if server is None:
        return
    sphinx_katex.KaTeXServer.katex_server = None
    atexit.unregister(sphinx_katex.KaTeXServer.terminate)
    server.terminate()


# sphinxcontrib-katex starts a Node server, waits until its unix socket file
# exists and connects once. The file exists from bind(); connections are only
# accepted after listen(). On a loaded machine the gap is long enough to fail
# the whole build with ConnectionRefusedError (seen with both cores busy). This
# start-up retries the connection until the (longer) timeout instead.
STARTUP_TIMEOUT = 60.0  # s; the Node process may start slowly on a busy machine


def _start_server_process(cls: type, rundir: Path, timeout: float) -> tuple[Popen, socket.socket]:
    socket_path = rundir / "katex.sock"
    process = Popen(cls.build_command(socket=socket_path), stdin=PIPE, stdout=PIPE, cwd=rundir)
    deadline = time.monotonic() + max(timeout, STARTUP_TIMEOUT)
    while True:
        if process.poll() is not None:
            raise ExtensionError(f"the KaTeX server exited at start-up (code {process.returncode})")
        if socket_path.is_socket():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(max(deadline - time.monotonic(), 0.1))
                sock.connect(str(socket_path))
                sock.settimeout(None)
                return process, sock
            except ConnectionRefusedError:  # bound but not listening yet
                sock.close()
        if time.monotonic() > deadline:
            process.kill()
            raise cls.timeout_error(max(timeout, STARTUP_TIMEOUT))
        time.sleep(0.01)


def setup(app: Sphinx) -> dict:
    sphinx_katex.KaTeXServer.start_server_process = classmethod(_start_server_process)
    sphinx_katex.RENDER_TIMEOUT = 60.0  # s per formula (default 5): a busy CI machine is slow
    if "sphinxcontrib.katex" not in app.extensions:
        raise ExtensionError("katex_local needs sphinxcontrib.katex listed before it")
    app.add_config_value("katex_local_dist", "node_modules/katex/dist", "env")
    app.connect("builder-inited", _stage_assets, priority=400)  # before sphinxcontrib.katex
    app.connect("html-page-context", _preload_fonts)
    app.connect("build-finished", _stop_server)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
