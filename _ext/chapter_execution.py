"""Chapter execution: scheduled over both cores, a failing cell reported in one screen.

MyST-NB executes each chapter while Sphinx reads it. This extension wraps
that step; it does not change what is executed or cached.

* **A failing cell** is reported as one error: the chapter file and line, the
  code cell's number and its first lines (the failing line marked), and the
  exception line. The full traceback goes to ``_build/exec-errors/<page>.log``.
  The page is then rendered without execution (so its headings and labels
  still exist and other pages do not fail on their links to it); warnings
  from that fallback render are dropped, since they only repeat the failure.
  The build exits non-zero and the chapter is read (and executed) again on the
  next build. Needs ``nb_execution_raise_on_error = True``.
* **Parallel reading** (``sphinx-build -j N``): Sphinx hands each worker a
  contiguous chunk of the documents to read. The documents are reordered so
  the chunks carry about equal execution time, predicted from the last
  build's ``exec-times.json`` (or, for a chapter never timed, from its number
  of code cells). Kernels get one BLAS/OpenMP thread each
  (``OMP_NUM_THREADS=1`` etc.) when N > 1, so N kernels do not oversubscribe
  N cores.
* **Serial writing**: only reading (and so execution) is parallel; the pages
  are written by the main process (see ``_env_updated`` for why).
* **Times**: at the end of the build, a table of per-chapter execution times
  (``*`` = executed in this build, else the time recorded in the cache) and the
  wall time of the read phase; the same as JSON in ``_build/exec-times.json``
  (next to the output folder).
* **Kernel log**: ipykernel logs a warning on every start ("Kernel is running
  over TCP without encryption"; the kernel listens on 127.0.0.1 only). The
  kernels get their own IPython directory (``_build/.ipython``), whose kernel
  config raises the kernel's log level to ERROR and turns off the input
  history database. That also keeps a reader's own IPython profile and
  startup files out of the build. The config also loads ``assert_values.py``,
  an IPython extension: a failing ``assert a > b`` without a message says
  ``0.48 > 0.5 is false`` (the cell's source, which the cache keys on, and the
  outputs of passing cells are as they were).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import assert_values
from docutils import nodes
from myst_nb.core.execute.base import ExecutionError
from myst_nb.core.read import create_nb_reader
from myst_nb.sphinx_ import NbMetadataCollector
from myst_nb.sphinx_ import Parser as MystNbParser
from sphinx.application import Sphinx
from sphinx.util import logging as sphinx_logging
from sphinx.util.parallel import make_chunks

logger = sphinx_logging.getLogger(__name__)

TIMES_FILE = "exec-times.json"
ERRORS_DIR = "exec-errors"
SHOWN_LINES = 6  # lines of the failing cell printed in the error
CONTEXT_LINES = 2  # lines shown before a failing line further down the cell
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_KERNEL_CONFIG = """\
# Written by _ext/chapter_execution.py for the kernels that execute the chapters.
c.IPKernelApp.log_level = "ERROR"  # not the per-start "running over TCP" warning
c.HistoryManager.enabled = False  # no history.sqlite shared by parallel kernels
# A failing comparison assert says what it compared (_ext/assert_values.py). The module is
# loaded from its file, not found on sys.path: the chapters' imports see what they saw.
import importlib.util as _util
import sys as _sys
_spec = _util.spec_from_file_location({name!r}, {path!r})
_sys.modules[{name!r}] = _util.module_from_spec(_spec)
_spec.loader.exec_module(_sys.modules[{name!r}])
c.InteractiveShellApp.extensions = [{name!r}]
"""
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_STATE: dict[str, Any] = {"build_dir": Path("_build")}  # set at config-inited


# ---------------------------------------------------------------- failing cells
def _cell_source(message: str) -> str | None:
    """The failing cell's source, as nbclient quotes it in its error message."""
    match = re.search(r"^-{10,}\n(.*?)\n-{10,}$", message, re.S | re.M)
    return match.group(1) if match else None


def _failing_line(traceback: str) -> int | None:
    """Line number inside the cell, from IPython's ``Cell In[n], line k``.

    The innermost frame of this cell: its first frame is the cell's statement that
    was running; later frames of the same ``In[n]`` are inside functions the cell
    defined (an assert in one of them is the line to show). Frames of other cells
    (``In[m]``, functions defined earlier) are not lines of this cell.
    """
    frames = re.findall(r"Cell In\[(\d+)\], line (\d+)", _ANSI.sub("", traceback))
    if not frames:
        return None
    cell = frames[0][0]
    return int([line for n, line in frames if n == cell][-1])


def _exception_line(err: BaseException) -> str:
    ename, evalue = getattr(err, "ename", None), getattr(err, "evalue", None)
    if ename:
        return f"{ename}: {evalue}" if evalue else ename
    first = str(err).strip().splitlines()
    return f"{type(err).__name__}: {first[0] if first else ''}"


def describe_failure(path: Path, text: str, err: BaseException, env: Any) -> tuple[int, str]:
    """``(line in the file, message)`` for a chapter whose execution raised ``err``."""
    message = _ANSI.sub("", str(err))
    source = _cell_source(message)
    reader = create_nb_reader(str(path), env.myst_config, env.mystnb_config, text)
    notebook = reader.read(text) if reader is not None else None
    code = [] if notebook is None else [
        (i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"
    ]
    found = None
    if source is not None:
        found = next((n for n, (_, c) in enumerate(code) if c.source == source), None)
        if found is None:  # a timeout quotes only the first lines
            found = next((n for n, (_, c) in enumerate(code)
                          if source.strip() and c.source.startswith(source.strip())), None)
    if found is None:
        return 1, f"a cell failed to execute\n  {_exception_line(err)}"
    index, cell = code[found]
    lines = text.splitlines()
    fence = int(notebook.metadata.get("source_map", [1] * len(notebook.cells))[index])
    src_lines = cell.source.splitlines() or [""]
    start = fence + 1  # 1-based line of the cell's first source line, after any options
    for n in range(fence, min(len(lines), fence + 40)):
        if lines[n] == src_lines[0]:
            start = n + 1
            break
    bad = _failing_line(getattr(err, "traceback", "") or message)
    if bad is not None and not 1 <= bad <= len(src_lines):
        bad = None
    shown = list(range(1, min(len(src_lines), SHOWN_LINES) + 1))
    if bad and bad + 1 > shown[-1] and len(src_lines) > SHOWN_LINES:
        # the cell's first line, "...", the failing line with CONTEXT_LINES before it, one after
        first, last = bad - CONTEXT_LINES, min(len(src_lines), bad + 1)
        shown = [1, 0, *range(first, last + 1)] if first > 3 else list(range(1, last + 1))
    out = [f"code cell {found + 1} (of {len(code)}) failed to execute:"]
    for k in shown:
        if k == 0:
            out.append("        ...")
            continue
        mark = ">" if k == bad else " "
        out.append(f"  {mark} {start + k - 1:4d} | {src_lines[k - 1]}")
    if len(src_lines) > max(shown):
        out.append(f"        ... ({len(src_lines) - max(shown)} more lines)")
    out.append(f"  {_exception_line(err)}")
    return start + (bad - 1 if bad else 0), "\n".join(out)


@contextmanager
def _drop_records(keep: Any) -> Iterator[None]:
    """Drop log records for which ``keep(record)`` is False, on every Sphinx handler.

    On the handlers, not the loggers: in a parallel worker the handler is the
    collector that later replays the records in the main process.
    """
    class _Filter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return keep(record)

    flt = _Filter()
    handlers = list(logging.getLogger("sphinx").handlers)
    for handler in handlers:
        handler.addFilter(flt)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(flt)


def _not_exec_failed(record: logging.LogRecord) -> bool:
    """MyST-NB's own "Executing notebook failed" warning: replaced by ours."""
    return not (getattr(record, "type", "") == "mystnb" and getattr(record, "subtype", "") == "exec"
                and str(record.msg).startswith("Executing notebook failed"))


class Parser(MystNbParser):
    """MyST-NB's parser, with failing cells reported in one screen."""

    def parse(self, inputstring: str, document: nodes.document) -> None:
        env = getattr(document.settings, "env", None) or self.env
        try:
            with _drop_records(_not_exec_failed):
                super().parse(inputstring, document)
            (_STATE["build_dir"] / ERRORS_DIR / f"{env.docname}.log").unlink(missing_ok=True)
            return
        except ExecutionError as exc:
            err = exc.__cause__ or exc
        except RuntimeError as exc:  # jupyter-cache's database failed mid-build
            if "jupyter cache" not in str(exc):
                raise
            err = exc
        docname = env.docname
        path = Path(env.doc2path(docname))
        if isinstance(err, RuntimeError):
            line, message = 1, (f"the execution cache failed while reading this chapter ({err}); "
                                "run `make clean-cache` and build again")
        else:
            line, message = describe_failure(path, inputstring, err, env)
            log = _STATE["build_dir"] / ERRORS_DIR / f"{docname}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(_ANSI.sub("", str(err)), encoding="utf-8")
            message += f"\n  full traceback: {os.path.relpath(log)}"
        logger.error(message, location=(docname, line), type="chapter_execution", subtype="cell")
        failed = env.__dict__.setdefault("chapter_execution_failed", set())
        failed.add(docname)
        # Render the page without execution: headings and labels stay, so other pages'
        # links still resolve; its own warnings (missing glue) only repeat the failure.
        del document[:]
        config = env.mystnb_config
        # execution off, and no page-level override (``mystnb:`` front matter) turns it on
        env.mystnb_config = config.copy(execution_mode="off", metadata_key="_chapter_execution_off")
        try:
            with _drop_records(lambda record: record.levelno < logging.WARNING):
                super().parse(inputstring, document)
        finally:
            env.mystnb_config = config


def _purge(app: Sphinx, env: Any, docname: str) -> None:
    env.__dict__.get("chapter_execution_failed", set()).discard(docname)


def _merge(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    theirs = other.__dict__.get("chapter_execution_failed", set()) & docnames
    if theirs:
        env.__dict__.setdefault("chapter_execution_failed", set()).update(theirs)


def _outdated(app: Sphinx, env: Any, added: set, changed: set, removed: set) -> list[str]:
    """A chapter that failed to execute is read (and executed) again next time."""
    return sorted(env.__dict__.get("chapter_execution_failed", set()) & set(env.all_docs))


# ---------------------------------------------------------------- parallel reading
def _times_path(app: Sphinx) -> Path:
    return Path(app.outdir).parent / TIMES_FILE


def _predicted_seconds(app: Sphinx, docnames: list[str]) -> dict[str, float]:
    """Expected execution time of each document: last build's, else ~1 s per code cell."""
    try:
        last = json.loads(_times_path(app).read_text(encoding="utf-8"))["chapters"]
    except (OSError, ValueError, KeyError, TypeError):
        last = {}
    guess = {}
    for doc in docnames:
        if doc in last and isinstance(last[doc], dict):
            guess[doc] = float(last[doc].get("seconds") or 0.0)
            continue
        try:
            text = Path(app.env.doc2path(doc)).read_text(encoding="utf-8")
        except OSError:
            text = ""
        guess[doc] = float(text.count("```{code-cell}"))
    return guess


def balance_chunks(docnames: list[str], cost: dict[str, float], nproc: int) -> list[str]:
    """Reorder ``docnames`` so Sphinx's contiguous chunks carry about equal cost.

    Sphinx splits the list into chunks with :func:`sphinx.util.parallel.make_chunks`
    and reads each chunk in one worker. Only when there is one chunk per worker
    is the split a partition worth balancing: longest first, each into the
    chunk with the least cost that still has room.
    """
    sizes = [len(c) for c in make_chunks(docnames, nproc)]
    if len(sizes) != nproc or nproc < 2:
        return list(docnames)
    bins: list[list[str]] = [[] for _ in sizes]
    loads = [0.0] * len(sizes)
    for doc in sorted(docnames, key=lambda d: (-cost.get(d, 0.0), d)):
        open_bins = [i for i in range(len(bins)) if len(bins[i]) < sizes[i]]
        i = min(open_bins, key=lambda b: (loads[b], b))
        bins[i].append(doc)
        loads[i] += cost.get(doc, 0.0)
    return [doc for chunk in bins for doc in chunk]


def _before_read(app: Sphinx, env: Any, docnames: list[str]) -> None:
    app._chapter_execution_start = time.time()
    app._chapter_execution_nproc = app.parallel
    if app.parallel > 1 and docnames:
        docnames[:] = balance_chunks(docnames, _predicted_seconds(app, docnames), app.parallel)


def _env_updated(app: Sphinx, env: Any) -> None:
    start = getattr(app, "_chapter_execution_start", None)
    app._chapter_execution_read = None if start is None else time.time() - start
    # Write the pages in this process. With -j 2 Sphinx writes with one forked worker
    # (the main process only feeds it), so parallel writing gains little here, and each
    # worker would start its own KaTeX Node server that nothing stops (a forked worker
    # exits without atexit handlers): stray processes and temp folders after every build.
    app.parallel = 1


# ---------------------------------------------------------------- times
def execution_times(app: Sphinx) -> dict[str, Any]:
    """Per-chapter execution times and the read phase's wall time, as written to JSON."""
    env = app.env
    start = getattr(app, "_chapter_execution_start", None)
    chapters = {}
    for docname in sorted(env.found_docs):
        data = NbMetadataCollector.get_doc_data(env).get(docname, {}).get("exec_data")
        if not data or data.get("runtime") is None:
            continue
        chapters[docname] = {
            "seconds": round(float(data["runtime"]), 2),
            "executed_now": bool(start is not None and data.get("mtime", 0) >= start
                                 and data.get("succeeded")),
            "succeeded": bool(data.get("succeeded")),
        }
    read = getattr(app, "_chapter_execution_read", None)
    return {
        "parallel": getattr(app, "_chapter_execution_nproc", app.parallel),
        "read_seconds": None if read is None else round(read, 2),
        "chapters": chapters,
    }


def _build_finished(app: Sphinx, exception: BaseException | None) -> None:
    if exception is not None or not app.config.chapter_execution_times:
        return
    times = execution_times(app)
    if not times["chapters"]:
        return
    path = _times_path(app)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(times, indent=2) + "\n", encoding="utf-8")
    now = [c for c in times["chapters"].values() if c["executed_now"]]
    width = max(len(d) for d in times["chapters"])
    lines = ["Chapter execution times (s; * = executed in this build, else from the cache):"]
    for doc, c in times["chapters"].items():
        lines.append(f"  {doc:<{width}}  {c['seconds']:7.1f} {'*' if c['executed_now'] else ''}")
    total = sum(c["seconds"] for c in times["chapters"].values())
    summary = f"  total {total:.1f} s; {len(now)} executed now"
    if now and times["read_seconds"] is not None:
        summary += (f" ({sum(c['seconds'] for c in now):.1f} s of execution) in a "
                    f"{times['read_seconds']:.1f} s read phase with {times['parallel']} "
                    "process(es)")
    lines.append(summary + f"; written to {os.path.relpath(path)}")
    logger.info("\n".join(lines))


# ---------------------------------------------------------------- kernels
def _kernel_environment(app: Sphinx, config: Any) -> None:
    _STATE["build_dir"] = Path(app.outdir).parent
    ipython = Path(app.outdir).parent / ".ipython"
    profile = ipython / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    kernel_config = profile / "ipython_kernel_config.py"
    text = _KERNEL_CONFIG.format(name=assert_values.NAME,
                                 path=str(Path(assert_values.__file__).resolve()))
    if not kernel_config.is_file() or kernel_config.read_text() != text:
        kernel_config.write_text(text)
    os.environ["IPYTHONDIR"] = str(ipython)  # inherited by every kernel
    if app.parallel > 1:
        for var in _THREAD_VARS:
            os.environ[var] = "1"


def setup(app: Sphinx) -> dict:
    app.setup_extension("myst_nb")
    app.add_source_parser(Parser, override=True)
    app.add_config_value("chapter_execution_times", True, "")
    app.connect("config-inited", _kernel_environment)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-before-read-docs", _before_read)
    app.connect("env-updated", _env_updated)
    app.connect("build-finished", _build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
