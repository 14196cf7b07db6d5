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

from collections.abc import Iterable, Iterator
from functools import lru_cache

from pybtex.backends.plaintext import Backend as PlainTextBackend
from pybtex.database import Entry
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle

STYLE_NAME = "author_year"


#: One plain-text backend for every render. ``Text.render_as("text")`` looks the backend
#: up as a plugin on each call, and pybtex's lookup scans every installed package's entry
#: points (``importlib.metadata.entry_points()``, uncached): formatting the 55-entry
#: bibliography made about 600 scans, and a chapter page took ~15 s to write.
PLAIN_TEXT = PlainTextBackend()


@lru_cache(maxsize=4096)
def _plain(latex: str) -> str:
    """The text of a LaTeX field ("Vaswani", "{Gemma Team}" -> "Gemma Team")."""
    return Text.from_latex(latex).render(PLAIN_TEXT)


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
    """Labels "Vaswani et al., 2017" (entries sharing author and year were told apart by
    :func:`disambiguate_years` before: "Liu et al., 2020a")."""

    def format_labels(self, sorted_entries: Iterable[Entry]) -> Iterator[str]:
        for who, year in (who_and_year(e) for e in sorted_entries):
            yield f"{who}, {year}"


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


def disambiguate_years(entries: Iterable[Entry]) -> None:
    """Entries with the same author text and year get 2020a, 2020b, ... in their ``year``
    field, in the list's order (by title), so that the citations in the text, the labels
    and the entries of the list all say which one is meant. Idempotent."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for entry in entries:
        groups.setdefault(who_and_year(entry), []).append(entry)
    order = AuthorYearOrder()
    for (_, year), group in groups.items():
        if len(group) > 1:
            for letter, entry in zip("abcdefghijklmnopqrstuvwxyz",
                                     sorted(group, key=order.sorting_key), strict=False):
                entry.fields["year"] = f"{year}{letter}"


def _disambiguate_cited_years(app: object) -> None:
    """After sphinxcontrib-bibtex has parsed the .bib files (its builder-inited handler)."""
    disambiguate_years(app.env.get_domain("cite").bibdata.data.entries.values())


def register() -> None:
    register_plugin("pybtex.style.formatting", STYLE_NAME, AuthorYearStyle, force=True)


def setup(app: object) -> dict:
    register()
    # sphinxcontrib-bibtex parses at builder-inited with the default priority 500
    app.connect("builder-inited", _disambiguate_cited_years, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
