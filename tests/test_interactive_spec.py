"""Tests for selfattn.interactive: the cell output and the two specs (no browser).

The in-page computation itself is checked against selfattn in Chromium by
tests/test_interactive.py.
"""

from __future__ import annotations

import json
import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import selfattn  # noqa: E402
from selfattn.interactive import (  # noqa: E402
    attention_toggle_spec,
    interactive_figure,
    perplexity_temperature_spec,
    score_variance_spec,
    softmax_temperature_spec,
)

SCORES = np.array([2.0, 1.8, 0.5, -1.0])


def _fig() -> object:
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    return fig


def _spec_from_html(html: str) -> dict:
    match = re.search(r'<script type="application/json" class="selfattn-vega-spec">(.*?)'
                      r"</script>", html, re.S)
    assert match, html[:200]
    return json.loads(match.group(1))


def test_bundle_has_html_for_the_page_and_static_forms_for_the_rest() -> None:
    spec = softmax_temperature_spec(SCORES)
    bundle = interactive_figure(spec, _fig(), alt="four bars")._repr_mimebundle_()
    # image/svg+xml would outrank text/html on the site (conf.py's mime priorities)
    assert set(bundle) == {"text/html", "application/pdf", "image/png", "text/plain"}
    assert bundle["application/pdf"].startswith(b"%PDF")
    html = bundle["text/html"]
    assert 'class="selfattn-vega"' in html and 'aria-label="four bars"' in html
    assert '<img src="data:image/svg+xml;base64,' in html  # the fallback, inside the div
    parsed = _spec_from_html(html)
    assert parsed["$schema"].endswith("vega-lite/v5.json")
    assert parsed["data"] == spec["data"] and parsed["transform"] == spec["transform"]


def test_spec_text_cannot_close_the_script_element() -> None:
    raw = np.zeros((1, 2, 2))
    spec = attention_toggle_spec(raw, ["</script><b>", "a&b"], head_dim=2)
    html = interactive_figure(spec, _fig(), alt="x").to_html()
    assert "</script><b>" not in html
    keys = {d["key"] for d in _spec_from_html(html)["data"]["values"]}
    assert keys == {"0 </script><b>", "1 a&b"}


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"scores: .*shape \(2, 2\)"):
        softmax_temperature_spec(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="scores: expected finite"):
        softmax_temperature_spec(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="temperature"):
        softmax_temperature_spec(SCORES, temperature=0.0)
    with pytest.raises(ValueError, match=r"raw_scores: .*got \(2, 3\)"):
        attention_toggle_spec(np.zeros((2, 3)), ["a", "b"], head_dim=2)
    with pytest.raises(ValueError, match="tokens: expected 2 tokens"):
        attention_toggle_spec(np.zeros((1, 2, 2)), ["a"], head_dim=2)
    with pytest.raises(ValueError, match="head_dim"):
        attention_toggle_spec(np.zeros((1, 2, 2)), ["a", "b"], head_dim=0)
    with pytest.raises(ValueError, match="head_names: expected 1"):
        attention_toggle_spec(np.zeros((1, 2, 2)), ["a", "b"], head_dim=2, head_names=[])
    with pytest.raises(TypeError, match="spec: expected a dict"):
        interactive_figure([1], _fig(), alt="x")
    with pytest.raises(ValueError, match="spec: expected a Vega-Lite view"):
        interactive_figure({"data": {}}, _fig(), alt="x")
    with pytest.raises(ValueError, match="spec: NaN"):
        interactive_figure({"mark": "bar", "data": {"values": [{"a": math.nan}]}}, _fig(),
                           alt="x")
    with pytest.raises(ValueError, match="alt"):
        interactive_figure({"mark": "bar"}, _fig(), alt=" ")
    with pytest.raises(TypeError, match="fallback: expected a matplotlib Figure"):
        interactive_figure({"mark": "bar"}, "fig.png", alt="x")


def test_specs_export_the_data_the_page_needs() -> None:
    spec = softmax_temperature_spec(SCORES, temperature=2.0, t_max=4.0)
    assert [d["score"] for d in spec["data"]["values"]] == SCORES.tolist()
    (param,) = spec["params"]
    assert param["name"] == "T" and param["value"] == 2.0 and param["bind"]["max"] == 4.0
    assert param["bind"]["input"] == "range"  # a native slider: focusable, keyboard works

    raw = np.arange(2 * 3 * 3, dtype=float).reshape(2, 3, 3)
    spec = attention_toggle_spec(raw, ["a", "b", "a"], head_dim=4)
    values = spec["data"]["values"]
    assert len(values) == raw.size
    assert all(raw[d["head"], d["qi"], d["ki"]] == d["raw"] for d in values)
    assert {p["name"] for p in spec["params"]} == {"head", "scaled", "causal"}
    # the scale the page multiplies by is 1/sqrt(head_dim), written out in full precision
    assert any(f"{0.5!r}" in t.get("calculate", "") for t in spec["transform"])


def _variance_samples() -> tuple[dict, dict]:
    rng = np.random.default_rng(0)
    raw, scaled = {}, {}
    for d_k in (2, 4, 8):
        q, k = rng.normal(size=(2, 5, 7, d_k))
        raw[d_k] = selfattn.attention_scores(q, k, scale=1.0)
        scaled[d_k] = selfattn.attention_scores(q, k)
    return raw, scaled


def test_variance_spec_exports_moments_and_fixed_bins() -> None:
    raw, scaled = _variance_samples()
    spec = score_variance_spec(raw, scaled, sigma=1.0, bins=11, seeds={2: 7, 4: 8, 8: 9})
    moments = spec["datasets"]["moments"]
    assert len(moments) == 6 and {m["e"] for m in moments} == {1, 2, 3}
    for m in moments:
        x = (raw if m["kind"] == "raw" else scaled)[2 ** m["e"]]
        # the page's formula gives numpy's (population) variance
        assert m["s2"] / m["n"] - (m["s1"] / m["n"]) ** 2 == pytest.approx(x.var(), rel=1e-12)
        assert m["seed"] == {1: 7, 2: 8, 3: 9}[m["e"]]
    counts = spec["datasets"]["counts"]
    for (e, kind) in {(c["e"], c["kind"]) for c in counts}:
        x = (raw if kind == "raw" else scaled)[2 ** e]
        half = 4.5 * (math.sqrt(8) if kind == "raw" else 1.0)  # sigma = 1, widest d_k = 8
        want, _ = np.histogram(x, bins=11, range=(-half, half))
        got = np.zeros(11, dtype=int)
        for c in counts:
            if (c["e"], c["kind"]) == (e, kind):
                got[c["b"]] = c["c"]
        assert got.tolist() == want.tolist()
    slider, d_k = spec["params"]
    assert slider["name"] == "log2_d_k" and slider["value"] == 2  # the middle d_k, 4
    assert slider["bind"] == {"input": "range", "min": 1, "max": 3, "step": 1,
                              "name": slider["bind"]["name"]}
    assert d_k == {"name": "d_k", "expr": "pow(2, log2_d_k)"}
    assert "seed" not in score_variance_spec(raw, scaled, sigma=1.0)["datasets"]["moments"][0]


def test_variance_spec_bad_input() -> None:
    raw, scaled = _variance_samples()
    with pytest.raises(ValueError, match="scaled_scores: expected the keys"):
        score_variance_spec(raw, {2: scaled[2]}, sigma=1.0)
    with pytest.raises(ValueError, match="powers of two"):
        score_variance_spec({3: raw[2]}, {3: scaled[2]}, sigma=1.0)
    with pytest.raises(ValueError, match="consecutive"):
        score_variance_spec({2: raw[2], 8: raw[8]}, {2: scaled[2], 8: scaled[8]}, sigma=1.0)
    with pytest.raises(ValueError, match="sigma"):
        score_variance_spec(raw, scaled, sigma=0.0)
    with pytest.raises(ValueError, match="initial_d_k"):
        score_variance_spec(raw, scaled, sigma=1.0, initial_d_k=16)
    with pytest.raises(ValueError, match=r"raw_scores\[4\]: .*finite"):
        score_variance_spec({**raw, 4: np.full(3, np.nan)}, scaled, sigma=1.0)
    with pytest.raises(ValueError, match="seeds"):
        score_variance_spec(raw, scaled, sigma=1.0, seeds={2: 1})
    with pytest.raises(TypeError, match="dicts"):
        score_variance_spec([raw[2]], [scaled[2]], sigma=1.0)


LOGITS = np.array([[2.0, 0.5, -1.0], [0.0, 1.5, 0.2], [-0.3, 0.1, 0.9], [1.0, 1.0, -2.0]])
TARGETS = np.array([0, 2, 2, 1])


def test_perplexity_spec_exports_logits_and_the_curve() -> None:
    spec = perplexity_temperature_spec(LOGITS, TARGETS, t_min=0.5, t_max=2.0, curve_points=5)
    rows = spec["datasets"]["logits"]
    assert [r["z"] for r in rows] == LOGITS.tolist() and [r["y"] for r in rows] == [0, 2, 2, 1]
    curve = spec["datasets"]["curve"]
    assert [c["t"] for c in curve] == pytest.approx([0.5, 0.5 ** 0.5, 1.0, 2 ** 0.5, 2.0])
    for c in curve:  # each point: exp of the mean cross-entropy of softmax(logits / T)
        logp = np.log(selfattn.softmax(LOGITS / c["t"]))
        want = math.exp(-logp[np.arange(4), TARGETS].mean())
        assert c["ppl"] == pytest.approx(want, rel=1e-12)
    (param,) = spec["params"]
    assert param["name"] == "T" and param["value"] == 1.0 and param["bind"]["input"] == "range"
    flat = json.dumps(spec["layer"])
    assert "exp((datum.z - datum.zmax) / T)" in flat and "exp(datum.ce)" in flat


def test_perplexity_spec_bad_input() -> None:
    with pytest.raises(ValueError, match=r"logits: expected shape \(N, V\).*\(3,\)"):
        perplexity_temperature_spec(np.zeros(3), np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="logits: expected finite"):
        perplexity_temperature_spec(np.full((2, 3), np.inf), np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match=r"targets: expected shape \(4,\)"):
        perplexity_temperature_spec(LOGITS, TARGETS[:3])
    with pytest.raises(ValueError, match=r"targets: expected ints in \[0, 3\)"):
        perplexity_temperature_spec(LOGITS, np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="targets: expected ints"):
        perplexity_temperature_spec(LOGITS, TARGETS.astype(float))
    with pytest.raises(ValueError, match="temperature"):
        perplexity_temperature_spec(LOGITS, TARGETS, temperature=5.0)
    with pytest.raises(ValueError, match="curve_points"):
        perplexity_temperature_spec(LOGITS, TARGETS, curve_points=1)
