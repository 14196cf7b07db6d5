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

:func:`softmax_temperature_spec`, :func:`attention_toggle_spec`,
:func:`score_variance_spec` and :func:`perplexity_temperature_spec` build the
book's four specs. Bad input raises ``TypeError`` or ``ValueError`` naming the
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
    "perplexity_temperature_spec",
    "score_variance_spec",
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


def _slider(name: str, value: float, low: float, high: float, step: float,
            label: str) -> dict:
    """A Vega-Lite parameter bound to a range input (the page's slider)."""
    return {"name": name, "value": value,
            "bind": {"input": "range", "min": low, "max": high, "step": step, "name": label}}


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
    values = [{"key": f"key {j}: s = {v:g}", "order": j, "score": float(v)}
              for j, v in enumerate(s)]
    # two-line labels ("key 0" over "s = 2"), so neighbours do not touch on a phone
    x = {"field": "key", "type": "nominal", "sort": None, "title": None,
         "axis": {"labelAngle": 0, "labelLimit": 90, "labelExpr": "split(datum.label, ': ')"}}
    y = {"field": "weight", "type": "quantitative", "scale": {"domain": [0, 1]},
         "title": "weight"}
    return {
        "description": "softmax of a score row at temperature T",
        "width": "container",
        "height": 200,
        "autosize": {"type": "fit-x", "contains": "padding"},
        "params": [_slider("T", temperature, t_min, t_max, step, "temperature T ")],
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
                          "', entropy ' + format(datum.entropy, '.4f') + ' nats'",
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


def score_variance_spec(
    raw_scores: dict[int, Any],
    scaled_scores: dict[int, Any],
    *,
    sigma: float,
    initial_d_k: int | None = None,
    bins: int = 61,
    seeds: dict[int, int] | None = None,
) -> dict:
    """Histograms of raw and scaled scores, with a slider for the head size ``d_k``.

    For every ``d_k`` (a power of two) the cell gives the sampled raw scores ``q·k`` and the
    scaled ones ``q·k/sqrt(d_k)``. The spec exports, per ``d_k`` and kind, the histogram
    counts (fixed bins, the same for every ``d_k``, so the spread is comparable) and the
    moments ``n``, ``sum x``, ``sum x²``. The page keeps the rows of the slider's ``d_k``
    and recomputes each sample variance ``sum x²/n - (sum x/n)²`` from the moments.

    Args:
        raw_scores: ``{d_k: scores}``, any shape, the unscaled dot products.
        scaled_scores: ``{d_k: scores}``, the same keys, the scaled dot products.
        sigma: the standard deviation the queries and keys were drawn with (for the
            formula ``d_k σ⁴`` the page prints next to the measurement).
        initial_d_k: the slider's initial ``d_k`` (default: the middle one).
        bins: number of histogram bins in each panel.
        seeds: optional ``{d_k: seed}`` the samples were drawn with, exported beside the
            moments so that a reader (and the tests) can draw them again.

    Returns:
        a Vega-Lite spec (dict); its slider parameter is ``log2_d_k`` and ``d_k`` is
        ``2 ** log2_d_k``.
    """
    if not isinstance(raw_scores, dict) or not isinstance(scaled_scores, dict) or not raw_scores:
        raise TypeError("raw_scores, scaled_scores: expected non-empty dicts {d_k: scores}")
    if sorted(raw_scores) != sorted(scaled_scores):
        raise ValueError(f"scaled_scores: expected the keys of raw_scores {sorted(raw_scores)}, "
                         f"got {sorted(scaled_scores)}")
    d_ks = sorted(raw_scores)
    for d_k in d_ks:
        if isinstance(d_k, bool) or not isinstance(d_k, int) or d_k < 1 or d_k & (d_k - 1):
            raise ValueError(f"raw_scores: expected powers of two as keys (d_k), got {d_k!r}")
    exps = [d_k.bit_length() - 1 for d_k in d_ks]
    if exps != list(range(exps[0], exps[-1] + 1)):
        raise ValueError(f"raw_scores: expected consecutive powers of two, got {d_ks}")
    if not (isinstance(sigma, (int, float)) and sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma: expected a positive number, got {sigma!r}")
    initial = d_ks[len(d_ks) // 2] if initial_d_k is None else initial_d_k
    if initial not in raw_scores:
        raise ValueError(f"initial_d_k: expected one of {d_ks}, got {initial!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"bins: expected an int >= 2, got {bins!r}")
    if seeds is not None and sorted(seeds) != d_ks:
        raise ValueError(f"seeds: expected the keys {d_ks}, got {sorted(seeds)}")

    samples = {}
    for kind, scores in (("raw", raw_scores), ("scaled", scaled_scores)):
        for d_k in d_ks:
            x = np.asarray(scores[d_k], dtype=float).ravel()
            if x.size < 2 or not np.isfinite(x).all():
                raise ValueError(f"{kind}_scores[{d_k}]: expected at least 2 finite values, "
                                 f"got shape {np.shape(scores[d_k])}")
            samples[kind, d_k] = x
    s4 = float(sigma) ** 4
    # fixed ranges: 4.5 standard deviations of the widest distribution of each kind
    half = {"raw": 4.5 * math.sqrt(d_ks[-1] * s4), "scaled": 4.5 * math.sqrt(s4)}
    moments, counts = [], []
    for (kind, d_k), x in samples.items():
        e = d_k.bit_length() - 1
        row = {"e": e, "kind": kind, "n": int(x.size), "s1": float(x.sum()),
               "s2": float((x * x).sum())}
        if seeds is not None:
            row["seed"] = int(seeds[d_k])
        moments.append(row)
        c, _ = np.histogram(x, bins=bins, range=(-half[kind], half[kind]))
        counts += [{"e": e, "kind": kind, "b": int(b), "c": int(c[b])} for b in np.flatnonzero(c)]

    def panel(kind: str, title: str, var_name: str, formula_name: str, formula: str) -> dict:
        lo, width = -half[kind], 2 * half[kind] / bins
        xs = {"field": "x0", "type": "quantitative", "title": title,
              "scale": {"domain": [-half[kind], half[kind]], "nice": False},
              "axis": {"tickCount": 8}}
        return {
            "width": "container",
            "height": 150,
            "layer": [
                {"name": f"{kind}_bars",
                 "data": {"name": "counts"},
                 "transform": [
                     {"filter": f"datum.e == log2_d_k && datum.kind == '{kind}'"},
                     {"joinaggregate": [{"op": "sum", "field": "c", "as": "total"}]},
                     {"calculate": f"{lo!r} + datum.b * {width!r}", "as": "x0"},
                     {"calculate": f"datum.x0 + {width!r}", "as": "x1"},
                     {"calculate": "datum.c / datum.total", "as": "share"},
                 ],
                 "mark": {"type": "rect", "color": "#4c78a8" if kind == "raw" else "#e45756"},
                 "encoding": {"x": xs, "x2": {"field": "x1"},
                              "y": {"field": "share", "type": "quantitative",
                                    "title": "share of scores", "axis": {"format": ".2f"}}}},
                {"name": f"{kind}_summary",
                 "data": {"name": "moments"},
                 "transform": [
                     {"filter": f"datum.e == log2_d_k && datum.kind == '{kind}'"},
                     {"calculate": "datum.s2 / datum.n - pow(datum.s1 / datum.n, 2)",
                      "as": "variance"},
                     {"calculate": f"{formula}", "as": "theory"},
                     {"calculate": f"'{var_name} = ' + format(datum.variance, '.2f') + "
                                   f"' ({formula_name} = ' + format(datum.theory, 'd') + ')'",
                      "as": "summary"},
                 ],
                 "mark": {"type": "text", "align": "left", "baseline": "bottom", "dy": -6,
                          "fontSize": 12},
                 "encoding": {"x": {"value": 0}, "y": {"value": 0},
                              "text": {"field": "summary", "type": "nominal"}}},
            ],
        }

    return {
        "description": "histograms of raw and scaled dot-product scores for a chosen d_k",
        "title": {"text": {"expr": "'head size d_k = ' + d_k"}, "anchor": "start",
                  "fontSize": 13},
        "datasets": {"counts": counts, "moments": moments},
        "params": [
            _slider("log2_d_k", initial.bit_length() - 1, exps[0], exps[-1], 1,
                    "head size: log₂ d_k "),
            {"name": "d_k", "expr": "pow(2, log2_d_k)"},
        ],
        "vconcat": [
            panel("raw", "raw score q·k", "Var(q·k)", "d_k σ⁴", f"pow(2, log2_d_k) * {s4!r}"),
            panel("scaled", "scaled score q·k/√d_k", "Var(q·k/√d_k)", "σ⁴", f"{s4!r}"),
        ],
        "spacing": 28,
    }


def perplexity_temperature_spec(
    logits: Any,
    targets: Any,
    *,
    temperature: float = 1.0,
    t_min: float = 0.25,
    t_max: float = 4.0,
    step: float = 0.05,
    curve_points: int = 61,
    digits: int = 9,
    floor: float | None = None,
) -> dict:
    """Perplexity of ``softmax(logits / T)`` on the targets, with a slider for ``T``.

    The cell exports the logits of ``N`` scored positions (each with its target) and the
    curve of perplexity against ``T``, computed here with
    :func:`selfattn.perplexity.perplexity` on a log-spaced grid from ``t_min`` to
    ``t_max``. For the slider's ``T`` the page recomputes, per position, the log-softmax of
    ``logits / T`` (shifted by the row maximum), the cross-entropy of the target, their
    mean over the positions and its ``exp``: the perplexity, marked on the curve.

    Args:
        logits: ``(N, V)`` next-token logits, one row per scored position.
        targets: ``(N,)`` the token that came next at each position, ints in ``[0, V)``.
        temperature: the slider's initial ``T``.
        t_min, t_max, step: the slider's range (``0 < t_min <= temperature <= t_max``).
        curve_points: number of grid points of the exported curve (at least 2).
        digits: the logits are exported rounded to this many significant digits (9 keep
            a float32 exactly); the curve is computed from the exported values.
        floor: optional perplexity drawn as a dashed line (e.g. the source's floor).

    Returns:
        a Vega-Lite spec (dict); its parameter is named ``T``.
    """
    from selfattn.perplexity import perplexity

    z = np.asarray(logits, dtype=float)
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] < 2:
        raise ValueError(f"logits: expected shape (N, V) with N >= 1 and V >= 2, got {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError(f"logits: expected finite values (shape {z.shape})")
    y = np.asarray(targets)
    if y.shape != z.shape[:1]:
        raise ValueError(f"targets: expected shape ({z.shape[0]},) to match logits {z.shape}, "
                         f"got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= z.shape[1]:
        raise ValueError(f"targets: expected ints in [0, {z.shape[1]}), got dtype {y.dtype}, "
                         f"range [{y.min()}, {y.max()}]")
    if not 0 < t_min <= temperature <= t_max or step <= 0:
        raise ValueError(f"temperature: expected 0 < t_min <= temperature <= t_max and step > 0, "
                         f"got t_min={t_min}, temperature={temperature}, t_max={t_max}, "
                         f"step={step}")
    if isinstance(curve_points, bool) or not isinstance(curve_points, int) or curve_points < 2:
        raise ValueError(f"curve_points: expected an int >= 2, got {curve_points!r}")
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
        raise ValueError(f"digits: expected an int in [1, 17], got {digits!r}")
    if floor is not None and not (isinstance(floor, (int, float)) and 0 < floor < math.inf):
        raise ValueError(f"floor: expected a positive number, got {floor!r}")
    z = np.array([[float(f"{v:.{digits}g}") for v in row] for row in z])  # what the page gets
    grid = np.geomspace(t_min, t_max, curve_points)
    curve = [{"t": float(t), "ppl": perplexity(z[None] / t, y[None])} for t in grid]
    if not all(math.isfinite(c["ppl"]) for c in curve):
        raise ValueError(f"logits: perplexity overflows at T = {t_min}; raise t_min")
    values = [{"p": i, "y": int(y[i]), "z": [float(v) for v in z[i]]} for i in range(len(z))]
    x = {"field": "t", "type": "quantitative", "title": "temperature T",
         "scale": {"type": "log", "domain": [t_min, t_max], "nice": False},
         "axis": {"values": [v for v in (0.1, 0.25, 0.5, 1, 2, 4, 10) if t_min <= v <= t_max]}}
    ppls = [c["ppl"] for c in curve] + ([] if floor is None else [float(floor)])
    y_lo, y_hi = 0.85 * min(ppls), 1.15 * max(ppls)
    y_ppl = {"field": "ppl", "type": "quantitative", "title": "perplexity",
             "scale": {"type": "log", "domain": [y_lo, y_hi], "nice": False},
             "axis": {"values": [v for v in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64)
                                 if y_lo <= v <= y_hi]}}
    return {
        "description": "perplexity of a model's next-token distribution at temperature T",
        "width": "container",
        "height": 220,
        "autosize": {"type": "fit-x", "contains": "padding"},
        "params": [_slider("T", temperature, t_min, t_max, step, "temperature T ")],
        "datasets": {"logits": values, "curve": curve},
        "layer": [
            *([] if floor is None else [
                {"name": "floor", "data": {"values": [{"ppl": float(floor)}]},
                 "layer": [
                     {"mark": {"type": "rule", "strokeDash": [6, 4], "color": "#888888"},
                      "encoding": {"y": y_ppl}},
                     {"mark": {"type": "text", "align": "left", "baseline": "top", "dy": 3,
                               "dx": 3, "fontSize": 12},
                      "encoding": {"y": y_ppl, "x": {"value": 0},
                                   "text": {"value": f"floor {floor:.3f}"}}},
                 ]}]),
            {"name": "curve", "data": {"name": "curve"},
             "mark": {"type": "line", "color": "#4c78a8", "strokeWidth": 2},
             "encoding": {"x": x, "y": y_ppl}},
            {"name": "current", "data": {"name": "logits"},
             "transform": [
                 {"calculate": "datum.z[datum.y]", "as": "zy"},  # the target's logit
                 {"flatten": ["z"]},  # one row per (position, token)
                 {"joinaggregate": [{"op": "max", "field": "z", "as": "zmax"}],
                  "groupby": ["p"]},
                 # shift by the row maximum before exp, as selfattn.log_softmax does
                 {"calculate": "exp((datum.z - datum.zmax) / T)", "as": "e"},
                 {"aggregate": [{"op": "sum", "field": "e", "as": "esum"}],
                  "groupby": ["p", "zy", "zmax"]},
                 # -log softmax(z / T)[y], one row per position
                 {"calculate": "log(datum.esum) - (datum.zy - datum.zmax) / T", "as": "nll"},
                 {"aggregate": [{"op": "mean", "field": "nll", "as": "ce"},
                                {"op": "count", "as": "positions"}]},
                 {"calculate": "exp(datum.ce)", "as": "ppl"},
                 {"calculate": "T", "as": "t"},
                 {"calculate": "'T = ' + format(T, '.2f') + ': perplexity ' + "
                               "format(datum.ppl, '.4f')", "as": "summary"},
             ],
             "layer": [
                 {"name": "point",
                  "mark": {"type": "point", "filled": True, "size": 90, "color": "#e45756",
                           "opacity": 1},
                  "encoding": {"x": x, "y": y_ppl}},
                 {"name": "summary",
                  "mark": {"type": "text", "align": "left", "baseline": "bottom", "dy": -8,
                           "fontSize": 12},
                  "encoding": {"x": {"value": 0}, "y": {"value": 0},
                               "text": {"field": "summary", "type": "nominal"}}},
             ]},
        ],
    }
