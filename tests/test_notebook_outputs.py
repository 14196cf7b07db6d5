"""A published notebook's outputs are the page's outputs.

The page shows each cell's stdout as one block (conf.py: ``nb_merge_streams``). The
published notebook must too: not two stream outputs where the page has one, and not
the last printed lines twice, which is what a build that executed the chapter wrote
when myst-nb merged the streams in place (``launch_notebooks.keep_executed_outputs``).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest

from sitetools import CHAPTERS, HTML, ROOT, require_built_site

sys.path.insert(0, str(ROOT / "_ext"))
from publish_notebooks import SETUP_MARK, coalesce_streams, publish  # noqa: E402

from launch_notebooks import executed_notebook, keep_executed_outputs  # noqa: E402

FIRST, SECOND = "output (1, 4, 16)\n", "equal to nn.MultiheadAttention\n"


def _code_cell(outputs: list[dict]) -> dict:
    return {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {},
            "outputs": outputs, "source": 'print("a")\nprint("b")'}


def _stdout(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_publish_merges_a_cells_stdout_as_the_page_does() -> None:
    nb = {"cells": [_code_cell([_stdout(FIRST), _stdout(SECOND)])], "metadata": {},
          "nbformat": 4, "nbformat_minor": 5}
    out = publish(nb, {}, install_spec="selfattn", merge_streams=True)
    cell = next(c for c in out["cells"] if c["cell_type"] == "code" and c["id"] != SETUP_MARK)
    assert cell["outputs"] == [_stdout(FIRST + SECOND)]
    assert nb["cells"][0]["outputs"] == [_stdout(FIRST), _stdout(SECOND)], "input changed"


def test_myst_nb_still_merges_streams_in_place() -> None:
    """The reason for keep_executed_outputs: if this fails, myst-nb no longer changes the
    outputs it is given, and the patch (see _ext/README.md) can go."""
    from myst_nb.core.utils import coalesce_streams as upstream

    outputs = [nbformat.from_dict(_stdout(FIRST)), nbformat.from_dict(_stdout(SECOND))]
    upstream(outputs)
    assert outputs[0]["text"] == FIRST + SECOND, "myst-nb no longer mutates: drop the patch"


def test_myst_nb_renders_through_the_wrapped_merge() -> None:
    """keep_executed_outputs wraps the name myst-nb's renderer calls; it must still be
    that name, called on a cell's outputs (else the patch silently stops applying)."""
    import inspect

    from myst_nb.core import render

    keep_executed_outputs()
    assert getattr(render.coalesce_streams, "_selfattn_copies", False)
    assert "outputs = coalesce_streams(outputs)" in inspect.getsource(render), (
        "myst-nb's renderer no longer calls coalesce_streams(outputs)")
    outputs = [nbformat.from_dict(_stdout(FIRST)), nbformat.from_dict(_stdout(SECOND))]
    merged = render.coalesce_streams(outputs)
    assert [o["text"] for o in merged] == [FIRST + SECOND]
    assert [o["text"] for o in outputs] == [FIRST, SECOND], "the patched merge mutated"


def test_executed_notebook_takes_the_kernels_outputs_from_the_cache(tmp_path: Path) -> None:
    """After a build that executed the chapter, jupyter_execute/ held the renderer's
    in-place merge: the first output with both lines, the second still there. The
    published notebook is built from the cache's record, as the kernel wrote it."""
    from jupyter_cache import get_cache

    executed = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('print("a")\nprint("b")', execution_count=1)
    cell.outputs = [nbformat.from_dict(_stdout(FIRST)), nbformat.from_dict(_stdout(SECOND))]
    executed.cells = [cell]
    executed.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    original = tmp_path / "original.ipynb"
    nbformat.write(executed, str(original))
    cache = tmp_path / "cache"
    get_cache(str(cache)).cache_notebook_file(str(original), check_validity=False)
    mutated = copy.deepcopy(executed)
    mutated.cells[0].outputs[0]["text"] = FIRST + SECOND  # what the renderer left
    written = tmp_path / "page.ipynb"
    nbformat.write(mutated, str(written))

    notebook = executed_notebook(written, str(cache))
    assert [o["text"] for o in notebook.cells[0].outputs] == [FIRST, SECOND]
    out = publish(json.loads(nbformat.writes(notebook)), {}, install_spec="selfattn",
                  merge_streams=True)
    shown = [o["text"] for c in out["cells"] if c["cell_type"] == "code"
             for o in c["outputs"]]
    assert shown == [FIRST + SECOND], shown


def test_coalesce_streams_reads_nbformat_line_lists() -> None:
    merged = coalesce_streams([_stdout(["a\n", "b\n"]), _stdout("c\n")])
    assert [o["text"] for o in merged] == ["a\nb\nc\n"]


# --- every published notebook against its page -----------------------------------------

def _page_streams(rel: str) -> list[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((HTML / rel).read_text(encoding="utf-8"), "html.parser")
    return [pre.get_text() for pre in soup.select("div.cell_output div.output.stream pre")]


def _notebook_streams(notebook: dict) -> list[str]:
    shown = []
    for cell in notebook["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or {"remove-cell", "remove-output"} & set(tags):
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                text = out["text"]
                shown.append("".join(text) if isinstance(text, list) else text)
    return shown


@pytest.mark.html
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_published_stream_outputs_equal_the_pages(chapter: Path) -> None:
    require_built_site()
    rel = f"chapters/{chapter.stem}.html"
    notebook = json.loads((HTML / "_sources" / "chapters" / f"{chapter.stem}.ipynb")
                          .read_text(encoding="utf-8"))
    page = [t.rstrip("\n") for t in _page_streams(rel)]
    published = [t.rstrip("\n") for t in _notebook_streams(notebook)]
    assert page, f"{rel} shows no printed output"
    assert published == page, next(
        (f"output {i}: page {p!r}\n  notebook {n!r}"
         for i, (p, n) in enumerate(zip(page, published, strict=False)) if p != n),
        f"{len(page)} printed outputs on the page, {len(published)} in the notebook")
