"""Tables and figures for the book: one look, used by every chapter.

Five public helpers:

* :func:`use_book_style` -- matplotlib settings for every figure (white
  background so figures read in light and dark mode, readable fonts,
  constrained layout). Call it once, in a chapter's hidden first cell.
* :func:`matrix_table` -- show a matrix **in full** as a compact HTML table
  (wide matrices scroll inside their own box), or as aligned text outside a
  notebook.
* :func:`attention_heatmap` -- one matrix of attention weights (or scores) as
  an annotated heatmap: rows are queries, columns are keys.
* :func:`heatmap_grid` -- several heatmaps side by side on one colour scale,
  e.g. one per head.
* :func:`plot_vectors_2d` -- 2-D vectors as arrows from the origin, with an
  optional second set drawn dashed ("after"), e.g. embeddings before and after
  one round of attention.

Numbers are formatted by :func:`format_number` everywhere, so a table, a
heatmap annotation and a test all agree on how ``0.1234`` is written.

Shape legend: ``n_rows``, ``n_cols`` the rows and columns of a matrix;
``q_len`` queries (rows) and ``k_len`` keys (columns) of attention weights.

Inputs may be NumPy arrays, torch tensors (detached and copied to the CPU) or
nested lists. Bad input raises ``TypeError`` (not numeric) or ``ValueError``
(wrong number of dimensions, empty, labels whose count does not match the
matrix); the message names the argument, the count or shape seen and the one
expected.

matplotlib is imported inside the functions, so ``import selfattn`` stays
fast and never picks a backend.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from selfattn.array_types import Array

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "BOOK_STYLE",
    "MatrixTable",
    "attention_heatmap",
    "format_number",
    "heatmap_grid",
    "matrix_table",
    "plot_vectors_2d",
    "use_book_style",
]

#: matplotlib rcParams applied by :func:`use_book_style`.
BOOK_STYLE: dict[str, Any] = {
    # white, opaque backgrounds: a figure stays readable on a dark page
    "figure.facecolor": "white",
    "figure.edgecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.edgecolor": "white",
    "savefig.transparent": False,
    # dark ink on that white background, whatever the theme
    "text.color": "#1a1a1a",
    "axes.labelcolor": "#1a1a1a",
    "axes.edgecolor": "#444444",
    "xtick.color": "#1a1a1a",
    "ytick.color": "#1a1a1a",
    # size and resolution: sharp on screen, small files
    "figure.dpi": 110,
    "savefig.dpi": 110,
    # at most 5.3 in wide (5.5 in once saved with its margin): a phone shows the whole
    # figure without sideways scroll and its 10.5 pt text at >= 9 CSS px
    "figure.figsize": (5.2, 3.4),
    "figure.constrained_layout.use": True,
    # readable fonts
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
    "legend.frameon": False,
    # SVG output (see use_book_style): text stays text, so it is sharp at any zoom and a
    # test can measure its rendered size; fixed ids so rebuilds give identical files
    "svg.fonttype": "none",
    "svg.hashsalt": "selfattn",
    # quiet frames
    "axes.spines.top": False,
    "axes.spines.right": False,
    "image.cmap": "Blues",
}

_DIGITS_MAX = 12
#: widest figure a helper draws, in inches (the book's limit is 5.5 in including the
#: margin matplotlib adds when it saves a figure)
MAX_FIGURE_WIDTH = 5.3
#: smallest text in a figure, in points (heatmap numbers included)
MIN_FONT_SIZE = 10.5


# ---------------------------------------------------------------- style
def use_book_style(*, inline: bool = True) -> None:
    """Apply :data:`BOOK_STYLE` to matplotlib's global ``rcParams``.

    Args:
        inline: inside a Jupyter kernel (the book's build), also switch
            matplotlib to the inline backend so that figures are shown under
            their cell even when the environment sets ``MPLBACKEND=Agg``, and
            make each figure output SVG (the web page: vector, text kept as
            text, readable when a phone shrinks it) plus PDF (the book's LaTeX
            build picks PDF). Outside a kernel this does nothing.

    Returns:
        None. Figures created afterwards have a white background, ~110 dpi
        and constrained layout.
    """
    import os

    # figure files carry a date; a fixed one keeps rebuilds identical
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")
    if inline:
        _activate_inline_backend()
    import matplotlib as mpl

    mpl.rcParams.update(BOOK_STYLE)


def _activate_inline_backend() -> None:
    """``%matplotlib inline`` when running in an IPython kernel; otherwise nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is optional
        return
    shell = get_ipython()
    if shell is None or "IPKernelApp" not in shell.config:
        return
    shell.run_line_magic("matplotlib", "inline")
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("svg", "pdf")


# ---------------------------------------------------------------- numbers
def format_number(value: Any, digits: int = 3) -> str:
    """Format one entry of a table or heatmap the way the whole book does.

    * floats: ``digits`` decimals (``0.1234`` -> ``"0.123"``); ``-0.000``
      is written ``"0.000"``; magnitudes of a million or more use scientific
      notation (``"1.235e+06"``); ``"inf"``, ``"-inf"`` and ``"nan"`` as such
      (``-inf`` is what a mask writes into blocked scores);
    * integers: as integers (``"3"``);
    * booleans (masks): ``"True"`` / ``"False"``.

    Args:
        value: a Python or NumPy scalar.
        digits: decimals for floats, an int in ``[0, 12]``.

    Returns:
        The formatted string.

    Raises:
        TypeError: ``value`` is not a number or bool, or ``digits`` is not an int.
        ValueError: ``digits`` is outside ``[0, 12]``.
    """
    _check_digits(digits)
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if not isinstance(value, (float, np.floating)):
        raise TypeError(f"value: expected a number or bool, got {type(value).__name__}")
    x = float(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 1e6:
        return f"{x:.{digits}e}"
    text = f"{x:.{digits}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]  # no "-0.000"
    return text


def _check_digits(digits: Any) -> None:
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)):
        raise TypeError(f"digits: expected an int in [0, {_DIGITS_MAX}], got "
                        f"{type(digits).__name__}")
    if not 0 <= digits <= _DIGITS_MAX:
        raise ValueError(f"digits: expected an int in [0, {_DIGITS_MAX}], got {digits}")


def _as_matrix(name: str, x: Any, *, allow_vector: bool = True) -> np.ndarray:
    """``x`` as a 2-D NumPy array ``(n_rows, n_cols)``; a 1-D input becomes one row."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise TypeError(f"{name}: expected a 2-D array of numbers, got {type(x).__name__} "
                        f"({exc})") from None
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{name}: expected numbers or bools, got dtype {arr.dtype} "
                        f"with shape {arr.shape}")
    if arr.ndim == 1 and allow_vector:
        arr = arr.reshape(1, -1)  # (n_cols,) -> (1, n_cols): a vector is shown as one row
    expected = "(n_rows, n_cols) or a 1-D vector" if allow_vector else "(n_rows, n_cols)"
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected shape {expected}, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty matrix, got shape {arr.shape}")
    return arr


def _as_labels(name: str, labels: Any, expected: int, what: str,
               shape: tuple[int, ...]) -> tuple[str, ...] | None:
    """Labels as a tuple of str; ``ValueError`` naming ``name`` if the count is wrong."""
    if labels is None:
        return None
    if isinstance(labels, str) or not isinstance(labels, Sequence | np.ndarray):
        raise TypeError(f"{name}: expected a sequence of {expected} labels ({what}), "
                        f"got {type(labels).__name__}")
    out = tuple(str(label) for label in labels)
    if len(out) != expected:
        raise ValueError(f"{name}: expected {expected} labels ({what}, matrix shape {shape}), "
                         f"got {len(out)}")
    return out


# ---------------------------------------------------------------- tables
@dataclass(frozen=True, eq=False, repr=False)
class MatrixTable:
    """A matrix shown in full: HTML in a notebook, aligned text elsewhere.

    Made by :func:`matrix_table`. A notebook calls ``_repr_html_``;
    ``print(table)`` and ``repr(table)`` give the text version.
    """

    values: np.ndarray  # (n_rows, n_cols) the matrix shown (a private copy)
    row_labels: tuple[str, ...] | None  # one label per row, or None for no label column
    col_labels: tuple[str, ...] | None  # one label per column, or None for no header row
    digits: int  # decimals used for floats (see format_number)
    title: str | None  # caption shown above the table, or None

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_cols)`` of the matrix shown."""
        return (int(self.values.shape[0]), int(self.values.shape[1]))

    def cells(self) -> list[list[str]]:
        """The formatted entries, row by row (what both renderings print)."""
        return [[format_number(v, self.digits) for v in row] for row in self.values]

    def _repr_html_(self) -> str:
        cells = self.cells()
        cell_style = ("padding:0.15em 0.6em;text-align:right;white-space:nowrap;"
                      "font-family:var(--pst-font-family-monospace, monospace);border:none")
        head_style = "padding:0.15em 0.6em;text-align:right;white-space:nowrap;border:none"
        row_head_style = "padding:0.15em 0.6em;text-align:left;white-space:nowrap;border:none"
        label = ""
        parts = ['<div class="selfattn-matrix" style="overflow-x:auto;max-width:100%;'
                 'margin:0.25em 0 0.75em 0">']
        if self.title is not None:
            # the title sits above the table (a <caption> would wrap to the table's
            # width); the table carries it as its accessible name
            title = html.escape(self.title)
            parts.append('<div class="selfattn-matrix-title" style="font-weight:600;'
                         f'padding:0 0 0.25em 0.6em">{title}</div>')
            label = f' aria-label="{title}"'
        parts.append(f'<table{label} style="border-collapse:collapse;width:auto;margin:0;'
                     'font-variant-numeric:tabular-nums;font-size:0.9em">')
        if self.col_labels is not None:
            header = "".join(f'<th scope="col" style="{head_style}">{html.escape(c)}</th>'
                             for c in self.col_labels)
            # the corner above the row labels heads nothing: a data cell, not an empty header
            corner = f'<td style="{head_style}"></td>' if self.row_labels is not None else ""
            parts.append(f'<thead><tr style="border-bottom:1px solid currentColor">'
                         f'{corner}{header}</tr></thead>')
        parts.append("<tbody>")
        for i, row in enumerate(cells):
            row_head = ""
            if self.row_labels is not None:
                row_head = (f'<th scope="row" style="{row_head_style}">'
                            f"{html.escape(self.row_labels[i])}</th>")
            body = "".join(f'<td style="{cell_style}">{html.escape(c)}</td>' for c in row)
            parts.append(f"<tr>{row_head}{body}</tr>")
        parts.append("</tbody></table></div>")
        return "".join(parts)

    def __repr__(self) -> str:
        cells = self.cells()
        n_cols = self.shape[1]
        widths = [max(len(row[j]) for row in cells) for j in range(n_cols)]
        if self.col_labels is not None:
            widths = [max(w, len(c)) for w, c in zip(widths, self.col_labels, strict=True)]
        label_width = max((len(r) for r in self.row_labels), default=0) if self.row_labels else 0
        lines = []
        if self.title is not None:
            lines.append(self.title)
        lead = (" " * label_width + "  ") if self.row_labels is not None else ""
        if self.col_labels is not None:
            lines.append((lead + "  ".join(c.rjust(w) for c, w in
                                          zip(self.col_labels, widths, strict=True))).rstrip())
        for i, row in enumerate(cells):
            prefix = (self.row_labels[i].ljust(label_width) + "  ") if self.row_labels else ""
            lines.append(prefix + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        return "\n".join(lines)

    __str__ = __repr__


def matrix_table(
    matrix: Array | Sequence[Any],
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    digits: int = 3,
    title: str | None = None,
) -> MatrixTable:
    """Show a whole matrix as a table (HTML in a notebook, aligned text otherwise).

    Every entry is shown; nothing is elided. In HTML the table sits in a box
    that scrolls sideways on its own when the matrix is wider than the page.

    Args:
        matrix: ``(n_rows, n_cols)`` numbers or bools (NumPy, torch or nested
            lists); a 1-D vector ``(n_cols,)`` is shown as a single row.
        row_labels: ``n_rows`` labels (e.g. the query tokens), or None.
        col_labels: ``n_cols`` labels (e.g. the key tokens), or None.
        digits: decimals for floating-point entries (see :func:`format_number`).
        title: optional caption above the table.

    Returns:
        A :class:`MatrixTable`; display it as a cell's last expression.

    Raises:
        TypeError: ``matrix`` is not numeric, labels are not a sequence, or
            ``digits`` is not an int.
        ValueError: ``matrix`` is not 1-D or 2-D or is empty; ``row_labels``
            or ``col_labels`` has the wrong count (the message gives both).

    Example:
        >>> print(matrix_table([[1.0, 0.5], [0.25, 0.0]], ["a", "b"], ["x", "y"], digits=2))
           x     y
        a  1.00  0.50
        b  0.25  0.00
    """
    _check_digits(digits)
    values = np.array(_as_matrix("matrix", matrix), copy=True)
    values.setflags(write=False)
    shape = tuple(int(s) for s in values.shape)
    rows = _as_labels("row_labels", row_labels, shape[0], "one per row", shape)
    cols = _as_labels("col_labels", col_labels, shape[1], "one per column", shape)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title: expected a str or None, got {type(title).__name__}")
    return MatrixTable(values=values, row_labels=rows, col_labels=cols, digits=int(digits),
                       title=title)


# ---------------------------------------------------------------- heatmaps
def _color_limits(arrays: list[np.ndarray], vmin: float | None,
                  vmax: float | None) -> tuple[float, float]:
    """Colour scale: [0, 1] when every finite value is a weight, else the data range."""
    finite = np.concatenate([a[np.isfinite(a)].ravel() for a in arrays]).astype(float)
    if finite.size == 0:
        lo, hi = 0.0, 1.0
    elif finite.min() >= 0.0 and finite.max() <= 1.0:
        lo, hi = 0.0, 1.0
    else:
        lo, hi = float(finite.min()), float(finite.max())
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
    lo = lo if vmin is None else float(vmin)
    hi = hi if vmax is None else float(vmax)
    if not lo < hi:
        raise ValueError(f"vmin, vmax: expected vmin < vmax, got vmin={lo}, vmax={hi}")
    return lo, hi


def _draw_heatmap(ax: Axes, values: np.ndarray, rows: tuple[str, ...] | None,
                  cols: tuple[str, ...] | None, *, lo: float, hi: float, cmap: str,
                  annotate: bool, digits: int, xlabel: str, ylabel: str,
                  title: str | None) -> Any:
    import matplotlib as mpl

    # non-finite entries (e.g. masked -inf scores) are drawn light grey
    colormap = mpl.colormaps[cmap].with_extremes(bad="#d9d9d9")
    shown = np.ma.masked_invalid(values.astype(float))
    image = ax.imshow(shown, cmap=colormap, vmin=lo, vmax=hi, aspect="auto",
                      interpolation="nearest")
    n_rows, n_cols = values.shape
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(n_rows))
    ax.set_xticklabels(cols if cols is not None else [str(j) for j in range(n_cols)])
    ax.set_yticklabels(rows if rows is not None else [str(i) for i in range(n_rows)])
    longest = max(len(t.get_text()) for t in ax.get_xticklabels())
    if longest > 4 and n_cols > 3:
        ax.tick_params(axis="x", labelrotation=45)
        for t in ax.get_xticklabels():
            t.set_horizontalalignment("right")
            t.set_rotation_mode("anchor")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    if title is not None:
        ax.set_title(title)
    if annotate:
        # font size from the width of one cell, never below the book's smallest text:
        # a figure with many columns is drawn larger (or without annotations) instead
        cell_pt = ax.get_position().width * ax.figure.get_figwidth() * 72 / n_cols
        size = max(MIN_FONT_SIZE, min(11.0, 0.28 * cell_pt))
        for i in range(n_rows):
            for j in range(n_cols):
                v = values[i, j]
                dark = bool(np.isfinite(v)) and (float(v) - lo) / (hi - lo) > 0.6
                ax.text(j, i, format_number(v, digits), ha="center", va="center",
                        fontsize=size, color="white" if dark else "#1a1a1a")
    return image


def attention_heatmap(
    weights: Array | Sequence[Any],
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
    cmap: str = "Blues",
    *,
    digits: int = 2,
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
    xlabel: str = "key",
    ylabel: str = "query",
) -> Axes:
    """Draw attention weights (or scores) as an annotated heatmap.

    Row ``i`` is query ``i``, column ``j`` is key ``j``; cell ``(i, j)`` shows
    ``weights[i, j]`` written with :func:`format_number` (``digits`` decimals).
    Non-finite entries (``-inf`` scores of a mask) are drawn light grey.

    Args:
        weights: ``(q_len, k_len)`` numbers (NumPy or torch); a 1-D ``(k_len,)``
            vector is drawn as one query row.
        row_labels: ``q_len`` query labels (tokens), or None for 0, 1, ...
        col_labels: ``k_len`` key labels, or None for 0, 1, ...
        ax: Axes to draw on; None creates a new figure sized to the matrix.
        title: optional title.
        annotate: write each value in its cell.
        cmap: a matplotlib colormap name.
        digits: decimals of the annotations.
        vmin, vmax: colour scale; default ``[0, 1]`` when every finite value
            lies in ``[0, 1]`` (weights), else the data range (scores).
        colorbar: add a colour bar next to the Axes.
        xlabel, ylabel: axis titles (default ``"key"`` and ``"query"``).

    Returns:
        The Axes drawn on. Its ``texts`` hold the annotations in row-major order.

    Raises:
        TypeError: ``weights`` is not numeric; ``cmap`` is not a colormap name.
        ValueError: ``weights`` is not 1-D/2-D or is empty; a label count does
            not match (the message names ``row_labels`` or ``col_labels`` and
            gives both counts); ``vmin >= vmax``.
    """
    values = _as_matrix("weights", weights)
    shape = tuple(int(s) for s in values.shape)
    rows = _as_labels("row_labels", row_labels, shape[0], "one per query row of weights", shape)
    cols = _as_labels("col_labels", col_labels, shape[1], "one per key column of weights",
                      shape)
    _check_digits(digits)
    _check_cmap(cmap)
    lo, hi = _color_limits([values], vmin, vmax)
    if ax is None:
        import matplotlib.pyplot as plt

        width = min(1.4 + 0.6 * shape[1], MAX_FIGURE_WIDTH)
        height = min(1.2 + 0.55 * shape[0], 10.0)
        _, ax = plt.subplots(figsize=(width, height))
    image = _draw_heatmap(ax, values, rows, cols, lo=lo, hi=hi, cmap=cmap, annotate=annotate,
                          digits=digits, xlabel=xlabel, ylabel=ylabel, title=title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.85)
    return ax


def _check_cmap(cmap: Any) -> None:
    import matplotlib as mpl

    if not isinstance(cmap, str) or cmap not in mpl.colormaps:
        raise TypeError(f"cmap: expected a matplotlib colormap name such as 'Blues', got {cmap!r}")


def heatmap_grid(
    matrices: Sequence[Any],
    labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int = 2,
    *,
    col_labels: Sequence[str] | None = None,
    annotate: bool = True,
    cmap: str = "Blues",
    digits: int = 2,
    vmin: float | None = None,
    vmax: float | None = None,
    suptitle: str | None = None,
    panel_size: float = 2.2,
    xlabel: str = "key",
    ylabel: str = "query",
) -> Figure:
    """Several heatmaps in a grid on one shared colour scale (e.g. one per head).

    Args:
        matrices: a non-empty sequence of ``(q_len, k_len)`` matrices, or one
            array ``(n_panels, q_len, k_len)`` (e.g. ``weights[0]`` of shape
            ``(num_heads, q_len, k_len)``).
        labels: ``q_len`` row (query) labels used on every panel; also the
            column labels unless ``col_labels`` is given (self-attention:
            queries and keys are the same tokens).
        titles: one title per panel, or None for "head 0", "head 1", ...
        ncols: panels per row (a positive int).
        col_labels: ``k_len`` column (key) labels, if they differ from ``labels``.
        annotate, cmap, digits, vmin, vmax, xlabel, ylabel: as in
            :func:`attention_heatmap`; the colour scale is shared by all panels.
        suptitle: optional title over the whole grid.
        panel_size: width in inches of one panel; reduced when the grid would be
            wider than ``MAX_FIGURE_WIDTH`` (5.3 in; choose ``ncols`` to keep panels large).

    Returns:
        The Figure; ``fig.axes`` holds the panels in order, then the colour bar.

    Raises:
        TypeError: a matrix is not numeric; ``ncols`` is not an int.
        ValueError: no matrices; a matrix is not 2-D; ``titles`` has the wrong
            count; a panel's shape does not match ``labels`` / ``col_labels``
            (the message names the argument, the panel and both counts).
    """
    import matplotlib.pyplot as plt

    if isinstance(matrices, np.ndarray) or hasattr(matrices, "detach"):
        stack = _as_stack(matrices)
        panels = [stack[i] for i in range(stack.shape[0])]
    else:
        if not isinstance(matrices, Sequence) or len(matrices) == 0:
            raise ValueError("matrices: expected a non-empty sequence of (q_len, k_len) "
                             f"matrices, got {type(matrices).__name__} of length "
                             f"{len(matrices) if isinstance(matrices, Sequence) else '?'}")
        panels = [_as_matrix(f"matrices[{i}]", m, allow_vector=False)
                  for i, m in enumerate(matrices)]
    n = len(panels)
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)):
        raise TypeError(f"ncols: expected a positive int, got {type(ncols).__name__}")
    if ncols <= 0:
        raise ValueError(f"ncols: expected a positive int, got {ncols}")
    if titles is not None:
        titles = [str(t) for t in titles]
        if len(titles) != n:
            raise ValueError(f"titles: expected {n} titles (one per matrix), got {len(titles)}")
    else:
        titles = [f"head {i}" for i in range(n)]
    cols_given = col_labels if col_labels is not None else labels
    checked = []
    for i, m in enumerate(panels):
        shape = tuple(int(s) for s in m.shape)
        rows = _as_labels("labels", labels, shape[0], f"one per row of matrices[{i}]", shape)
        cols = _as_labels("col_labels" if col_labels is not None else "labels", cols_given,
                          shape[1], f"one per column of matrices[{i}]", shape)
        checked.append((rows, cols))
    _check_digits(digits)
    _check_cmap(cmap)
    lo, hi = _color_limits(panels, vmin, vmax)
    ncols = min(int(ncols), n)
    nrows = math.ceil(n / ncols)
    q_len, k_len = panels[0].shape
    aspect = q_len / k_len
    panel_size = min(float(panel_size), (MAX_FIGURE_WIDTH - 0.8) / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(panel_size * ncols + 0.8,
                                      (panel_size * aspect + 0.6) * nrows + 0.3))
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.set_axis_off()
            continue
        rows, cols = checked[i]
        image = _draw_heatmap(ax, panels[i], rows, cols, lo=lo, hi=hi, cmap=cmap,
                              annotate=annotate, digits=digits,
                              xlabel=xlabel if i // ncols == nrows - 1 else "",
                              ylabel=ylabel if i % ncols == 0 else "", title=titles[i])
    # one bar beside all rows; aspect grows with the rows so the bar stays thin
    fig.colorbar(image, ax=list(axes.flat), shrink=0.85, aspect=20 * nrows)
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig


def _as_stack(x: Any) -> np.ndarray:
    """``(n_panels, q_len, k_len)`` array from a NumPy array or torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != 3:
        raise ValueError(f"matrices: expected shape (n_panels, q_len, k_len) or a sequence "
                         f"of (q_len, k_len) matrices, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"matrices: expected a non-empty stack, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"matrices: expected numbers, got dtype {arr.dtype}")
    return arr


# ---------------------------------------------------------------- vectors
def _as_vector_dict(name: str, vectors: Any) -> dict[str, np.ndarray]:
    if not isinstance(vectors, Mapping) or len(vectors) == 0:
        raise TypeError(f"{name}: expected a non-empty dict name -> vector of shape (2,), "
                        f"got {type(vectors).__name__}")
    out = {}
    for key, v in vectors.items():
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        try:
            arr = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"{name}[{key!r}]: expected a vector of 2 numbers, got "
                            f"{type(v).__name__}") from None
        if arr.shape != (2,):
            raise ValueError(f"{name}[{key!r}]: expected shape (2,), got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name}[{key!r}]: contains NaN or infinity: {arr.tolist()}")
        out[str(key)] = arr
    return out


def plot_vectors_2d(
    vectors: Mapping[str, Any],
    after: Mapping[str, Any] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    colors: Mapping[str, str] | None = None,
    before_label: str = "before",
    after_label: str = "after",
    after_suffix: str = "\u2032",
    legend: bool | str = True,
) -> Axes:
    """Draw 2-D vectors as arrows from the origin, each labelled with its name.

    With ``after``, a second set is drawn dashed in the same colour per name
    (the words after one round of attention, say), labelled ``name`` +
    ``after_suffix`` (a prime by default: ``bat′``).

    Args:
        vectors: dict name -> vector of shape ``(2,)`` (solid arrows).
        after: optional dict name -> vector ``(2,)`` (dashed arrows); a name
            also in ``vectors`` keeps its colour.
        ax: Axes to draw on; None creates a new square figure.
        title: optional title.
        colors: optional dict name -> matplotlib colour, to give a word the same
            colour in several panels; names left out get the next colours of
            the default cycle.
        before_label, after_label: legend entries for solid and dashed arrows.
        after_suffix: appended to the names of the dashed arrows.
        legend: draw the solid/dashed legend (only when ``after`` is given):
            True places it where matplotlib finds room ("best"), a string is
            a matplotlib location such as ``"upper left"``, False omits it.

    Returns:
        The Axes, with equal aspect so that angles and lengths look right.

    Raises:
        TypeError: ``vectors`` / ``after`` is not a non-empty dict; ``colors``
            is not a dict.
        ValueError: a vector does not have shape ``(2,)`` or is not finite (the
            message names the dict and the key).
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    solid = _as_vector_dict("vectors", vectors)
    dashed = _as_vector_dict("after", after) if after is not None else {}
    if colors is not None and not isinstance(colors, Mapping):
        raise TypeError(f"colors: expected a dict name -> colour, got {type(colors).__name__}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 5.0))
    palette = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2"])
    names = list(dict.fromkeys([*solid, *dashed]))
    chosen = dict(colors) if colors is not None else {}
    free = iter([c for c in palette if c not in chosen.values()] or palette)
    color_of = {name: chosen[name] if name in chosen else next(free, "#444444")
                for name in names}
    points = [np.zeros(2), *solid.values(), *dashed.values()]
    span = max(float(np.max(np.abs(np.stack(points)))), 1e-9)

    def arrow(v: np.ndarray, color: str, style: str, text: str) -> None:
        ax.annotate("", xy=(v[0], v[1]), xytext=(0.0, 0.0),
                    arrowprops={"arrowstyle": "-|>", "color": color, "lw": 2.0,
                                "linestyle": style, "shrinkA": 0, "shrinkB": 0,
                                "mutation_scale": 16})
        norm = float(np.hypot(*v)) or 1.0
        offset = 0.06 * span * v / norm
        ax.text(v[0] + offset[0], v[1] + offset[1], text, color=color, ha="center",
                va="center", fontsize=11, fontweight="bold" if style == "-" else "normal")

    for name, v in solid.items():
        arrow(v, color_of[name], "-", name)
    for name, v in dashed.items():
        arrow(v, color_of[name], "--", name + after_suffix)
    stack = np.stack(points)
    pad = 0.18 * span
    ax.set_xlim(min(stack[:, 0].min(), 0.0) - pad, max(stack[:, 0].max(), 0.0) + pad)
    ax.set_ylim(min(stack[:, 1].min(), 0.0) - pad, max(stack[:, 1].max(), 0.0) + pad)
    ax.set_aspect("equal")
    ax.axhline(0.0, color="#999999", lw=0.8, zorder=0)
    ax.axvline(0.0, color="#999999", lw=0.8, zorder=0)
    ax.grid(True, color="#e6e6e6", lw=0.8, zorder=0)
    ax.set_axisbelow(True)
    if title is not None:
        ax.set_title(title)
    if dashed and legend:
        handles = [Line2D([], [], color="#444444", lw=2.0, linestyle="-", label=before_label),
                   Line2D([], [], color="#444444", lw=2.0, linestyle="--", label=after_label)]
        ax.legend(handles=handles, loc="best" if legend is True else legend)
    return ax
