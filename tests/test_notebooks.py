"""The published notebooks (download, Colab, Binder) run anywhere and read as plain Markdown.

Three layers:

* the publisher's pieces on small inputs (exact expected strings);
* every notebook of the built site: no MyST left, numbers in place of glue
  placeholders (the same text the HTML page shows), a first install cell;
* every notebook executed top to bottom (nbclient) in a fresh venv holding only
  ``selfattn`` installed from this checkout, plus what the notebook's own
  install line names, and a kernel. The install cell itself is skipped: it
  would fetch the package from GitHub.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from sitetools import CHAPTERS, HTML, REPOSITORY, ROOT, require_built_site

sys.path.insert(0, str(ROOT / "_ext"))
from publish_notebooks import (  # noqa: E402
    SETUP_MARK,
    PublishError,
    Resolver,
    convert_markdown,
    extra_requirements,
    imported_modules,
    publish,
    strip_glue,
)

from launch_notebooks import binder_url, colab_url  # noqa: E402

MYST_LEFTOVERS = ("{glue", "{term}", "{cite", ":::", "{doc}", "{ref}", "{numref}", "{math}",
                  "{py:", "{admonition}", "{note}", "{dropdown}")


def published(chapter: Path) -> dict:
    require_built_site()
    path = HTML / "_sources" / "chapters" / f"{chapter.stem}.ipynb"
    return json.loads(path.read_text(encoding="utf-8"))


def text_of(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


# --- the publisher's pieces -------------------------------------------------------

def test_strip_glue_removes_calls_of_any_layout_and_keeps_the_rest() -> None:
    source = (
        "import numpy as np\n"
        "from myst_nb import glue\n"
        "x = np.arange(3)\n"
        'glue("a", float(x.sum()),\n'
        "     display=False)\n"
        "for k in range(2):\n"
        '    glue(f"k{k}", k, display=False)\n'
        "if x.any():\n"
        "    y = 1\n"
        '    glue("y", y, display=False)\n'
        "print(x)  # glue stays in comments\n"
    )
    assert strip_glue(source) == (
        "import numpy as np\n"
        "x = np.arange(3)\n"
        "if x.any():\n"
        "    y = 1\n"
        "print(x)  # glue stays in comments"
    )


def test_strip_glue_refuses_to_leave_an_empty_block() -> None:
    with pytest.raises(PublishError, match="empty"):
        strip_glue('def f():\n    glue("a", 1)\n')


def test_markdown_conversion_of_roles_and_directives() -> None:
    values = {"w": {"data": {"text/plain": "0.78259"}}, "n": {"data": {"text/plain": "12"}},
              "s": {"data": {"text/plain": "'abc'"}}}
    resolver = Resolver(
        doc=lambda t: ("Chapter One", f"https://site/{t}.html"),
        ref=lambda t: ("A section", f"https://site/p.html#{t}"),
        term=lambda t: f"https://site/glossary.html#term-{t}",
        py=lambda t: f"https://site/api.html#{t}",
        cite=lambda keys, mode: f"[{mode}:{','.join(keys)}]",
    )
    source = "\n".join([
        "(sec-label)=",
        "## Title",
        "% a MyST comment",
        "Weight {glue:text}`w:.3f`, count {glue:text}`n`, name {glue:text}`s`, any {glue}`n`.",
        "See {doc}`01-concept`, {ref}`the part <sec-x>`, {term}`tokens <token>`, {cite:p}`a,b`.",
        "Call {py:func}`~selfattn.attention.attention_scores`; inline {math}`x^2`.",
        ":::{admonition} Exercise 1.1",
        ":class: tip",
        "Do {term}`softmax`.",
        ":::",
        "::::{note}",
        "```python",
        "print('{term}`kept as code`')",
        "```",
        "::::",
        ":::{dropdown} Solution",
        "It is $1$.",
        ":::",
        "$$ a = b $$ (eq-one)",
    ])
    assert convert_markdown(source, values, resolver).split("\n") == [
        '<a id="sec-label"></a>',
        "",
        "## Title",
        "Weight 0.783, count 12, name abc, any 12.",
        "See [Chapter One](https://site/01-concept.html), [the part](https://site/p.html#sec-x), "
        "[tokens](https://site/glossary.html#term-token), [p:a,b].",
        "Call [`attention_scores()`](https://site/api.html#selfattn.attention.attention_scores);"
        " inline $x^2$.",
        "> **Exercise 1.1**",
        ">",
        "> Do [softmax](https://site/glossary.html#term-softmax).",
        "> **Note**",
        ">",
        "> ```python",
        "> print('{term}`kept as code`')",
        "> ```",
        "<details><summary>Solution</summary>",
        "",
        "It is $1$.",
        "",
        "</details>",
        "$$ a = b $$",
    ]


def test_raw_blocks_keep_plain_html_and_drop_scripts_and_latex() -> None:
    source = "\n".join(["```{raw} html", "<b>kept</b>", "```",
                        "```{raw} html", "<script>redirect()</script>", "```",
                        "```{raw} latex", "\\appendix", "```", "after"])
    assert convert_markdown(source, {}, Resolver()) == "<b>kept</b>\nafter"


def test_figures_link_to_the_site_and_builder_only_blocks_are_dropped() -> None:
    source = "\n".join([
        "```{figure} ../images/flow.*", ":figclass: only-light", ":alt: X becomes Q", "",
        "The caption.", "```", "", "````{only} html", "```{figure} ../images/flow-dark.svg",
        ":alt: dark twin", "", "Dark caption.", "```", "````", "after",
    ])
    resolver = Resolver(image=lambda path: "https://site/_images/" + path.rsplit("/", 1)[-1])
    assert convert_markdown(source, {}, resolver).split("\n") == [
        "![X becomes Q](https://site/_images/flow.svg)", "", "*The caption.*", "", "after",
    ]


def test_unknown_myst_fails_loudly() -> None:
    with pytest.raises(PublishError, match="role"):
        convert_markdown("{unknownrole}`x`", {}, Resolver())
    with pytest.raises(PublishError, match="directive"):
        convert_markdown(":::{unknowndirective}\nx\n:::", {}, Resolver())
    with pytest.raises(PublishError, match="glue key"):
        convert_markdown("{glue:text}`missing:.2f`", {}, Resolver())


def test_extra_requirements_name_only_what_selfattn_does_not_bring() -> None:
    code = ["import math\nimport numpy as np\nimport torch\nfrom myst_nb import glue",
            "from IPython.display import display\nimport selfattn.plotting",
            "from torchmetrics.text import Perplexity"]
    modules = imported_modules(code)
    assert {"numpy", "torch", "torchmetrics", "selfattn"} <= modules
    extras = extra_requirements(modules)
    assert [e.split("==")[0] for e in extras] == ["torchmetrics"], extras


def test_installed_distributions_are_read_once_for_every_page(monkeypatch) -> None:
    """Reading every installed file list costs 0.2-0.5 s of CPU; a build publishes a
    notebook per chapter and each asks which distribution owns each import."""
    import publish_notebooks

    calls = []
    real = publish_notebooks.metadata.packages_distributions
    monkeypatch.setattr(publish_notebooks.metadata, "packages_distributions",
                        lambda: calls.append(1) or real())
    publish_notebooks._module_owners.cache_clear()
    for _page in range(3):
        assert extra_requirements({"numpy", "torchmetrics"}) == extra_requirements({"torchmetrics"})
    assert len(calls) == 1


def test_publish_drops_glue_only_cells_and_glue_outputs() -> None:
    glue_out = {"output_type": "display_data", "data": {"text/plain": "1"},
                "metadata": {"scrapbook": {"name": "k", "mime_prefix": ""}}}
    shown = {"output_type": "stream", "name": "stdout", "text": "hi\n"}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"jupytext": {}}, "cells": [
        {"cell_type": "code", "id": "a", "metadata": {"tags": ["remove-cell"]},
         "execution_count": 1, "outputs": [],
         "source": "from myst_nb import glue\n# setup"},
        {"cell_type": "code", "id": "b", "metadata": {}, "execution_count": 2,
         "outputs": [shown, glue_out], "source": 'print("hi")\nglue("k", 1)'},
        {"cell_type": "markdown", "id": "c", "metadata": {}, "source": "k = {glue:text}`k`"},
    ]}
    out = publish(notebook, {"k": glue_out}, install_spec="selfattn")
    assert [c["id"] for c in out["cells"]] == [SETUP_MARK, "b", "c"]
    assert out["cells"][1]["source"] == 'print("hi")'
    assert out["cells"][1]["outputs"] == [shown]
    assert out["cells"][1]["execution_count"] == 1
    assert out["cells"][2]["source"] == "k = 1"
    assert "jupytext" not in out["metadata"]
    assert notebook["cells"][1]["source"].endswith('glue("k", 1)'), "input was modified"


def test_launch_urls() -> None:
    nb = "_sources/chapters/02-qkv.ipynb"
    assert colab_url("org/repo", "gh-pages", nb) == (
        "https://colab.research.google.com/github/org/repo/blob/gh-pages/" + nb)
    url = binder_url("org/repo", "binder-env", "gh-pages", nb)
    # Binder builds the environment ref; nbgitpuller pulls the content branch
    assert url.startswith("https://mybinder.org/v2/gh/org/repo/binder-env?urlpath=git-pull%3F")
    inner = unquote(url.split("urlpath=", 1)[1])
    assert "&" not in url.split("urlpath=", 1)[1], "the nbgitpuller query must stay encoded"
    params = dict(p.split("=", 1) for p in inner.split("?", 1)[1].split("&"))
    assert unquote(params["repo"]) == "https://github.com/org/repo"
    assert params["branch"] == "gh-pages"
    assert unquote(params["urlpath"]) == f"lab/tree/repo/{nb}"


# --- the notebooks of the built site ---------------------------------------------

@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_published_notebook_is_plain_markdown_with_numbers(chapter: Path) -> None:
    nb = published(chapter)
    cells = nb["cells"]
    setup = [c for c in cells if c.get("id") == SETUP_MARK]
    assert len(setup) == 1 and cells.index(setup[0]) <= 1, "install cell missing or not first"
    assert re.search(r"^%pip install .*download\.pytorch\.org/whl/cpu.*selfattn",
                     text_of(setup[0]), re.M), text_of(setup[0])
    for cell in cells:
        text = text_of(cell)
        for leftover in MYST_LEFTOVERS:
            assert leftover not in text, f"{leftover!r} left in a {cell['cell_type']} cell:\n{text}"
        if cell["cell_type"] == "markdown":
            assert not re.search(r"^\([\w.:-]+\)=\s*$", text, re.M), f"label left:\n{text}"
        else:
            assert "myst_nb" not in text and not re.search(r"\bglue\(", text), text
    code = [c for c in cells if c["cell_type"] == "code"]
    assert sum(len(c["outputs"]) for c in code) > 0, "executed outputs were dropped"
    assert not any("scrapbook" in o.get("metadata", {}) for c in code for o in c["outputs"])


@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_published_numbers_are_the_ones_the_page_shows(chapter: Path) -> None:
    """Each glued number of the page appears in the notebook's markdown, in order.

    Not those of a ``screen-only`` paragraph (one that asks for a slider): a notebook
    keeps its ``print-only`` twin, whose numbers the page shows too."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((HTML / "chapters" / f"{chapter.stem}.html")
                         .read_text(encoding="utf-8"), "html.parser")
    for twin in soup.select(".screen-only"):
        twin.decompose()
    page = str(soup)
    shown = re.findall(r'<span class="pasted-text">([^<]*)</span>', page)
    assert shown, "the page shows no glued numbers"
    markdown = "\n".join(text_of(c) for c in published(chapter)["cells"]
                         if c["cell_type"] == "markdown")
    pos = 0
    for value in shown:
        value = html.unescape(value)
        found = markdown.find(value, pos)
        assert found >= 0, f"{value!r} (shown on the page) is not in the notebook after {pos}"
        pos = found + len(value)


# --- executed in a fresh environment ---------------------------------------------

def install_extras(notebook: dict) -> list[str]:
    """What the install cell installs besides selfattn (pinned names only)."""
    setup = next(c for c in notebook["cells"] if c.get("id") == SETUP_MARK)
    line = next(ln for ln in text_of(setup).split("\n") if ln.startswith("%pip install"))
    words = shlex.split(line)[2:]
    packages, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("--extra-index-url", "--index-url"):
            skip = True
            continue
        if word.startswith("-") or word.startswith("selfattn"):
            continue
        packages.append(word)
    return packages


@pytest.fixture(scope="module")
def fresh_kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with only selfattn (from this checkout), what the install lines name, a kernel."""
    require_built_site()
    env = tmp_path_factory.mktemp("fresh")
    venv = env / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    extras = sorted({p for c in CHAPTERS for p in install_extras(published(c))})
    # install from a copy of the checkout: setuptools leaves build/ where it builds
    package = env / "selfattn-src"
    package.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", package)
    shutil.copytree(ROOT / "code", package / "code",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    # CPU torch (the pin), the package itself, a kernel, the notebooks' own extras
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={torch_pin()}", str(package), "ipykernel==7.4.0", *extras],
                   check=True, cwd=env)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; import selfattn, sys;"
         "print(selfattn.__file__); sys.exit(u.find_spec('myst_nb') is not None)"],
        capture_output=True, text=True, cwd=env)
    assert probe.returncode == 0, "the fresh venv has myst_nb: it is not fresh"
    assert str(ROOT) not in probe.stdout, "selfattn must be installed, not the checkout"
    kernels = env / "share" / "jupyter" / "kernels" / "fresh"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh selfattn", "language": "python",
    }))
    return str(env / "share" / "jupyter")


@pytest.mark.build
@pytest.mark.html
@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_published_notebook_runs_top_to_bottom_in_a_fresh_venv(
    chapter: Path, fresh_kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", fresh_kernel)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.reads(json.dumps(published(chapter)), as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") != SETUP_MARK]
    # cells tagged raises-exception may raise; any other error fails the test
    NotebookClient(nb, kernel_name="fresh", timeout=900,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code"
              and "raises-exception" not in c.metadata.get("tags", [])
              for o in c.outputs if o.output_type == "error"]
    assert not errors, errors


# --- Binder: a CPU environment whose commit changes only with the environment -----

BINDER = ROOT / "_extra" / "binder"


def torch_pin() -> str:
    """PyTorch's version, written once: the ``torch==`` line of requirements.txt."""
    lines = (ROOT / "requirements.txt").read_text().split("\n")
    return next(ln.split("==", 1)[1].split()[0] for ln in lines if ln.startswith("torch=="))


def lock_pins() -> dict[str, str]:
    lines = (ROOT / "requirements-lock.txt").read_text().split("\n")
    return dict(ln.strip().split("==", 1) for ln in lines if "==" in ln and not ln.startswith("#"))


def test_binder_environment_is_cpu_torch_and_matches_the_lock() -> None:
    lines = [ln.strip() for ln in (BINDER / "requirements.txt").read_text().split("\n")
             if ln.strip() and not ln.startswith("#")]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    pins = dict(ln.split("==", 1) for ln in lines if "==" in ln)
    assert pins["torch"] == f"{torch_pin()}+cpu", "Binder must install the CPU build of torch"
    lock = lock_pins()
    for name in ("numpy", "matplotlib", "torchmetrics"):
        assert pins[name] == lock[name], f"{name}: Binder {pins[name]} != lock {lock[name]}"
    assert "nbgitpuller" in pins, "the launch links need nbgitpuller in the image"
    assert any(ln.startswith("selfattn @ git+https://github.com/") for ln in lines)
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"


def binder_env_commit(tmp: Path, name: str) -> str:
    out = subprocess.run(["bash", str(ROOT / ".github" / "binder-env.sh"), str(tmp / name)],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().split("\n")[-1]


def test_binder_env_commit_depends_only_on_the_environment(tmp_path: Path) -> None:
    first = binder_env_commit(tmp_path, "a")
    again = binder_env_commit(tmp_path, "b")  # another checkout, another time: same commit
    assert re.fullmatch(r"[0-9a-f]{40}", first) and first == again
    files = subprocess.run(["git", "-C", str(tmp_path / "a"), "ls-tree", "-r", "--name-only",
                            "HEAD"], check=True, capture_output=True, text=True).stdout.split()
    assert files == ["binder/requirements.txt", "binder/runtime.txt"], files


def test_workflow_pushes_the_binder_env_branch() -> None:
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text()
    assert ".github/binder-env.sh" in workflow
    assert re.search(r"git push .*binder-env", workflow), "the workflow never pushes binder-env"


@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_built_launch_links(chapter: Path) -> None:
    require_built_site()
    html = (HTML / "chapters" / f"{chapter.stem}.html").read_text(encoding="utf-8")
    nb_rel = f"_sources/chapters/{chapter.stem}.ipynb"
    assert (HTML / nb_rel).is_file()
    colab = re.findall(r'href="(https://colab\.research\.google\.com[^"]+)"', html)
    assert colab and colab[0].endswith(f"/blob/gh-pages/{nb_rel}"), colab
    binder = re.findall(r'href="(https://mybinder\.org[^"]+)"', html)
    assert binder and "/binder-env?urlpath=git-pull" in binder[0], binder
    repo_name = REPOSITORY.rsplit("/", 1)[-1]
    assert unquote(unquote(binder[0])).endswith(f"/{repo_name}/{nb_rel}")
    assert "branch=gh-pages" in unquote(binder[0])


@pytest.mark.html
def test_bibliography_is_loaded_once_per_build() -> None:
    """Each page's notebook used to load and format references.bib twice (~15 s a page,
    pages written one after another). The build records what publishing did in
    ``_build/publish-stats.json``: one load for all the pages it wrote, however many."""
    require_built_site()
    stats = json.loads((HTML.parent / "publish-stats.json").read_text(encoding="utf-8"))
    notebooks = {f"chapters/{c.stem}" for c in CHAPTERS} | {"benchmarks"}
    assert set(stats["pages"]) <= notebooks, sorted(set(stats["pages"]) - notebooks)
    assert stats["bibliography_loads"] == (1 if stats["pages"] else 0), stats
