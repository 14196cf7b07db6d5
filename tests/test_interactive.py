"""The interactive figures in headless Chromium, with the network cut off.

Each slider, toggle and selector is moved by script (and the slider by keyboard);
the weights the page then computes, and the numbers it prints, must equal what
selfattn computes from the same exported data. JavaScript off: the static fallback
shows. At 390 px nothing scrolls sideways; in dark mode the text stays light.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlparse

import numpy as np
import pytest

import selfattn

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")  # the fixtures (conftest.py) drive Chromium with it

TEMPERATURE_PAGE = "chapters/04-whys.html"
HEADS_PAGE = "chapters/03-multi-head.html"
PAGES = [TEMPERATURE_PAGE, HEADS_PAGE]

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




class Visit:
    """One page, every request to another host blocked and recorded, errors collected."""

    def __init__(self, browser: object, site: str, rel: str, **ctx: object) -> None:
        self.context = browser.new_context(**ctx)
        self.external: list[str] = []
        self.errors: list[str] = []
        host = urlparse(site).netloc

        def route(route, request) -> None:  # noqa: ANN001
            if urlparse(request.url).netloc in (host, "") or request.url.startswith("data:"):
                route.continue_()
            else:
                self.external.append(request.url)
                route.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.goto(f"{site}/{rel}", wait_until="load")

    def figure(self) -> object:
        """The page's (first) interactive figure, once drawn."""
        self.page.wait_for_selector("div.selfattn-vega.selfattn-vega-ready", timeout=30_000)
        return self.page.query_selector("div.selfattn-vega")

    def __enter__(self) -> Visit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.close()


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
        el = visit.figure()
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
        el = visit.figure()
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


@pytest.mark.parametrize("rel", PAGES)
def test_without_javascript_the_static_fallback_shows(browser: object, site: str,
                                                      rel: str) -> None:
    with Visit(browser, site, rel, java_script_enabled=False) as visit:
        img = visit.page.query_selector("div.selfattn-vega .selfattn-vega-fallback img")
        assert img is not None and img.is_visible()
        assert img.evaluate("i => i.complete && i.naturalWidth > 0")
        assert img.bounding_box()["width"] > 200


@pytest.mark.parametrize("rel", PAGES)
def test_phone_width_no_sideways_scroll(browser: object, site: str, rel: str) -> None:
    with Visit(browser, site, rel, viewport={"width": 390, "height": 844}) as visit:
        el = visit.figure()
        widths = visit.page.evaluate(
            "() => ({doc: document.documentElement.scrollWidth, view: window.innerWidth})")
        assert widths["doc"] <= widths["view"], widths
        box = el.bounding_box()
        chart = el.query_selector("svg").bounding_box()
        assert chart["x"] >= box["x"] - 0.5 and chart["x"] + chart["width"] <= box["x"] + box[
            "width"] + 0.5, (chart, box)
        assert not el.query_selector(".selfattn-vega-fallback").is_visible()


def luminance(css_color: str) -> float:
    if css_color.startswith("#"):
        h = css_color.lstrip("#")
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    else:
        r, g, b = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


# texts drawn on the page background (axis labels, titles, the summary line), not in cells
PAGE_TEXT_JS = """
el => Array.from(el.querySelectorAll('svg text'))
  .filter(t => !t.closest('.cell_labels_marks'))
  .map(t => getComputedStyle(t).fill)
"""


@pytest.mark.parametrize("rel", PAGES)
def test_dark_mode_text_is_light(browser: object, site: str, rel: str) -> None:
    for scheme in ("light", "dark"):
        with Visit(browser, site, rel, color_scheme=scheme) as visit:
            el = visit.figure()
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
