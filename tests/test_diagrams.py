"""The diagrams in images/: drawn by the script, labelled with the chapters' shapes, readable.

* The committed SVG, PDF and PNG files (the diagrams and the shared-link preview) are
  byte for byte what ``images/make_diagrams.py`` draws, so neither a hand edit nor a
  script edit without ``make diagrams`` can slip in.
* The shapes the diagrams are labelled with are the chapters' own worked
  examples (read from the chapters' code cells).
* The smallest text of every diagram renders at >= 9 CSS px when the diagram
  is shown 342 px wide (the text column of a 390 px phone), and each diagram
  a chapter shows has alt text and both a light and a dark variant.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
CHAPTERS = ROOT / "chapters"
PHONE_TEXT_WIDTH_PX = 342  # 390 px viewport minus the theme's padding
MIN_FONT_PX = 9.0


def _load_script():
    spec = importlib.util.spec_from_file_location("make_diagrams", IMAGES / "make_diagrams.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_diagrams"] = module
    spec.loader.exec_module(module)
    return module


diagrams = _load_script()


def _chapter_sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(CHAPTERS.glob("*.md")))


@pytest.mark.slow
def test_committed_svgs_are_what_the_script_draws(tmp_path: Path) -> None:
    drawn = {p.name: p.read_bytes() for p in diagrams.draw_all(tmp_path)}
    committed = {p.name: p.read_bytes() for p in IMAGES.iterdir()
                 if p.suffix in (".svg", ".pdf", ".png")}
    assert sorted(committed) == sorted(drawn), (
        "images/ holds SVG/PDF/PNG files the script does not draw, or misses some: "
        "run `make diagrams`"
    )
    stale = [name for name in drawn if drawn[name] != committed[name]]
    assert not stale, f"out of date (run `make diagrams` and commit): {stale}"


@pytest.mark.slow
def test_two_runs_draw_identical_files(tmp_path: Path) -> None:
    first = {p.name: p.read_bytes() for p in diagrams.draw_all(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in diagrams.draw_all(tmp_path / "b")}
    assert first == second


def _assignment(names: str, source: str) -> tuple[int, ...]:
    """The integers of a chapter line like ``batch, seq_len, d_model, head_dim = 2, 5, 8, 4``."""
    m = re.search(rf"^{re.escape(names)}\s*=\s*([\d,\s]+)$", source, flags=re.MULTILINE)
    assert m, f"no line `{names} = ...` in the chapters: the diagram's example moved"
    return tuple(int(v) for v in m.group(1).split(","))


def test_attention_flow_shapes_are_chapter_2s_example() -> None:
    _, seq_len, d_model, head_dim = _assignment("batch, seq_len, d_model, head_dim",
                                                _chapter_sources())
    e = diagrams.EXAMPLES["attention-flow"]
    assert (e["seq_len"], e["d_model"], e["d_k"], e["d_v"]) == (seq_len, d_model,
                                                                 head_dim, head_dim)


def test_multi_head_shapes_are_chapter_3s_example() -> None:
    _, seq_len, d_model, num_heads = _assignment("batch, seq_len, d_model, num_heads",
                                                 _chapter_sources())
    e = diagrams.EXAMPLES["multi-head"]
    assert (e["seq_len"], e["d_model"], e["num_heads"], e["head_dim"]) == (
        seq_len, d_model, num_heads, d_model // num_heads)


def test_causal_mask_tokens_are_chapter_5s_sentence() -> None:
    m = re.search(r'^tokens = (\[[^\]]*\])$', _chapter_sources(), flags=re.MULTILINE)
    assert m, "no `tokens = [...]` line in the chapters"
    tokens = eval(m.group(1))  # a literal list of strings from our own chapter
    assert tokens == diagrams.MASK_TOKENS
    assert diagrams.EXAMPLES["causal-mask"]["seq_len"] == len(tokens)


@pytest.mark.parametrize("svg", sorted(IMAGES.glob("*.svg")), ids=lambda p: p.name)
def test_shape_labels_are_written_in_the_svg(svg: Path) -> None:
    text = svg.read_text(encoding="utf-8")
    stem = svg.stem.removesuffix("-dark")
    e = diagrams.EXAMPLES[stem]
    if stem == "attention-flow":
        expected = [f"{e['seq_len']} × {e['d_model']}", f"{e['seq_len']} × {e['d_k']}",
                    f"{e['seq_len']} × {e['seq_len']}"]
    elif stem == "multi-head":
        expected = [f"{e['seq_len']} × {e['d_model']}", f"{e['seq_len']} × {e['head_dim']}"]
    elif stem == "causal-mask":
        expected = diagrams.MASK_TOKENS
    elif stem == "transformer-block":
        expected = ["Post-LN", "Pre-LN", "LayerNorm", "MLP", "multi-head attention"]
    else:
        expected = [f"{t} × {e['d_k']}" for t in range(1, e["steps"] + 1)]
    missing = [s for s in expected if s not in text]
    assert not missing, f"{svg.name} lacks the labels {missing}"


@pytest.mark.parametrize("svg", sorted(IMAGES.glob("*.svg")), ids=lambda p: p.name)
def test_text_is_readable_on_a_phone(svg: Path) -> None:
    text = svg.read_text(encoding="utf-8")
    m = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', text)
    assert m, f"{svg.name} has no viewBox"
    view_width = float(m.group(1))
    sizes = [float(s) for s in re.findall(r"font-size: ([\d.]+)px", text)]
    assert sizes, f"{svg.name}: no text found (text must stay text: svg.fonttype none)"
    # the page shows the diagram at most PHONE_TEXT_WIDTH_PX wide on a phone
    shown = min(PHONE_TEXT_WIDTH_PX, view_width * 96 / 72)
    smallest_px = min(sizes) * shown / view_width
    assert smallest_px >= MIN_FONT_PX, (
        f"{svg.name}: smallest text {smallest_px:.1f} px at 390 px, want >= {MIN_FONT_PX}"
    )


def test_each_placed_diagram_has_alt_text_and_both_variants() -> None:
    source = _chapter_sources()
    placed = re.findall(r"```\{figure\} \.\./images/([\w-]+)\.(?:svg|\*)\n((?::[^\n]*\n)*)",
                        source)
    stems = {stem for stem, _ in placed}
    assert stems >= {s for s in diagrams.DIAGRAMS}, (
        f"diagrams drawn but not placed in a chapter: {set(diagrams.DIAGRAMS) - stems}"
    )
    for stem, options in placed:
        assert re.search(r":alt: \S.{20,}", options), f"{stem}: alt text missing or too short"
        assert ":figclass:" in options and "only-" in options, f"{stem}: no only-light/dark class"
        if stem.endswith("-dark"):
            assert "only-dark" in options
            # without it the theme puts a light background behind the image in dark mode
            assert ":class: dark-light" in options, f"{stem}: add `:class: dark-light`"
        else:
            assert "only-light" in options
    assert {s for s in stems if s.endswith("-dark")} == {f"{s}-dark" for s in diagrams.DIAGRAMS}
