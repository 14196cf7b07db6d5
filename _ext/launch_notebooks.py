"""Launch and download buttons that point at real, executed ``.ipynb`` files.

The chapters are MyST text notebooks (``.md``). sphinx-book-theme copies each
executed notebook to ``_sources/<page>.ipynb`` for download, but points its
Colab and Binder buttons at the ``.md`` in the repository, which Colab cannot
open. This extension, after the theme:

* adds a first "setup" cell to each downloadable notebook that installs the
  ``selfattn`` package when the notebook runs on Colab or Binder (a no-op
  anywhere the package is already importable), and
* points Colab and Binder at that executed notebook on the published branch
  (``launch_notebook_branch``, the branch the site is deployed to).

Configuration (in ``conf.py``)::

    launch_notebook_branch = "gh-pages"
    launch_install_spec = "selfattn @ git+https://github.com/ORG/REPO@main"
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

SETUP_MARK = "selfattn-launch-setup"


def setup_cell(spec: str) -> dict[str, Any]:
    """The first cell of every downloadable notebook."""
    source = (
        "# Setup for Colab / Binder: install the book's package if it is missing.\n"
        "import importlib.util, subprocess, sys\n"
        "if importlib.util.find_spec('selfattn') is None:\n"
        f"    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', {spec!r}])\n"
    )
    return {
        "cell_type": "code", "execution_count": None, "id": SETUP_MARK,
        "metadata": {"tags": ["remove-cell", SETUP_MARK]}, "outputs": [], "source": source,
    }


def fill_outputs_from_cache(path: Path, cache_path: str | None) -> None:
    """Put the executed outputs into a downloadable notebook that lacks them.

    myst-nb 1.4 writes ``jupyter_execute/<page>.ipynb`` from the notebook *before*
    merging a cache hit, so after a cached build the copy has no outputs. The
    jupyter-cache record holds them; merge it in (cells are matched by source).
    """
    if not cache_path:
        return
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.read(str(path), as_version=4)
    if any(c.get("outputs") for c in notebook.cells if c.cell_type == "code"):
        return
    if notebook.cells and notebook.cells[0].get("id") == SETUP_MARK:
        notebook.cells = notebook.cells[1:]
    try:
        _, merged = get_cache(cache_path).merge_match_into_notebook(notebook)
    except KeyError:  # not cached (execution off): leave it as it is
        return
    nbformat.write(merged, str(path))


def add_setup_cell(path: Path, spec: str) -> None:
    """Insert the setup cell at the top of ``path`` once (idempotent)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = notebook.get("cells", [])
    if cells and cells[0].get("id") == SETUP_MARK:
        return
    notebook["cells"] = [setup_cell(spec), *cells]
    notebook["nbformat"], notebook["nbformat_minor"] = 4, max(notebook.get("nbformat_minor", 5), 5)
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _walk(buttons: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for button in buttons:
        yield button
        yield from _walk(button.get("buttons", []))


def _on_page_context(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object
) -> None:
    ipynb = context.get("ipynb_source")
    if not ipynb:
        return
    notebook = Path(app.outdir) / "_sources" / ipynb
    if notebook.is_file():
        fill_outputs_from_cache(notebook, getattr(app.config, "nb_execution_cache_path", None))
        add_setup_cell(notebook, app.config.launch_install_spec)
    repo = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    owner_repo = repo.removeprefix("https://github.com/")
    branch = app.config.launch_notebook_branch
    nb_path = f"_sources/{ipynb}"
    urls = {
        "Colab": f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/{nb_path}",
        "Binder": f"https://mybinder.org/v2/gh/{owner_repo}/{branch}?urlpath=tree/{nb_path}",
    }
    for button in _walk(context.get("header_buttons", [])):
        if button.get("text") in urls:
            button["url"] = urls[button["text"]]


def setup(app: Sphinx) -> dict:
    app.add_config_value("launch_notebook_branch", "gh-pages", "html")
    app.add_config_value("launch_install_spec", "selfattn", "html")
    # After sphinx-book-theme's own handler (default priority 500) has built the buttons.
    app.connect("html-page-context", _on_page_context, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
