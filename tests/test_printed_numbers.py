"""Printed outputs show rounded numbers, not float noise (issue 35).

A float32 value printed by ``repr`` shows its binary rounding: training-the-stack
printed the gradient 1e-4 as ``9.999999747378752e-05`` and AdamW's steps of 0.01 as
``0.009999999776482582``. A number with 10 or more significant digits in a printed
output is such noise where a rounded value was meant; this reads every executed
output of the published notebooks (the page's outputs, tests/test_notebook_outputs.py)
and finds them.

Chapters other than training-the-stack still print some, each a largest difference
or a gap at machine precision (``1.1102230246251565e-16``) that a ``:.1e`` would say
as well: issue 35 leaves them to the chapters' authors, so each chapter may print at
most the count listed in ``LEFT`` and no more; a chapter not listed, none.
"""

from __future__ import annotations

import json
import re

import pytest

from sitetools import CHAPTERS, HTML, require_built_site

pytestmark = pytest.mark.html

# a decimal number (optionally with an exponent) standing alone in the text
NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
NOISE_DIGITS = 10

# chapter -> how many noisy numbers it may still print (issue 35: left to the chapters)
# (06-perplexity's three 2.050506613187 show three formulas agreeing to 12 decimals)
LEFT = {"01-concept": 7, "02-qkv": 1, "03-multi-head": 2, "05-causal": 3,
        "05b-kv-cache": 2, "06-perplexity": 5, "attention-at-scale": 1,
        "inside-a-trained-model": 6, "stable-logits": 1}


def significant_digits(mantissa: str) -> int:
    """Digits that carry the value: ``12.34`` 4, ``0.000123`` 3, and ``1000.000000`` 1 (a
    value formatted to fixed decimals shows zeros, not noise)."""
    return len(mantissa.replace(".", "").strip("0"))


def noisy_numbers(text: str) -> list[str]:
    return [m.group(0) for m in NUMBER.finditer(text)
            if significant_digits(m.group(1)) >= NOISE_DIGITS]


def printed_text(notebook: dict) -> list[str]:
    """Every stream and text/plain output of a notebook's code cells."""
    texts = []
    for cell in notebook["cells"]:
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            if out.get("output_type") == "stream":
                texts.append("".join(out["text"]))
            elif "text/plain" in out.get("data", {}):
                texts.append("".join(out["data"]["text/plain"]))
    return texts


def test_noise_finder_tells_noise_from_rounded_values() -> None:
    found = noisy_numbers("gradient sizes [9.999999747378752e-05, 0.003, 80.0] "
                          "steps [0.009999999776482582, 0.01] ppl 2.0505 loss 1.23456789 "
                          "seed 1234567890 range 0.5-0.6 total 1000.000000")
    assert found == ["9.999999747378752e-05", "0.009999999776482582"]


@pytest.mark.parametrize("chapter", [c.stem for c in CHAPTERS])
def test_printed_outputs_are_rounded(chapter: str) -> None:
    require_built_site()
    path = HTML / "_sources" / "chapters" / f"{chapter}.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    texts = printed_text(notebook)
    assert texts, f"{chapter}: no printed outputs read (wrong file?)"
    noise = [n for t in texts for n in noisy_numbers(t)]
    allowed = LEFT.get(chapter, 0)
    assert len(noise) <= allowed, (
        f"{chapter} prints {len(noise)} numbers with {NOISE_DIGITS}+ significant digits "
        f"(float noise; round them, e.g. f'{{x:.4f}}' or f'{{x:.1e}}'), at most {allowed} "
        f"allowed: {noise}")
