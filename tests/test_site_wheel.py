"""Published notebooks install the package they came from (issue 35).

`make site` builds the package's wheel with a version naming the commit
(``0.1.0+g<sha>``, _ext/site_wheel.py) and serves it at the site's root; every published
notebook's install cell installs exactly that file from the site's own address. Checked
here: the version's form, that each install line names a file the built site holds and
that file's version is this commit's, and that a fresh venv installs it with no network
but the built site (served on 127.0.0.1) and runs a notebook with it. Published
notebooks also drop the build's short tracebacks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from sitetools import CHAPTERS, HOSTING, HTML, ROOT, require_built_site, serve

sys.path.insert(0, str(ROOT / "_ext"))
from publish_notebooks import SETUP_MARK, publish  # noqa: E402
from site_wheel import VERSION, commit_version, package_version  # noqa: E402


def test_the_wheel_version_names_the_commit() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert commit_version("0.1.0", sha, False) == "0.1.0+g0123456789ab"
    assert commit_version("0.1.0", sha, True) == "0.1.0+g0123456789ab.dirty"
    with pytest.raises(ValueError, match="sha"):
        commit_version("0.1.0", "main", False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    version = package_version()
    m = VERSION.match(version)
    assert m and head.startswith(m["sha"]), (version, head)


def test_published_notebooks_drop_the_short_tracebacks() -> None:
    """The pages print one-line errors (``%xmode Minimal`` in each chapter's hidden first
    cell); a reader running the notebook gets whole tracebacks, with line numbers."""
    cell = {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {},
            "outputs": [], "source": 'import torch\nget_ipython().run_line_magic("xmode", '
                                     '"Minimal")  # short errors\nx = torch.ones(2)'}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = publish(nb, {}, install_spec="selfattn")
    code = [c["source"] for c in out["cells"] if c["cell_type"] == "code"
            and c["id"] != SETUP_MARK]
    assert code == ["import torch\nx = torch.ones(2)"], code


# --- the built site (`make site`) ----------------------------------------------------

def _published(chapter: Path) -> dict:
    return json.loads((HTML / "_sources" / "chapters" / f"{chapter.stem}.ipynb")
                      .read_text(encoding="utf-8"))


def install_line(notebook: dict) -> str:
    setup = next(c for c in notebook["cells"] if c.get("id") == SETUP_MARK)
    text = "".join(setup["source"])
    return next(ln for ln in text.split("\n") if ln.startswith("%pip install"))


def install_url(notebook: dict) -> str:
    """The URL of ``selfattn @ URL`` in a notebook's install line."""
    spec = next(w for w in shlex.split(install_line(notebook)) if w.startswith("selfattn"))
    name, _, url = spec.partition(" @ ")
    assert name == "selfattn" and url, f"not a direct reference: {spec!r}"
    return url


def site_wheel() -> Path:
    """The wheel the built site serves; fails unless the site was built by `make site`."""
    require_built_site()
    wheels = sorted(HTML.glob("selfattn-*.whl"))
    assert len(wheels) == 1, f"the site holds {wheels}: build it with `make site`"
    return wheels[0]


def wheel_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return re.search(r"^Version: (.+)$", text, re.M).group(1).strip()


@pytest.mark.slow
@pytest.mark.html
def test_every_install_line_names_the_sites_wheel_of_this_commit() -> None:
    wheel = site_wheel()
    version = wheel_version(wheel)
    assert version == package_version(), (version, package_version())
    assert wheel.name.startswith(f"selfattn-{version}-"), wheel.name
    site = HOSTING.site_url
    for chapter in CHAPTERS:
        url = install_url(_published(chapter))
        assert url.startswith(site), f"{chapter.stem}: installs {url}, not from {site}"
        target = HTML / unquote(urlsplit(url).path).removeprefix(urlsplit(site).path)
        assert target == wheel, f"{chapter.stem}: installs {url}, the site holds {wheel.name}"


@pytest.mark.slow
@pytest.mark.html
@pytest.mark.build
def test_a_fresh_venv_installs_the_wheel_from_the_site_and_runs_a_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install cell as published, run in a fresh venv whose only way to the package
    is the built site on 127.0.0.1 (pip has no index: PIP_NO_INDEX). The venv sees the
    project's dependencies (NumPy, PyTorch, a kernel) through a .pth file, not
    ``selfattn``: the project's editable install is not on that path."""
    import nbformat
    from nbclient import NotebookClient

    wheel = site_wheel()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # the venv's own old setuptools would hide the project's (torch needs a newer one)
    subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "-y", "setuptools"],
                   check=True, env=dict(os.environ, PIP_NO_INDEX="1"))
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    deps = Path(sys.prefix) / "lib" / site_packages.parent.name / "site-packages"
    (site_packages / "book-deps.pth").write_text(f"{deps}\n")
    probe = subprocess.run([str(python), "-c", "import selfattn"], capture_output=True,
                           cwd=tmp_path)
    assert probe.returncode != 0, "the fresh venv imports selfattn before installing it"
    chapter = "03-multi-head"  # a short one
    notebook = json.loads((HTML / "_sources" / "chapters" / f"{chapter}.ipynb").read_text())
    with serve(HTML, HOSTING.site_path) as base:
        local = base + "/"
        nb = nbformat.reads(json.dumps(notebook).replace(HOSTING.site_url, local),
                            as_version=4)
        line = install_line(nb)
        assert local + wheel.name in line, line
        kernels = tmp_path / "share" / "jupyter" / "kernels" / "fresh"
        kernels.mkdir(parents=True)
        (kernels / "kernel.json").write_text(json.dumps({
            "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "fresh", "language": "python",
            "env": {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                    "OMP_NUM_THREADS": "1", "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
        }))
        monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
        nb.cells.append(nbformat.v4.new_code_cell(
            "import importlib.metadata, selfattn\n"
            "print(importlib.metadata.version('selfattn'), selfattn.__file__)"))
        NotebookClient(nb, kernel_name="fresh", timeout=900,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    setup = next(c for c in nb.cells if c.get("id") == SETUP_MARK)
    errors = [o for c in nb.cells if c.cell_type == "code"
              and "raises-exception" not in c.metadata.get("tags", [])
              for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    shown = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    version, path = shown.split()
    assert version == wheel_version(wheel), (shown, setup.outputs)
    assert str(venv) in path, f"selfattn imported from {path}, not the fresh venv"
