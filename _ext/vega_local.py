"""Interactive figures: Vega, Vega-Lite and vega-embed served from the build, no CDN.

``npm ci`` installs the three (pinned in ``package-lock.json``). This extension
copies their minified browser builds into ``_static/vega/`` once per site and adds
them, with ``_static/interactive.js`` (which renders every
``div.selfattn-vega`` a cell wrote with :func:`selfattn.interactive.interactive_figure`),
only to the pages that have such a figure. Every other page loads none of it.

Configuration (``conf.py``): ``vega_local_modules``, the ``node_modules`` folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ConfigError

# load order matters: vega-lite and vega-embed expect the globals of the ones before
BUNDLES = (
    ("vega", "build/vega.min.js"),
    ("vega-lite", "build/vega-lite.min.js"),
    ("vega-embed", "build/vega-embed.min.js"),
)
MARKER = 'class="selfattn-vega"'
_SOURCE_MAP = re.compile(rb"\n?//# sourceMappingURL=\S+\s*$")


def _stage_assets(app: Sphinx) -> None:
    """Copy the three bundles (without their source-map comment: the maps are not served)."""
    modules = Path(app.confdir, app.config.vega_local_modules)
    stage = Path(app.outdir).parent / ".vega-static"
    target = stage / "vega"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for package, path in BUNDLES:
        src = modules / package / path
        if not src.is_file():
            raise ConfigError(f"{src} not found: run `npm ci` in the repository root "
                              "(`make html` does it) to install the pinned Vega packages.")
        (target / src.name).write_bytes(_SOURCE_MAP.sub(b"\n", src.read_bytes()))
    if str(stage) not in app.config.html_static_path:
        app.config.html_static_path.append(str(stage))


def _add_scripts(app: Sphinx, pagename: str, templatename: str, context: dict,
                 doctree: object) -> None:
    """Load Vega only on pages with an interactive figure (deferred, in order)."""
    if MARKER not in (context.get("body") or ""):
        return
    for _, path in BUNDLES:
        app.add_js_file(f"vega/{Path(path).name}", defer="defer")
    app.add_js_file("interactive.js", defer="defer")


def setup(app: Sphinx) -> dict:
    app.add_config_value("vega_local_modules", "node_modules", "env")
    app.connect("builder-inited", _stage_assets)
    app.connect("html-page-context", _add_scripts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
