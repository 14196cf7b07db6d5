"""Fixtures shared by the browser tests (test_browser, test_reader_*, test_interactive, test_pdf).

One static server over the built site and one headless Chromium per test session
(per pytest-xdist worker): each test opens its own browser context, so tests do not
share cookies, storage or colour scheme, only the browser process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sitetools import (
    CHROMIUM_ARGS,
    HTML,
    PREFIX,
    chromium_path,
    require_built_site,
    serve,
    under_ci,
)


@pytest.fixture(scope="session")
def site() -> Iterator[str]:
    """Base URL of the built site, served as GitHub Pages serves it (under PREFIX, gzipped)."""
    require_built_site()
    with serve(HTML, PREFIX) as base:
        yield base


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's headless Chromium driven by Playwright; a failure (not a skip) under CI."""
    playwright_sync = pytest.importorskip("playwright.sync_api")
    exe = chromium_path()
    if exe is None:
        if under_ci():
            pytest.fail("Chromium is missing under CI: `make test` installs Debian's chromium")
        pytest.skip("Chromium not installed (apt-get install chromium)")
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests of one page go to one xdist worker (`--dist loadgroup`), so the
    read-only tests can share that worker's open copy of the page (open_page's pool).
    A test served the built site (the ``site`` fixture) reads it: it is marked ``html``;
    one given the PDF's text (test_pdf's ``pdf_text``) is marked ``pdf``. `make test-fast`
    leaves both out. A test that reads either by itself carries the marker in its file;
    CI runs `make test-fast` on a fresh clone first, so a missing one fails there."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "site" in fixtures:
            item.add_marker(pytest.mark.html)
        if "pdf_text" in fixtures:
            item.add_marker(pytest.mark.pdf)
        rel = getattr(item, "callspec", None) and item.callspec.params.get("rel")
        if rel and item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group(name=str(rel)))
