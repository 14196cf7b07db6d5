"""Never serve stale notebook outputs after the package changes.

MyST-NB executes chapters through jupyter-cache, which keys a notebook on its
cell sources only. Edit ``code/selfattn/`` and an unchanged chapter would keep
its old outputs. This extension hashes every watched source file and

* points ``nb_execution_cache_path`` at a cache folder named by that hash, so
  a package change starts from an empty cache, and
* stores the hash in an ``env``-rebuild config value, so Sphinx re-reads every
  document when the hash changes.

A chapter edit alone leaves the hash alone: only that chapter re-executes.

Configuration (in ``conf.py``)::

    exec_cache_watch = ["code/selfattn"]      # folders or files, relative to conf.py
    exec_cache_root = "_build/.jupyter_cache"  # where the hashed caches live
"""

from __future__ import annotations

import hashlib
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


def _on_config_inited(app: Sphinx, config: Config) -> None:
    root = Path(app.confdir)
    key = source_hash(root, list(config.exec_cache_watch))
    config.exec_cache_key = key
    config.nb_execution_cache_path = str(root / config.exec_cache_root / key)


def setup(app: Sphinx) -> dict:
    app.add_config_value("exec_cache_watch", [], "env")
    app.add_config_value("exec_cache_root", "_build/.jupyter_cache", "env")
    # Changing this value makes Sphinx re-read (and so re-execute) every document.
    app.add_config_value("exec_cache_key", "", "env")
    app.connect("config-inited", _on_config_inited, priority=400)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
