"""Search sends a reader to the page that teaches what they typed (issue 35).

In headless Chromium over the built site, the search page's own functions rank a list
of queries (the six a reader tried, and more) and cut the excerpts of their first
results: the first result is the chapter, or the section, that teaches the term; the
API reference still comes first for an API name; every excerpt is the article's own
text (its prose; its code when only the code holds the words), never the theme's menus
or a contents list. One query also goes through the
search field and the rendered results list.
"""

from __future__ import annotations

import re

import pytest

from sitetools import OfflinePage

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

DESKTOP = {"viewport": {"width": 1280, "height": 900}}

# query -> its first result: a page, or "page > the start of a section's title"
FIRST = {
    # the six a reader tried (issue 35): the teaching chapter came first for none
    "latent": "chapters/kv-memory.html",
    "sliding window": "chapters/sliding-windows.html",
    "induction head": "chapters/inside-a-trained-model.html > Induction heads",
    "perplexity": "chapters/06-perplexity.html",
    "why scale": "chapters/04-whys.html",
    "RoPE": "chapters/attention-at-scale.html",
    # more terms, each taught in one chapter and mentioned in others
    "online softmax": "chapters/attention-at-scale.html > The online softmax",
    "multi-head attention": "chapters/03-multi-head.html",
    "softmax": "chapters/01-concept.html",
    "KV cache": "chapters/05b-kv-cache.html",
    "causal mask": "chapters/05-causal.html",
    "RMSNorm": "chapters/transformer-block.html",
    "SwiGLU": "chapters/transformer-block.html",
    "residual stream": "chapters/transformer-block.html",
    "cross-attention": "chapters/transformer-block.html > Cross-attention",
    "warm-up": "chapters/training-the-stack.html",
    "QK-norm": "chapters/stable-logits.html",
    "soft-capping": "chapters/stable-logits.html",
    "attention sink": "chapters/inside-a-trained-model.html > Attention sinks",
    "grouped-query attention": "chapters/kv-memory.html",
    "ALiBi": "chapters/attention-at-scale.html",
    "positional encoding": "chapters/04b-subspaces-positions.html",
    "padding mask": "chapters/05-causal.html",
    "temperature": "chapters/04-whys.html",
    # an API name still finds its entry first
    "alibi_bias": "api.html#selfattn.",
    "scaled_dot_product_attention": "api.html#selfattn.",
}


def first_is(result: dict, expected: str) -> bool:
    """The result is the expected page (or API entry), and the expected section if named."""
    page, _, section = expected.partition(" > ")
    if not result["href"].startswith(page):
        return False
    return not section or result["title"].partition(" > ")[2].startswith(section)


# Runs Sphinx's query pipeline (the page's Search object, our scorer in it) without the
# DOM: the first `top` results of each query, and the excerpts of the first `cut`.
RANK_JS = """async ([queries, top, cut]) => {
  const root = document.documentElement.dataset.content_root;
  for (let i = 0; i < 200 && !Search.hasIndex(); i++) await new Promise(r => setTimeout(r, 50));
  const pages = new Map();
  const out = {};
  for (const query of queries) {
    const [q, terms, excluded, highlight, objects] = Search._parseQuery(query);
    const results = Search._performSearch(q, terms, excluded, highlight, objects)
      .slice(-top).reverse();
    const listed = [];
    for (const [i, [doc, title, anchor, descr, score, file, kind]] of results.entries()) {
      const item = {href: doc + DOCUMENTATION_OPTIONS.LINK_SUFFIX + anchor, title, kind, score};
      if (i < cut && !descr) {
        const url = root + doc + DOCUMENTATION_OPTIONS.FILE_SUFFIX;
        if (!pages.has(url)) pages.set(url, await (await fetch(url)).text());
        const summary = Search.makeSearchSummary(pages.get(url), terms, anchor);
        item.excerpt = summary ? summary.textContent : null;
        // the article's text as a reader reads it (its prose and its code, not the
        // outputs, the menus or the contents beside it)
        const page = new DOMParser().parseFromString(pages.get(url), 'text/html');
        const article = page.querySelector('article.bd-article');
        article.querySelectorAll('div.cell_output, .headerlink, .katex-mathml, script, style')
          .forEach(el => el.remove());
        item.prose = article.textContent.replace(/\\s+/g, ' ');
      }
      listed.push(item);
    }
    out[query] = listed;
  }
  return out;
}"""

# menu and contents texts the theme puts into every page's <main> (what excerpts showed)
MENU_TEXT = ("System Settings", "Light Dark", "On this page", "Contents", "Download",
             "Search Ctrl", "Repository", "Open issue", "Edit on", "Launch")


def search_ranks(browser: object, site: str, queries: list[str], top: int = 5,
                 cut: int = 3) -> dict[str, list[dict]]:
    """{query: its first ``top`` results} as the built site's search page ranks them,
    with the excerpts of the first ``cut``. Also run on the site before the change."""
    with OfflinePage(browser, site, "search.html", **DESKTOP) as visit:
        return visit.page.evaluate(RANK_JS, [queries, top, cut])


@pytest.fixture(scope="module")
def ranked(browser: object, site: str) -> dict[str, list[dict]]:
    return search_ranks(browser, site, list(FIRST))


@pytest.mark.parametrize("query", list(FIRST))
def test_search_ranks_the_page_that_teaches_first(ranked: dict, query: str) -> None:
    results = ranked[query]
    expected = FIRST[query]
    shown = [f"{r['href']} ({r['kind']}, {r['score']:.1f})" for r in results]
    assert results and first_is(results[0], expected), (
        f"{query!r}: expected {expected} first, the search ranks {shown}")


@pytest.mark.parametrize("query", list(FIRST))
def test_search_excerpts_are_the_articles_own_prose(ranked: dict, query: str) -> None:
    words = [w for w in re.split(r"[^a-z0-9_]+", query.lower()) if len(w) > 1]
    for r in ranked[query][:3]:
        excerpt = r.get("excerpt")
        if "excerpt" not in r:  # an API object: its description is the entry's name
            continue
        assert excerpt, f"{query!r}: no excerpt for {r['href']}"
        text = excerpt.strip("… ").strip()
        assert text in r["prose"], f"{query!r}: {r['href']}'s excerpt is not its prose: "\
            f"{excerpt!r}"
        leaked = [m for m in MENU_TEXT if m in excerpt]
        assert not leaked, f"{query!r}: {r['href']}'s excerpt shows menu text {leaked}"
        if r["kind"] != "index":  # a glossary entry may match by a stem only
            assert any(w[:4] in excerpt.lower() for w in words), (
                f"{query!r}: {r['href']}'s excerpt misses the query: {excerpt!r}")


def test_search_field_lists_the_teaching_section_with_its_prose(browser: object,
                                                                site: str) -> None:
    """End to end: typed into the search field, the results list shows the section that
    teaches first, with an excerpt of its prose."""
    with OfflinePage(browser, site, "chapters/02-qkv.html", **DESKTOP) as visit:
        page = visit.page
        field = page.locator(".bd-sidebar-primary input[name=q]").first
        if not field.is_visible():
            page.keyboard.press("Control+k")
            field = page.locator("#pst-search-dialog input[name=q]")
        field.fill("induction head")
        with page.expect_navigation():
            field.press("Enter")
        page.wait_for_function("() => document.querySelectorAll("
                               "'ul.search li p.context').length >= 3", timeout=20_000)
        first = page.locator("ul.search li").first
        link = first.locator("a").first
        assert "chapters/inside-a-trained-model.html#" in link.get_attribute("href")
        assert "> Induction heads" in link.inner_text(), link.inner_text()
        excerpt = first.locator("p.context").inner_text()
        assert "induction" in excerpt.lower() and "System Settings" not in excerpt, excerpt


def test_sphinx_search_still_has_what_search_scorer_replaces() -> None:
    """_ext/search_scorer.js wraps Search._performSearch and replaces Search.htmlToText and
    Search.makeSearchSummary (_ext/README.md, #20). If Sphinx renames them, the book's
    search silently falls back to Sphinx's order and excerpts; if Sphinx stops requiring a
    query of half a title's length, the patch may be smaller."""
    from sitetools import HTML, require_built_site

    require_built_site()
    tools = (HTML / "_static" / "searchtools.js").read_text(encoding="utf-8")
    for name in ("_performSearch: (", "htmlToText: (htmlString, anchor)",
                 "makeSearchSummary: (htmlText, keywords, anchor)",
                 "const _orderResultsByScoreThenName", "queryLower.length >= title.length / 2",
                 "Search.makeSearchSummary(data, searchTerms, anchor)"):
        assert name in tools, f"searchtools.js no longer has {name!r}: revisit search_scorer.js"
    language = (HTML / "_static" / "language_data.js").read_text(encoding="utf-8")
    assert "Search._performSearch = " in language, "the scorer is not in language_data.js"
