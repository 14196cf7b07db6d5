"""Time the book's rebuilds against the bound of issue 16 (a script, not a test).

Three builds with ``make html`` in this checkout (the site must be built once):

1. **package edit**: a module-level statement is appended to
   ``code/selfattn/__init__.py``, so every chapter that imports the package
   executes (in parallel, ``-j auto``); its ``_build/exec-times.json`` gives the
   chapters' execution times.
2. **render only**: the edit is undone, the execution cache as it was before
   the edit is put back and the pages and Sphinx's environment are removed, so
   every page is read and rendered from the cache with no execution.
3. **no-op**: nothing changed.

The goal: package-edit time <= 1.2 x ideal, where ideal = sum of execution times / cores
+ render-only time. The results go to ``benchmarks/results/build.json``. The edit is always
undone, and the cache as it was before is restored.

Usage::

    .venv/bin/python benchmarks/bench_build.py
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDITED = ROOT / "code" / "selfattn" / "__init__.py"
RESULTS = ROOT / "benchmarks" / "results" / "build.json"


def make_html() -> float:
    """Wall seconds of one ``make html`` (its output goes to a log next to the results)."""
    log = ROOT / "_build" / "bench-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as out:
        subprocess.run(["make", "html"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    return time.perf_counter() - start


def exec_times() -> dict:
    return json.loads((ROOT / "_build" / "exec-times.json").read_text())


def main() -> None:
    original = EDITED.read_bytes()
    make_html()  # make sure the site is up to date first
    cache = ROOT / "_build" / ".jupyter_cache"
    saved = ROOT / "_build" / ".jupyter_cache.bench-saved"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(cache, saved, symlinks=True)
    load_before = os.getloadavg()
    try:
        # module-level code: every chapter that imports the package depends on it
        EDITED.write_bytes(original + b"_BENCHMARK_EDIT = True  # benchmark: module level\n")
        package_edit = make_html()
        times = exec_times()
    finally:
        EDITED.write_bytes(original)
        shutil.rmtree(cache, ignore_errors=True)
        saved.rename(cache)
    shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)  # pages and environment
    render_only = make_html()
    noop = make_html()

    chapters = times["chapters"]
    assert all(c["executed_now"] for c in chapters.values()), chapters
    total = sum(c["seconds"] for c in chapters.values())
    cores = times["parallel"]
    ideal = total / cores + render_only
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "processes": cores,
        "chapter_seconds": {d: c["seconds"] for d, c in chapters.items()},
        "sum_of_execution_seconds": round(total, 1),
        "read_phase_seconds": times["read_seconds"],
        "package_edit_seconds": round(package_edit, 1),
        "render_only_seconds": round(render_only, 1),
        "noop_seconds": round(noop, 2),
        "ideal_seconds": round(ideal, 1),  # sum of execution / processes + render only
        "ratio_to_ideal": round(package_edit / ideal, 3),  # goal: <= 1.2
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
