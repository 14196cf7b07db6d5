"""The book as a build: every chapter executed, nothing stale, listings that run alone.

These tests read the site that `make html` wrote (``make test`` builds it first)
and run small builds of their own in temporary folders.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sitetools import CHAPTERS, HTML, ROOT, code_cells, require_built_site

pytestmark = pytest.mark.build

VENV_BIN = Path(sys.executable).parent


@pytest.mark.html
def test_every_chapter_is_built_with_outputs() -> None:
    require_built_site()
    assert CHAPTERS, "no chapters found"
    for chapter in CHAPTERS:
        page = HTML / "chapters" / (chapter.stem + ".html")
        assert page.is_file(), f"{chapter.name} was not built"
        html = page.read_text(encoding="utf-8")
        assert "cell_output" in html, f"{page.name} shows no executed output"
        # An executed error would render as an ipython traceback block.
        assert "Traceback (most recent call last)" not in html or "raises-exception" in html, (
            f"{page.name} shows a traceback from a cell not tagged raises-exception"
        )


# What myst-nb 1.4 writes for a {glue:text} it cannot fill (myst_nb/ext/glue/roles.py,
# crossref.py): nothing. The role returns no node and a warning ("No key 'k' found in glue
# data for this document ... [mystnb.glue]"; the same for a value with no text/plain or one
# its format spec cannot format), whose system message Sphinx drops from the page
# (keep_warnings is off). A filled one is <span class="pasted-text">. So a page has one
# such span for every {glue:text} role in its prose (the build's -W fails on the warning
# first; this checks what the reader gets, also with that warning suppressed).
_GLUE_ROLE = re.compile(r"\{glue(?::([a-z]+))?\}`")
_GLUE_DIRECTIVE = re.compile(r"^[`:~]{3,}\{glue(?::[a-z]+)?\}", re.M)
# fenced code (cells, listings): not prose. Directives ({note}, {figure}, {only} html)
# hold prose and stay.
_CODE_FENCE = re.compile(
    r"^(`{3,}|~{3,})(?:\{code-cell\}|\{code-block\}|\{code\}|[a-z0-9]*\s*$).*?^\1\s*$",
    re.S | re.M)


def unfilled_glue(markdown: str, html: str) -> str | None:
    """Why the page ``html`` built from ``markdown`` lacks a glued value, or None."""
    prose = _CODE_FENCE.sub("", markdown)
    kinds = _GLUE_ROLE.findall(prose)
    other = sorted({k or "(any)" for k in kinds if k != "text"})
    if other or _GLUE_DIRECTIVE.search(prose):
        return (f"glue roles or directives this check does not know: {other}; "
                "count their rendered nodes here too")
    filled = html.count('class="pasted-text"')
    if filled != len(kinds):
        return f"{len(kinds)} {{glue:text}} roles in the source, {filled} values in the page"
    return None


@pytest.mark.html
def test_glued_numbers_render() -> None:
    """Every {glue:text} of a page's prose shows a value (see unfilled_glue)."""
    require_built_site()
    pages = [(c, HTML / "chapters" / f"{c.stem}.html") for c in CHAPTERS]
    pages += [(ROOT / "benchmarks.md", HTML / "benchmarks.html")]
    checked = 0
    for source, page in pages:
        text = source.read_text(encoding="utf-8")
        problem = unfilled_glue(text, page.read_text(encoding="utf-8"))
        assert problem is None, f"{page.name}: {problem}"
        checked += len(_GLUE_ROLE.findall(text))
    assert checked > 500, checked  # the chapters glue hundreds of numbers


# The book's rule for figures: at most 5.5 in wide, no text below 10.5 pt. Then a 390 px
# phone shows a whole figure in its 342 px figure box (a 5.5 in figure, 528 CSS px, shrinks
# to 0.65) with its smallest text at >= 9 CSS px (tests/test_reader_phone.py measures that).
MAX_FIGURE_INCHES = 5.5
MIN_FIGURE_FONT_PT = 10.5


def chapter_figures() -> list[tuple[str, Path]]:
    """(page, SVG file) of every figure a chapter cell drew (not the diagrams of images/)."""
    diagrams = {p.name for p in (ROOT / "images").glob("*.svg")}
    figures = []
    for chapter in CHAPTERS:
        page = HTML / "chapters" / (chapter.stem + ".html")
        html = page.read_text(encoding="utf-8")
        for src in re.findall(r'<img[^>]+src="([^"]*_images/[^"]+\.svg)"', html):
            if Path(src).name not in diagrams:
                figures.append((page.name, (page.parent / src).resolve()))
    return figures


@pytest.mark.html
def test_chapter_figures_are_narrow_with_large_enough_text() -> None:
    """matplotlib writes an SVG's size in points (72 per inch) and its text sizes in
    points too (the `px` of the SVG's user units): read both from every figure file. Math
    text writes its exponents and subscripts in smaller <tspan>s: they count too."""
    require_built_site()
    figures = chapter_figures()
    assert len(figures) >= 20, f"expected the chapters' figures, found {len(figures)}"
    wide, small = [], []
    for page, path in figures:
        svg = path.read_text(encoding="utf-8")
        width = re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', svg)
        assert width, f"{page} {path.name}: no width in points"
        inches = float(width.group(1)) / 72
        if inches > MAX_FIGURE_INCHES + 1e-6:
            wide.append(f"{page} {path.name}: {inches:.2f} in")
        sizes = [float(s) for s in
                 re.findall(r"<(?:text|tspan)[^>]*font(?:-size)?:[^;\"]*?([\d.]+)px", svg)]
        assert sizes, f"{page} {path.name}: no text elements (text drawn as paths?)"
        if min(sizes) < MIN_FIGURE_FONT_PT - 1e-6:
            small.append(f"{page} {path.name}: {min(sizes):g} pt")
    assert (wide, small) == ([], []), (
        f"figures wider than {MAX_FIGURE_INCHES} in:\n" + "\n".join(wide)
        + f"\nfigure text below {MIN_FIGURE_FONT_PT} pt:\n" + "\n".join(small))


def _listing(chapter: Path) -> str:
    text = chapter.read_text(encoding="utf-8")
    cells = [src for tags, src in code_cells(text) if "copy-this" in tags]
    assert len(cells) == 1, f"{chapter.name}: expected one copy-this cell, found {len(cells)}"
    return cells[0]


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_copy_this_listing_runs_in_a_fresh_interpreter(chapter: Path, tmp_path: Path) -> None:
    """The chapter's "copy this" listing runs with only the package installed: no notebook
    state, no repository on the path, a fresh working directory."""
    script = tmp_path / "listing.py"
    script.write_text(_listing(chapter), encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "0",
    }
    result = subprocess.run(
        [sys.executable, "-I", str(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"{chapter.name} listing failed:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{chapter.name} listing printed nothing to check against"


_FRONT_MATTER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
"""


def _mini_book(tmp: Path, value: int, extra_cell: str = "") -> None:
    """A one-page book that glues a value returned by a watched package.

    It uses the real book's execution extensions (exec_cache, chapter_execution) and
    settings. ``extra_cell``: source of a second code cell, after the glued text.
    """
    (tmp / "pkg").mkdir(exist_ok=True)
    (tmp / "pkg" / "probe_pkg.py").write_text(f"def answer():\n    return {value}\n")
    shutil.copytree(ROOT / "_ext", tmp / "_ext", dirs_exist_ok=True)
    (tmp / "conf.py").write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        sys.path.insert(0, str(Path(__file__).parent / "_ext"))
        extensions = ["myst_nb", "exec_cache", "chapter_execution"]
        nb_execution_mode = "cache"
        nb_execution_raise_on_error = True
        exec_cache_watch = ["pkg"]
        exec_cache_root = "_build/.jupyter_cache"
        exclude_patterns = ["_build", "pkg", "_ext"]
    """))
    text = _FRONT_MATTER + textwrap.dedent("""\
        # Probe

        ```{code-cell} ipython3
        from myst_nb import glue
        import probe_pkg
        glue("answer", probe_pkg.answer())
        ```

        The answer is {glue:text}`answer`.
    """)
    if extra_cell:
        text += f"\n```{{code-cell}} ipython3\n{extra_cell.strip()}\n```\n"
    (tmp / "index.md").write_text(text)


def _sphinx_build(
    tmp: Path, env: dict[str, str] | None = None, opts: tuple[str, ...] = ("-W", "-q"),
) -> subprocess.CompletedProcess:
    """Build the small book in ``tmp`` with warnings as errors (``opts``).

    Output goes to files, not pipes, and the build runs in its own process
    group that is killed afterwards: a helper process the build leaves behind
    (KaTeX's Node server) can neither keep the test waiting on a pipe nor
    outlive it.
    """
    # -N: no colour codes, whatever the environment says (FORCE_COLOR under CI)
    cmd = [str(VENV_BIN / "sphinx-build"), "-N", *opts, "-b", "html", ".", "_build/html"]
    out, err = tmp / "_sphinx.out", tmp / "_sphinx.err"
    with out.open("w") as fout, err.open("w") as ferr:
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=fout, stderr=ferr,
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=300)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(cmd, returncode, out.read_text(), err.read_text())


def _build_mini_result(tmp: Path, opts: tuple[str, ...] = ("-W", "-q")):
    return _sphinx_build(tmp, env=dict(os.environ, PYTHONPATH=str(tmp / "pkg")), opts=opts)


def _build_mini(tmp: Path, opts: tuple[str, ...] = ("-W", "-q")) -> str:
    result = _build_mini_result(tmp, opts)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "without encryption" not in result.stdout + result.stderr  # kernel log is quiet
    return (tmp / "_build" / "html" / "index.html").read_text(encoding="utf-8")


def _answer(html: str) -> str:
    match = re.search(r"The answer is\s*(?:<[^>]+>\s*)*([0-9]+)", html)
    assert match, "glued answer not found in the page"
    return match.group(1)


@pytest.mark.slow
def test_package_edit_re_executes_chapters(tmp_path: Path) -> None:
    """jupyter-cache keys on cell source only; the exec_cache extension must not let an
    edit to the package leave old outputs on the page."""
    _mini_book(tmp_path, 41)
    assert _answer(_build_mini(tmp_path)) == "41"
    # Same chapter, same cells; only the package changes.
    (tmp_path / "pkg" / "probe_pkg.py").write_text("def answer():\n    return 42\n")
    assert _answer(_build_mini(tmp_path)) == "42"
    # And back: the old cache entry is correct again and may be reused.
    (tmp_path / "pkg" / "probe_pkg.py").write_text("def answer():\n    return 41\n")
    assert _answer(_build_mini(tmp_path)) == "41"


@pytest.mark.html
def test_real_book_cache_is_keyed_on_the_package() -> None:
    """The real conf.py watches code/selfattn: its hash names the cache folder in use."""
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        from exec_cache import source_hash
    finally:
        sys.path.pop(0)
    key = source_hash(ROOT, ["code/selfattn"])
    require_built_site()
    assert (ROOT / "_build" / ".jupyter_cache" / key).is_dir(), (
        "the build did not use the cache keyed on the current package source"
    )


def _math_book(tmp: Path, formula: str, build: bool = True) -> subprocess.CompletedProcess | None:
    """A one-page book with one formula, built (if ``build``) with the real book's KaTeX
    set-up."""
    shutil.copytree(ROOT / "_ext", tmp / "_ext", dirs_exist_ok=True)
    (tmp / "conf.py").write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, str(Path(__file__).parent / "_ext"))
        extensions = ["myst_parser", "sphinxcontrib.katex", "katex_local"]
        myst_enable_extensions = ["dollarmath"]
        katex_prerender = True
        katex_local_dist = {str(ROOT / "node_modules" / "katex" / "dist")!r}
        exclude_patterns = ["_build", "_ext"]
    """))
    (tmp / "index.md").write_text(f"# Probe\n\nThe formula ${formula}$ ends here.\n")
    return _sphinx_build(tmp) if build else None


@pytest.mark.slow
def test_math_is_typeset_at_build_time_with_local_katex(tmp_path: Path) -> None:
    result = _math_book(tmp_path, r"\operatorname{softmax}(S / \sqrt{d_k})")
    assert result.returncode == 0, result.stderr[-3000:]
    html = (tmp_path / "_build" / "html" / "index.html").read_text(encoding="utf-8")
    assert '<span class="katex">' in html and "<math" in html  # HTML for the eye, MathML for AT
    assert r"\sqrt" not in re.sub(r"<annotation.*?</annotation>", "", html)  # no raw TeX left
    assets = re.findall(r"<(?:link|script)\b[^>]*>", html)
    assert not [a for a in assets if re.search(r'(?:src|href)="(?:https?:)?//', a)], assets
    assert not re.search(r'<script[^>]*(?:mathjax|katex)', html, re.I), "math needs no script"
    static = tmp_path / "_build" / "html" / "_static" / "katex"
    assert (static / "katex.min.css").is_file()
    assert any((static / "fonts").glob("KaTeX_Main-Regular.woff2"))


@pytest.mark.slow
def test_formula_katex_cannot_parse_fails_the_build(tmp_path: Path) -> None:
    result = _math_book(tmp_path, r"\frac{1}{\sqrt{d_k}")  # one brace short
    assert result.returncode != 0, "a broken formula was published as red source text"
    assert "Expected '}'" in result.stderr or "KaTeX" in result.stderr, result.stderr[-2000:]


# ---------------------------------------------------------------- faults: one screen each


def _cache_dirs(tmp: Path) -> list[Path]:
    return sorted((tmp / "_build" / ".jupyter_cache").iterdir())


# A line libzmq's C++ code prints when a kernel's socket is torn down mid-poll at
# shutdown ("Assertion failed: pfd.revents & POLLIN (src/signaler.cpp:238)"): seen
# once in CI on a loaded machine, from the kernel process, with the build's result
# right. It is not the build speaking, so the stderr checks below leave it out.
_ZMQ_SHUTDOWN_NOISE = re.compile(r"^Assertion failed: .* \(src/\w+\.cpp:\d+\)$")


def _build_lines(stderr: str) -> list[str]:
    """The non-empty lines of a build's stderr, without libzmq's shutdown noise."""
    return [line for line in stderr.splitlines()
            if line.strip() and not _ZMQ_SHUTDOWN_NOISE.match(line.strip())]


@pytest.mark.slow
def test_corrupted_execution_cache_is_moved_aside_and_the_build_heals(tmp_path: Path):
    """A cache database cut short (a full disk, a killed CI job) must not crash the build:
    the cache is moved aside with one line on stderr, and the chapters re-execute."""
    _mini_book(tmp_path, 41)
    assert _answer(_build_mini(tmp_path)) == "41"
    [cache] = _cache_dirs(tmp_path)
    db = cache / "global.db"
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 2)
    result = _build_mini_result(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = _build_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"exec_cache: the execution cache _build/.jupyter_cache/{cache.name}"
                               " is unusable ("), lines[0]
    assert "re-executing the chapters" in lines[0]
    assert _answer((tmp_path / "_build" / "html" / "index.html").read_text()) == "41"
    # the broken cache is kept aside for inspection; a fresh, healthy one is in use
    names = [d.name for d in _cache_dirs(tmp_path)]
    assert names[0] == cache.name and names[1].startswith(cache.name + ".unusable-"), names
    assert _cache_problem()(cache) is None
    assert (cache / "executed").is_dir() and any((cache / "executed").iterdir())
    # and the next build is quiet again
    assert _build_lines(_build_mini_result(tmp_path).stderr) == []


def _cache_problem():
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        from exec_cache import cache_problem
    finally:
        sys.path.pop(0)
    return cache_problem


def test_cache_check_names_each_kind_of_damage(tmp_path: Path) -> None:
    """The same check on hand-made caches: no database yet is fine; an empty file, a
    non-database, missing tables or a missing executed notebook are each unusable."""
    import sqlite3

    cache_problem = _cache_problem()
    cache = tmp_path / "cache"
    cache.mkdir()
    assert cache_problem(cache) is None  # nothing yet: jupyter-cache creates the database
    db = cache / "global.db"
    db.write_bytes(b"")
    assert "tables missing, found none" in cache_problem(cache)
    db.write_bytes(b"not a database " * 100)
    assert "not a database" in cache_problem(cache)
    db.unlink()
    with sqlite3.connect(db) as con:
        con.executescript("CREATE TABLE settings (pk); CREATE TABLE nbproject (pk);"
                          "CREATE TABLE nbcache (pk, hashkey);"
                          "INSERT INTO nbcache VALUES (1, 'abc')")
    con.close()
    assert "1 cached notebook(s) missing" in cache_problem(cache)
    (cache / "executed" / "abc").mkdir(parents=True)
    (cache / "executed" / "abc" / "base.ipynb").write_text("{}")
    assert cache_problem(cache) is None


def test_two_readers_store_their_notebooks_one_at_a_time(tmp_path: Path) -> None:
    """Under `sphinx-build -j` two readers can store executed notebooks at the same
    moment; jupyter-cache then deleted one's fresh record as an old one (CI: KeyError
    'Notebook file does not exist for cache record PK: 2'). _ext/exec_cache.py makes
    each store hold a lock: the second store waits until the first has finished, and
    both notebooks stay in the cache."""
    import threading

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.cache.db import NbCacheRecord
    from jupyter_cache.cache.main import CacheBundleIn

    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        from exec_cache import serialize_cache_writes
    finally:
        sys.path.pop(0)
    serialize_cache_writes()
    cache = get_cache(tmp_path / "cache")
    create_record = NbCacheRecord.create_record
    first_inside, release_first = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_create_record(*args: object, **kwargs: object) -> object:
        uri = kwargs["uri"]
        order.append(f"{uri} in")
        if uri == "first.ipynb":  # the first store stops halfway, holding the lock
            first_inside.set()
            release_first.wait(10)
        record = create_record(*args, **kwargs)
        order.append(f"{uri} out")
        return record

    def store(uri: str, text: str) -> None:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        cache.cache_notebook_bundle(CacheBundleIn(nb, uri), check_validity=False)

    NbCacheRecord.create_record = staticmethod(slow_create_record)
    try:
        first = threading.Thread(target=store, args=("first.ipynb", "1"))
        second = threading.Thread(target=store, args=("second.ipynb", "2"))
        first.start()
        assert first_inside.wait(10)
        second.start()
        second.join(0.5)  # without the lock the second store runs through now
        release_first.set()
        first.join(10)
        second.join(10)
    finally:
        NbCacheRecord.create_record = staticmethod(create_record)
    assert order == ["first.ipynb in", "first.ipynb out", "second.ipynb in",
                     "second.ipynb out"], order
    assert sorted(r.uri for r in cache.list_cache_records()) == ["first.ipynb", "second.ipynb"]


_FAILING_CELL = """
x = probe_pkg.answer()
y = x + 1
assert y == 43, f"expected 43, got {y}"
print("never reached")
"""


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_failing_cell_is_reported_in_one_screen(tmp_path: Path, jobs: str):
    """File and line, cell number, its first lines, the exception: no traceback, no
    "report this error to the developers", a non-zero exit; the next build retries."""
    _mini_book(tmp_path, 41, extra_cell=_FAILING_CELL)
    result = _build_mini_result(tmp_path, ("-n", "-W", "--keep-going", "-q", "-j", jobs))
    assert result.returncode != 0
    err = result.stderr
    text = (tmp_path / "index.md").read_text().splitlines()
    line = text.index('assert y == 43, f"expected 43, got {y}"') + 1
    expected = [
        f"{tmp_path / 'index.md'}:{line}: ERROR: code cell 2 (of 2) failed to execute:",
        f"    {line - 2:4d} | x = probe_pkg.answer()",
        f"    {line - 1:4d} | y = x + 1",
        f"  > {line:4d} | assert y == 43, f\"expected 43, got {{y}}\"",
        f"    {line + 1:4d} | print(\"never reached\")",
        "  AssertionError: expected 43, got 42",
        "  full traceback: _build/exec-errors/index.log [chapter_execution.cell]",
    ]
    assert err.strip().splitlines() == expected, err
    for noise in ("Traceback", "report this error", "Versions", "without encryption",
                  "Executing notebook failed"):
        assert noise not in err + result.stdout, noise
    log = (tmp_path / "_build" / "exec-errors" / "index.log").read_text()
    assert "AssertionError" in log and "Traceback" in log  # the whole story, in a file
    # Unchanged source: the failed chapter is read and executed again, and fails again.
    again = _build_mini_result(tmp_path, ("-W", "-q", "-j", jobs))
    assert again.returncode != 0 and "code cell 2 (of 2) failed" in again.stderr
    # Fixed (the package now answers 42): the build passes and the error log is gone.
    (tmp_path / "pkg" / "probe_pkg.py").write_text("def answer():\n    return 42\n")
    assert _answer(_build_mini(tmp_path, ("-W", "-q", "-j", jobs))) == "42"
    assert not (tmp_path / "_build" / "exec-errors" / "index.log").exists()


# A long cell whose 30th line is a bare comparison that fails: share = 48 / 100.
_LONG_FAILING_CELL = "\n".join(
    ["x = probe_pkg.answer()"]
    + [f"v{k} = x + {k}" for k in range(2, 29)]
    + ["share = (x + 7) / 100", "assert share > 0.5", 'print("never reached")', "done = True"])


@pytest.mark.slow
def test_a_failing_assert_deep_in_a_cell_shows_its_line_and_both_values(tmp_path: Path):
    """The report marks line 30 of the cell with its line in the file, shows the lines
    around it, and the assert's values (the kernels load _ext/assert_values.py), not a
    bare AssertionError, also under %xmode Minimal; the cell's source, which the cache
    keys on, is as written, and the page shows what the cell printed once it passes."""
    _mini_book(tmp_path, 41, extra_cell=_LONG_FAILING_CELL)
    # as the chapters do (short errors for cells tagged raises-exception): IPython's
    # traceback then names no line at all
    index = tmp_path / "index.md"
    index.write_text(index.read_text().replace(
        "from myst_nb import glue\n",
        'from myst_nb import glue\nget_ipython().run_line_magic("xmode", "Minimal")\n', 1))
    src = _LONG_FAILING_CELL.splitlines()
    assert src[29] == "assert share > 0.5"
    result = _build_mini_result(tmp_path, ("-n", "-W", "--keep-going", "-q"))
    assert result.returncode != 0
    text = (tmp_path / "index.md").read_text().splitlines()
    line = text.index("assert share > 0.5") + 1
    first = text.index("x = probe_pkg.answer()", text.index(src[1]) - 2) + 1
    assert line == first + 29
    expected = [
        f"{tmp_path / 'index.md'}:{line}: ERROR: code cell 2 (of 2) failed to execute:",
        f"    {first:4d} | x = probe_pkg.answer()",
        "        ...",
        f"    {line - 2:4d} | v28 = x + 28",
        f"    {line - 1:4d} | share = (x + 7) / 100",
        f"  > {line:4d} | assert share > 0.5",
        f"    {line + 1:4d} | print(\"never reached\")",
        "        ... (1 more lines)",
        "  AssertionError: 0.48 > 0.5 is false",
        "  full traceback: _build/exec-errors/index.log [chapter_execution.cell]",
    ]
    assert result.stderr.strip().splitlines() == expected, result.stderr
    log = (tmp_path / "_build" / "exec-errors" / "index.log").read_text()
    assert "assert share > 0.5" in log and "0.48 > 0.5 is false" in log
    # Fixed (share 0.51): the build passes, the cell prints what it printed, and the cached
    # notebook, whose code the cache keys on, holds the cell as written.
    (tmp_path / "pkg" / "probe_pkg.py").write_text("def answer():\n    return 44\n")
    html = _build_mini(tmp_path, ("-W", "-q"))
    assert re.search(r"<pre>(?:<span></span>)?never reached\s*</pre>", html), html[-2000:]
    from jupyter_cache import get_cache

    [(cache, record)] = [(cache, r) for d in _cache_dirs(tmp_path)
                         for cache in [get_cache(str(d))] for r in cache.list_cache_records()]
    notebook = cache.get_cache_bundle(record.pk).nb
    assert [c.source for c in notebook.cells if c.cell_type == "code"][1] == _LONG_FAILING_CELL


@pytest.mark.slow
def test_prose_edit_re_renders_one_page_without_executing(tmp_path: Path) -> None:
    """Editing a sentence of one chapter re-reads that chapter only, from the execution
    cache: nothing executes. (jupyter-cache keys a notebook on its code cells.)"""
    import json

    _mini_book(tmp_path, 41)
    (tmp_path / "second.md").write_text(_FRONT_MATTER + textwrap.dedent("""\
        # Second

        ```{code-cell} ipython3
        print("second page", 6 * 7)
        ```

        Some prose.
    """))
    index = tmp_path / "index.md"
    index.write_text(index.read_text() + "\n```{toctree}\nsecond\n```\n")
    opts = ("-W", "-j", "2")
    first = _build_mini_result(tmp_path, opts)
    assert first.returncode == 0, first.stderr[-3000:]
    times = json.loads((tmp_path / "_build" / "exec-times.json").read_text())["chapters"]
    assert {d: c["executed_now"] for d, c in times.items()} == {"index": True, "second": True}
    # the same times, printed at the end of the build
    assert "Chapter execution times" in first.stdout
    assert re.search(r"\n  second +[0-9.]+ \*\n", first.stdout), first.stdout[-1500:]
    second = tmp_path / "second.md"
    second.write_text(second.read_text().replace("Some prose.", "Some edited prose."))
    result = _build_mini_result(tmp_path, opts)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "0 added, 1 changed, 0 removed" in result.stdout, result.stdout
    assert "Executing notebook" not in result.stdout + result.stderr
    assert "second.md: Using cached notebook" in result.stdout
    times = json.loads((tmp_path / "_build" / "exec-times.json").read_text())["chapters"]
    assert not any(c["executed_now"] for c in times.values()), times
    assert "Some edited prose." in (tmp_path / "_build" / "html" / "second.html").read_text()


@pytest.mark.slow
def test_an_unknown_glue_key_fails_the_build_and_the_glue_check(tmp_path: Path) -> None:
    """A {glue:text} whose key no cell glued: the build (-W) fails naming it; built
    without -W, the page shows nothing in its place, and unfilled_glue says so."""
    _mini_book(tmp_path, 42)
    index = tmp_path / "index.md"
    index.write_text(index.read_text() + "\nAnd {glue:text}`no_such_key:.2f` too.\n")
    strict = _build_mini_result(tmp_path)
    assert strict.returncode != 0
    assert "No key 'no_such_key' found in glue data" in strict.stderr, strict.stderr
    result = _build_mini_result(tmp_path, ("-q",))
    assert result.returncode == 0, result.stderr[-3000:]
    html = (tmp_path / "_build" / "html" / "index.html").read_text(encoding="utf-8")
    assert _answer(html) == "42"  # the known key is filled
    assert "no_such_key" not in html and "And  too." in re.sub(r"<[^>]+>", "", html)
    assert unfilled_glue(index.read_text(), html) == (
        "2 {glue:text} roles in the source, 1 values in the page")
    # the same page with the unknown key taken out passes the check
    index.write_text(index.read_text().replace(" {glue:text}`no_such_key:.2f`", ""))
    assert unfilled_glue(index.read_text(), _build_mini(tmp_path)) is None
