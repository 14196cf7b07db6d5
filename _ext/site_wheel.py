"""The package's wheel, named by the commit it was built from, served by the hosted site.

A published notebook's outputs come from the package as it was when the site was built.
Installing ``selfattn@main`` in its first cell ran other code a month later. So
`make site` builds the package's wheel with a version that names the commit,
``0.1.0+g<12 hex digits>`` (``.dirty`` appended when ``code/`` or ``pyproject.toml``
differ from it), and serves it at the site's root; conf.py points every published
notebook's install cell at that file on the site's own address (_ext/hosting.py, so a
fork's notebooks install the fork's wheel from the fork's site).

Run by the Makefile (``python _ext/site_wheel.py OUTDIR``): the tree is not changed
(the version is written into a copy of ``pyproject.toml``), pip builds without network
(``--no-build-isolation``: setuptools from the venv), and the zip's timestamps are the
commit's (``SOURCE_DATE_EPOCH``), so one commit gives one wheel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "selfattn"
#: what conf.py reads: the wheel `make site` built (the path of the file)
ENV = "BOOK_WHEEL"
VERSION = re.compile(r"^(?P<base>\d+(?:\.\d+)*)\+g(?P<sha>[0-9a-f]{12})(?:\.dirty)?$")


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def base_version(root: Path = ROOT) -> str:
    """The version pyproject.toml states (``0.1.0``)."""
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def commit_version(base: str, sha: str, dirty: bool) -> str:
    """``0.1.0+g<12 hex digits of the commit>``, ``.dirty`` when the package's files differ
    from that commit (a PEP 440 local version: pip sorts it after ``0.1.0``)."""
    if not re.fullmatch(r"[0-9a-f]{12,40}", sha):
        raise ValueError(f"sha must be a commit's hex digits, got {sha!r}")
    return f"{base}+g{sha[:12]}" + (".dirty" if dirty else "")


def package_version(root: Path = ROOT) -> str:
    """The version of a wheel built from ``root`` now."""
    sha = _git("rev-parse", "HEAD", root=root)
    dirty = bool(_git("status", "--porcelain", "--", "code", "pyproject.toml", root=root))
    return commit_version(base_version(root), sha, dirty)


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """Build the wheel into ``out`` (its other selfattn wheels removed); return its path."""
    version = package_version(root)
    out = out.resolve()  # pip runs in a temporary folder
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{NAME}-*.whl"):
        old.unlink()
    env = dict(os.environ, SOURCE_DATE_EPOCH=_git("log", "-1", "--format=%ct", root=root),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(root / "code", src / "code",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
        text, n = re.subn(r'(?m)^version = "[^"]+"$', f'version = "{version}"', text, count=1)
        if n != 1:
            raise RuntimeError("pyproject.toml has no `version = \"...\"` line")
        (src / "pyproject.toml").write_text(text, encoding="utf-8")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "--wheel-dir", str(out), str(src)],
                       check=True, env=env, cwd=tmp)
    (wheel,) = out.glob(f"{NAME}-*.whl")
    if wheel.name.split("-")[1] != version:
        raise RuntimeError(f"built {wheel.name}, expected version {version}")
    return wheel


if __name__ == "__main__":
    print(build_wheel(Path(sys.argv[1])))
