"""Copying code and reading exercises, checked in headless Chromium: solutions stay
hidden until clicked, a copy button copies the code only, and every `>>>` example of the
API page copies as code that prints what the page shows.
"""

from __future__ import annotations

import pytest

from sitetools import CHAPTER_PAGES, open_page

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it


# --- exercises, copy buttons -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_exercise_solution_hidden_until_clicked(browser: object, site: str, rel: str) -> None:
    context, page = open_page(browser, site, rel)
    try:
        hidden = page.locator("details.hide.above-input")
        assert hidden.count() >= 3, f"{rel}: expected >= 3 hidden solutions"
        first = hidden.first
        output = first.locator(".cell_input, .cell_output").first
        assert not output.is_visible(), "solution visible before the click"
        first.locator("summary").click()
        assert output.is_visible(), "solution still hidden after the click"
        assert first.evaluate("el => el.open") is True
    finally:
        context.close()


def test_copy_button_copies_code_only(browser: object, site: str) -> None:
    rel = CHAPTER_PAGES[0]
    context, page = open_page(
        browser, site, rel, whole=False, permissions=["clipboard-read", "clipboard-write"]
    )
    try:
        cell = page.locator("div.cell:not(.tag_remove-input) div.cell_input").first
        code = cell.locator("pre").inner_text()
        cell.hover()
        cell.locator("button.copybtn").click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.strip() == code.strip()
        assert not copied.lstrip().startswith((">>>", "In [")), "prompt copied"
        outputs = page.locator("div.cell_output").first.inner_text().strip()
        assert outputs == "" or outputs not in copied, "output copied with the code"
    finally:
        context.close()


# --- copying snippets: API examples ---------------------------------------------------

def run_like_a_repl(code: str, namespace: dict) -> str:
    """Run ``code`` statement by statement as the interactive prompt does (an
    expression's value is printed) and return what it printed."""
    import ast
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for stmt in ast.parse(code).body:
            exec(compile(ast.Interactive([stmt]), "<copied>", "single"), namespace)  # noqa: S102
    return out.getvalue()


@pytest.mark.slow
def test_api_examples_copy_as_runnable_code(browser: object, site: str) -> None:
    """The copy button of every `>>>` example on the API page puts only the code on
    the clipboard; run in its module's namespace (as doctest does), it prints exactly
    the output the page shows."""
    import importlib

    context, page = open_page(browser, site, "api.html",
                              permissions=["clipboard-read", "clipboard-write"])
    try:
        blocks = page.locator("div.doctest")
        assert blocks.count() >= 8, f"expected the API's examples, found {blocks.count()}"
        for i in range(blocks.count()):
            block = blocks.nth(i)
            shown = block.locator("pre").inner_text()
            module = block.evaluate(
                "b => { const dl = b.closest('dl.py'); return dl.querySelector('dt.sig').id; }"
            )
            while module.count(".") > 1:  # selfattn.masks.causal_mask -> selfattn.masks
                module = module.rsplit(".", 1)[0]
            block.scroll_into_view_if_needed()
            block.hover()
            block.locator("button.copybtn").click()
            copied = page.evaluate("navigator.clipboard.readText()")
            assert ">>>" not in copied and "..." not in copied.replace("...,", ""), copied
            expected = "\n".join(
                line for line in shown.splitlines()
                if line.strip() and not line.startswith((">>> ", "... "))
            )
            namespace = dict(vars(importlib.import_module(module)))
            printed = run_like_a_repl(copied, namespace)
            norm = lambda s: " ".join(s.split())  # noqa: E731
            assert norm(printed) == norm(expected), (
                f"example {i} ({module}): copied\n{copied}\nprinted\n{printed}\n"
                f"page shows\n{expected}"
            )
    finally:
        context.close()
