"""Never serve stale notebook outputs after the package changes; re-execute only what can change.

MyST-NB executes chapters through jupyter-cache, which keys a notebook on its
cell sources only. Edit ``code/selfattn/`` and an unchanged chapter would keep
its old outputs. This extension keeps one cache and stores with each cached
chapter what it depended on, then re-executes exactly the chapters whose
dependencies changed.

**What a chapter depends on** is recorded while its kernel runs. A start-up
file in the kernels' IPython directory (``_build/.ipython``, see
``chapter_execution``) installs an import hook for the watched files: each
watched module is compiled with one call added at the top of every function
body, which notes the file the first time any of its functions runs (the
kernel writes one line to a file). The cost is one call per package function
call, ~0.1-0.2 us: CPU time of 100 training steps of a small TinyLM, 4 runs
each alternating, 3.42 s without the hook and 3.10 s with it (noise); with
``sys.settrace`` (Python 3.11 then runs every instruction unspecialised) the
same loop took 1.4-1.7x and a plain Python loop 3-7x as long. The kernel also
notes each watched module it imports, and each watched file whose source text
it reads through ``linecache`` (``inspect.getsource``, a traceback with source
lines). When the executed chapter is stored, its record in the cache gets
``exec_deps``:

* ``module``: if the chapter imported any watched module, the *module-level
  code* of every watched file: the file's syntax tree without docstrings and
  with every function body left out, so constants, defaults, class
  attributes, decorators and signatures count (other files: their bytes);
* ``ran``: for each file whose functions ran, its *code*: the syntax tree
  without docstrings (comments and blank lines are not in it);
* ``read``: for each file whose text the chapter read, its bytes.

**Before each build** (``config-inited``, in the main process) every record is
checked against the files as they are now. A record whose dependency changed,
or that has no ``exec_deps``, is removed, so the chapter misses the cache, and
``env-get-outdated`` makes Sphinx re-read (and so re-execute) it (until a
build finishes, ``_build/.exec_deps/pending.json`` keeps these chapters, so
a build stopped midway does not lose them with their records). The build
prints one line for each chapter it re-executes and the file that made it.
So an edit inside a function re-executes the chapters that ran a function of
that file; a docstring or comment edit re-executes none; an edit to
module-level code re-executes every chapter that imports the package. Each
chapter keeps one record (storing a new one removes the chapter's older ones),
so no older record can come back when a cell edit is undone. Limits: a
chapter that shows a docstring (``help``, ``__doc__``) is not re-executed
when only the docstring changes; the kernels must import the watched files
themselves (as the editable install does), not a copy.

A chapter edit alone leaves the package alone: only that chapter re-executes.
The cache's database is created before Sphinx forks its readers (``-j``).

The earlier design named the cache folder by a hash of every watched file.
If no cache exists yet but such a folder matches the files as they are, it
becomes the cache (:func:`adopt_legacy_cache`); its records depend on the
text of every file until they are executed again.

Before the build uses the cache, :func:`cache_problem` checks it: a database
that SQLite cannot read (a full disk or a killed job leaves it truncated), or
an entry whose executed notebook is missing. An unusable cache is moved aside
(``<name>.unusable-<time>``, kept for inspection; ``make clean-cache`` removes
all caches), one line on stderr says so, and the chapters are re-executed.
So are they when the cache folder is new (deleted by hand).

Under ``sphinx-build -j`` several readers execute chapters at once and each
stores its result. jupyter-cache stores a notebook by adding its record, then
writing the notebook file, then deleting the oldest records beyond its limit,
which it finds with two queries; a record another reader added between those
two queries is taken for an old one and deleted, its file not yet written:
``KeyError: 'Notebook file does not exist for cache record PK: 2'`` (seen once
in CI, a two-chapter book built with ``-j 2``). :func:`serialize_cache_writes`
makes each store hold an exclusive lock on ``<cache>/store.lock`` (flock), so
stores happen one at a time; executions still run in parallel. The same
wrapper attaches ``exec_deps`` and removes the chapter's older records.

Configuration (in ``conf.py``)::

    exec_cache_watch = ["code/selfattn"]      # folders or files, relative to conf.py
    exec_cache_root = "_build/.jupyter_cache"  # the cache is its folder CACHE_NAME

Working files (the kernels' notes, the instrumented modules' compiled code, a
memo of the files' hashes) are kept in ``_build/.exec_deps``.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import hashlib
import json
import os
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging as sphinx_logging

logger = sphinx_logging.getLogger(__name__)

CACHE_NAME = "notebooks"  # the one cache folder under exec_cache_root
WORK_DIR = ".exec_deps"  # under the build folder
DEPS_KEY = "exec_deps"  # in a cache record's data
DEPS_VERSION = 1
ENV_NOTES = "EXEC_CACHE_NOTES"  # file the kernel appends its notes to
ENV_WATCH = "EXEC_CACHE_WATCH"  # watched folders/files (real paths), os.pathsep-separated
ENV_CODE = "EXEC_CACHE_CODE"  # folder for the instrumented modules' compiled code
STARTUP_FILE = "00-exec-cache-deps.py"
STORE_LOCK = "store.lock"

# Set at config-inited in the main process; forked readers inherit it.
_STATE: dict[str, Any] = {}


# ---------------------------------------------------------------- what a file's code is
def _sha(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _drop_docstrings(tree: ast.AST) -> None:
    """Remove the docstring of the module and of every class and function, in place."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                del body[0]


def _drop_function_bodies(tree: ast.AST) -> None:
    """Empty every function body, in place: what is left runs when the module is imported."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.body = []


def file_hashes(path: Path) -> dict[str, str]:
    """``text`` (the bytes), ``code`` (docstrings and comments left out) and ``module``
    (also every function body left out) hashes of one watched file.

    A file that is not Python, or does not parse, has its bytes for all three.
    """
    raw = path.read_bytes()
    text = _sha(raw)
    if path.suffix != ".py":
        return {"text": text, "code": text, "module": text}
    try:
        tree = ast.parse(raw, str(path))
    except (SyntaxError, ValueError):
        return {"text": text, "code": text, "module": text}
    _drop_docstrings(tree)
    code = _sha(ast.dump(tree))
    _drop_function_bodies(tree)
    return {"text": text, "code": code, "module": _sha(ast.dump(tree))}


def watched_files(root: Path, watched: list[str]) -> list[Path]:
    """Every watched file (folders searched recursively), without compiled Python."""
    files: list[Path] = []
    for entry in watched:
        path = (root / entry).resolve()
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        files += [f for f in found if "__pycache__" not in f.parts
                  and f.suffix not in {".pyc", ".pyo"} and f.is_file()]
    return files


def package_state(root: Path, watched: list[str], memo: Path | None = None) -> dict[str, dict]:
    """``{path relative to root: file_hashes(...)}`` for every watched file.

    ``memo``: a JSON file of earlier results, keyed by the bytes' hash, so an
    unchanged file is not parsed again (all files: ~0.9 s; from the memo: ~0.02 s).
    """
    known: dict[str, dict] = {}
    if memo is not None:
        try:
            known = json.loads(memo.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
    state: dict[str, dict] = {}
    for file in watched_files(root, watched):
        rel = file.relative_to(root).as_posix()
        raw = file.read_bytes()
        entry = known.get(rel)
        if not (isinstance(entry, dict) and entry.get("text") == _sha(raw)):
            entry = file_hashes(file)
        state[rel] = entry
    if memo is not None and state != known:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, memo)
    return state


# ---------------------------------------------------------------- what a chapter used
def deps_record(notes: list[str], state: dict[str, dict], root: Path) -> dict[str, Any]:
    """The ``exec_deps`` of one execution, from the kernel's notes (lines ``kind path``)."""
    used: dict[str, set[str]] = {"imported": set(), "ran": set(), "read": set()}
    real_root = Path(os.path.realpath(root))
    by_real = {os.path.realpath(root / rel): rel for rel in state}
    for line in notes:
        kind, _, path = line.strip().partition(" ")
        if kind not in used or not path:
            continue
        rel = by_real.get(os.path.realpath(path))
        if rel is None:  # a watched file that appeared during the build
            rel = os.path.relpath(os.path.realpath(path), real_root)
        used[kind].add(rel)
    missing = {"text": "unknown", "code": "unknown", "module": "unknown"}
    imported = bool(used["imported"] or used["ran"])
    return {
        "version": DEPS_VERSION,
        "module": {rel: h["module"] for rel, h in state.items()} if imported else {},
        "ran": {rel: state.get(rel, missing)["code"] for rel in sorted(used["ran"])},
        "read": {rel: state.get(rel, missing)["text"] for rel in sorted(used["read"])},
    }


def stale_reasons(deps: Any, state: dict[str, dict]) -> list[str]:
    """Why an execution with dependencies ``deps`` may be out of date now; [] if it is not."""
    if not isinstance(deps, dict) or deps.get("version") != DEPS_VERSION:
        return ["it was cached without a record of the package files it used"]
    reasons: dict[str, str] = {}  # one reason per file, the first that applies
    module = deps.get("module") or {}
    if module:
        for rel in sorted(set(module) | set(state)):
            if rel not in state:
                reasons[rel] = f"{rel} was removed"
            elif rel not in module:
                reasons[rel] = f"{rel} was added"
            elif state[rel]["module"] != module[rel]:
                reasons[rel] = f"the module-level code of {rel} changed"
    for rel, code in sorted((deps.get("ran") or {}).items()):
        if rel not in state:
            reasons.setdefault(rel, f"{rel} was removed")
        elif state[rel]["code"] != code:
            reasons.setdefault(rel, f"the code of {rel} changed (the chapter ran it)")
    why = ("cached before chapters recorded what they used" if deps.get("adopted")
           else "the chapter read it")
    for rel, text in sorted((deps.get("read") or {}).items()):
        if rel not in state:
            reasons.setdefault(rel, f"{rel} was removed")
        elif state[rel]["text"] != text:
            reasons.setdefault(rel, f"the text of {rel} changed ({why})")
    return list(reasons.values())


# ---------------------------------------------------------------- the kernels' hook
# Written to <IPYTHONDIR>/profile_default/startup/ and run by every kernel that starts.
KERNEL_HOOK = '''\
"""Written by _ext/exec_cache.py: note which watched files this kernel imports, runs and reads."""


def _exec_cache_hook():
    import ast
    import builtins
    import hashlib
    import importlib.machinery
    import importlib.util
    import linecache
    import marshal
    import os
    import sys
    import traceback

    notes_file = os.environ.get("EXEC_CACHE_NOTES")
    roots = [r for r in os.environ.get("EXEC_CACHE_WATCH", "").split(os.pathsep) if r]
    code_dir = os.environ.get("EXEC_CACHE_CODE")
    if not notes_file or not roots:
        return
    noted = set()

    def note(kind, path):
        if (kind, path) not in noted:
            noted.add((kind, path))
            with open(notes_file, "a", encoding="utf-8") as out:
                out.write(f"{kind} {path}\\n")

    def watched(path):
        real = os.path.realpath(path)
        return real if any(real == r or real.startswith(r + os.sep) for r in roots) else None

    seen = set()

    def ran(path):  # called first thing in every function of a watched module
        if path not in seen:
            seen.add(path)
            note("ran", path)

    builtins.__exec_cache_ran__ = ran

    class AddNote(ast.NodeTransformer):
        def __init__(self, path):
            self.path = path

        def visit_FunctionDef(self, node):
            self.generic_visit(node)
            body = node.body
            first = body[0]
            doc = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                   and isinstance(first.value.value, str))
            at = 1 if doc else 0  # after the docstring, which stays the docstring
            where = body[at] if at < len(body) else first  # the call gets this line
            call = ast.Expr(ast.Call(ast.Name("__exec_cache_ran__", ast.Load()),
                                     [ast.Constant(self.path)], []))
            for part in ast.walk(call):
                part.lineno, part.col_offset = where.lineno, where.col_offset
                part.end_lineno, part.end_col_offset = where.lineno, where.col_offset
            body.insert(at, call)
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

    class Loader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname):
            path = self.get_filename(fullname)
            real = os.path.realpath(path)
            note("imported", real)
            source = self.get_data(path)
            key = hashlib.sha256(importlib.util.MAGIC_NUMBER + b"exec_cache-1\\0"
                                 + path.encode() + b"\\0" + source).hexdigest()
            cached = os.path.join(code_dir, key) if code_dir else None
            if cached and os.path.isfile(cached):
                try:
                    with open(cached, "rb") as f:
                        return marshal.load(f)
                except (OSError, EOFError, ValueError, TypeError):
                    pass
            tree = AddNote(real).visit(ast.parse(source, path))
            code = compile(tree, path, "exec", dont_inherit=True)
            if cached:
                try:
                    os.makedirs(code_dir, exist_ok=True)
                    tmp = f"{cached}.{os.getpid()}"
                    with open(tmp, "wb") as f:
                        marshal.dump(code, f)
                    os.replace(tmp, cached)
                except OSError:
                    pass
            return code

    class Finder:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is cls or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            if (type(spec.loader) is importlib.machinery.SourceFileLoader
                    and spec.origin and watched(spec.origin)):
                spec.loader = Loader(spec.loader.name, spec.loader.path)
            return spec

    sys.meta_path.insert(0, Finder)

    getlines = linecache.getlines
    # Not a read: a snapshot of the live stack (torch.manual_seed keeps one, with source
    # lines, for a lazy CUDA seed); shown, it would go to stderr, which fails the build.
    snapshots = {traceback.extract_stack.__code__, traceback.format_stack.__code__,
                 traceback.print_stack.__code__}

    def getlines_noted(filename, module_globals=None):
        if filename and not filename.startswith("<"):
            real = watched(filename)
            if real and ("read", real) not in noted:
                frame = sys._getframe(1)
                while frame is not None and frame.f_code not in snapshots:
                    frame = frame.f_back
                if frame is None:
                    note("read", real)
        return getlines(filename, module_globals)

    linecache.getlines = getlines_noted


_exec_cache_hook()
del _exec_cache_hook
'''


def _write_kernel_hook(app: Sphinx) -> None:
    """Put the hook into the IPython directory the kernels use (``chapter_execution`` sets
    it; without that extension, ``_build/.ipython``)."""
    build = Path(app.outdir).parent
    ipython = os.environ.get("IPYTHONDIR")
    if not ipython or not Path(ipython).resolve().is_relative_to(build.resolve()):
        ipython = str(build / ".ipython")
        os.environ["IPYTHONDIR"] = ipython
    startup = Path(ipython) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    hook = startup / STARTUP_FILE
    if not hook.is_file() or hook.read_text(encoding="utf-8") != KERNEL_HOOK:
        hook.write_text(KERNEL_HOOK, encoding="utf-8")


def _notes_file() -> Path | None:
    work = _STATE.get("work")
    return None if work is None else work / f"notes-{os.getpid()}.txt"


def _on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    """A fresh notes file for the kernel that may execute this document (one per reader)."""
    notes = _notes_file()
    if notes is None:
        return
    notes.unlink(missing_ok=True)
    os.environ[ENV_NOTES] = str(notes)


# ---------------------------------------------------------------- the cache
def cache_problem(cache: Path) -> str | None:
    """Why the jupyter-cache folder ``cache`` cannot be used, or None if it can.

    Reads the SQLite database read-only: ``PRAGMA quick_check`` (the pages are
    readable and consistent), its tables, and the table of cached notebooks,
    whose executed copies must exist. A folder with no database file yet is
    fine: jupyter-cache creates one.
    """
    db = cache / "global.db"
    if not db.exists():
        return None
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            check = con.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                return f"SQLite quick_check: {check[0] if check else 'no answer'}"
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
            if not {"nbcache", "nbproject", "settings"} <= tables:
                # jupyter-cache creates its tables only with a new database file
                return f"tables missing, found {sorted(tables) or 'none'}"
            keys = [row[0] for row in con.execute("SELECT hashkey FROM nbcache")]
    except sqlite3.Error as exc:
        return str(exc)
    missing = [k for k in keys if not (cache / "executed" / k / "base.ipynb").is_file()]
    if missing:
        return f"{len(missing)} cached notebook(s) missing from {cache / 'executed'}"
    return None


def _move_aside_if_unusable(cache: Path, root: Path) -> bool:
    """Move an unusable cache folder aside and say so in one line; True if it was moved."""
    problem = cache_problem(cache)
    if problem is None:
        return False
    _move_aside(cache, root, problem)
    return True


def _move_aside(cache: Path, root: Path, problem: str) -> None:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = cache.with_name(f"{cache.name}.unusable-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = cache.with_name(f"{cache.name}.unusable-{stamp}-{n}")
    cache.rename(aside)
    print(
        f"exec_cache: the execution cache {cache.relative_to(root)} is unusable ({problem}); "
        f"moved it to {aside.name} and re-executing the chapters.",
        file=sys.stderr, flush=True,
    )


def remove_stale_records(cache: Path, state: dict[str, dict]) -> dict[str, list[str]]:
    """Remove every record of ``cache`` whose dependencies changed: ``{uri: reasons}``."""
    from jupyter_cache import get_cache

    store = get_cache(str(cache))
    stale: dict[str, list[str]] = {}
    try:
        for record in store.list_cache_records():
            reasons = stale_reasons((record.data or {}).get(DEPS_KEY), state)
            if reasons:
                stale.setdefault(record.uri, reasons)
                store.remove_cache(record.pk)
    finally:
        store.db.dispose()  # the engine is not shared with the forked readers
    return stale


def legacy_key(root: Path, watched: list[str]) -> str:
    """The name of the cache folder before dependencies were recorded: SHA-256 (first 16
    hex digits) over the paths and bytes of every watched file."""
    digest = hashlib.sha256()
    for file in watched_files(root, watched):
        digest.update(str(file.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def adopt_legacy_cache(cache: Path, root: Path, watched: list[str],
                       state: dict[str, dict]) -> bool:
    """Make the last cache of the earlier design (a folder named by the hash of the
    package, made for the package as it is now) the cache; True if there was one.

    Its records do not say what their chapters used, so each is recorded as depending
    on the text of every watched file: the next edit to the package, of any kind,
    re-executes them (as before), and from then on they record their own. Of several
    records of one chapter (older cells) only the newest is kept.
    """
    old = cache.parent / legacy_key(root, watched)
    if cache.exists() or not old.is_dir() or cache_problem(old) is not None:
        return False
    every = {"version": DEPS_VERSION, "module": {r: h["module"] for r, h in state.items()},
             "ran": {r: h["code"] for r, h in state.items()},
             "read": {r: h["text"] for r, h in state.items()}, "adopted": True}
    old.rename(cache)
    from jupyter_cache import get_cache

    store = get_cache(str(cache))
    try:  # one record per chapter, as stores keep it: the newest
        newest: dict[str, Any] = {}
        for record in sorted(store.list_cache_records(), key=lambda r: (r.created, r.pk)):
            if record.uri in newest:
                store.remove_cache(newest[record.uri].pk)
            newest[record.uri] = record
    finally:
        store.db.dispose()
    with closing(sqlite3.connect(cache / "global.db")) as con:
        for pk, data in con.execute("SELECT pk, data FROM nbcache").fetchall():
            record = json.loads(data) if data else {}
            record[DEPS_KEY] = every
            con.execute("UPDATE nbcache SET data = ? WHERE pk = ?", (json.dumps(record), pk))
        con.commit()
    logger.info(f"exec_cache: using the execution cache {old.name} as {cache.name}; its chapters "
                "re-execute at the next edit of the package")
    return True


def _on_config_inited(app: Sphinx, config: Config) -> None:
    root = Path(app.confdir)
    work = Path(app.outdir).parent / WORK_DIR
    _STATE["root"], _STATE["work"] = root, work
    watched = list(config.exec_cache_watch)
    state = package_state(root, watched, memo=work / "hashes.json")
    _STATE["package"] = state
    os.environ[ENV_WATCH] = os.pathsep.join(
        os.path.realpath(root / w) for w in watched)
    os.environ[ENV_CODE] = str(work / "code")
    cache = root / config.exec_cache_root / CACHE_NAME
    adopt_legacy_cache(cache, root, watched, state)
    moved = _move_aside_if_unusable(cache, root)
    app._exec_cache_reset = moved or not (cache / "global.db").exists()
    config.nb_execution_cache_path = str(cache)
    _create_database(cache)
    try:
        stale = remove_stale_records(cache, state)
    except (RuntimeError, KeyError, sqlite3.Error) as exc:  # damage cache_problem cannot see
        _move_aside(cache, root, f"reading its records failed: {exc}")
        app._exec_cache_reset = True
        _create_database(cache)
        stale = {}
    app._exec_cache_stale = stale
    app._exec_cache_pending = _remember_pending(work, set(stale), app._exec_cache_reset)
    srcdir = Path(app.srcdir)
    for uri, reasons in sorted(stale.items()):
        source = Path(uri)
        if source.is_file() and source.is_relative_to(srcdir):  # still a page of this book
            docname = source.relative_to(srcdir).with_suffix("").as_posix()
            logger.info(f"exec_cache: re-executing {docname}: {'; '.join(reasons)}")


PENDING_FILE = "pending.json"
ALL = "*"  # pending: every notebook


def _remember_pending(work: Path, uris: set[str], everything: bool) -> set[str]:
    """The chapters to re-read in this build: those found stale now, and those found stale
    (or a reset) by an earlier build that did not finish, whose records are gone already.
    Kept in ``pending.json`` until a build finishes (:func:`_on_build_finished`)."""
    path = work / PENDING_FILE
    try:
        pending = set(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pending = set()
    pending |= uris | ({ALL} if everything else set())
    if pending:
        work.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(sorted(pending)), encoding="utf-8")
    return pending


def _on_build_finished(app: Sphinx, exception: BaseException | None) -> None:
    """The environment with the re-read chapters is saved: nothing is pending any more."""
    if exception is None and "work" in _STATE:
        (_STATE["work"] / PENDING_FILE).unlink(missing_ok=True)


def _create_database(cache: Path) -> None:
    """Create the cache's database now, in the main process.

    With ``sphinx-build -j N`` the chapters are read in N forked workers. Given a
    new cache folder, each would create the database's tables at the same time,
    and all but one fail ("table settings already exists").
    """
    from jupyter_cache import get_cache

    get_cache(str(cache)).db.dispose()  # the engine is not shared with the workers


def _on_env_get_outdated(app: Sphinx, env: Any, added: set, changed: set,
                         removed: set) -> list[str]:
    """Re-read (and so re-execute) each chapter whose record was stale; after a reset,
    every notebook the build knows of."""
    outdated = set()
    pending = getattr(app, "_exec_cache_pending", set())
    for uri in pending - {ALL}:
        docname = env.path2doc(uri)
        if docname is not None and docname in env.all_docs:
            outdated.add(docname)
    if ALL in pending or getattr(app, "_exec_cache_reset", False):
        metadata = getattr(env, "nb_metadata", {})
        outdated |= {d for d, data in metadata.items() if "exec_data" in data and d in env.all_docs}
    return sorted(outdated)


def _attach_deps(bundle: Any) -> None:
    """Add the kernel's notes, as ``exec_deps``, to the data of the bundle being stored."""
    notes = os.environ.get(ENV_NOTES)
    state, root = _STATE.get("package"), _STATE.get("root")
    if not notes or state is None or root is None or notes != str(_notes_file()):
        return
    try:
        lines = Path(notes).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []  # the kernel imported nothing watched
    bundle.data[DEPS_KEY] = deps_record(lines, state, root)  # the bundle is frozen, its dict not
    Path(notes).unlink(missing_ok=True)


def serialize_cache_writes() -> None:
    """Make jupyter-cache store one notebook at a time across processes (see above).

    Wraps ``JupyterCacheBase.cache_notebook_bundle`` (record, file, truncation)
    in an exclusive ``flock`` on ``<cache>/store.lock``; idempotent. Inside the
    lock, a bundle stored during a build gets its ``exec_deps``, and the other
    records of the same chapter (uri) are removed.
    """
    from jupyter_cache.cache.main import JupyterCacheBase

    store = JupyterCacheBase.cache_notebook_bundle
    if getattr(store, "_selfattn_locked", False):
        return

    @functools.wraps(store)
    def locked_store(self: Any, bundle: Any, *args: object, **kwargs: object) -> object:
        with open(self.path / STORE_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            _attach_deps(bundle)
            record = store(self, bundle, *args, **kwargs)
            if DEPS_KEY in (bundle.data or {}):
                for old in self.list_cache_records():
                    if old.uri == record.uri and old.pk != record.pk:
                        self.remove_cache(old.pk)
            return record

    locked_store._selfattn_locked = True  # type: ignore[attr-defined]
    JupyterCacheBase.cache_notebook_bundle = locked_store


def setup(app: Sphinx) -> dict:
    serialize_cache_writes()
    app.add_config_value("exec_cache_watch", [], "env")
    app.add_config_value("exec_cache_root", "_build/.jupyter_cache", "env")
    app.connect("config-inited", _on_config_inited, priority=400)
    app.connect("builder-inited", _write_kernel_hook)
    app.connect("source-read", _on_source_read)
    app.connect("env-get-outdated", _on_env_get_outdated)
    app.connect("build-finished", _on_build_finished)
    return {"version": "2.0", "parallel_read_safe": True, "parallel_write_safe": True}
