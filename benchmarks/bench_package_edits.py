"""Time the rebuild after an edit to the package (a script, not a test; issue 31).

For each edit below, in this checkout (the site must be built once): the edit is
made and ``make html`` timed (A), then the edit is undone and ``make html`` timed
again (B); A and B re-execute the same chapters. Each edit changes no result:

* ``latent.py function``: a ``pass`` inside the first function of ``latent.py``;
* ``softmax.py function``: the same in ``softmax.py``;
* ``latent.py docstring``: a word in that function's docstring and a comment line.

For each build: its wall time, the chapters executed (``_build/exec-times.json``) and
exec_cache's lines saying why. The results go to ``benchmarks/results/package_edits.json``.

Usage::

    .venv/bin/python benchmarks/bench_package_edits.py [rounds]
"""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "code" / "selfattn"
RESULTS = ROOT / "benchmarks" / "results" / "package_edits.json"
LOG = ROOT / "_build" / "bench-package-edits.log"


def _first_function(text: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))


def add_pass(text: str) -> str:
    """A ``pass`` as the first statement after the first function's docstring."""
    func = _first_function(text)
    after = func.body[1] if len(func.body) > 1 else func.body[0]
    lines = text.splitlines(keepends=True)
    indent = " " * after.col_offset
    lines.insert(after.lineno - 1, f"{indent}pass\n")
    return "".join(lines)


def edit_docstring(text: str) -> str:
    """A word more in the first function's docstring, and a comment at the end."""
    func = _first_function(text)
    doc = func.body[0]
    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
    lines = text.splitlines(keepends=True)
    lines[doc.lineno - 1] = lines[doc.lineno - 1].replace('"""', '"""Edited: ', 1)
    return "".join(lines) + "# benchmark edit: a comment\n"


EDITS: dict[str, tuple[str, Callable[[str], str]]] = {
    "latent.py function": ("latent.py", add_pass),
    "softmax.py function": ("softmax.py", add_pass),
    "latent.py docstring": ("latent.py", edit_docstring),
}


def make_html() -> dict:
    """One timed ``make html``: wall seconds, chapters executed, exec_cache's lines."""
    LOG.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with LOG.open("w") as out:
        subprocess.run(["make", "html"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    wall = time.perf_counter() - start
    times = json.loads((ROOT / "_build" / "exec-times.json").read_text())
    now = {d: c["seconds"] for d, c in times["chapters"].items() if c["executed_now"]}
    lines = [line for line in LOG.read_text().splitlines() if line.startswith("exec_cache:")]
    return {"wall_seconds": round(wall, 1), "executed": now,
            "execution_seconds": round(sum(now.values()), 1), "why": lines}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    make_html()  # up to date first
    results: dict = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "edits": {},
    }
    for name, (module, edit) in EDITS.items():
        path = PACKAGE / module
        original = path.read_text()
        runs = []
        for _ in range(rounds):
            try:
                path.write_text(edit(original))
                edited = make_html()
            finally:
                path.write_text(original)
            undone = make_html()
            runs.append({"edited": edited, "undone": undone})
            print(name, json.dumps({k: {"wall": v["wall_seconds"], "n": len(v["executed"])}
                                    for k, v in runs[-1].items()}), flush=True)
        results["edits"][name] = runs
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
