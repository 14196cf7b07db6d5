"""What a chapter's cache depends on (_ext/exec_cache.py), without building a book.

A chapter is re-executed when the code of a package file whose functions it ran
changes, when the module-level code of any package file changes (if it imported
the package), or when the text of a file it read changes; never for a docstring
or a comment. The build tests (tests/test_build.py) check the same on a small book.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sitetools import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
try:
    import exec_cache
finally:
    sys.path.pop(0)

MODULE = '''\
"""A module."""

SCALE = 2.0  # a constant


class Layer:
    """A class."""

    width = 4  # a class attribute

    def forward(self, x, shift=1):
        """Forward."""
        # a comment
        return x * SCALE + shift


def helper(x):
    """Helper."""
    return x + 1
'''


def _hashes(tmp: Path, text: str) -> dict[str, str]:
    path = tmp / "mod.py"
    path.write_text(text)
    return exec_cache.file_hashes(path)


@pytest.mark.parametrize("edit", [
    ('"""A module."""', '"""A module, documented better."""'),  # module docstring
    ('"""Forward."""', '"""Forward, with more words.\n\n        More."""'),  # method docstring
    ("# a comment", "# another comment"),
    ("SCALE = 2.0  # a constant", "SCALE = 2.0"),  # a trailing comment removed
    ("\n\ndef helper", "\n\n\n# spacing\ndef helper"),
], ids=["module-docstring", "docstring", "comment", "trailing-comment", "blank-lines"])
def test_docstrings_comments_and_layout_are_not_code(tmp_path: Path, edit) -> None:
    before = _hashes(tmp_path, MODULE)
    after = _hashes(tmp_path, MODULE.replace(*edit))
    assert after["text"] != before["text"]
    assert after["code"] == before["code"] and after["module"] == before["module"]


@pytest.mark.parametrize("edit", [
    ("return x * SCALE + shift", "return x * SCALE - shift"),
    ("return x + 1", "return x + 2"),
], ids=["method-body", "function-body"])
def test_a_function_body_is_code_but_not_module_level(tmp_path: Path, edit) -> None:
    before = _hashes(tmp_path, MODULE)
    after = _hashes(tmp_path, MODULE.replace(*edit))
    assert after["code"] != before["code"]
    assert after["module"] == before["module"]


@pytest.mark.parametrize("edit", [
    ("SCALE = 2.0", "SCALE = 3.0"),  # a constant
    ("width = 4", "width = 5"),  # a class attribute
    ("shift=1", "shift=2"),  # a default argument
    ("def helper(x)", "def helper(y)"),  # a signature
], ids=["constant", "class-attribute", "default", "signature"])
def test_module_level_code_is_module_level(tmp_path: Path, edit) -> None:
    before = _hashes(tmp_path, MODULE)
    after = _hashes(tmp_path, MODULE.replace(*edit))
    assert after["module"] != before["module"] and after["code"] != before["code"]


def _package(tmp: Path) -> Path:
    pkg = tmp / "pkg" / "probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from probe import alpha, beta\n")
    (pkg / "alpha.py").write_text(MODULE)
    (pkg / "beta.py").write_text('def b():\n    """B."""\n    return 2\n')
    (pkg / "table.json").write_text("[1, 2]\n")
    return pkg


def test_stale_reasons_name_the_file_and_what_changed(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    state = exec_cache.package_state(tmp_path, ["pkg"])
    assert sorted(state) == ["pkg/probe/__init__.py", "pkg/probe/alpha.py",
                             "pkg/probe/beta.py", "pkg/probe/table.json"]
    ran_alpha = exec_cache.deps_record(
        [f"imported {pkg / 'alpha.py'}", f"ran {pkg / 'alpha.py'}"], state, tmp_path)
    ran_beta = exec_cache.deps_record([f"ran {pkg / 'beta.py'}"], state, tmp_path)
    read_beta = exec_cache.deps_record(
        [f"imported {pkg / 'beta.py'}", f"read {pkg / 'beta.py'}"], state, tmp_path)
    no_import = exec_cache.deps_record([], state, tmp_path)
    assert ran_alpha["ran"] == {"pkg/probe/alpha.py": state["pkg/probe/alpha.py"]["code"]}
    assert no_import == {"version": exec_cache.DEPS_VERSION, "module": {}, "ran": {}, "read": {}}
    all_deps = (ran_alpha, ran_beta, read_beta, no_import)

    def reasons() -> list[list[str]]:
        now = exec_cache.package_state(tmp_path, ["pkg"])
        return [exec_cache.stale_reasons(d, now) for d in all_deps]

    assert reasons() == [[], [], [], []]
    alpha = pkg / "alpha.py"
    alpha.write_text(MODULE.replace("return x + 1", "return x + 2"))  # inside a function
    assert reasons() == [["the code of pkg/probe/alpha.py changed (the chapter ran it)"],
                         [], [], []]
    alpha.write_text(MODULE.replace('"""Helper."""', '"""Helper, edited."""'))  # docstring
    beta = pkg / "beta.py"
    beta.write_text(beta.read_text().replace('"""B."""', '"""B, edited."""'))
    assert reasons() == [[], [], ["the text of pkg/probe/beta.py changed (the chapter read it)"],
                         []]
    alpha.write_text(MODULE.replace("width = 4", "width = 5"))  # module-level
    changed = ["the module-level code of pkg/probe/alpha.py changed"]
    assert reasons() == [changed, changed, changed + ["the text of pkg/probe/beta.py changed "
                                                      "(the chapter read it)"], []]
    alpha.write_text(MODULE)
    (pkg / "table.json").write_text("[1, 3]\n")  # a data file is module-level
    assert reasons()[1] == ["the module-level code of pkg/probe/table.json changed"]
    (pkg / "table.json").unlink()
    assert reasons()[1] == ["pkg/probe/table.json was removed"]
    assert exec_cache.stale_reasons(None, state) == [
        "it was cached without a record of the package files it used"]


def test_unchanged_files_are_hashed_from_the_memo(tmp_path: Path) -> None:
    _package(tmp_path)
    memo = tmp_path / "memo.json"
    state = exec_cache.package_state(tmp_path, ["pkg"], memo=memo)
    assert json.loads(memo.read_text()) == state
    fake = {rel: {**h, "code": "from-the-memo"} for rel, h in state.items()}
    memo.write_text(json.dumps(fake))
    assert exec_cache.package_state(tmp_path, ["pkg"], memo=memo) == fake
    (tmp_path / "pkg" / "probe" / "beta.py").write_text("def b():\n    return 3\n")
    again = exec_cache.package_state(tmp_path, ["pkg"], memo=memo)
    assert again["pkg/probe/beta.py"]["code"] != "from-the-memo"  # the edited file: parsed
    assert again["pkg/probe/alpha.py"]["code"] == "from-the-memo"


_KERNEL = """
import inspect, json, sys, traceback
import probe
from probe import alpha, beta


class Snapshot:  # as torch.manual_seed does: keep the live stack, source lines and all
    def __mul__(self, other):
        traceback.format_stack()
        return 1.0


layer = alpha.Layer()
assert layer.forward(Snapshot()) == 2.0  # not a read of alpha.py
print(json.dumps({
    "forward": layer.forward(3.0),
    "doc": alpha.Layer.forward.__doc__,
    "helper_doc": alpha.helper.__doc__,
    "source": inspect.getsource(beta.b).splitlines()[0],
}))
try:
    alpha.Layer().forward(None)
except TypeError:  # its line number, without reading alpha's source (which is noted)
    tb = sys.exc_info()[2]
    while tb.tb_next:
        tb = tb.tb_next
    print(tb.tb_lineno)
"""


def test_kernel_hook_notes_the_files_run_imported_and_read(tmp_path: Path) -> None:
    """The start-up file the kernels run: alpha's functions ran, beta was imported and its
    text read (inspect.getsource) but none of its functions ran; a snapshot of the stack
    through alpha is not a read; the instrumented code keeps its docstrings, results and
    line numbers; a second start uses compiled code."""
    pkg = _package(tmp_path)
    hook = tmp_path / "hook.py"
    hook.write_text(exec_cache.KERNEL_HOOK)
    notes = tmp_path / "notes.txt"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), PYTHONDONTWRITEBYTECODE="1",
               **{exec_cache.ENV_NOTES: str(notes), exec_cache.ENV_WATCH: str(tmp_path / "pkg"),
                  exec_cache.ENV_CODE: str(tmp_path / "code")})
    script = f"exec(open({str(hook)!r}).read())\n" + textwrap.dedent(_KERNEL)
    for start in ("first", "second"):
        notes.unlink(missing_ok=True)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True).stdout.splitlines()
        got = json.loads(out[0])
        assert got == {"forward": 7.0, "doc": "Forward.", "helper_doc": "Helper.",
                       "source": "def b():"}, start
        line = MODULE.splitlines().index("        return x * SCALE + shift") + 1
        assert int(out[1]) == line, start  # the traceback points at the real line
        lines = sorted(notes.read_text().splitlines())
        real = {name: os.path.realpath(pkg / name) for name in ("__init__.py", "alpha.py",
                                                                  "beta.py")}
        assert lines == sorted([f"imported {real['__init__.py']}", f"imported {real['alpha.py']}",
                                f"imported {real['beta.py']}", f"ran {real['alpha.py']}",
                                f"read {real['beta.py']}"]), start
        assert len(list((tmp_path / "code").iterdir())) == 3, start


def test_the_last_cache_of_the_hash_named_design_is_adopted(tmp_path: Path) -> None:
    """The cache folder named by the package's hash, made for the package as it is, becomes
    the cache, with the newest record of each chapter; its records depend on the text of
    every file, so a docstring edit, which needs no execution from now on, still
    re-executes them once."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.cache.main import CacheBundleIn

    pkg = _package(tmp_path)
    root = tmp_path / "_build" / ".jupyter_cache"
    old = root / exec_cache.legacy_key(tmp_path, ["pkg"])
    store = get_cache(str(old))
    for source, seconds in (("1", 0.5), ("2", 1.5)):  # the chapter before and after an edit
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        store.cache_notebook_bundle(
            CacheBundleIn(nb, "page.md", data={"execution_seconds": seconds}),
            check_validity=False)
    store.db.dispose()
    other = root / "0123456789abcdef"  # made for another version of the package
    other.mkdir()
    state = exec_cache.package_state(tmp_path, ["pkg"])
    cache = root / exec_cache.CACHE_NAME
    assert exec_cache.adopt_legacy_cache(cache, tmp_path, ["pkg"], state)
    assert not old.exists() and other.is_dir() and exec_cache.cache_problem(cache) is None
    [record] = get_cache(str(cache)).list_cache_records()
    assert record.uri == "page.md" and record.data["execution_seconds"] == 1.5
    deps = record.data[exec_cache.DEPS_KEY]
    assert exec_cache.stale_reasons(deps, state) == []
    assert not exec_cache.adopt_legacy_cache(cache, tmp_path, ["pkg"], state)  # once
    beta = pkg / "beta.py"
    beta.write_text(beta.read_text().replace('"""B."""', '"""B, edited."""'))
    now = exec_cache.package_state(tmp_path, ["pkg"])
    assert exec_cache.stale_reasons(deps, now) == [
        "the text of pkg/probe/beta.py changed (cached before chapters recorded what they used)"]
    shutil.rmtree(cache)  # a cache of another package is not adopted
    assert not exec_cache.adopt_legacy_cache(cache, tmp_path, ["pkg"], now)


def test_a_cache_whose_records_cannot_be_read_is_moved_aside(tmp_path: Path, capsys) -> None:
    """A database that passes cache_problem's checks but whose records jupyter-cache cannot
    read (here: a table without its columns) is moved aside before the build, with one
    line on stderr, and every chapter is re-read."""
    import sqlite3
    from types import SimpleNamespace

    _package(tmp_path)
    cache = tmp_path / "_build" / ".jupyter_cache" / exec_cache.CACHE_NAME
    cache.mkdir(parents=True)
    with sqlite3.connect(cache / "global.db") as con:
        con.executescript("CREATE TABLE settings (pk); CREATE TABLE nbproject (pk);"
                          "CREATE TABLE nbcache (pk, hashkey)")
    con.close()
    assert exec_cache.cache_problem(cache) is None
    config = SimpleNamespace(exec_cache_watch=["pkg"], exec_cache_root="_build/.jupyter_cache")
    app = SimpleNamespace(confdir=str(tmp_path), srcdir=str(tmp_path),
                          outdir=str(tmp_path / "_build" / "html"))
    environ = dict(os.environ)
    try:
        exec_cache._on_config_inited(app, config)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is unusable (reading its records failed: " in err[0], err
    assert app._exec_cache_reset and app._exec_cache_stale == {}
    assert config.nb_execution_cache_path == str(cache)
    assert [p.name.startswith("notebooks.unusable-") for p in sorted(cache.parent.iterdir())] == [
        False, True]
    assert exec_cache.cache_problem(cache) is None and (cache / "global.db").is_file()


def test_chapters_found_stale_stay_pending_until_a_build_finishes(tmp_path: Path) -> None:
    """A build that removes a stale record and is stopped before it re-reads the chapter
    (killed, or a failing extension): the next build, which finds no stale record any
    more, still re-reads the chapter; after a finished build nothing is pending."""
    from types import SimpleNamespace

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.cache.main import CacheBundleIn

    _package(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("# Page\n")
    cache = tmp_path / "_build" / ".jupyter_cache" / exec_cache.CACHE_NAME
    store = get_cache(str(cache))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    stale = {exec_cache.DEPS_KEY: {"version": exec_cache.DEPS_VERSION, "module": {},
                                   "ran": {"pkg/probe/alpha.py": "older"}, "read": {}}}
    store.cache_notebook_bundle(CacheBundleIn(nb, str(page), data=stale), check_validity=False)
    store.db.dispose()
    env = SimpleNamespace(all_docs={"page": 0}, nb_metadata={},
                          path2doc=lambda uri: "page" if uri == str(page) else None)

    def build(finish: bool) -> list[str]:
        config = SimpleNamespace(exec_cache_watch=["pkg"], exec_cache_root="_build/.jupyter_cache")
        app = SimpleNamespace(confdir=str(tmp_path), srcdir=str(tmp_path),
                              outdir=str(tmp_path / "_build" / "html"))
        environ = dict(os.environ)
        try:
            exec_cache._on_config_inited(app, config)
        finally:
            os.environ.clear()
            os.environ.update(environ)
        outdated = exec_cache._on_env_get_outdated(app, env, set(), set(), set())
        if finish:
            exec_cache._on_build_finished(app, None)
        return outdated

    assert build(finish=False) == ["page"]  # stale: its record removed; then stopped
    assert get_cache(str(cache)).list_cache_records() == []
    assert build(finish=True) == ["page"]  # no record left to find stale: still re-read
    assert build(finish=True) == []
