"""Old links into chapters that were split or moved still land on their section.

Chapter 4 ("the whys") became 04-whys (scaling and softmax) and
04b-subspaces-positions; chapter 5 ("causal attention") became 05-causal
(masks and padding) and 05b-kv-cache. The transformer-block chapter moved from
before the masks chapter to after it (it uses the masks), keeping its URL, and
later became three: transformer-block (the block), tinylm (the stack and its
gradients at initialisation) and training-the-stack (AdamW, warm-up, modern
blocks trained). Attention-at-scale's MQA/GQA section moved to kv-memory, the
chapter on the KV cache, its trained-heads section to inside-a-trained-model, and
its section on keeping the scores in range (QK-norm, soft-capping) to stable-logits.
The old pages keep their URLs. Every anchor they had before the split or move must
still resolve: either the old page still has it, or the old page's redirect
script sends it to the new page, which has it. ``OLD_ANCHORS`` lists the
anchors of the last build before the change (numbered citation ids such as
``id1`` left out: they are renumbered by every edit and nobody links to them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sitetools import HTML, require_built_site

pytestmark = pytest.mark.html  # each test reads the built pages

OLD_ANCHORS: dict[str, list[str]] = {
    "04-whys": [
        "ch4-whys", "the-whys-scaling-softmax-subspaces-and-positions", "ch4-why-scale",
        "why-scale-by-1-sqrt-d-k", "why-scale-by-", "the-variance-of-a-dot-product",
        "measuring-it", "fig-ch4-variance", "large-scores-saturate-the-softmax",
        "fig-ch4-saturation", "a-saturated-softmax-has-almost-no-gradient", "fig-ch4-jacobian",
        "what-it-does-to-learning", "fig-ch4-training", "ch4-dmodel-bug",
        "the-classic-bug-sqrt-d-text-model-instead-of-sqrt-d-k", "the-classic-bug--instead-of-",
        "fig-ch4-dmodel-bug", "ch4-why-softmax", "why-softmax", "dividing-by-the-sum",
        "hard-attention-take-the-argmax", "ch4-temperature",
        "temperature-between-argmax-and-uniform", "fig-ch4-temperature",
        "the-properties-that-matter-checked", "ch4-why-subspaces", "why-project-into-subspaces",
        "what-one-pair-w-q-w-k-can-express", "what-one-pair--can-express", "ch4-rank-two-head",
        "a-previous-token-head-with-d-k-2", "a-previous-token-head-with-",
        "two-relations-one-head-or-two", "fig-ch4-two-relations", "ch4-why-positions",
        "why-positional-encoding", "attention-cannot-see-order", "the-sinusoidal-encoding",
        "fig-ch4-sinusoidal", "with-positions-order-matters", "summary", "exercises",
        "copy-this",
    ],
    "05-causal": [
        "ch5-causal", "causal-masked-attention", "ch5-why",
        "why-a-decoder-must-not-see-the-future", "ch5-mask-matrix", "the-mask-as-a-matrix",
        "fig-ch5-mask", "ch5-two-ways", "two-ways-to-apply-the-mask", "ch5-float16",
        "infty-a-very-negative-number-and-float16", "-a-very-negative-number-and-float16",
        "ch5-last-token", "the-last-token-sees-everything", "ch5-future",
        "changing-the-future-leaves-the-past-alone", "ch5-dropout",
        "dropout-on-the-attention-weights", "ch5-padding", "batches-with-padding",
        "fig-ch5-padding", "ch5-kv-cache", "generating-token-by-token-the-kv-cache",
        "what-the-cache-saves-counted", "fig-ch5-kv-cost", "ch5-generation",
        "generating-text-from-a-tiny-model", "ch5-summary", "summary", "ch5-exercises",
        "exercises", "ch5-copy-this", "copy-this",
    ],
    "transformer-block": [
        "ch-block", "the-transformer-block", "tb-residual", "the-residual-stream", "tb-why-wo",
        "why-w-o-exists", "why--exists", "tb-layernorm", "layernorm-before-or-after",
        "fig-tb-gradnorms", "tb-mlp", "the-mlp", "tb-pytorch", "the-block-equals-pytorch-s-layers",
        "the-block-equals-pytorchs-layers", "tb-cross",
        "cross-attention-queries-from-one-sequence-keys-and-values-from-another", "fig-tb-cross",
        "tb-training", "training-the-stack-adamw-and-warm-up", "fig-tb-schedule", "tb-summary",
        "summary", "tb-exercises", "exercises", "tb-copy-this", "copy-this",
        # the last build before the split in three added these
        "tb-identity-path", "the-identity-path-with-and-without-layernorm-on-it", "tb-gradients",
        "gradients-at-initialisation", "tb-tinylm", "a-stack-of-blocks-tinylm",
        "tb-warmup-measured", "when-does-a-stack-need-the-warm-up-measured-over-seeds",
        "tb-warmup-start", "fig-tb-warmup",
    ],
    "attention-at-scale": [
        "ch-scale", "attention-at-scale", "as-positions", "positions-inside-attention",
        "longer-than-trained", "training-twice-as-long", "fig-as-extrapolation", "as-gqa",
        "sharing-keys-and-values-mqa-and-gqa", "as-tiled",
        "attention-without-the-l-times-l-matrix", "attention-without-the--matrix",
        "the-online-softmax", "memory-and-time-against-l", "memory-and-time-against-",
        "fig-as-memory", "as-heads", "what-a-trained-model-attends-to", "fig-as-heads",
        "as-summary", "summary", "as-exercises", "exercises", "as-copy-this", "copy-this",
        # added after the splits above, moved to stable-logits
        "as-stable-logits", "keeping-the-scores-in-range-qk-norm-and-soft-capping",
        "measured-the-largest-score-during-training", "fig-as-stable",
    ],
}
# where a page's moved sections went: the pages an anchor may now live on, or, for a page
# whose sections went to several pages, each moved anchor's page (so that an anchor
# redirected anywhere else fails)
NEW_PAGES: dict[str, tuple[str, ...] | dict[str, str]] = {
    "04-whys": ("04b-subspaces-positions",), "05-causal": ("05b-kv-cache",),
    "transformer-block": ("tinylm", "training-the-stack"),
    "attention-at-scale": {
        **{anchor: "kv-memory" for anchor in ("as-gqa", "sharing-keys-and-values-mqa-and-gqa")},
        **{anchor: "inside-a-trained-model"
           for anchor in ("as-heads", "what-a-trained-model-attends-to", "fig-as-heads")},
        **{anchor: "stable-logits"
           for anchor in ("as-stable-logits",
                          "keeping-the-scores-in-range-qk-norm-and-soft-capping",
                          "measured-the-largest-score-during-training", "fig-as-stable")},
    },
}
CASES = [(page, anchor) for page, anchors in OLD_ANCHORS.items() for anchor in anchors]


def _ids(page: str) -> set[str]:
    html = (HTML / "chapters" / f"{page}.html").read_text(encoding="utf-8")
    return set(re.findall(r'\sid="([^"]+)"', html))


def _redirects(page: str) -> dict[str, str]:
    """The ``moved`` maps of the page's redirect scripts, merged: anchor -> page.html.

    A page whose sections went to several pages may carry one script per move."""
    html = (HTML / "chapters" / f"{page}.html").read_text(encoding="utf-8")
    moved: dict[str, str] = {}
    for found in re.findall(r"var moved = (\{.*?\});", html, re.S):
        moved |= json.loads(found)
    return moved


@pytest.mark.parametrize(("page", "anchor"), CASES, ids=[f"{p}#{a}" for p, a in CASES])
def test_old_anchor_still_resolves(page: str, anchor: str) -> None:
    require_built_site()
    if anchor in _ids(page):
        assert anchor not in _redirects(page), f"{page}#{anchor} is both kept and redirected"
        return
    moved = _redirects(page)
    assert anchor in moved, f"{page}.html#{anchor}: gone from the page and not redirected"
    target = Path(moved[anchor]).stem
    new_pages = NEW_PAGES[page]
    expected = (new_pages.get(anchor),) if isinstance(new_pages, dict) else new_pages
    assert target in expected, f"{page}#{anchor} redirects to {moved[anchor]}, not {expected}"
    assert anchor in _ids(target), f"{page}#{anchor} redirects to {target}.html, which lacks it"


def test_split_pages_are_in_the_toctree_in_reading_order() -> None:
    """The split chapters in order: the block chapters after the masks they use and
    before the KV-cache chapter that generates with their TinyLM; stable-logits right
    after attention-at-scale, whose section it was and whose models it trains; then the
    two chapters on the KV cache at scale, whose MQA/GQA section moved into the second:
    sliding windows first (the second chapter's comparison uses a windowed model), then
    kv-memory; then the chapter that looks inside the trained models."""
    require_built_site()
    index = (HTML / "index.html").read_text(encoding="utf-8")
    pages = ("03-multi-head", "04-whys", "04b-subspaces-positions", "05-causal",
             "transformer-block", "tinylm", "training-the-stack", "05b-kv-cache",
             "06-perplexity", "attention-at-scale", "stable-logits", "sliding-windows",
             "kv-memory", "inside-a-trained-model")
    order = [index.find(f'href="chapters/{p}.html"') for p in pages]
    assert -1 not in order, f"a chapter is missing from the table of contents: {order}"
    assert order == sorted(order), "the chapters are out of reading order"


@pytest.mark.browser
def test_old_link_lands_on_the_moved_section(browser: object, site: str) -> None:
    """In a browser: the old URL of a moved section ends on the new page at that section."""
    context = browser.new_context()
    try:
        page = context.new_page()
        for old, new in (("04-whys", "04b-subspaces-positions"), ("05-causal", "05b-kv-cache"),
                         ("transformer-block", "training-the-stack"),
                         ("attention-at-scale", "kv-memory"),
                         ("attention-at-scale", "inside-a-trained-model"),
                         ("attention-at-scale", "stable-logits")):
            anchor = next(a for a, target in _redirects(old).items()
                          if Path(target).stem == new)
            page.goto(f"{site}/chapters/{old}.html#{anchor}")
            page.wait_for_url(f"**/chapters/{new}.html#{anchor}", timeout=10_000)
            assert page.locator(f'[id="{anchor}"]').count() == 1
    finally:
        context.close()
