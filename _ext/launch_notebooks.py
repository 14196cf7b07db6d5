"""Launch and download buttons that open published, runnable ``.ipynb`` files.

The chapters are MyST text notebooks (``.md``). sphinx-book-theme copies each
executed notebook to ``_sources/<page>.ipynb`` for download, but that copy
imports ``myst_nb``, shows raw MyST in its markdown, and the theme points Colab
and Binder at the ``.md`` in the repository. This extension, after the theme:

* replaces the downloadable notebook by its published form
  (:func:`publish_notebooks.publish`: numbers substituted, plain Markdown, no
  build-only imports, a first ``%pip install`` cell, executed outputs kept);
* points Colab at that notebook on the published branch
  (``launch_notebook_branch``, where the site is deployed), and
* adds the whole-book PDF (``book_pdf_name``, made by ``make pdf``) to every
  page's download menu when the build serves it (``-t book_pdf``, `make site`), and
* points Binder at a separate, rarely changing environment ref
  (``launch_binder_env_ref``, made from ``_extra/binder`` by the Pages workflow)
  whose image nbgitpuller fills with the notebooks of the published branch. The
  published branch is force-pushed on every deploy; the environment ref keeps
  its commit while ``_extra/binder`` is unchanged, so Binder reuses its image.

Configuration (in ``conf.py``)::

    launch_notebook_branch = "gh-pages"
    launch_binder_env_ref = "binder-env"
    launch_install_spec = "selfattn @ git+https://github.com/ORG/REPO@main"  # Binder's image
    launch_notebook_install_spec = "selfattn @ https://ORG.github.io/REPO/selfattn-...whl"
    publish_site_url = "https://ORG.github.io/REPO/"
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlencode

from publish_notebooks import (
    SETUP_MARK,
    PublishError,
    Resolver,
    citation_formatter,
    load_bibliography,
    publish,
)
from sphinx.application import Sphinx
from sphinx.util import docname_join, logging

logger = logging.getLogger(__name__)

__all__ = ["BOOK_PDF_TAG", "SETUP_MARK", "binder_url", "colab_url"]

#: The tag (``sphinx-build -t book_pdf``, `make site`) of a build whose site holds the
#: whole-book PDF: only then do the pages link it (index.md's ``{only}`` block too).
BOOK_PDF_TAG = "book_pdf"


def executed_notebook(path: Path, cache_path: str | None) -> Any:
    """The executed notebook at ``path``, its outputs as the kernel wrote them.

    myst-nb 1.4 writes ``jupyter_execute/<page>.ipynb`` from the notebook *before*
    merging a cache hit, so after a cached build the copy has no outputs. The
    jupyter-cache record holds them; merge it in (cells are matched by source).
    The record is the kernel's own record, so it is read whenever there is one, also
    after a build that executed the chapter (see :func:`keep_executed_outputs`).
    """
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)
    if not cache_path:
        return notebook
    from jupyter_cache import get_cache

    try:
        _, merged = get_cache(cache_path).merge_match_into_notebook(notebook)
    except KeyError:  # not cached (execution off): leave it as it is
        return notebook
    return merged


def keep_executed_outputs() -> None:
    """Make myst-nb merge a cell's stream outputs on a copy, not on the notebook itself.

    With ``nb_merge_streams`` the renderer calls ``coalesce_streams(outputs)``, which
    appends each later stdout output to the first one *in place* and returns a new list
    without them. The notebook myst-nb then writes to ``jupyter_execute/`` (after a build
    that executed the chapter) keeps every output, the first one now holding them all:
    the published notebook printed a cell's last lines twice. Wrapped here to work on a
    deep copy; idempotent. No upstream issue (myst-nb 1.4's render.py marks the call
    "TODO should this be saved on the output notebook"); _ext/README.md lists this patch
    and tests/test_notebook_outputs.py fails when myst-nb stops mutating (time to drop it)
    or stops calling the name this wraps.
    """
    from myst_nb.core import render

    merge = render.coalesce_streams
    if getattr(merge, "_selfattn_copies", False):
        return

    def merge_a_copy(outputs: list) -> list:
        return merge(copy.deepcopy(outputs))

    merge_a_copy._selfattn_copies = True  # type: ignore[attr-defined]
    render.coalesce_streams = merge_a_copy


def colab_url(owner_repo: str, branch: str, nb_path: str) -> str:
    """Colab opens a notebook straight from a GitHub branch."""
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/{nb_path}"


def binder_url(owner_repo: str, env_ref: str, content_branch: str, nb_path: str,
               interface: str = "lab/tree") -> str:
    """Binder builds ``env_ref`` (environment only); nbgitpuller pulls the notebooks.

    The image is keyed on the commit of ``env_ref``, which changes only when the
    environment does, so Binder does not rebuild on every deploy of the site.
    """
    repo_name = owner_repo.split("/")[-1]
    pull = "git-pull?" + urlencode(
        {"repo": f"https://github.com/{owner_repo}", "branch": content_branch,
         "urlpath": f"{interface}/{repo_name}/{nb_path}"},
        quote_via=quote, safe="",
    )
    return f"https://mybinder.org/v2/gh/{owner_repo}/{env_ref}?urlpath={quote(pull, safe='')}"


#: Where each build records what publishing cost: ``_build/publish-stats.json`` (next to
#: the output folder, like chapter_execution's exec-times.json). The bibliography is
#: loaded and formatted once per build; tests/test_notebooks.py reads the count.
STATS_FILE = "publish-stats.json"


def _stats(app: Sphinx) -> dict[str, Any]:
    stats = getattr(app, "_publish_stats", None)
    if stats is None:
        stats = app._publish_stats = {"bibliography_loads": 0, "pages": {}}
    return stats


def shared_bibliography(app: Sphinx) -> tuple[Any, Any]:
    """``(cite, bibliography)`` of :func:`publish_notebooks.citation_formatter`, made once
    per build and shared by every page: parsing references.bib and formatting its entries
    through pybtex costs far more than publishing a page (the pages used to load and
    format it twice each)."""
    shared = getattr(app, "_publish_bibliography", None)
    if shared is None:
        entries = load_bibliography(Path(app.srcdir) / b for b in app.config.bibtex_bibfiles)
        refs_doc = app.config.publish_references_doc
        refs_url = _site_url(app, refs_doc) if refs_doc in app.env.titles else ""
        shared = app._publish_bibliography = citation_formatter(entries, refs_url)
        _stats(app)["bibliography_loads"] += 1
    return shared


def _site_url(app: Sphinx, doc: str, anchor: str = "") -> str:
    site = app.config.publish_site_url.rstrip("/") + "/"
    return site + app.builder.get_target_uri(doc) + (f"#{anchor}" if anchor else "")


def make_resolver(app: Sphinx, docname: str) -> Resolver:
    """Cross-references of page ``docname`` resolved from the Sphinx environment to
    absolute site URLs. Only the closures are per page: the domains are Sphinx's, read as
    they are, and the citations come from :func:`shared_bibliography`."""
    env = app.env
    site = app.config.publish_site_url.rstrip("/") + "/"
    std = env.get_domain("std")
    py = env.get_domain("py")

    def url(doc: str, anchor: str = "") -> str:
        return _site_url(app, doc, anchor)

    def doc(target: str) -> tuple[str, str]:
        name = target.lstrip("/") if target.startswith("/") else docname_join(docname, target)
        if name not in env.titles:
            raise PublishError(f"{docname}: unknown document {target!r}")
        return env.titles[name].astext(), url(name)

    def ref(label: str) -> tuple[str, str]:
        key = label.lower()
        if key in std.labels:
            target_doc, anchor, title = std.labels[key]
            if target_doc == docname:  # same chapter: the notebook's own anchor
                return title, f"#{label}"
            return title, url(target_doc, anchor)
        if key in std.anonlabels:
            target_doc, anchor = std.anonlabels[key]
            return label, url(target_doc, anchor)
        raise PublishError(f"{docname}: unknown label {label!r}")

    def term(target: str) -> str:
        found = std._terms.get(target.lower())
        if not found:
            raise PublishError(f"{docname}: unknown glossary term {target!r}")
        return url(*found)

    def py_object(name: str) -> str:
        entry = py.objects.get(name)
        return url(entry.docname, entry.node_id) if entry else ""

    cite, _ = shared_bibliography(app)

    def image(path: str) -> str:
        # Sphinx copies a page's figures into _images/ under their own file name
        return f"{site}_images/{PurePosixPath(path).name}"

    return Resolver(doc=doc, ref=ref, term=term, py=py_object, cite=cite, image=image)


def publish_page(app: Sphinx, pagename: str, out: Path) -> None:
    """Write the published notebook of ``pagename`` to ``out``."""
    start = time.perf_counter()
    jupyter_execute = Path(app.outdir).parent / "jupyter_execute"
    notebook = executed_notebook(jupyter_execute / f"{pagename}.ipynb",
                                 getattr(app.config, "nb_execution_cache_path", None))
    glue_file = jupyter_execute / f"{pagename}.glue.json"
    values = json.loads(glue_file.read_text(encoding="utf-8")) if glue_file.is_file() else {}
    _, bibliography = shared_bibliography(app)
    published = publish(
        notebook, values,
        install_spec=app.config.launch_notebook_install_spec or app.config.launch_install_spec,
        resolver=make_resolver(app, pagename), bibliography=bibliography,
        title=app.env.titles[pagename].astext(),
        page_url=_site_url(app, pagename),
        merge_streams=bool(app.config.nb_merge_streams),
    )
    out.write_text(json.dumps(published, indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    _stats(app)["pages"][pagename] = round(time.perf_counter() - start, 3)


def _write_stats(app: Sphinx, exception: Exception | None) -> None:
    stats = getattr(app, "_publish_stats", None)
    if exception is None and stats is not None and app.builder.format == "html":
        path = Path(app.outdir).parent / STATS_FILE
        path.write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _walk(buttons: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for button in buttons:
        yield button
        yield from _walk(button.get("buttons", []))


def _book_pdf_button(app: Sphinx, context: dict) -> None:
    """The download menu offers the whole book as a PDF when the build serves it
    (``-t book_pdf``: `make site` copies the PDF into the site); the theme's own
    ".pdf" entry only prints the page, so it says so."""
    name = app.config.book_pdf_name
    for button in _walk(context.get("header_buttons", [])):
        if button.get("label") == "download-pdf-button":
            button["text"], button["tooltip"] = "print", "Print this page"
    if not name or not app.tags.has(BOOK_PDF_TAG):
        return
    for button in _walk(context.get("header_buttons", [])):
        if button.get("label") != "download-buttons":
            continue
        entries = button.setdefault("buttons", [])
        if not any(e.get("label") == "download-book-pdf-button" for e in entries):
            entries.append({
                "type": "link", "url": context["pathto"](name, 1), "text": "book .pdf",
                "tooltip": "Download the whole book as one PDF", "icon": "fas fa-book",
                "label": "download-book-pdf-button",
            })


def _on_page_context(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object
) -> None:
    _book_pdf_button(app, context)
    ipynb = context.get("ipynb_source")
    if not ipynb:
        return
    notebook = Path(app.outdir) / "_sources" / ipynb
    try:
        publish_page(app, pagename, notebook)
    except PublishError as exc:  # a warning, and so (-W) a failed build
        logger.warning(f"cannot publish {pagename}.ipynb: {exc}", location=pagename)
        return
    repo = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    owner_repo = repo.removeprefix("https://github.com/")
    branch = app.config.launch_notebook_branch
    nb_path = f"_sources/{ipynb}"
    urls = {
        "Colab": colab_url(owner_repo, branch, nb_path),
        "Binder": binder_url(owner_repo, app.config.launch_binder_env_ref, branch, nb_path),
    }
    for button in _walk(context.get("header_buttons", [])):
        if button.get("text") in urls:
            button["url"] = urls[button["text"]]


def _binder_requirements_install_spec(app: Sphinx, exception: Exception | None) -> None:
    """The site's copy of ``binder/requirements.txt`` (from ``html_extra_path``) installs
    the package from the repository the book is built for (``launch_install_spec``), as
    the notebooks' install cells do: a fork's site names the fork, not the original."""
    path = Path(app.outdir) / "binder" / "requirements.txt"
    if exception is not None or app.builder.format != "html" or not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    lines = [app.config.launch_install_spec if ln.startswith("selfattn @ ") else ln
             for ln in text.split("\n")]
    path.write_text("\n".join(lines), encoding="utf-8")


def setup(app: Sphinx) -> dict:
    keep_executed_outputs()
    app.add_config_value("launch_notebook_branch", "gh-pages", "html")
    app.add_config_value("launch_binder_env_ref", "binder-env", "html")
    app.add_config_value("launch_install_spec", "selfattn", "html")
    # what a published notebook's first cell installs: `make site` sets the wheel it built
    # (conf.py); empty: launch_install_spec, as Binder's image does
    app.add_config_value("launch_notebook_install_spec", "", "html")
    app.add_config_value("publish_site_url", "", "html")
    app.add_config_value("publish_references_doc", "references", "html")
    app.add_config_value("book_pdf_name", "self-attention-verified.pdf", "html")
    # After sphinx-book-theme's own handler (default priority 500) has built the buttons.
    app.connect("html-page-context", _on_page_context, priority=900)
    app.connect("build-finished", _binder_requirements_install_spec)
    app.connect("build-finished", _write_stats)
    return {"version": "2.0", "parallel_read_safe": True, "parallel_write_safe": True}
