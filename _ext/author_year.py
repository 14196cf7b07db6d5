"""An author-year reference list for author-year citations.

The text cites author and year, [Vaswani et al., 2017] (sphinxcontrib-bibtex's
``bibtex_reference_style = "author_year"``). pybtex's formatting styles label the
list by number in citation order (``unsrt``: [1], [2], ...), so a reader who read
"Vaswani et al., 2017" had to hunt for it. This module registers the pybtex style
``author_year`` (conf.py's ``bibtex_default_style``): pybtex's ``unsrt`` entries,
labelled with the same author-year text the citations show, sorted by author, year
and title. The site's references page and the PDF's list use it.

:func:`who_and_year` is the one place that text is made; the published notebooks
(publish_notebooks) cite and list their references with it and with this style,
through pybtex, instead of formatting entries by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from pybtex.database import Entry
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle

STYLE_NAME = "author_year"


def _plain(latex: str) -> str:
    return Text.from_latex(latex).render_as("text")


def who_and_year(entry: Entry) -> tuple[str, str]:
    """("Vaswani et al.", "2017"): last names as the citations show them."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = [_plain(" ".join(p.prelast_names + p.last_names)) for p in people]
    if len(last) >= 3:
        who = f"{last[0]} et al."
    elif len(last) == 2:
        who = f"{last[0]} and {last[1]}"
    else:
        who = last[0] if last else "Anon."
    return who, entry.fields.get("year", "n.d.")


class AuthorYearLabels(BaseLabelStyle):
    """Labels "Vaswani et al., 2017"; a second entry with the same text gets 2017a, 2017b."""

    def format_labels(self, sorted_entries: Iterable[Entry]) -> Iterator[str]:
        entries = list(sorted_entries)
        texts = [who_and_year(e) for e in entries]
        repeated = Counter(texts)
        seen: Counter = Counter()
        for who, year in texts:
            suffix = ""
            if repeated[(who, year)] > 1:
                suffix = "abcdefghijklmnopqrstuvwxyz"[seen[(who, year)]]
                seen[(who, year)] += 1
            yield f"{who}, {year}{suffix}"


class AuthorYearOrder(BaseSortingStyle):
    """By the label's text, then title ("Gemma Team" under G: pybtex's author_year_title
    sorts the braces of a name given as ``{Gemma Team}`` after every letter)."""

    def sorting_key(self, entry: Entry) -> tuple[str, str, str]:
        who, year = who_and_year(entry)
        return who.lower(), year, _plain(entry.fields.get("title", "")).lower()


class AuthorYearStyle(UnsrtStyle):
    """pybtex's ``unsrt`` entries, labelled and sorted by author and year."""

    default_label_style = AuthorYearLabels
    default_sorting_style = AuthorYearOrder


def register() -> None:
    register_plugin("pybtex.style.formatting", STYLE_NAME, AuthorYearStyle, force=True)


def setup(app: object) -> dict:
    register()
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
