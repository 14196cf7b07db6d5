"""Never serve stale notebook outputs after the package changes.

MyST-NB executes chapters through jupyter-cache, which keys a notebook on its
cell sources only. Edit ``code/selfattn/`` and an unchanged chapter would keep
its old outputs. This extension hashes every watched source file and

* points ``nb_execution_cache_path`` at a cache folder named by that hash, so
  a package change starts from an empty cache, and
* stores the hash in an ``env``-rebuild config value, so Sphinx re-reads every
  document when the hash changes.

A chapter edit alone leaves the hash alone: only that chapter re-executes.
The cache's database is created before Sphinx forks its readers (``-j``).

Before the build uses the cache, :func:`cache_problem` checks it: a database
that SQLite cannot read (a full disk or a killed job leaves it truncated), or
an entry whose executed notebook is missing. An unusable cache is moved aside
(``<key>.unusable-<time>``, kept for inspection; ``make clean-cache`` removes
all caches), one line on stderr says so, and the chapters are re-executed.

Under ``sphinx-build -j`` several readers execute chapters at once and each
stores its result. jupyter-cache stores a notebook by adding its record, then
writing the notebook file, then deleting the oldest records beyond its limit,
which it finds with two queries; a record another reader added between those
two queries is taken for an old one and deleted, its file not yet written:
``KeyError: 'Notebook file does not exist for cache record PK: 2'`` (seen once
in CI, a two-chapter book built with ``-j 2``). :func:`serialize_cache_writes`
makes each store hold an exclusive lock on ``<cache>/store.lock`` (flock), so
stores happen one at a time; executions still run in parallel.

Configuration (in ``conf.py``)::

    exec_cache_watch = ["code/selfattn"]      # folders or files, relative to conf.py
    exec_cache_root = "_build/.jupyter_cache"  # where the hashed caches live
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config


def source_hash(root: Path, watched: list[str]) -> str:
    """SHA-256 (first 16 hex digits) over the paths and bytes of every watched file."""
    digest = hashlib.sha256()
    for entry in watched:
        path = (root / entry).resolve()
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix in {".pyc", ".pyo"}:
                continue
            digest.update(str(file.relative_to(root)).encode())
            digest.update(b"\0")
            digest.update(file.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


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
    return True


def _on_config_inited(app: Sphinx, config: Config) -> None:
    root = Path(app.confdir)
    key = source_hash(root, list(config.exec_cache_watch))
    config.exec_cache_key = key
    cache = root / config.exec_cache_root / key
    app._exec_cache_reset = _move_aside_if_unusable(cache, root)
    config.nb_execution_cache_path = str(cache)
    _create_database(cache)


def _create_database(cache: Path) -> None:
    """Create the cache's database now, in the main process.

    With ``sphinx-build -j N`` the chapters are read in N forked workers. Given a
    new cache folder, each would create the database's tables at the same time,
    and all but one fail ("table settings already exists").
    """
    from jupyter_cache import get_cache

    get_cache(str(cache)).db.dispose()  # the engine is not shared with the workers


def _on_env_get_outdated(app: Sphinx, env, added, changed, removed) -> list[str]:
    """After a reset, re-read (and so re-execute) every notebook the build knows of."""
    if not getattr(app, "_exec_cache_reset", False):
        return []
    metadata = getattr(env, "nb_metadata", {})
    return sorted(d for d, data in metadata.items() if "exec_data" in data and d in env.all_docs)


STORE_LOCK = "store.lock"


def serialize_cache_writes() -> None:
    """Make jupyter-cache store one notebook at a time across processes (see above).

    Wraps ``JupyterCacheBase.cache_notebook_bundle`` (record, file, truncation)
    in an exclusive ``flock`` on ``<cache>/store.lock``; idempotent.
    """
    from jupyter_cache.cache.main import JupyterCacheBase

    store = JupyterCacheBase.cache_notebook_bundle
    if getattr(store, "_selfattn_locked", False):
        return

    @functools.wraps(store)
    def locked_store(self, *args: object, **kwargs: object) -> object:
        with open(self.path / STORE_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            return store(self, *args, **kwargs)

    locked_store._selfattn_locked = True  # type: ignore[attr-defined]
    JupyterCacheBase.cache_notebook_bundle = locked_store


def setup(app: Sphinx) -> dict:
    serialize_cache_writes()
    app.add_config_value("exec_cache_watch", [], "env")
    app.add_config_value("exec_cache_root", "_build/.jupyter_cache", "env")
    # Changing this value makes Sphinx re-read (and so re-execute) every document.
    app.add_config_value("exec_cache_key", "", "env")
    app.connect("config-inited", _on_config_inited, priority=400)
    app.connect("env-get-outdated", _on_env_get_outdated)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
