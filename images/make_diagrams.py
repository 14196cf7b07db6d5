"""Draw the book's diagrams as SVG files in this folder, and the shared-link preview.

Run ``make diagrams`` (or ``python images/make_diagrams.py``). Each diagram is
drawn twice: ``NAME.svg`` for the light theme (and the PDF) and
``NAME-dark.svg`` for the dark theme; the chapters show one or the other with
the theme's ``only-light`` / ``only-dark`` classes. The light variant is also
written as ``NAME.pdf`` for the PDF book (a chapter names ``NAME.*`` and each
builder takes the format it supports).

``social-preview.png`` is the image a shared link shows (OpenGraph, Twitter card):
the title beside causal attention weights computed here.

The shapes written in the diagrams are the shapes of the chapters' own worked
examples. They live in :data:`EXAMPLES`, and ``tests/test_diagrams.py`` checks
them against the assignments in the chapters' code cells and checks that the
committed SVG files are exactly what this script draws (so an edit to the
script without ``make diagrams``, or a hand edit to an SVG, fails the tests).

Everything is drawn in inch coordinates on one axes that fills the figure.
Colours are the Okabe-Ito palette (safe for the common colour-vision
deficiencies). Text stays text in the SVG (``svg.fonttype = none``), so it is
sharp at every zoom and searchable. The output is byte-for-byte reproducible:
no date in the metadata and a fixed hash salt for element ids.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib._mathtext as mathtext  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

HERE = Path(__file__).resolve().parent

#: The worked examples the diagrams are labelled with, by chapter.
EXAMPLES: dict[str, dict[str, int]] = {
    # chapter 2, "the shape walk": batch, seq_len, d_model, head_dim = 2, 5, 8, 4
    "attention-flow": {"seq_len": 5, "d_model": 8, "d_k": 4, "d_v": 4},
    # chapter 3, "every reshape": batch, seq_len, d_model, num_heads = 2, 5, 8, 4
    "multi-head": {"seq_len": 5, "d_model": 8, "num_heads": 4, "head_dim": 2},
    # chapter 5: the sentence "cat walks by the bank"
    "causal-mask": {"seq_len": 5},
    # chapter 5: one token per step; four steps drawn
    "kv-cache": {"steps": 4, "d_k": 4},
    # the transformer block chapter: no numbers, only the order of the sublayers
    "transformer-block": {},
}
MASK_TOKENS = ["cat", "walks", "by", "the", "bank"]

# Okabe-Ito
BLUE, ORANGE, GREEN, VERMILION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
PURPLE, SKY, YELLOW = "#CC79A7", "#56B4E9", "#F0E442"
HEAD_COLOURS = [BLUE, ORANGE, GREEN, PURPLE]


@dataclass(frozen=True)
class Theme:
    """Ink and paper of one variant."""

    name: str  # "" for light, "-dark" for dark (file suffix)
    ink: str  # text and outlines
    muted: str  # secondary text
    paper: str  # background of empty cells ("none" keeps the page colour)
    fill_alpha: float  # opacity of coloured cells


LIGHT = Theme("", "#1a1a1a", "#555555", "white", 0.30)
DARK = Theme("-dark", "#e6e6e6", "#b0b0b0", "#1e1e1e", 0.45)

FONT = 12  # pt; at 390 px the 5-inch diagrams shrink to ~0.7, i.e. >= 11 CSS px
SMALL = 11
CELL = 0.14  # inches per matrix entry


class Canvas:
    """A figure of ``width`` x ``height`` inches with drawing helpers in inches."""

    def __init__(self, width: float, height: float, theme: Theme):
        self.theme = theme
        self.fig = plt.figure(figsize=(width, height))
        self.fig.patch.set_alpha(0.0)  # transparent: the page colour shows
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()
        self.ax.patch.set_alpha(0.0)

    def text(self, x: float, y: float, s: str, *, size: float = FONT, muted: bool = False,
             ha: str = "center", va: str = "center", weight: str = "normal") -> None:
        colour = self.theme.muted if muted else self.theme.ink
        self.ax.text(x, y, s, ha=ha, va=va, fontsize=size, color=colour, fontweight=weight)

    def matrix(self, x: float, y: float, rows: int, cols: int, colour: str, *,
               name: str = "", shape: str = "", cell: float = CELL, name_at: str = "above",
               masked: set[tuple[int, int]] | None = None,
               highlight_rows: set[int] | None = None) -> tuple[float, float, float, float]:
        """A rows x cols grid centred at (x, y); returns (left, bottom, width, height).

        ``name`` goes above the grid, ``shape`` below it. Cells in ``masked``
        are hatched (blocked), rows in ``highlight_rows`` drawn in orange.
        """
        w, h = cols * cell, rows * cell
        left, bottom = x - w / 2, y - h / 2
        t = self.theme
        for i in range(rows):
            for j in range(cols):
                c = colour
                if highlight_rows and i in highlight_rows:
                    c = ORANGE
                blocked = masked is not None and (i, j) in masked
                self.ax.add_patch(Rectangle(
                    (left + j * cell, bottom + (rows - 1 - i) * cell), cell, cell,
                    facecolor=t.paper if blocked else c,
                    alpha=1.0 if blocked else t.fill_alpha,
                    edgecolor="none", hatch="///" if blocked else None,
                ))
                if blocked:  # the hatch takes the edge colour: draw it in muted ink
                    self.ax.add_patch(Rectangle(
                        (left + j * cell, bottom + (rows - 1 - i) * cell), cell, cell,
                        facecolor="none", edgecolor=t.muted, hatch="///", linewidth=0,
                    ))
        # grid lines: one row per token
        for i in range(rows + 1):
            self.ax.plot([left, left + w], [bottom + i * cell] * 2, color=t.ink,
                         linewidth=0.9 if i in (0, rows) else 0.3)
        for j in range(cols + 1):
            self.ax.plot([left + j * cell] * 2, [bottom, bottom + h], color=t.ink,
                         linewidth=0.9 if j in (0, cols) else 0.3)
        if name and name_at == "above":
            self.text(x, bottom + h + 0.17, name)
        elif name and name_at == "left":
            self.text(left - 0.1, y, name, ha="right")
        elif name:
            self.text(left + w + 0.1, y, name, ha="left")
        if shape:
            self.text(x, bottom - 0.17, shape, size=SMALL, muted=True)
        return left, bottom, w, h

    def arrow(self, x0: float, y0: float, x1: float, y1: float, label: str = "", *,
              label_side: str = "right", rad: float = 0.0) -> None:
        self.ax.add_patch(FancyArrowPatch(
            (x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12,
            color=self.theme.ink, linewidth=1.1, connectionstyle=f"arc3,rad={rad}",
            shrinkA=2, shrinkB=2,
        ))
        if label:
            mx, my = (x0 + x1) / 2, (y0 + y1) / 2
            dx = 0.08 if label_side == "right" else -0.08
            self.text(mx + dx, my, label, size=SMALL, ha="left" if dx > 0 else "right")

    def save(self, stem: str, out_dir: Path) -> list[Path]:
        """Write the SVG (HTML) and, for the light theme, a PDF (the LaTeX/PDF build)."""
        path = out_dir / f"{stem}{self.theme.name}.svg"
        self.fig.savefig(path, format="svg", metadata={"Date": None}, transparent=True)
        written = [path]
        if self.theme is LIGHT:
            pdf = path.with_suffix(".pdf")
            self.fig.savefig(pdf, format="pdf", transparent=True,
                             metadata={"CreationDate": None, "ModDate": None, "Producer": None})
            written.append(pdf)
        plt.close(self.fig)
        # a reader without DejaVu Sans gets a font of similar width, then any sans-serif
        text = path.read_text(encoding="utf-8")
        text = text.replace("font-family: 'DejaVu Sans'",
                            "font-family: 'DejaVu Sans', Verdana, sans-serif")
        path.write_text(text, encoding="utf-8")
        return written


def attention_flow(theme: Theme) -> Canvas:
    """X -> Q, K, V -> scores S -> weights A -> context C, with every shape."""
    e = EXAMPLES["attention-flow"]
    L, d, dk, dv = e["seq_len"], e["d_model"], e["d_k"], e["d_v"]
    cv = Canvas(5.0, 6.75, theme)
    half = L * CELL / 2  # half the height of every matrix (all have L rows)
    # row 1: the input
    y1 = 6.2
    cv.matrix(2.5, y1, L, d, SKY, name="$X$", name_at="left",
              shape=rf"$L \times d_{{model}}$ = {L} × {d}")
    cv.text(2.5 + d * CELL / 2 + 0.1, y1, "one token\nper row", size=SMALL, muted=True,
            ha="left")
    # row 2: three projections
    y2 = 4.6
    xs = {"Q": 0.85, "K": 2.5, "V": 4.15}
    cols = {"Q": BLUE, "K": GREEN, "V": PURPLE}
    widths = {"Q": dk, "K": dk, "V": dv}
    for n, x in xs.items():
        cv.arrow(2.5, y1 - half - 0.32, x, y2 + half + 0.08)
        mx = (2.5 + x) / 2
        side = {"Q": -1, "K": 1, "V": 1}[n]
        cv.text(mx + side * 0.12, (y1 - half - 0.32 + y2 + half) / 2, rf"$\times W_{n}$",
                size=SMALL, ha="left" if side > 0 else "right")
        letter = "d_v" if n == "V" else "d_k"
        cv.matrix(x, y2, L, widths[n], cols[n], name=f"${n}$", name_at="left",
                  shape=rf"$L \times {letter}$ = {L} × {widths[n]}")
    # row 3: scores from Q and K
    y3 = 2.95
    cv.arrow(xs["Q"], y2 - half - 0.32, 1.75, y3 + half + 0.08)
    cv.arrow(xs["K"], y2 - half - 0.32, 1.95, y3 + half + 0.08)
    cv.matrix(1.85, y3, L, L, VERMILION, name="scores $S$", name_at="left",
              shape=rf"$L \times L$ = {L} × {L}")
    cv.text(1.85 + L * CELL / 2 + 0.1, y3, "= QKᵀ / √dₖ", size=SMALL,
            ha="left")
    # row 4: weights, and the context beside them
    y4 = 1.4
    cv.arrow(1.85, y3 - half - 0.32, 1.85, y4 + half + 0.08)
    cv.text(1.97, (y3 + y4) / 2, "softmax of each row", size=SMALL, ha="left")
    cv.matrix(1.85, y4, L, L, ORANGE, name="weights $A$", name_at="left",
              shape=rf"$L \times L$ = {L} × {L}")
    cv.text(1.85, y4 - 0.62, "(rows sum to 1)", size=SMALL, muted=True, va="top")
    cv.arrow(1.85 + half + 0.08, y4, xs["V"] - dv * CELL / 2 - 0.08, y4)
    cv.text((1.85 + xs["V"]) / 2, y4 + 0.17, "$AV$", size=SMALL)
    cv.arrow(xs["V"], y2 - half - 0.32, xs["V"], y4 + half + 0.08)
    cv.matrix(xs["V"], y4, L, dv, PURPLE, name="$C$", name_at="right",
              shape=rf"$L \times d_v$ = {L} × {dv}")
    cv.text(xs["V"], y4 - 0.62, "(context vectors)", size=SMALL, muted=True, va="top")
    cv.text(2.5, 0.12, rf"$W_Q, W_K$: {d} × {dk} ($d_{{model}} \times d_k$);  "
            rf"$W_V$: {d} × {dv} ($d_{{model}} \times d_v$)", size=SMALL, muted=True)
    return cv


def _striped(cv: Canvas, x: float, y: float, rows: int, cols: int, stripe: int,
             cell: float = CELL) -> None:
    """Fill a rows x cols block centred at (x, y) with one head colour per ``stripe`` columns."""
    left, bottom = x - cols * cell / 2, y - rows * cell / 2
    for j in range(cols):
        cv.ax.add_patch(Rectangle((left + j * cell, bottom), cell, rows * cell,
                                  facecolor=HEAD_COLOURS[j // stripe],
                                  alpha=cv.theme.fill_alpha, edgecolor="none"))


def multi_head(theme: Theme) -> Canvas:
    """Project, split into heads, attend per head, concatenate, W_O."""
    e = EXAMPLES["multi-head"]
    L, d, h, hd = e["seq_len"], e["d_model"], e["num_heads"], e["head_dim"]
    assert h * hd == d, "the diagram draws the convention head_dim = d_model / num_heads"
    cv = Canvas(5.0, 7.4, theme)
    half = L * CELL / 2
    gap = 0.32  # room for the shape line under a matrix
    y = [6.85, 5.45, 4.0, 2.55, 1.05]  # rows: X, Q, heads, head contexts, output
    cv.matrix(2.5, y[0], L, d, SKY, name="$X$", name_at="left",
              shape=rf"$L \times d_{{model}}$ = {L} × {d}")
    cv.arrow(2.5, y[0] - half - gap, 2.5, y[1] + half + 0.06)
    cv.text(2.62, (y[0] + y[1]) / 2 - 0.05, r"$\times W_Q$  (likewise $W_K$, $W_V$)",
            size=SMALL, ha="left")
    _striped(cv, 2.5, y[1], L, d, hd)
    cv.matrix(2.5, y[1], L, d, "none", name="$Q$", name_at="left",
              shape=rf"$L \times d_{{model}}$ = {L} × {d}")
    cv.text(2.5 + d * CELL / 2 + 0.1, y[1], "one colour\nper head", size=SMALL,
            muted=True, ha="left")
    xs = [1.0 + k * 1.07 for k in range(h)]
    left_q = 2.5 - d * CELL / 2
    for k, x in enumerate(xs):
        # from the head's columns of Q down to the head's own block
        cv.arrow(left_q + (k + 0.5) * hd * CELL, y[1] - half - gap, x, y[2] + half + 0.06)
        cv.matrix(x, y[2], L, hd, HEAD_COLOURS[k], name=f"$Q_{k}$", name_at="left")
        cv.arrow(x, y[2] - half - 0.06, x, y[3] + half + 0.06)
        cv.matrix(x, y[3], L, hd, HEAD_COLOURS[k], name=rf"head$_{k}$", name_at="left")
        # back into the head's columns of the concatenation
        cv.arrow(x, y[3] - half - 0.06, left_q + (k + 0.5) * hd * CELL, y[4] + half + 0.06)
    cv.text(2.5, y[2] - half - 0.1 - 0.0, "", size=SMALL)
    cv.text(0.05, (y[1] + y[2]) / 2 + 0.05, "split", size=SMALL, ha="left", weight="bold")
    cv.text(0.05, (y[1] + y[2]) / 2 - 0.17, rf"$h$ = {h} heads", size=SMALL, ha="left",
            muted=True)
    cv.text(0.05, (y[2] + y[3]) / 2 + 0.05, "attend", size=SMALL, ha="left", weight="bold")
    cv.text(0.05, (y[3] + y[4]) / 2 + 0.05, "concatenate", size=SMALL, ha="left",
            weight="bold")
    cv.text(2.5, y[2] + half + 0.2, "", size=SMALL)
    _striped(cv, 2.5, y[4], L, d, hd)
    cv.matrix(2.5, y[4], L, d, "none", shape=rf"$L \times d_{{model}}$ = {L} × {d}")
    cv.arrow(2.5 + d * CELL / 2 + 0.06, y[4], 3.55, y[4])
    cv.text(3.32, y[4] + 0.2, r"$\times W_O$", size=SMALL)
    cv.matrix(4.3, y[4], L, d, SKY, shape="output")
    cv.text(2.5, 0.12, rf"each head: $L \times d_k$ = {L} × {hd},  "
            rf"$d_k = d_{{model}}/h$;  $W_O$: {d} × {d}", size=SMALL, muted=True)
    return cv


def causal_mask(theme: Theme) -> Canvas:
    """Scores, the triangle of blocked entries set to -inf, then softmax."""
    L = EXAMPLES["causal-mask"]["seq_len"]
    cell = 0.30
    cv = Canvas(5.0, 3.4, theme)
    grey = "#dddddd" if theme is LIGHT else "#3c3c3c"
    x0, y0 = 1.3, 1.75
    w = h = L * cell
    left, bottom = x0 - w / 2, y0 - h / 2
    left2 = 3.1
    for i in range(L):
        for j in range(L):
            for lft, colour in ((left, VERMILION), (left2, ORANGE)):
                future = j > i
                cv.ax.add_patch(Rectangle(
                    (lft + j * cell, bottom + h - (i + 1) * cell), cell, cell,
                    facecolor=grey if future else colour,
                    alpha=1.0 if future else theme.fill_alpha, edgecolor="none"))
                if future:
                    cv.text(lft + (j + 0.5) * cell, bottom + h - (i + 0.5) * cell,
                            "−∞" if lft == left else "0", size=SMALL - 1)
    cv.matrix(x0, y0, L, L, "none", cell=cell)
    cv.matrix(left2 + w / 2, y0, L, L, "none", cell=cell)
    for i, tok in enumerate(MASK_TOKENS):
        cv.text(left - 0.06, bottom + h - (i + 0.5) * cell, tok, size=SMALL, ha="right")
        cv.ax.text(left + (i + 0.5) * cell, bottom + h + 0.06, tok, rotation=60,
                   ha="left", va="bottom", fontsize=SMALL - 1, color=theme.ink)
    cv.text(0.05, 3.22, "rows: queries;  columns: keys", size=SMALL, muted=True, ha="left")
    cv.arrow(left + w + 0.08, y0, left2 - 0.08, y0)
    cv.text((left + w + left2) / 2, y0 + 0.2, "softmax", size=SMALL)
    cv.text(x0, bottom - 0.2, "masked scores", size=SMALL)
    cv.text(left2 + w / 2, bottom - 0.2, "weights $A$", size=SMALL)
    cv.text(2.5, 0.38, "grey: key j is in the future of query i (j > i).", size=SMALL,
            muted=True)
    cv.text(2.5, 0.12, "The mask acts on the scores, before the softmax.", size=SMALL,
            muted=True)
    return cv


def kv_cache(theme: Theme) -> Canvas:
    """At step t the cache holds t keys and t values; one new row per token."""
    e = EXAMPLES["kv-cache"]
    steps, dk = e["steps"], e["d_k"]
    cell = 0.16
    cv = Canvas(5.0, 3.9, theme)
    xs = [0.75 + k * 1.18 for k in range(steps)]
    top = 3.05
    for t, x in enumerate(xs, start=1):
        cv.text(x, 3.65, f"step t = {t}", size=SMALL, weight="bold")
        # the new query: one row
        cv.matrix(x, top + 0.15, 1, dk, BLUE, cell=cell)
        cv.text(x - dk * cell / 2 - 0.05, top + 0.15, "q", size=SMALL, ha="right")
        # keys cache, then values cache: t rows, the newest highlighted
        kc = top - 0.45 - t * cell / 2
        cv.matrix(x, kc, t, dk, GREEN, cell=cell, highlight_rows={t - 1})
        cv.text(x - dk * cell / 2 - 0.05, kc, "K", size=SMALL, ha="right")
        vc = 1.55 - t * cell / 2
        cv.matrix(x, vc, t, dk, PURPLE, cell=cell, highlight_rows={t - 1})
        cv.text(x - dk * cell / 2 - 0.05, vc, "V", size=SMALL, ha="right")
        cv.text(x, 0.72 - 0.0, f"{t} × {dk}", size=SMALL, muted=True)
    cv.text(2.5, 0.38, "orange: the row appended at this step; earlier rows are reused",
            size=SMALL, muted=True)
    cv.text(2.5, 0.10, "the new query attends to all t cached keys", size=SMALL, muted=True)
    return cv


def transformer_block(theme: Theme) -> Canvas:
    """Post-LN (the original Transformer) beside pre-LN (GPT-2 and most models since)."""
    cv = Canvas(5.0, 5.2, theme)
    box_w, box_h = 1.7, 0.36
    colours = {"LayerNorm": YELLOW, "Attention": BLUE, "MLP": GREEN}

    def box(x: float, y: float, label: str) -> None:
        cv.ax.add_patch(FancyBboxPatch(
            (x - box_w / 2, y - box_h / 2), box_w, box_h, boxstyle="round,pad=0.02",
            facecolor=colours[label], alpha=theme.fill_alpha + 0.1,
            edgecolor=theme.ink, linewidth=0.9))
        cv.text(x, y, "multi-head attention" if label == "Attention" else label, size=SMALL)

    def plus(x: float, y: float) -> None:
        cv.ax.add_patch(plt.Circle((x, y), 0.12, facecolor="none", edgecolor=theme.ink,
                                   linewidth=1.0))
        cv.ax.plot([x - 0.07, x + 0.07], [y, y], color=theme.ink, linewidth=1.0)
        cv.ax.plot([x, x], [y - 0.07, y + 0.07], color=theme.ink, linewidth=1.0)

    def column(x: float, title: str, subtitle: str, order: list[str]) -> None:
        """Draw one block top-down; "|" marks where the residual branch leaves the stream."""
        cv.text(x, 4.98, title, weight="bold")
        cv.text(x, 4.72, subtitle, size=SMALL, muted=True)
        y = 4.42
        cv.text(x, y, "$x$ (residual stream)", size=SMALL)
        y_prev = y - 0.14
        skip_from = y_prev
        rail = x - box_w / 2 - 0.18  # the residual path runs down this line
        for item in order:
            if item == "|":
                skip_from = y_prev - 0.06
            elif item == "+":
                y -= 0.45
                cv.arrow(x, y_prev, x, y + 0.13)
                plus(x, y)
                cv.ax.plot([x, rail, rail], [skip_from, skip_from, y], color=theme.ink,
                           linewidth=1.0)
                cv.arrow(rail, y, x - 0.12, y)
                y_prev = y - 0.12
            else:
                y -= 0.5
                cv.arrow(x, y_prev, x, y + box_h / 2 + 0.02)
                box(x, y, item)
                y_prev = y - box_h / 2 - 0.02
        cv.arrow(x, y_prev, x, y - 0.42)
        cv.text(x, y - 0.55, "output", size=SMALL)

    column(1.3, "Post-LN", "original Transformer",
           ["|", "Attention", "+", "LayerNorm", "|", "MLP", "+", "LayerNorm"])
    column(3.72, "Pre-LN", "GPT-2 and since",
           ["|", "LayerNorm", "Attention", "+", "|", "LayerNorm", "MLP", "+"])
    cv.text(2.5, 0.38, "Pre-LN: the residual stream runs from input to output",
            size=SMALL, muted=True)
    cv.text(2.5, 0.14, "through additions only, with no LayerNorm on it.", size=SMALL,
            muted=True)
    return cv


DIAGRAMS: dict[str, Callable[[Theme], Canvas]] = {
    "attention-flow": attention_flow,
    "multi-head": multi_head,
    "causal-mask": causal_mask,
    "kv-cache": kv_cache,
    "transformer-block": transformer_block,
}


#: The image a shared link shows (OpenGraph and Twitter card; conf.py's ``ogp_image``):
#: 1200 x 630 px, the size both ask for, opaque (a preview has no page colour behind it).
PREVIEW = "social-preview"
PREVIEW_INCHES, PREVIEW_DPI = (12.0, 6.3), 100


def causal_weights(seq_len: int, d_k: int = 4, seed: int = 0) -> list[list[float]]:
    """Causal attention weights softmax(QKᵀ/√d_k + mask) of random queries and keys.

    Row i holds the weights of query i over keys 0..i (zero beyond): each row sums
    to 1. Computed here, with a fixed seed, so the preview draws weights, not a pattern
    typed by hand."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, seq_len, d_k))  # (seq_len, d_k) each
    scores = q @ k.T / np.sqrt(d_k)  # (seq_len, seq_len)
    scores[np.triu_indices(seq_len, 1)] = -np.inf  # a query sees itself and earlier keys
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    assert np.allclose(weights.sum(axis=1), 1.0)
    return weights.tolist()


def social_preview(out_dir: Path) -> Path:
    """The book's title beside the causal attention weights of chapter 5's sentence."""
    theme = LIGHT
    width, height = PREVIEW_INCHES
    cv = Canvas(width, height, theme)
    cv.fig.patch.set_alpha(1.0)
    cv.fig.patch.set_facecolor("white")
    cv.ax.add_patch(Rectangle((0, 0), 0.22, height, facecolor=BLUE, edgecolor="none"))
    cv.text(0.75, 4.55, "Self-Attention,", size=54, weight="bold", ha="left")
    cv.text(0.75, 3.55, "Verified", size=54, weight="bold", ha="left")
    cv.text(0.78, 2.35, "Self-attention from first principles.", size=21, ha="left")
    cv.text(0.78, 1.8, "Every number on its pages is computed", size=21, muted=True,
            ha="left")
    cv.text(0.78, 1.3, "by tested code while the book is built.", size=21, muted=True,
            ha="left")
    tokens = MASK_TOKENS
    n, cell = len(tokens), 0.66
    left, top = 8.15, 5.15
    for i, row in enumerate(causal_weights(n)):
        for j, w in enumerate(row):
            x, y = left + j * cell, top - (i + 1) * cell
            if j > i:  # masked: hatched, as in the causal-mask diagram
                cv.ax.add_patch(Rectangle((x, y), cell, cell, facecolor="none",
                                          edgecolor=theme.muted, hatch="///", linewidth=0))
            else:
                cv.ax.add_patch(Rectangle((x, y), cell, cell, facecolor=ORANGE,
                                          alpha=0.12 + 0.88 * w, edgecolor="none"))
        cv.text(left - 0.12, top - (i + 0.5) * cell, tokens[i], size=17, ha="right")
    for j, token in enumerate(tokens):
        cv.text(left + (j + 0.5) * cell, top + 0.22, token, size=16)
    for k in range(n + 1):
        lw = 1.2 if k in (0, n) else 0.4
        cv.ax.plot([left, left + n * cell], [top - k * cell] * 2, color=theme.ink, linewidth=lw)
        cv.ax.plot([left + k * cell] * 2, [top, top - n * cell], color=theme.ink, linewidth=lw)
    cv.text(left + n * cell / 2, top - n * cell - 0.38, "causal attention weights", size=17,
            muted=True)
    path = out_dir / f"{PREVIEW}.png"
    cv.fig.savefig(path, format="png", dpi=PREVIEW_DPI, metadata={"Software": None})
    plt.close(cv.fig)
    return path


def draw_all(out_dir: Path = HERE) -> list[Path]:
    """Write every diagram, light and dark, and the shared-link preview into ``out_dir``;
    return the paths."""
    plt.rcParams.update({
        "svg.fonttype": "none",  # text stays text
        "svg.hashsalt": "self-attention-verified",  # stable element ids
        "font.family": "DejaVu Sans",
        "hatch.linewidth": 0.6,
    })
    # Subscripts such as the "model" of d_model are drawn at 70 % by default,
    # too small on a phone; 88 % keeps them >= 9 CSS px at 390 px (the test).
    mathtext.SHRINK_FACTOR = 0.88
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, draw in DIAGRAMS.items():
        for theme in (LIGHT, DARK):
            paths.extend(draw(theme).save(stem, out_dir))
    paths.append(social_preview(out_dir))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = parser.parse_args(argv)
    for p in draw_all(args.out):
        print(p.relative_to(args.out.resolve().parent) if p.is_relative_to(
            args.out.resolve().parent) else p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
