"""The interactive figures in headless Chromium, with the network cut off.

Each slider, toggle and selector is moved by script (and the slider by keyboard);
the weights the page then computes, and the numbers it prints, must equal what
selfattn computes from the same exported data. JavaScript off: the static fallback
shows. At 390 px nothing scrolls sideways; in dark mode the text stays light.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import selfattn
from sitetools import OfflinePage, luminance

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

TEMPERATURE_PAGE = "chapters/04-whys.html"  # also the d_k slider (VARIANCE)
HEADS_PAGE = "chapters/03-multi-head.html"
PERPLEXITY_PAGE = "chapters/06-perplexity.html"
PAGES = [TEMPERATURE_PAGE, HEADS_PAGE, PERPLEXITY_PAGE]
# each figure is found by the start of its spec's description
TEMPERATURE = "softmax of a score row"
HEADS = "attention weights of one head"
VARIANCE = "histograms of raw and scaled"
PERPLEXITY = "perplexity of a model's next-token"

# The rows the page computed: the compiled Vega spec's data set that has a "weight" field.
WEIGHTS_JS = """
async (el) => {
  await el.vegaView.runAsync();
  for (const d of el.vegaSpec.data) {
    let rows;
    try { rows = el.vegaView.data(d.name); } catch (err) { continue; }
    if (rows.length && 'weight' in rows[0]) return rows.map(r => Object.assign({}, r));
  }
  return null;
}
"""
TEXTS_JS = "el => Array.from(el.querySelectorAll('svg text')).map(t => t.textContent)"


class Visit(OfflinePage):
    """One page, every request to another host blocked and recorded, errors collected
    (sitetools.OfflinePage), and its interactive figures."""

    def figures(self) -> list[object]:
        """The page's interactive figures, once all are drawn."""
        self.page.wait_for_function(
            "() => { const all = document.querySelectorAll('div.selfattn-vega');"
            " return all.length > 0 && Array.from(all).every("
            "  el => el.classList.contains('selfattn-vega-ready')); }", timeout=30_000)
        return self.page.query_selector_all("div.selfattn-vega")

    def figure(self, description: str) -> object:
        """The figure whose spec's description starts with ``description``, once drawn."""
        found = [el for el in self.figures()
                 if exported(el).get("description", "").startswith(description)]
        assert len(found) == 1, f"{len(found)} figures described {description!r}"
        return found[0]


def exported(el: object) -> dict:
    """The spec the cell exported (the JSON in the page)."""
    return json.loads(el.eval_on_selector("script.selfattn-vega-spec", "s => s.textContent"))


def set_slider(el: object, value: float) -> None:
    el.eval_on_selector(
        "input[type=range]",
        "(s, v) => { s.value = String(v); s.dispatchEvent(new Event('input', {bubbles: true})); }",
        value,
    )


def check_temperature(el: object, scores: np.ndarray, temperature: float) -> None:
    assert el.evaluate("el => el.vegaView.signal('T')") == pytest.approx(temperature)
    rows = sorted(el.evaluate(WEIGHTS_JS), key=lambda r: r["order"])
    expected = selfattn.softmax(scores / temperature)
    assert np.allclose([r["weight"] for r in rows], expected, atol=1e-12, rtol=0)
    entropy = float(-(expected * np.log(expected)).sum())
    texts = el.evaluate(TEXTS_JS)
    summary = next(t for t in texts if t.startswith("largest weight"))
    largest, shown_entropy = (float(v) for v in re.findall(r"\d+\.\d+", summary))
    assert largest == round(float(expected.max()), 4), summary
    assert shown_entropy == round(entropy, 4), summary
    labels = {f"{w:.4f}" for w in expected}
    assert labels <= set(texts), (labels, texts)


def test_temperature_slider_matches_selfattn(browser: object, site: str) -> None:
    with Visit(browser, site, TEMPERATURE_PAGE) as visit:
        el = visit.figure(TEMPERATURE)
        scores = np.array([d["score"] for d in exported(el)["data"]["values"]])
        check_temperature(el, scores, 1.0)  # the initial position
        for temperature in (0.25, 3.5):  # two slider positions, set by script
            set_slider(el, temperature)
            check_temperature(el, scores, temperature)
        # keyboard: the slider is a focusable <input type=range>; one step right
        slider = el.query_selector("input[type=range]")
        slider.focus()
        visit.page.keyboard.press("ArrowRight")
        check_temperature(el, scores, 3.55)
        assert visit.external == [] and visit.errors == [], (visit.external, visit.errors)


def expected_heads(raw: np.ndarray, head: int, scaled: bool, causal: bool,
                   head_dim: int) -> np.ndarray:
    scores = raw[head] * (1 / np.sqrt(head_dim) if scaled else 1.0)
    if causal:
        scores = np.where(selfattn.causal_mask(len(scores)), scores, -np.inf)
    return selfattn.softmax(scores)


def test_head_selector_and_toggles_match_selfattn(browser: object, site: str) -> None:
    with Visit(browser, site, HEADS_PAGE) as visit:
        el = visit.figure(HEADS)
        spec = exported(el)
        values = spec["data"]["values"]
        n_heads = 1 + max(d["head"] for d in values)
        seq_len = 1 + max(d["qi"] for d in values)
        raw = np.zeros((n_heads, seq_len, seq_len))
        for d in values:
            raw[d["head"], d["qi"], d["ki"]] = d["raw"]
        head_dim = int(re.search(r"d_k = (\d+)", json.dumps(spec["params"])).group(1))
        select = el.query_selector("select")
        boxes = el.query_selector_all("input[type=checkbox]")
        scale_box, causal_box = boxes  # in the spec's order: scaled, causal
        states = [(0, True, False), (1, True, False), (1, True, True), (0, False, True)]
        seen = []
        for head, scaled, causal in states:
            select.select_option(str(head))
            scale_box.set_checked(scaled)
            causal_box.set_checked(causal)
            rows = el.evaluate(WEIGHTS_JS)
            got = np.zeros((seq_len, seq_len))
            for r in rows:
                got[r["qi"], r["ki"]] = r["weight"]
            want = expected_heads(raw, head, scaled, causal, head_dim)
            assert np.allclose(got, want, atol=1e-12, rtol=0), (head, scaled, causal)
            labels = el.evaluate(TEXTS_JS)
            assert labels.count("×") == (seq_len * (seq_len - 1) // 2 if causal else 0)
            seen.append(got)
        assert not np.allclose(seen[0], seen[1]) and not np.allclose(seen[1], seen[2])
        assert visit.external == [] and visit.errors == [], (visit.external, visit.errors)


# The rows of every data set of the compiled spec that has `field`, one list per data set.
ROWS_WITH_JS = """
async (el, field) => {
  await el.vegaView.runAsync();
  const out = [];
  for (const d of el.vegaSpec.data) {
    let rows;
    try { rows = el.vegaView.data(d.name); } catch (err) { continue; }
    if (rows.length && field in rows[0]) out.push(rows.map(r => Object.assign({}, r)));
  }
  return out;
}
"""


def rows_with(el: object, field: str) -> list[list[dict]]:
    return el.evaluate(ROWS_WITH_JS, field)


def redraw_scores(moment: dict) -> tuple[np.ndarray, np.ndarray]:
    """The d_k figure's samples drawn again from their exported seed, as the chapter does:
    q then k, normal with the figure's sigma, shape (200, 16, d_k); scores by selfattn."""
    d_k = 2 ** moment["e"]
    sigma = float(np.sqrt(np.sqrt(moment["s4"])))
    rng = np.random.default_rng(moment["seed"])
    shape = (200, 16, d_k)
    assert moment["n"] == 200 * 16 * 16
    q = rng.normal(0.0, sigma, size=shape)
    k = rng.normal(0.0, sigma, size=shape)
    return selfattn.attention_scores(q, k, scale=1.0), selfattn.attention_scores(q, k)


def check_variance(el: object, spec: dict, e: int) -> None:
    d_k = 2 ** e
    assert el.evaluate("el => [el.vegaView.signal('log2_d_k'), el.vegaView.signal('d_k')]") == [
        e, d_k]
    shown = {rows[0]["kind"]: rows[0] for rows in rows_with(el, "variance")}
    assert set(shown) == {"raw", "scaled"} and all(r["e"] == e for r in shown.values())
    s4 = shown["scaled"]["theory"]  # sigma^4, the formula of the scaled panel
    raw, scaled = redraw_scores({**shown["raw"], "s4": s4})
    texts = el.evaluate(TEXTS_JS)
    assert f"head size d_k = {d_k}" in texts, texts
    for kind, scores, line in (
            ("raw", raw, f"Var(q·k) = {raw.var():.2f} (d_k σ⁴ = {d_k * s4:.0f})"),
            ("scaled", scaled, f"Var(q·k/√d_k) = {scaled.var():.2f} (σ⁴ = {s4:.0f})")):
        assert shown[kind]["variance"] == pytest.approx(scores.var(), rel=1e-9, abs=0)
        assert line in texts, (line, texts)
    # the bars: the share of the scores in each fixed bin, as numpy counts them
    bars = {rows[0]["kind"]: rows for rows in rows_with(el, "share")}
    widest = 2 ** max(m["e"] for m in spec["datasets"]["moments"])
    for kind, scores in (("raw", raw), ("scaled", scaled)):
        half = 4.5 * np.sqrt(s4 * (widest if kind == "raw" else 1))
        n_bins = round(2 * half / (bars[kind][0]["x1"] - bars[kind][0]["x0"]))
        counts, _ = np.histogram(scores, bins=n_bins, range=(-half, half))
        got = np.zeros(n_bins)
        for r in bars[kind]:
            got[r["b"]] = r["share"]
            assert r["x0"] == pytest.approx(-half + r["b"] * 2 * half / n_bins)
        assert np.allclose(got, counts / counts.sum(), atol=1e-15, rtol=0), kind


def test_d_k_slider_matches_selfattn(browser: object, site: str) -> None:
    with Visit(browser, site, TEMPERATURE_PAGE) as visit:
        el = visit.figure(VARIANCE)
        spec = exported(el)
        check_variance(el, spec, 6)  # the initial position, d_k = 64
        for e in (1, 10):  # d_k = 2 and d_k = 1024, set by script
            set_slider(el, e)
            check_variance(el, spec, e)
        slider = el.query_selector("input[type=range]")
        slider.focus()
        visit.page.keyboard.press("ArrowLeft")  # one step down: d_k = 512
        check_variance(el, spec, 9)
        assert visit.external == [] and visit.errors == [], (visit.external, visit.errors)


def check_perplexity(el: object, logits: np.ndarray, targets: np.ndarray,
                     temperature: float) -> float:
    assert el.evaluate("el => el.vegaView.signal('T')") == pytest.approx(temperature)
    found = rows_with(el, "ce")  # the row the page computed for the slider's T (per layer)
    assert found and all(len(rows) == 1 and rows[0] == found[0][0] for rows in found)
    row = found[0][0]
    want_nll = selfattn.negative_log_likelihood(logits[None] / temperature, targets[None])
    want = selfattn.perplexity(logits[None] / temperature, targets[None])
    assert row["positions"] == len(targets)
    assert row["ce"] == pytest.approx(want_nll, rel=1e-12, abs=0)
    assert row["ppl"] == pytest.approx(want, rel=1e-12, abs=0)
    line = f"T = {temperature:.2f}: perplexity {want:.4f}"
    assert line in el.evaluate(TEXTS_JS), line
    return want


def test_temperature_perplexity_matches_selfattn(browser: object, site: str) -> None:
    with Visit(browser, site, PERPLEXITY_PAGE) as visit:
        el = visit.figure(PERPLEXITY)
        data = exported(el)["datasets"]
        logits = np.array([r["z"] for r in data["logits"]])  # (N, V)
        targets = np.array([r["y"] for r in data["logits"]])  # (N,)
        at_one = check_perplexity(el, logits, targets, 1.0)  # the initial position
        # the point sits on the exported curve, and the prose quotes the same number
        curve_one = next(c["ppl"] for c in data["curve"] if c["t"] == pytest.approx(1.0))
        assert at_one == pytest.approx(curve_one, rel=1e-12)
        # textContent, not innerText: a section off screen is not laid out
        # (content-visibility), and innerText leaves out what is not laid out
        prose = " ".join(visit.page.locator("main p, main li").all_text_contents())
        assert f"{at_one:.4f}" in prose
        for temperature in (0.5, 2.5):  # two slider positions, set by script
            set_slider(el, temperature)
            check_perplexity(el, logits, targets, temperature)
        slider = el.query_selector("input[type=range]")
        slider.focus()
        visit.page.keyboard.press("ArrowLeft")  # one step down
        check_perplexity(el, logits, targets, 2.45)
        assert visit.external == [] and visit.errors == [], (visit.external, visit.errors)


@pytest.mark.parametrize("rel", PAGES)
def test_without_javascript_the_static_fallback_shows(browser: object, site: str,
                                                      rel: str) -> None:
    with Visit(browser, site, rel, java_script_enabled=False) as visit:
        imgs = visit.page.query_selector_all("div.selfattn-vega .selfattn-vega-fallback img")
        assert imgs and len(imgs) == len(visit.page.query_selector_all("div.selfattn-vega"))
        for img in imgs:
            img.scroll_into_view_if_needed()
            assert img.is_visible()
            assert img.evaluate("i => i.complete && i.naturalWidth > 0")
            assert img.bounding_box()["width"] > 200


@pytest.mark.slow
@pytest.mark.parametrize("rel", PAGES)
def test_phone_width_no_sideways_scroll(browser: object, site: str, rel: str) -> None:
    with Visit(browser, site, rel, viewport={"width": 390, "height": 844}) as visit:
        figures = visit.figures()
        widths = visit.page.evaluate(
            "() => ({doc: document.documentElement.scrollWidth, view: window.innerWidth})")
        assert widths["doc"] <= widths["view"], widths
        for el in figures:
            box = el.bounding_box()
            chart = el.query_selector("svg").bounding_box()
            assert chart["x"] >= box["x"] - 0.5 and chart["x"] + chart["width"] <= box[
                "x"] + box["width"] + 0.5, (chart, box)
            assert not el.query_selector(".selfattn-vega-fallback").is_visible()


# texts drawn on the page background (axis labels, titles, the summary line), not in cells
PAGE_TEXT_JS = """
el => Array.from(el.querySelectorAll('svg text'))
  .filter(t => !t.closest('.cell_labels_marks'))
  .map(t => getComputedStyle(t).fill)
"""


@pytest.mark.slow
@pytest.mark.parametrize("rel", PAGES)
def test_dark_mode_text_is_light(browser: object, site: str, rel: str) -> None:
    for scheme in ("light", "dark"):
        with Visit(browser, site, rel, color_scheme=scheme) as visit:
            for el in visit.figures():
                assert el.evaluate("el => el.dataset.theme") == scheme
                fills = [luminance(f) for f in el.evaluate(PAGE_TEXT_JS) if f != "none"]
                assert fills
                if scheme == "dark":
                    assert min(fills) > 0.6, fills
                else:
                    assert max(fills) < 0.45, fills
                controls = el.evaluate(
                    "el => getComputedStyle(el.querySelector('.vega-bindings label')).color")
                assert (luminance(controls) > 0.6) == (scheme == "dark"), controls
