"""The page budget, in headless Chromium: a chapter's first load is at most
MAX_PAGE_BYTES over the wire and its math is typeset within MAX_TYPESET_SECONDS
(`make test-slow` runs it alone, after the parallel run: marked timing).
"""

from __future__ import annotations

import json

import pytest

from sitetools import CHAPTER_PAGES, ROOT, WAIT_MATH_JS, RequestWatch

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

# Page budget: first load of a chapter page, and time until its math is typeset.
MAX_PAGE_BYTES = 1_500_000
MAX_TYPESET_SECONDS = 1.5  # the aim is 1 s; margin for a loaded CI machine
BUDGET: dict[str, dict[str, float]] = {}


@pytest.mark.timing  # a time budget means nothing while other tests share the cores
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_page_budget(browser: object, site: str, rel: str) -> None:
    """First-load bytes (gzip, as hosts send them) and the time until math is typeset.

    The time is the median of three first loads, each in a fresh context (empty cache):
    one hiccup of a shared CI machine does not decide it, a page that is slow every time
    still fails."""
    wire: list[int] = []  # bytes over the wire (gzip where the server compresses, as hosts do)
    raw: list[int] = []  # bytes after decompression
    timings = []
    for attempt in range(3):
        context = browser.new_context()
        page = context.new_page()
        requests = RequestWatch(page)
        if attempt == 0:  # count bytes on the first load only: reading bodies costs time
            page.on("requestfinished", lambda req: wire.append(req.sizes()["responseBodySize"]))
            page.on("response", lambda r: raw.append(len(r.body()) if r.ok else 0))
        try:
            page.goto(f"{site}/{rel}", wait_until="load")
            timings.append(page.evaluate(WAIT_MATH_JS))
            requests.settle()
        finally:
            context.close()
    timing = sorted(timings, key=lambda t: t["typeset"])[1]  # the median load
    typeset_ms = timing["typeset"]
    total = sum(wire)
    BUDGET[rel] = {"bytes": total, "bytes_uncompressed": sum(raw),
                   **{f"{k}_s": round(v / 1000, 3) for k, v in timing.items()},
                   "typeset_s_each": [round(t["typeset"] / 1000, 3) for t in timings]}
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "page-budget.json").write_text(json.dumps(BUDGET, indent=1))
    assert total <= MAX_PAGE_BYTES, f"{rel}: first load {total} bytes"
    assert typeset_ms / 1000 <= MAX_TYPESET_SECONDS, (
        f"{rel}: math typeset at {typeset_ms} ms (median of {BUDGET[rel]['typeset_s_each']} s)")
