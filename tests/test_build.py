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


def test_glued_numbers_render() -> None:
    """Glue placeholders that failed to resolve leave their key or an error in the page."""
    require_built_site()
    for page in (HTML / "chapters").glob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert "glue target not found" not in html.lower(), page.name
        assert "Keyerror" not in html, page.name


def _listing(chapter: Path) -> str:
    text = chapter.read_text(encoding="utf-8")
    cells = [src for tags, src in code_cells(text) if "copy-this" in tags]
    assert len(cells) == 1, f"{chapter.name}: expected one copy-this cell, found {len(cells)}"
    return cells[0]


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


def _mini_book(tmp: Path, value: int) -> None:
    """A one-page book that glues a value returned by a watched package."""
    (tmp / "pkg").mkdir(exist_ok=True)
    (tmp / "pkg" / "probe_pkg.py").write_text(f"def answer():\n    return {value}\n")
    shutil.copytree(ROOT / "_ext", tmp / "_ext", dirs_exist_ok=True)
    (tmp / "conf.py").write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        sys.path.insert(0, str(Path(__file__).parent / "_ext"))
        extensions = ["myst_nb", "exec_cache"]
        nb_execution_mode = "cache"
        nb_execution_raise_on_error = True
        exec_cache_watch = ["pkg"]
        exec_cache_root = "_build/.jupyter_cache"
        exclude_patterns = ["_build", "pkg", "_ext"]
    """))
    (tmp / "index.md").write_text(textwrap.dedent("""\
        ---
        jupytext:
          text_representation:
            extension: .md
            format_name: myst
        kernelspec:
          name: python3
          display_name: Python 3
        ---
        # Probe

        ```{code-cell} ipython3
        from myst_nb import glue
        import probe_pkg
        glue("answer", probe_pkg.answer())
        ```

        The answer is {glue:text}`answer`.
    """))


def _sphinx_build(tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Build the small book in ``tmp`` with warnings as errors.

    Output goes to files, not pipes, and the build runs in its own process
    group that is killed afterwards: a helper process the build leaves behind
    (KaTeX's Node server) can neither keep the test waiting on a pipe nor
    outlive it.
    """
    cmd = [str(VENV_BIN / "sphinx-build"), "-W", "-q", "-b", "html", ".", "_build/html"]
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


def _build_mini(tmp: Path) -> str:
    result = _sphinx_build(tmp, env=dict(os.environ, PYTHONPATH=str(tmp / "pkg")))
    assert result.returncode == 0, result.stderr[-3000:]
    return (tmp / "_build" / "html" / "index.html").read_text(encoding="utf-8")


def _answer(html: str) -> str:
    match = re.search(r"The answer is\s*(?:<[^>]+>\s*)*([0-9]+)", html)
    assert match, "glued answer not found in the page"
    return match.group(1)


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


def _math_book(tmp: Path, formula: str) -> subprocess.CompletedProcess:
    """A one-page book with one formula, built with the real book's KaTeX set-up."""
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
    return _sphinx_build(tmp)


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


def test_formula_katex_cannot_parse_fails_the_build(tmp_path: Path) -> None:
    result = _math_book(tmp_path, r"\frac{1}{\sqrt{d_k}")  # one brace short
    assert result.returncode != 0, "a broken formula was published as red source text"
    assert "Expected '}'" in result.stderr or "KaTeX" in result.stderr, result.stderr[-2000:]
