"""Interactive figures: a Vega-Lite spec in the page, a static figure everywhere else.

An executed cell builds a `Vega-Lite <https://vega.github.io/vega-lite/>`_ spec
(a plain dict) from numbers ``selfattn`` computed, and displays it with
:func:`interactive_figure`. The cell's output carries three forms of it:

* ``text/html`` (the web page): a ``<div class="selfattn-vega">`` holding the
  spec as JSON and a static fallback image. The site's ``_static/interactive.js``
  renders the spec with vega-embed (served from the site, see
  ``_ext/vega_local.py``) and then hides the fallback. With JavaScript off, and
  in a published notebook, the fallback is what the reader sees.
* ``application/pdf`` (the LaTeX/PDF build, whose first choice it is) and
  ``image/png`` (any other non-HTML reader): the same static figure.
* ``text/plain``: the figure's description.

The page only recomputes what a slider or toggle changes, with Vega-Lite
transforms (``exp``, per-row sums) over the data the cell exported.

:func:`softmax_temperature_spec` and :func:`attention_toggle_spec` build the
book's two specs. Bad input raises ``TypeError`` or ``ValueError`` naming the
argument and the shape seen.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any

import numpy as np

__all__ = [
    "InteractiveFigure",
    "attention_toggle_spec",
    "interactive_figure",
    "softmax_temperature_spec",
]

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # an identifier: never fetched
# text at least 12 px: the page's charts are read at their drawn size
CONFIG = {"axis": {"labelFontSize": 12, "titleFontSize": 12},
          "legend": {"labelFontSize": 12, "titleFontSize": 12}}


def _spec_json(spec: dict) -> str:
    """The spec as JSON safe inside ``<script type="application/json">``."""
    try:
        text = json.dumps(spec, allow_nan=False, separators=(",", ":"))
    except ValueError as err:
        raise ValueError(f"spec: NaN or infinity cannot go into a Vega-Lite spec ({err})") from err
    except TypeError as err:
        raise TypeError(f"spec: expected JSON-serialisable values ({err})") from err
    # "</script>" or "<!--" inside a string would end the script element early
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _figure_bytes(fig: Any, fmt: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()


class InteractiveFigure:
    """A Vega-Lite spec plus its static fallback, displayed by Jupyter's rich display.

    Build it with :func:`interactive_figure`.
    """

    def __init__(self, spec: dict, svg: bytes, png: bytes, pdf: bytes, alt: str) -> None:
        self.spec = spec
        self.svg, self.png, self.pdf, self.alt = svg, png, pdf, alt

    def to_html(self) -> str:
        """The ``<div>``: the spec as JSON, an empty chart box, the fallback image."""
        svg64 = base64.b64encode(self.svg).decode("ascii")
        alt = html.escape(self.alt, quote=True)
        return (
            f'<div class="selfattn-vega" role="figure" aria-label="{alt}">'
            f'<script type="application/json" class="selfattn-vega-spec">{_spec_json(self.spec)}'
            "</script>"
            '<div class="selfattn-vega-chart"></div>'
            '<div class="selfattn-vega-fallback">'
            f'<img src="data:image/svg+xml;base64,{svg64}" alt="{alt}">'
            "<p>(Static version: the interactive one needs JavaScript.)</p>"
            "</div></div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/html": self.to_html(),
            "application/pdf": self.pdf,
            "image/png": base64.b64encode(self.png).decode("ascii"),
            "text/plain": f"<interactive figure: {self.alt}>",
        }


def interactive_figure(spec: dict, fallback: Any, *, alt: str) -> InteractiveFigure:
    """Wrap a Vega-Lite ``spec`` and a matplotlib ``fallback`` figure for display.

    Args:
        spec: a Vega-Lite v5 spec (dict); ``$schema`` is added when missing.
        fallback: the static matplotlib Figure showing the spec's initial state. It is
            saved (SVG for the page, PDF and PNG for the rest) and closed.
        alt: one-sentence description for screen readers and the fallback image.

    Returns:
        an object whose rich display is the interactive figure.
    """
    if not isinstance(spec, dict):
        raise TypeError(f"spec: expected a dict (a Vega-Lite spec), got {type(spec).__name__}")
    if not any(k in spec for k in ("mark", "layer", "hconcat", "vconcat", "concat", "facet")):
        raise ValueError(f"spec: expected a Vega-Lite view (mark, layer or concat), "
                         f"got keys {sorted(spec)}")
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError("alt: expected a non-empty description of the figure")
    if not hasattr(fallback, "savefig"):
        raise TypeError(f"fallback: expected a matplotlib Figure, got {type(fallback).__name__}")
    spec = {"$schema": SCHEMA, "config": CONFIG, **spec}
    _spec_json(spec)  # fail now, in the cell, on NaN or a non-JSON value
    import matplotlib.pyplot as plt

    svg, png, pdf = (_figure_bytes(fallback, f) for f in ("svg", "png", "pdf"))
    plt.close(fallback)
    return InteractiveFigure(spec, svg, png, pdf, alt.strip())


def _vector(name: str, x: Any) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected finite values, got {arr}")
    return arr


def softmax_temperature_spec(
    scores: Any,
    *,
    temperature: float = 1.0,
    t_min: float = 0.05,
    t_max: float = 5.0,
    step: float = 0.05,
) -> dict:
    """Bars of ``softmax(scores / T)`` with a slider for the temperature ``T``.

    The page computes, for the slider's ``T``: the weights (shifted by the row maximum,
    as :func:`selfattn.softmax` does), the largest weight and the entropy
    ``-sum w log w`` in nats, shown above the bars.

    Args:
        scores: ``(k_len,)`` one row of scores.
        temperature: the slider's initial ``T``.
        t_min, t_max, step: the slider's range (``0 < t_min <= temperature <= t_max``).

    Returns:
        a Vega-Lite spec (dict); its parameter is named ``T``.
    """
    s = _vector("scores", scores)
    if not 0 < t_min <= temperature <= t_max or step <= 0:
        raise ValueError(f"temperature: expected 0 < t_min <= temperature <= t_max and step > 0, "
                         f"got t_min={t_min}, temperature={temperature}, t_max={t_max}, "
                         f"step={step}")
    values = [{"key": f"key {j} (s = {v:g})", "order": j, "score": float(v)}
              for j, v in enumerate(s)]
    x = {"field": "key", "type": "nominal", "sort": None, "title": None,
         "axis": {"labelAngle": 0, "labelLimit": 90}}
    y = {"field": "weight", "type": "quantitative", "scale": {"domain": [0, 1]},
         "title": "weight"}
    return {
        "description": "softmax of a score row at temperature T",
        "width": "container",
        "height": 200,
        "autosize": {"type": "fit-x", "contains": "padding"},
        "params": [{"name": "T", "value": temperature,
                    "bind": {"input": "range", "min": t_min, "max": t_max, "step": step,
                             "name": "temperature T "}}],
        "data": {"values": values},
        "transform": [
            {"joinaggregate": [{"op": "max", "field": "score", "as": "smax"}]},
            # shift by the maximum before exp, as selfattn.softmax does
            {"calculate": "exp((datum.score - datum.smax) / T)", "as": "e"},
            {"joinaggregate": [{"op": "sum", "field": "e", "as": "esum"}]},
            {"calculate": "datum.e / datum.esum", "as": "weight"},
            {"calculate": "datum.weight > 0 ? -datum.weight * log(datum.weight) : 0",
             "as": "plogp"},
            {"joinaggregate": [{"op": "sum", "field": "plogp", "as": "entropy"},
                               {"op": "max", "field": "weight", "as": "largest"}]},
            {"calculate": "'largest weight ' + format(datum.largest, '.4f') + "
                          "'   entropy ' + format(datum.entropy, '.4f') + ' nats'",
             "as": "summary"},
        ],
        "layer": [
            {"name": "bars", "mark": {"type": "bar", "color": "#4c78a8"},
             "encoding": {"x": x, "y": y}},
            {"name": "bar_labels", "mark": {"type": "text", "dy": -7, "fontSize": 12},
             "encoding": {"x": x, "y": y, "text": {"field": "weight", "format": ".4f"}}},
            {"name": "summary",
             "transform": [{"filter": "datum.order == 0"}],
             "mark": {"type": "text", "align": "left", "baseline": "bottom", "dy": -12,
                      "fontSize": 12},
             "encoding": {
                 "x": {"value": 0}, "y": {"value": 0},
                 "text": {"field": "summary", "type": "nominal"}}},
        ],
    }


def attention_toggle_spec(
    raw_scores: Any,
    tokens: list[str],
    *,
    head_dim: int,
    head_names: list[str] | None = None,
) -> dict:
    """Heatmap of one head's attention weights, with a head selector and two toggles.

    The page computes, for the chosen head: ``S = raw · (1/sqrt(head_dim) if scaled
    else 1)``, blocks keys after the query when ``causal`` is on, and takes the
    softmax of each row (shifted by the row maximum over the allowed keys).

    Args:
        raw_scores: ``(num_heads, seq_len, seq_len)`` unscaled ``Q Kᵀ`` of each head.
        tokens: ``seq_len`` token strings (rows are queries, columns keys).
        head_dim: ``d_k``, for the scale ``1/sqrt(d_k)``.
        head_names: optional label of each head for the selector.

    Returns:
        a Vega-Lite spec (dict); its parameters are ``head``, ``scaled``, ``causal``.
    """
    raw = np.asarray(raw_scores, dtype=float)
    if raw.ndim != 3 or raw.shape[1] != raw.shape[2] or raw.shape[0] == 0:
        raise ValueError(f"raw_scores: expected shape (num_heads, seq_len, seq_len), "
                         f"got {raw.shape}")
    if not np.isfinite(raw).all():
        raise ValueError(f"raw_scores: expected finite values (shape {raw.shape})")
    num_heads, seq_len, _ = raw.shape
    if len(tokens) != seq_len:
        raise ValueError(f"tokens: expected {seq_len} tokens (raw_scores has shape "
                         f"{raw.shape}), got {len(tokens)}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"head_dim: expected a positive int, got {head_dim!r}")
    names = [f"head {h}" for h in range(num_heads)] if head_names is None else list(head_names)
    if len(names) != num_heads:
        raise ValueError(f"head_names: expected {num_heads} names, got {len(names)}")
    labels = [f"{i} {t}" for i, t in enumerate(tokens)]  # unique even when a word repeats
    values = [{"head": h, "qi": i, "ki": j, "query": labels[i], "key": labels[j],
               "raw": float(raw[h, i, j])}
              for h in range(num_heads) for i in range(seq_len) for j in range(seq_len)]
    scale = 1.0 / math.sqrt(head_dim)
    x = {"field": "key", "type": "ordinal", "sort": labels, "title": "key",
         "axis": {"labelAngle": -45}}
    yq = {"field": "query", "type": "ordinal", "sort": labels, "title": "query"}
    return {
        "description": "attention weights of one head with causal and scale toggles",
        "width": "container",
        "height": 34 * seq_len,
        "autosize": {"type": "fit-x", "contains": "padding"},
        "params": [
            {"name": "head", "value": 0,
             "bind": {"input": "select", "options": list(range(num_heads)),
                      "labels": names, "name": "head "}},
            {"name": "scaled", "value": True,
             "bind": {"input": "checkbox", "name": f"scale by 1/√d_k (d_k = {head_dim}) "}},
            {"name": "causal", "value": False,
             "bind": {"input": "checkbox", "name": "causal mask "}},
        ],
        "data": {"values": values},
        "transform": [
            {"filter": "datum.head == head"},
            {"calculate": f"datum.raw * (scaled ? {scale!r} : 1)", "as": "score"},
            {"calculate": "!causal || datum.ki <= datum.qi", "as": "allowed"},
            {"calculate": "datum.allowed ? datum.score : null", "as": "open_score"},
            {"joinaggregate": [{"op": "max", "field": "open_score", "as": "smax"}],
             "groupby": ["qi"]},
            {"calculate": "datum.allowed ? exp(datum.score - datum.smax) : 0", "as": "e"},
            {"joinaggregate": [{"op": "sum", "field": "e", "as": "esum"}], "groupby": ["qi"]},
            {"calculate": "datum.e / datum.esum", "as": "weight"},
            {"calculate": "datum.allowed ? format(datum.weight, '.2f') : '×'", "as": "label"},
        ],
        "encoding": {"x": x, "y": yq},
        "layer": [
            {"name": "cells", "mark": {"type": "rect", "stroke": "#888", "strokeWidth": 0.5},
             "encoding": {"color": {
                 "condition": {"test": "!datum.allowed", "value": "#bbbbbb"},
                 "field": "weight", "type": "quantitative",
                 "scale": {"domain": [0, 1], "scheme": "blues"},
                 "legend": {"title": "weight"}}}},
            {"name": "cell_labels", "mark": {"type": "text", "fontSize": 11},
             "encoding": {"text": {"field": "label"},
                          "color": {"condition": {"test": "datum.weight > 0.5",
                                                  "value": "white"},
                                    "value": "black"}}},
        ],
    }
