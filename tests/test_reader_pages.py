"""What the built pages hold for a reader, read from the HTML (no browser): the
notation table, glossary links, citations, executed-notebook downloads and launch
links, repository buttons and dates, and the API page's parameter types.

The other test_reader_* files check what a reader sees and does in headless Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from sitetools import CHAPTER_PAGES, CHAPTERS, HTML, REPOSITORY, require_built_site

pytestmark = pytest.mark.html  # each test reads the built site


# --- notation, glossary, citations -------------------------------------------------

def test_notation_page_renders_the_books_table() -> None:
    require_built_site()
    html = (HTML / "notation.html").read_text(encoding="utf-8")
    for code_name in ("seq_len", "d_model", "head_dim", "num_heads", "scores", "weights", "mask"):
        assert f">{code_name}<" in html, f"notation table lacks {code_name}"


@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_chapters_link_terms_to_the_glossary(rel: str) -> None:
    require_built_site()
    html = (HTML / rel).read_text(encoding="utf-8")
    assert re.search(r'href="\.\./glossary\.html#term-', html), f"{rel} links no glossary term"


def test_citations_resolve_to_the_bibliography() -> None:
    require_built_site()
    refs = (HTML / "references.html").read_text(encoding="utf-8")
    assert "attention is all you need" in refs.lower()
    assert "jointly learning to align" in refs.lower()
    cited = 0
    for rel in CHAPTER_PAGES:
        html = (HTML / rel).read_text(encoding="utf-8")
        assert "[?]" not in html, f"{rel} has an unresolved citation"
        cited += len(re.findall(r'href="(?:\.\./)?references\.html#id', html))
    assert cited >= len(CHAPTER_PAGES), "chapters cite too little"


# --- downloads, launch buttons, repository buttons, dates --------------------------

@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_download_and_launch_point_at_executed_notebooks(chapter: Path) -> None:
    require_built_site()
    rel = f"chapters/{chapter.stem}.html"
    html = (HTML / rel).read_text(encoding="utf-8")
    nb_rel = f"_sources/chapters/{chapter.stem}.ipynb"
    notebook = json.loads((HTML / nb_rel).read_text(encoding="utf-8"))
    outputs = sum(len(c.get("outputs", [])) for c in notebook["cells"] if c["cell_type"] == "code")
    assert outputs > 0, "downloadable notebook has no executed outputs"
    setup = [c for c in notebook["cells"] if c.get("id") == "selfattn-launch-setup"]
    assert setup and notebook["cells"].index(setup[0]) <= 1, "no install cell at the top"
    assert f'href="../{nb_rel}"' in html, "no .ipynb download link"
    for host in ("colab.research.google.com", "mybinder.org"):
        links = re.findall(rf'href="(https://{re.escape(host)}[^"]+)"', html)
        assert links, f"no {host} launch link"
        # Binder's link carries the notebook path inside nbgitpuller's (encoded) query
        target = unquote(unquote(links[0]))
        assert target.endswith(f"/{nb_rel}"), f"{host} link does not open the .ipynb: {target}"


@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_repository_buttons_and_last_updated(rel: str) -> None:
    require_built_site()
    html = (HTML / rel).read_text(encoding="utf-8")
    repo = REPOSITORY  # the hosted build's repository (a fork names its own)
    assert f'href="{repo}"' in html
    assert f"{repo}/issues/new?title=Issue%20on%20page%20%2F{rel}" in html
    stem = Path(rel).stem
    assert f"{repo}/edit/main/chapters/{stem}.md" in html
    assert re.search(r"Last updated on\s+\d{4}-\d{2}-\d{2}", html), "no last-updated date"


# --- API page: parameter types ------------------------------------------------------

def test_api_page_names_the_array_type_instead_of_any() -> None:
    """Array parameters read `Array` (linked to its definition), not `Any`."""
    from bs4 import BeautifulSoup

    require_built_site()
    soup = BeautifulSoup((HTML / "api.html").read_text(encoding="utf-8"), "html.parser")
    assert soup.find(id="selfattn.array_types.Array"), "the Array alias is not documented"

    def param_types(function_id: str) -> dict[str, str]:
        dl = soup.find(id=function_id).find_parent("dl")
        field = dl.find(lambda t: t.name == "dt" and t.get_text().startswith("Parameters"))
        field = field.find_next_sibling("dd")
        types = {}
        for li in field.find_all("li") or [field]:
            text = li.get_text(" ", strip=True)
            name, _, rest = text.partition(" ")
            types[name] = rest.split("–")[0]
        return types

    for function_id, params in {
        "selfattn.attention.scaled_dot_product_attention": ["query", "key", "value", "mask"],
        "selfattn.softmax.softmax": ["x"],
        "selfattn.perplexity.perplexity": ["logits", "targets"],
        "selfattn.masks.to_additive_mask": ["mask"],
        "selfattn.similarity.cosine_similarity": ["a", "b"],
    }.items():
        types = param_types(function_id)
        for p in params:
            assert "Array" in types[p] and "Any" not in types[p], f"{function_id}({p}): {types}"
        link = soup.find(id=function_id).find_parent("dl").find(
            "a", href=re.compile(r"#selfattn\.array_types\.Array$"))
        assert link is not None, f"{function_id}: Array does not link to its definition"
