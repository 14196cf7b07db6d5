"""Every patch of another library's internals (_ext/README.md lists them) has a test here.

Each test fails in one of two ways, both telling a maintainer to act:

* the patch no longer applies: the name, the code shape or the markup it changes is
  gone (an upgrade moved it), so the book silently lost the fix;
* upstream fixed it: the library no longer shows the bug, so the patch can go.

Where the bug can only be seen in a browser or a build, the test named in the register
checks the effect; here the library's own code or output is read for the cause. These
tests read installed packages and the built site; none builds anything.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from sitetools import HTML, ROOT, require_built_site

sys.path.insert(0, str(ROOT / "_ext"))

SITE_PACKAGES = Path(inspect.getfile(pytest)).parents[1]
PYDATA = SITE_PACKAGES / "pydata_sphinx_theme"
BOOK_THEME = SITE_PACKAGES / "sphinx_book_theme"


def _source(module: object) -> str:
    """A module's source as installed (not as a test or conf.py may have patched it)."""
    return Path(inspect.getfile(module)).read_text(encoding="utf-8")


# --- katex_local -------------------------------------------------------------------------

def test_katex_server_start_still_connects_once() -> None:
    """katex_local retries the first connection (the socket file exists from bind(), the
    server accepts only after listen(): ConnectionRefusedError on a busy machine)."""
    import sphinxcontrib.katex as katex

    source = _source(katex)
    start = source[source.index("def start_server_process"):]
    start = start[:start.index("\n    @classmethod")]
    assert "sock.connect(" in start, "start_server_process changed: revisit katex_local"
    assert "ConnectionRefusedError" not in start, "upstream retries now: drop the patch"
    params = list(inspect.signature(katex.KaTeXServer.start_server_process).parameters)
    assert params == ["rundir", "timeout"], params
    for name in ("build_command", "timeout_error", "katex_server", "terminate"):
        assert hasattr(katex.KaTeXServer, name), f"KaTeXServer.{name} is gone"


def test_katex_render_timeout_is_still_a_module_global_of_five_seconds() -> None:
    import sphinxcontrib.katex as katex

    source = _source(katex)
    assert "RENDER_TIMEOUT = 5.0" in source, "upstream changed the default: revisit"
    assert "server.render(request, RENDER_TIMEOUT)" in source, "the patched name is unused"


def test_katex_server_is_still_stopped_only_at_exit() -> None:
    """katex_local stops the Node server at build-finished (a failing build may never
    reach the atexit hook, and the orphan holds the build's stdout open)."""
    import sphinxcontrib.katex as katex

    source = _source(katex)
    assert "atexit.register(KaTeXServer.terminate" in source
    finished = source[source.index("def builder_finished"):]
    finished = finished[:finished.index("\ndef ")]
    assert "terminate" not in finished and "katex_server" not in finished, (
        "upstream stops the server at build-finished itself: drop ours")


def test_katex_options_still_default_to_lenient() -> None:
    import sphinxcontrib.katex as katex

    source = _source(katex)
    assert "KATEX_DEFAULT_OPTIONS" in source
    from katex_local import STRICT_OPTIONS

    defaults = re.search(r"KATEX_DEFAULT_OPTIONS = (\{.*?\})", source, re.S).group(1)
    assert not all(f'"{k}"' in defaults or f"'{k}'" in defaults for k in STRICT_OPTIONS), (
        "upstream defaults are strict now: katex_local need not set them")


# --- chapter_execution, exec_cache, launch_notebooks (myst-nb, jupyter-cache, Sphinx) ----

def test_myst_nb_parser_and_failure_message_are_what_chapter_execution_wraps() -> None:
    """chapter_execution subclasses myst-nb's Parser, drops myst-nb's own "Executing
    notebook failed" warning (it reports the failing cell itself) and re-parses with a
    copy of the config whose execution is off. tests/test_build.py's failing-cell test
    checks the report end to end."""
    import myst_nb
    from myst_nb.core.config import NbParserConfig
    from myst_nb.sphinx_ import Parser

    assert myst_nb.__version__ == "1.4.0", (
        "myst-nb upgraded: check that a failing cell is still reported as one warning "
        "whose text starts 'Executing notebook failed', then update this version")
    from myst_nb.core.execute import cache

    assert "Executing notebook failed" in _source(cache), (
        "myst-nb words its failure differently: chapter_execution would report it twice")
    assert callable(getattr(Parser, "parse", None))
    config = NbParserConfig().copy(execution_mode="off", metadata_key="_off")
    assert (config.execution_mode, config.metadata_key) == ("off", "_off")


def test_sphinx_still_decides_parallel_writing_after_reading() -> None:
    """chapter_execution sets app.parallel = 1 at env-updated so the pages are written in
    one process (forked writers each started a KaTeX server nothing stopped). That only
    works while Sphinx decides parallel writing after the read phase, from app.parallel."""
    from sphinx.builders import Builder

    build = inspect.getsource(Builder.build)
    read = build.index("self.read()")
    decide = build.index("self.parallel_ok = self._app.is_parallel_allowed('write')")
    assert read < decide, "Sphinx decides parallel writing before reading now"
    assert "self._app.parallel > 1 and self.allow_parallel" in build


def test_jupyter_cache_still_stores_without_a_lock() -> None:
    """exec_cache wraps cache_notebook_bundle in a flock (two parallel readers deleted
    each other's new record: KeyError 'Notebook file does not exist for cache record').
    tests/test_build.py::test_two_readers_store_their_notebooks_one_at_a_time checks it."""
    from jupyter_cache.cache.main import JupyterCacheBase

    from exec_cache import STORE_LOCK

    source = _source(sys.modules[JupyterCacheBase.__module__])
    store = source[source.index("def cache_notebook_bundle"):]
    store = store[:store.index("\n    def ", 10)]
    assert "lock" not in store.lower(), "jupyter-cache locks its store now: drop ours"
    assert "truncate_caches" in store, "the store no longer truncates: revisit the race"
    assert STORE_LOCK == "store.lock"


def test_myst_nb_still_writes_the_notebook_before_merging_a_cache_hit() -> None:
    """launch_notebooks.executed_notebook reads outputs from the cache because myst-nb
    writes jupyter_execute/<page>.ipynb from the notebook it was given, which after a
    cache hit has no outputs."""
    import myst_nb.sphinx_ as sphinx_

    source = _source(sphinx_)
    assert "content = nbformat.writes(notebook).encode(\"utf-8\")" in source, (
        "myst-nb writes a different notebook now: check whether it holds the outputs")


def test_ipykernel_still_replies_with_the_traceback_it_showed_last() -> None:
    """assert_values wraps the kernel shell's _showtraceback: after ipykernel has sent the
    error output (the cell's output, unchanged), it appends the failure's cell lines to
    shell._last_traceback, which ipykernel copies into the execute reply and nbclient turns
    into the CellExecutionError the build reports. That needs all three to stay so.
    tests/test_build.py::test_a_failing_assert_deep_in_a_cell_shows_its_line_and_both_values
    checks it end to end (under %xmode Minimal, as the chapters run)."""
    from ipykernel import ipkernel, zmqshell
    from nbclient import client

    show = inspect.getsource(zmqshell.ZMQInteractiveShell._showtraceback)
    assert "self._last_traceback = stb" in show, "ipykernel keeps the traceback elsewhere"
    assert show.index('"error"') < show.index("self._last_traceback = stb"), (
        "ipykernel sends the error output after keeping it: the cell output would change")
    assert '"traceback": shell._last_traceback or []' in _source(ipkernel), (
        "the execute reply's traceback no longer comes from shell._last_traceback")
    check = inspect.getsource(client.NotebookClient._check_raise_for_error)
    assert "CellExecutionError.from_cell_and_msg(cell, exec_reply_content)" in check, (
        "nbclient builds its error from something other than the execute reply")
    from IPython.core.compilerop import CachingCompiler

    assert "_filename_map" in inspect.getsource(CachingCompiler), (
        "IPython maps cell file names to In[n] differently: assert_values.cell_lines")


# --- conf.py --------------------------------------------------------------------------

def test_sphinx_still_writes_type_alias_forward_refs_by_their_repr() -> None:
    """conf.py's _alias_repr_workaround: `Array | None` rendered as
    TypeAliasForwardRef('selfattn.array_types.Array'), a broken reference (related:
    sphinx-doc/sphinx#14004; falcon carries the same patch, falconry/falcon#2469).
    tests/test_reader.py::test_api_page_names_the_array_type_instead_of_any checks the
    page."""
    import sphinx.util.inspect as sphinx_inspect

    source = _source(sphinx_inspect)
    cls = source[source.index("class TypeAliasForwardRef"):]
    cls = cls[:cls.index("\nclass ", 10) if "\nclass " in cls[10:] else len(cls)]
    assert "return f'{self.__class__.__name__}({self.name!r})'" in cls, (
        "TypeAliasForwardRef's repr changed: check whether the workaround is needed")


# --- templates, scripts and styles over the themes --------------------------------------

def test_webpack_macros_copy_differs_from_the_theme_only_by_fontawesome() -> None:
    """_templates/static/webpack-macros.html is pydata-sphinx-theme's macro file without
    the 1.5 MB fontawesome.js (the theme's CSS draws every icon the book uses)."""
    def lines(path: Path) -> list[str]:
        text = re.sub(r"\{#.*?#\}|<!--.*?-->", "", path.read_text(encoding="utf-8"), flags=re.S)
        return [ln.strip() for ln in text.splitlines() if ln.strip()]

    theirs = lines(PYDATA / "theme" / "pydata_sphinx_theme" / "static" / "webpack-macros.html")
    ours = lines(ROOT / "_templates" / "static" / "webpack-macros.html")
    dropped = [ln for ln in theirs if ln not in ours]
    assert ours == [ln for ln in theirs if ln not in dropped], "the copy drifted from the theme"
    assert len(dropped) == 1 and "fontawesome.js" in dropped[0], dropped


@pytest.mark.html
def test_pages_have_one_pair_of_sidebar_buttons() -> None:
    """With no navbar_* items the theme renders an empty top bar, so the article header's
    buttons are the only .primary-toggle and .secondary-toggle, and the themes, which bind
    the first of each (pydata-sphinx-theme#2451, sphinx-book-theme#988), bind them.
    tests/test_reader.py's sidebar tests tap and click them."""
    require_built_site()
    page = (HTML / "chapters" / "02-qkv.html").read_text(encoding="utf-8")
    header = re.search(r'<header id="pst-header"[^>]*>(.*?)</header>', page, re.S)
    assert header and not header.group(1).strip(), "the theme's top bar has content again"
    assert len(re.findall(r'class="[^"]*\bprimary-toggle\b', page)) == 1
    assert len(re.findall(r'class="[^"]*\bsecondary-toggle\b', page)) == 1
    theme_js = _source_js(PYDATA, "pydata-sphinx-theme.js")
    assert 'document.querySelector(".primary-toggle")' in theme_js, (
        "the theme no longer binds the first toggle only: #2451 may be fixed")


def _source_js(package: Path, name: str) -> str:
    return next(package.rglob(f"assets/scripts/{name}")).read_text(encoding="utf-8")


@pytest.mark.html
def test_the_mislabelled_controls_a11y_js_fixes_are_still_mislabelled() -> None:
    """a11y.js drops three attributes axe reports (the axe sweeps of make test-slow check
    the pages). Each is still in what the libraries write."""
    require_built_site()
    page = (HTML / "chapters" / "02-qkv.html").read_text(encoding="utf-8")
    assert re.search(r'<button class="btn search-button-field[^"]*"[^>]*aria-label="Search"',
                     page), "the search field's label matches its text now: drop that fix"
    togglebutton = (HTML / "_static" / "togglebutton.js").read_text(encoding="utf-8")
    assert "Toggle hidden content" in togglebutton, "togglebutton's label changed"
    refs = (HTML / "references.html").read_text(encoding="utf-8")
    assert 'role="list" class="citation-list"' in refs, "the citation list lost its role"


@pytest.mark.parametrize(("rule", "why"), [
    ("div.math{flex-direction:row-reverse", "a formula wider than a phone overflows left"),
    ("html[data-theme=dark] .bd-content div.cell_output .text_html:not(:has(table."
     "dataframe))", "a light slab behind every HTML output in dark mode"),
])
def test_theme_css_custom_css_overrides_is_still_there(rule: str, why: str) -> None:
    """custom.css overrides these rules of pydata-sphinx-theme (see _ext/README.md)."""
    css = (PYDATA / "theme" / "pydata_sphinx_theme" / "static" / "styles"
           / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
    assert rule in css, f"the theme changed the rule behind '{why}': revisit custom.css"


def test_book_theme_still_removes_the_header_buttons_focus_ring() -> None:
    css = next(BOOK_THEME.rglob("static/styles/sphinx-book-theme.css")).read_text(
        encoding="utf-8")
    assert ".bd-header-article .btn:focus{box-shadow:none}" in css, (
        "sphinx-book-theme keeps the focus ring now: custom.css's ring may go")


def test_sphinx_sitemap_still_lists_only_the_pages_written_in_this_run() -> None:
    """_ext/sitemap_every_page.py hands sphinx-sitemap the pages an incremental build did
    not write. It is needed while sphinx-sitemap starts each build with an empty queue
    that only its html-page-context handler fills."""
    import sphinx_sitemap

    assert "sitemap_links = Manager().Queue()" in inspect.getsource(
        sphinx_sitemap.record_builder_type)
    setup = inspect.getsource(sphinx_sitemap.setup)
    assert 'app.connect("html-page-context", add_html_link)' in setup
    assert 'app.connect("build-finished", create_sitemap)' in setup  # default priority 500
    assert "found_docs" not in inspect.getsource(sphinx_sitemap)


def test_sphinx_still_numbers_figures_at_env_get_updated_against_the_last_table() -> None:
    """_ext/figure_twins.py runs one env-get-updated handler before and one after the
    TocTreeCollector's (default priority 500): the one after rewrites the figure numbers
    the collector assigned afresh; the one before gives it, as the table to compare
    with, its own numbers of the last build. Whether Sphinx still numbers the hidden
    dark copy (the bug) is checked by test_figure_twins.py's small book."""
    from sphinx.environment.collectors import EnvironmentCollector, toctree

    assert "app.connect('env-get-updated', self.get_updated_docs)" in inspect.getsource(
        EnvironmentCollector.enable), "the collector's handler has a priority now"
    collector = toctree.TocTreeCollector
    assert "self.assign_figure_numbers(env)" in inspect.getsource(collector.get_updated_docs)
    assign = inspect.getsource(collector.assign_figure_numbers)
    assert "old_fignumbers = env.toc_fignumbers" in assign
    assert "env.toc_fignumbers = {}" in assign
    assert "fignums != old_fignumbers.get(docname)" in assign
