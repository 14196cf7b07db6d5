"""Tables and figures: what they show must equal the numbers they were given."""

from __future__ import annotations

from html.parser import HTMLParser

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from selfattn.plotting import (  # noqa: E402
    BOOK_STYLE,
    attention_heatmap,
    format_number,
    heatmap_grid,
    matrix_table,
    plot_vectors_2d,
    use_book_style,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


class _Cells(HTMLParser):
    """Collect the text of every <th>/<td>, in document order, tagged by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, str]] = []
        self.tags: list[str] = []
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        if tag in ("th", "td"):
            self._open, self._text = tag, []

    def handle_endtag(self, tag) -> None:
        if tag == self._open:
            self.cells.append((tag, "".join(self._text)))
            self._open = None

    def handle_data(self, data) -> None:
        if self._open:
            self._text.append(data)


def _parse(html: str) -> _Cells:
    parser = _Cells()
    parser.feed(html)
    return parser


# --- format_number: exact strings (reference) ----------------------------------


@pytest.mark.parametrize(
    "value,digits,expected",
    [
        (0.1234, 3, "0.123"),
        (0.1236, 3, "0.124"),
        (1.0, 2, "1.00"),
        (-0.0001, 3, "0.000"),  # never "-0.000"
        (-0.25, 2, "-0.25"),
        (2.5, 0, "2"),  # round half to even, as Python formats
        (np.float32(0.5), 3, "0.500"),
        (3, 3, "3"),
        (np.int64(-7), 3, "-7"),
        (True, 3, "True"),
        (np.bool_(False), 3, "False"),
        (-np.inf, 3, "-inf"),
        (np.inf, 3, "inf"),
        (np.nan, 3, "nan"),
        (1234567.0, 3, "1.235e+06"),
    ],
)
def test_format_number_exact(value, digits, expected) -> None:
    assert format_number(value, digits) == expected


def test_format_number_bad_input() -> None:
    with pytest.raises(TypeError, match="value: expected a number or bool, got str"):
        format_number("0.5")
    with pytest.raises(ValueError, match=r"digits: expected an int in \[0, 12\], got 13"):
        format_number(0.5, 13)
    with pytest.raises(TypeError, match="digits: expected an int"):
        format_number(0.5, 2.0)


# --- matrix_table ----------------------------------------------------------------


def test_matrix_table_html_has_every_value_and_label_in_order() -> None:
    m = np.array([[0.14, 0.32, 0.5], [0.32, 0.77, 1.22]])
    t = matrix_table(m, ["Money", "Bank"], ["Money", "Bank", "Grows"], digits=3, title="S")
    cells = _parse(t._repr_html_()).cells
    expected = [
        ("td", ""), ("th", "Money"), ("th", "Bank"), ("th", "Grows"),
        ("th", "Money"), ("td", "0.140"), ("td", "0.320"), ("td", "0.500"),
        ("th", "Bank"), ("td", "0.320"), ("td", "0.770"), ("td", "1.220"),
    ]
    assert cells == expected
    html = t._repr_html_()
    assert 'class="selfattn-matrix-title"' in html and '<table aria-label="S"' in html
    assert html.index(">S</div>") < html.index("<table")  # the title comes first


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 7)),
           elements=st.floats(-1e4, 1e4, allow_nan=False)),
    st.integers(0, 5),
)
def test_matrix_table_html_cells_equal_formatted_values(m: np.ndarray, digits: int) -> None:
    rows = [f"r{i}" for i in range(m.shape[0])]
    cols = [f"c{j}" for j in range(m.shape[1])]
    t = matrix_table(m, rows, cols, digits=digits)
    cells = _parse(t._repr_html_()).cells
    assert cells[0] == ("td", "")  # the empty corner is a data cell, never an empty header
    tds = [text for tag, text in cells[1:] if tag == "td"]
    assert tds == [format_number(v, digits) for v in m.ravel()]
    ths = [text for tag, text in cells if tag == "th"]
    assert ths == [*cols, *rows] and "" not in ths
    # the text version shows the same numbers in the same order
    body = repr(t).splitlines()[1:]
    assert [tok for line in body for tok in line.split()[1:]] == tds


def test_matrix_table_html_scrolls_in_its_own_box_and_has_no_script() -> None:
    html = matrix_table(np.ones((2, 40)))._repr_html_()
    assert html.startswith('<div class="selfattn-matrix" style="overflow-x:auto')
    assert "<script" not in html.lower() and "onclick" not in html.lower()
    assert html.count("<td") == 80


def test_matrix_table_without_labels_has_no_header_cells() -> None:
    cells = _parse(matrix_table([[1.0, 2.0]], digits=1)._repr_html_()).cells
    assert cells == [("td", "1.0"), ("td", "2.0")]


def test_matrix_table_escapes_labels() -> None:
    html = matrix_table([[1.0]], ["<b>x</b>"], ["a&b"])._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "a&amp;b" in html and "<b>" not in html


def test_matrix_table_text_is_aligned() -> None:
    t = matrix_table([[1.0, -22.5], [0.125, 3.0]], ["a", "long"], ["x", "y"], digits=2)
    lines = repr(t).splitlines()
    assert lines == [
        "         x       y",
        "a     1.00  -22.50",
        "long  0.12    3.00",
    ]
    assert str(t) == repr(t)


def test_matrix_table_vector_bool_int_and_torch() -> None:
    assert matrix_table(np.array([0.5, 0.25]), digits=2).shape == (1, 2)
    bools = _parse(matrix_table(np.array([[True, False]]))._repr_html_()).cells
    assert bools == [("td", "True"), ("td", "False")]
    ints = _parse(matrix_table(np.array([[3, 4]]))._repr_html_()).cells
    assert ints == [("td", "3"), ("td", "4")]
    t = torch.tensor([[0.5, 1.5]], requires_grad=True)
    np.testing.assert_array_equal(matrix_table(t).values, [[0.5, 1.5]])


def test_matrix_table_keeps_a_copy() -> None:
    m = np.array([[1.0, 2.0]])
    t = matrix_table(m)
    m[0, 0] = 99.0
    assert t.cells() == [["1.000", "2.000"]]


def test_matrix_table_label_count_mismatch_names_argument_and_counts() -> None:
    m = np.zeros((3, 4))
    with pytest.raises(ValueError, match=r"row_labels: expected 3 labels .*\(3, 4\).*got 2"):
        matrix_table(m, row_labels=["a", "b"])
    with pytest.raises(ValueError, match=r"col_labels: expected 4 labels .*got 5"):
        matrix_table(m, col_labels=list("abcde"))


def test_matrix_table_bad_input() -> None:
    with pytest.raises(ValueError, match=r"matrix: expected shape \(n_rows, n_cols\).*\(2, 2, 2\)"):
        matrix_table(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"matrix: expected a non-empty matrix, got shape \(0,"):
        matrix_table(np.zeros((0, 3)))
    with pytest.raises(TypeError, match="matrix: expected numbers or bools, got dtype <U1"):
        matrix_table(np.array([["a"]]))
    with pytest.raises(TypeError, match="row_labels: expected a sequence"):
        matrix_table(np.zeros((1, 1)), row_labels="a")
    with pytest.raises(TypeError, match="title: expected a str"):
        matrix_table(np.zeros((1, 1)), title=3)


# --- attention_heatmap -------------------------------------------------------------


def test_heatmap_annotations_equal_formatted_weights() -> None:
    rng = np.random.default_rng(0)
    w = rng.random((3, 4))
    w /= w.sum(axis=1, keepdims=True)
    ax = attention_heatmap(w, ["a", "b", "c"], ["w", "x", "y", "z"], digits=2)
    assert [t.get_text() for t in ax.texts] == [format_number(v, 2) for v in w.ravel()]
    # each annotation sits on its cell: text (j, i) shows w[i, j]
    for t, (i, j) in zip(ax.texts, np.ndindex(w.shape), strict=True):
        assert t.get_position() == (j, i)
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.images[0].get_clim() == (0.0, 1.0)  # weights: fixed [0, 1] scale


def test_heatmap_of_scores_uses_data_range_and_marks_minus_inf() -> None:
    s = np.array([[1.0, -np.inf], [0.5, 2.0]])
    ax = attention_heatmap(s, ["q0", "q1"], ["k0", "k1"], title="scores")
    assert [t.get_text() for t in ax.texts] == ["1.00", "-inf", "0.50", "2.00"]
    assert ax.images[0].get_clim() == (0.5, 2.0)
    assert bool(np.ma.getmaskarray(ax.images[0].get_array())[0, 1])
    assert ax.get_title() == "scores"


def test_heatmap_draws_on_given_axes_without_annotations() -> None:
    fig, ax = plt.subplots()
    out = attention_heatmap(np.eye(2), ["a", "b"], ["a", "b"], ax=ax, annotate=False,
                            colorbar=False)
    assert out is ax and len(ax.texts) == 0 and len(fig.axes) == 1


def test_heatmap_label_mismatch_names_argument_and_counts() -> None:
    with pytest.raises(ValueError, match=r"row_labels: expected 2 labels .*got 3"):
        attention_heatmap(np.eye(2), ["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match=r"col_labels: expected 2 labels .*got 1"):
        attention_heatmap(np.eye(2), ["a", "b"], ["a"])


def test_heatmap_bad_input() -> None:
    with pytest.raises(ValueError, match=r"weights: expected shape"):
        attention_heatmap(np.zeros((1, 2, 2)))
    with pytest.raises(TypeError, match="cmap: expected a matplotlib colormap name"):
        attention_heatmap(np.eye(2), cmap="NotAColormap")
    with pytest.raises(ValueError, match="vmin, vmax: expected vmin < vmax"):
        attention_heatmap(np.eye(2), vmin=1.0, vmax=0.0)


# --- heatmap_grid ------------------------------------------------------------------


def test_heatmap_grid_panels_titles_and_shared_scale() -> None:
    mats = [np.full((2, 2), 0.25), np.array([[0.9, 0.1], [0.3, 0.7]]), np.eye(2)]
    fig = heatmap_grid(mats, ["a", "b"], ["h0", "h1", "h2"], ncols=2)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["h0", "h1", "h2"]
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)
    assert [t.get_text() for t in panels[1].texts] == ["0.90", "0.10", "0.30", "0.70"]
    hidden = [ax for ax in fig.axes if not ax.images and not ax.axison]
    assert len(hidden) == 1  # 3 panels on a 2 x 2 grid


def test_heatmap_grid_accepts_a_stack_and_torch() -> None:
    stack = torch.softmax(torch.randn(4, 3, 3, generator=torch.Generator().manual_seed(0)), -1)
    fig = heatmap_grid(stack, ["x", "y", "z"], ncols=4)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2", "head 3"]
    np.testing.assert_allclose(panels[2].images[0].get_array(), stack[2].numpy())


def test_helpers_draw_figures_a_phone_can_show_whole() -> None:
    """The book's figure rule (<= 5.5 in saved, so <= 5.3 in drawn; text >= 10.5 pt) holds
    for every figure a helper sizes itself, however many columns or panels it gets."""
    import matplotlib as mpl

    use_book_style(inline=False)
    try:
        width, _ = BOOK_STYLE["figure.figsize"]
        assert width <= 5.3
        sizes = [BOOK_STYLE[k] for k in ("font.size", "axes.titlesize", "axes.labelsize",
                                        "xtick.labelsize", "ytick.labelsize",
                                        "legend.fontsize")]
        assert min(sizes) >= 10.5
        ax = attention_heatmap(np.full((3, 12), 1 / 12))
        assert ax.figure.get_figwidth() <= 5.3
        assert min(t.get_fontsize() for t in ax.texts) >= 10.5  # cell numbers
        for ncols in (1, 2, 3, 4, 8):
            fig = heatmap_grid(np.full((8, 4, 4), 0.25), ncols=ncols, panel_size=3.0)
            assert fig.get_figwidth() <= 5.3, ncols
            assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 10.5
        fig = plot_vectors_2d({"a": [1.0, 0.0]}).figure
        assert fig.get_figwidth() <= 5.3
    finally:
        mpl.rcdefaults()


def test_heatmap_grid_bad_input() -> None:
    with pytest.raises(ValueError, match="titles: expected 2 titles .*got 1"):
        heatmap_grid([np.eye(2), np.eye(2)], titles=["only one"])
    with pytest.raises(ValueError,
                       match=r"labels: expected 2 labels \(one per row of matrices\[1\].*got 3"):
        heatmap_grid([np.eye(3), np.eye(2)], ["a", "b", "c"])
    with pytest.raises(ValueError, match="matrices: expected a non-empty sequence"):
        heatmap_grid([])
    with pytest.raises(ValueError, match="ncols: expected a positive int, got 0"):
        heatmap_grid([np.eye(2)], ncols=0)
    with pytest.raises(ValueError, match=r"matrices: expected shape \(n_panels, q_len, k_len\)"):
        heatmap_grid(np.eye(2))


# --- plot_vectors_2d -----------------------------------------------------------------


def _arrows(ax):
    return [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]


def test_plot_vectors_draws_one_arrow_per_vector_from_the_origin() -> None:
    before = {"bat": np.array([3.0, 3.0]), "cave": np.array([4.0, 0.0])}
    after = {"bat": np.array([3.4, 1.7]), "cave": np.array([3.6, 1.3])}
    ax = plot_vectors_2d(before, after, title="moving")
    arrows = _arrows(ax)
    assert len(arrows) == 4
    assert [tuple(a.xy) for a in arrows] == [(3.0, 3.0), (4.0, 0.0), (3.4, 1.7), (3.6, 1.3)]
    assert all(tuple(a.xyann) == (0.0, 0.0) for a in arrows)
    styles = [a.arrow_patch.get_linestyle() for a in arrows]
    assert styles[0] == styles[1] == "-" and styles[2] == styles[3] == "--"
    # same word, same colour before and after
    assert to_rgba(arrows[0].arrow_patch.get_edgecolor()) == to_rgba(
        arrows[2].arrow_patch.get_edgecolor())
    names = [t.get_text() for t in ax.texts if getattr(t, "arrow_patch", None) is None]
    assert names == ["bat", "cave", "bat\u2032", "cave\u2032"]
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    assert x0 < 0 < 4.0 < x1 and y0 < 0 < 3.0 < y1
    assert ax.get_aspect() == 1.0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["before", "after"]
    ax2 = plot_vectors_2d(before, after, legend="upper left")
    assert ax2.get_legend()._loc == 2  # matplotlib's code for "upper left"
    assert plot_vectors_2d(before, after, legend=False).get_legend() is None


def test_plot_vectors_keeps_chosen_colours() -> None:
    colors = {"bat": "#d62728", "cave": "#2ca02c"}
    ax = plot_vectors_2d({"cave": [4.0, 0.0], "bat": [3.0, 3.0], "racket": [0.0, 5.0]},
                         colors=colors)
    got = [to_rgba(a.arrow_patch.get_edgecolor()) for a in _arrows(ax)]
    assert got[0] == to_rgba("#2ca02c") and got[1] == to_rgba("#d62728")
    assert got[2] not in (to_rgba("#2ca02c"), to_rgba("#d62728"))  # a free colour
    with pytest.raises(TypeError, match="colors: expected a dict"):
        plot_vectors_2d({"x": [1.0, 0.0]}, colors=["red"])


def test_plot_vectors_bad_input_names_the_key() -> None:
    with pytest.raises(ValueError,
                       match=r"vectors\['bat'\]: expected shape \(2,\), got shape \(3,\)"):
        plot_vectors_2d({"bat": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"after\['x'\]: contains NaN"):
        plot_vectors_2d({"x": [1.0, 0.0]}, {"x": [np.nan, 0.0]})
    with pytest.raises(TypeError, match="vectors: expected a non-empty dict"):
        plot_vectors_2d({})


# --- use_book_style -------------------------------------------------------------------


def test_use_book_style_sets_white_facecolor_and_layout() -> None:
    with matplotlib.rc_context({"figure.facecolor": "black", "axes.facecolor": "black",
                                "figure.dpi": 72, "figure.constrained_layout.use": False}):
        use_book_style()
        assert to_rgba(matplotlib.rcParams["figure.facecolor"]) == (1.0, 1.0, 1.0, 1.0)
        assert to_rgba(matplotlib.rcParams["axes.facecolor"]) == (1.0, 1.0, 1.0, 1.0)
        assert to_rgba(matplotlib.rcParams["savefig.facecolor"]) == (1.0, 1.0, 1.0, 1.0)
        assert matplotlib.rcParams["figure.dpi"] == 110
        assert matplotlib.rcParams["figure.constrained_layout.use"] is True
        fig, ax = plt.subplots()
        assert to_rgba(fig.get_facecolor()) == (1.0, 1.0, 1.0, 1.0)
        assert to_rgba(ax.get_facecolor()) == (1.0, 1.0, 1.0, 1.0)
        # outside a Jupyter kernel the backend is left alone
        assert matplotlib.get_backend().lower() == "agg"
    assert BOOK_STYLE["figure.facecolor"] == "white"
