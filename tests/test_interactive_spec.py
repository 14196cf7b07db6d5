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

from selfattn.interactive import (  # noqa: E402
    attention_toggle_spec,
    interactive_figure,
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
