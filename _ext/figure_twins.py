"""A diagram's dark-mode copy carries its light twin's figure number.

A chapter draws a diagram twice: a figure with ``:figclass: only-light`` and, right
after it inside ``{only} html``, the same figure drawn for dark mode with
``:figclass: only-dark``. The theme shows one of the two. Sphinx numbers both, so a
light-mode reader saw "Fig. 7.1" then "Fig. 7.3" (the hidden dark copy took 7.2), a
dark-mode reader saw 7.2, and {numref} to every later figure was one ahead of its
caption as either reader saw it.

Sphinx numbers the figures of every page afresh after each read
(``TocTreeCollector.assign_figure_numbers``, an ``env-get-updated`` handler) into
``env.toc_fignumbers[docname][figtype][figure_id] = (*section, n)``; captions and
{numref} both read that table. After it, this extension gives each dark twin its light
twin's number and numbers the later figures as if the dark twin were not there. The
pairs are found when a page is read (a dark figure pairs with the figure just before
it, which must be an only-light one), so a page re-read alone keeps them.

Sphinx decides which pages to write again by comparing the numbers it assigns with
the table as left by the last build. That table holds the numbers shown, not Sphinx's
own, so it would find every page with a twin changed on every build. This extension
hands it back its own numbers of the last build to compare with, and adds the pages
whose shown numbers changed. Registered in _ext/README.md; tests/test_figure_twins.py
checks the built book, a small book built with and without this extension, and an
incremental build.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

Numbers = dict[str, dict[str, dict[str, tuple[int, ...]]]]


def _find_twins(app: Any, doctree: nodes.document) -> None:
    """Record each only-dark figure of the page just read with the figure before it."""
    docname = app.env.docname
    pairs: dict[str, str] = {}
    previous: nodes.figure | None = None
    for figure in doctree.findall(nodes.figure):
        if "only-dark" in figure["classes"] and figure["ids"]:
            if previous is None or "only-light" not in previous["classes"] or not previous["ids"]:
                logger.warning(
                    "an only-dark figure must follow its only-light twin to share its number",
                    location=figure, type="figure_twins",
                )
            else:
                pairs[figure["ids"][0]] = previous["ids"][0]
        previous = figure
    if pairs:
        app.env.figure_twins[docname] = pairs


def _purge(app: Any, env: Any, docname: str) -> None:
    env.figure_twins.pop(docname, None)


def _merge(app: Any, env: Any, docnames: set[str], other: Any) -> None:
    for docname in docnames:
        if docname in other.figure_twins:
            env.figure_twins[docname] = other.figure_twins[docname]


def _init_env(app: Any) -> None:
    if not hasattr(app.env, "figure_twins"):
        app.env.figure_twins = {}  # docname -> {dark figure id: light figure id}
        app.env.figure_twins_sphinx_numbers = {}  # Sphinx's own numbers, last build


def shown_numbers(numbers: Numbers, twins: dict[str, dict[str, str]]) -> Numbers:
    """Sphinx's figure numbers with each dark twin given its light twin's number and the
    figures after it (same section prefix, any page) moved up by one per twin."""
    dropped: dict[tuple[int, ...], list[int]] = {}
    for docname, pairs in twins.items():
        figures = numbers.get(docname, {}).get("figure", {})
        for dark, light in pairs.items():
            if dark in figures and light in figures:
                *prefix, n = figures[dark]
                dropped.setdefault(tuple(prefix), []).append(n)
    for ns in dropped.values():
        ns.sort()
    shown: Numbers = {}
    for docname, by_type in numbers.items():
        shown[docname] = dict(by_type)
        if "figure" not in by_type:
            continue
        figures = {}
        for figure_id, (*prefix, n) in by_type["figure"].items():
            figures[figure_id] = (*prefix, n - bisect_left(dropped.get(tuple(prefix), []), n))
        for dark, light in twins.get(docname, {}).items():
            if dark in figures and light in figures:
                figures[dark] = figures[light]
        shown[docname]["figure"] = figures
    return shown


def _before_numbering(app: Any, env: Any) -> list[str]:
    # Sphinx's collector compares its new numbers with env.toc_fignumbers: let it compare
    # with its own numbers of the last build, not with the ones this extension showed.
    env.figure_twins_shown = env.toc_fignumbers
    env.toc_fignumbers = env.figure_twins_sphinx_numbers
    return []


def _after_numbering(app: Any, env: Any) -> list[str]:
    shown_before = env.figure_twins_shown
    del env.figure_twins_shown
    env.figure_twins_sphinx_numbers = env.toc_fignumbers
    env.toc_fignumbers = shown_numbers(env.toc_fignumbers, env.figure_twins)
    return [d for d in env.toc_fignumbers if env.toc_fignumbers[d] != shown_before.get(d)]


def setup(app: Any) -> dict:
    app.connect("builder-inited", _init_env)
    app.connect("doctree-read", _find_twins)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    # Sphinx numbers the figures in its TocTreeCollector's env-get-updated handler
    # (default priority 500): one handler just before it and one just after.
    app.connect("env-get-updated", _before_numbering, priority=400)
    app.connect("env-get-updated", _after_numbering, priority=600)
    return {"version": "1.0", "env_version": 1, "parallel_read_safe": True,
            "parallel_write_safe": True}
