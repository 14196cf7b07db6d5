"""Two references by the same authors in the same year are told apart everywhere.

RAdam and Admin are both "Liu et al., 2020": the reference list labelled them 2020a
and 2020b while the text cited "Liu et al., 2020" for both (the page's check of
labels against citations failed). ``disambiguate_years`` writes the letter into the
entries' year, so the citations, the labels and the entries agree, on the site and
in the published notebooks.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

from author_year import disambiguate_years, who_and_year  # noqa: E402
from publish_notebooks import citation_formatter, load_bibliography  # noqa: E402
from pybtex.database import parse_string  # noqa: E402

BIB = r"""
@article{b, author={Liu, A and Jiang, B and He, C}, title={Understanding the difficulty},
         year={2020}}
@article{a, author={Liu, A and Jiang, B and He, C}, title={On the variance}, year={2020}}
@article{c, author={Liu, A and Jiang, B and He, C}, title={Another}, year={2021}}
@article{d, author={Vaswani, A and Shazeer, N and Parmar, N}, title={Attention}, year={2017}}
"""


def test_same_authors_same_year_get_letters_in_title_order_once() -> None:
    entries = parse_string(BIB, "bibtex").entries
    disambiguate_years(entries.values())
    years = {key: entry.fields["year"] for key, entry in entries.items()}
    assert years == {"a": "2020a", "b": "2020b", "c": "2021", "d": "2017"}
    disambiguate_years(entries.values())  # a second pass changes nothing
    assert {key: entry.fields["year"] for key, entry in entries.items()} == years
    assert who_and_year(entries["b"]) == ("Liu et al.", "2020b")


def test_the_book_cites_and_lists_liu_2020a_and_2020b_alike() -> None:
    entries = load_bibliography([ROOT / "references.bib"])
    cite, bibliography = citation_formatter(entries)
    for key, year in (("liu2020radam", "2020a"), ("liu2020admin", "2020b")):
        assert f"Liu et al., {year}" in cite([key], "p")
        assert bibliography(key).startswith(f"\\[Liu et al., {year}\\]")


def test_formatting_never_looks_a_backend_up_as_a_plugin(monkeypatch) -> None:
    """pybtex's plugin lookup scans every installed package's entry points, uncached:
    rendering each field and entry through it made a chapter page take ~15 s to write.
    After the style is made (one lookup), no text or entry may look anything up."""
    import author_year
    import pybtex.plugin

    entries = parse_string(r"""
        @article{d, author={Vaswani, A and Shazeer, N and Parmar, N}, title={Attention},
                 journal={NeurIPS}, year={2017}}""", "bibtex").entries
    _, bibliography = citation_formatter(dict(entries))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"plugin lookup while formatting: {args}")

    monkeypatch.setattr(pybtex.plugin, "_load_entry_point", refuse)
    author_year._plain.cache_clear()
    assert author_year._plain(r"{Gemma Team} and {others}") == "Gemma Team and others"
    assert bibliography("d") == (r"\[Vaswani et al., 2017\] A Vaswani, N Shazeer, and N Parmar\. "
                                 r"Attention\. *NeurIPS*, 2017\.")
