"""The book's worked-example inputs, taken from the study notes.

The book is built from five public study notes on self-attention (numbered
000 to 004). This module holds the **input** numbers of their worked examples,
and nothing else: every result the book shows is computed from these inputs by
the package, never copied from a note (the notes' hand arithmetic does not
always survive recomputation).

=====================================  =========  ===================================
function                               note       what
=====================================  =========  ===================================
:func:`bat_cave_racket`                002        three words as 2-D coordinates
:func:`bank_vocabulary`                004        five words as 3-d embeddings
:func:`money_bank_grows`               004        the sentence "Money Bank Grows"
:func:`river_bank_flows`               004        the sentence "River Bank Flows"
:func:`money_bank_projections`         004        W_Q, W_K, W_V of the worked example
:func:`stretch_example`                002        v1 ... v4 and the stretch diag(3, 1)
=====================================  =========  ===================================

Every array is ``float64`` and **read-only** (``arr.flags.writeable`` is
False), so a reader cannot change an example by accident; copy it first
(``E.copy()``) to experiment. Each call returns fresh objects.

Tokens are rows, as everywhere in the book: an embedding matrix ``E`` has shape
``(seq_len, d_model)`` and a projection ``W`` has shape ``(d_model, head_dim)``
and is applied as ``E @ W``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Projections",
    "StretchExample",
    "TokenEmbeddings",
    "bank_vocabulary",
    "bat_cave_racket",
    "money_bank_grows",
    "money_bank_projections",
    "river_bank_flows",
    "stretch_example",
]


def _frozen(rows: Sequence[Sequence[float]] | Sequence[float]) -> np.ndarray:
    """A fresh read-only float64 array holding ``rows``."""
    arr = np.array(rows, dtype=np.float64)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class TokenEmbeddings:
    """Tokens and their embeddings, one token per row.

    Unpacks like a pair: ``tokens, E = money_bank_grows()``.
    """

    text: str  # the sentence or word list the tokens come from
    tokens: tuple[str, ...]  # the seq_len tokens, in order
    embeddings: np.ndarray  # (seq_len, d_model) float64, read-only; row i embeds tokens[i]
    source: str  # which study note the numbers come from

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != len(self.tokens):
            raise ValueError(
                f"embeddings: expected shape ({len(self.tokens)}, d_model) (one row per "
                f"token), got shape {self.embeddings.shape}"
            )

    def __iter__(self) -> Iterator[Any]:
        """Yield ``tokens`` then ``embeddings`` so the object unpacks as a pair."""
        yield self.tokens
        yield self.embeddings

    def __len__(self) -> int:
        """The number of tokens, ``seq_len``."""
        return len(self.tokens)

    def vector(self, token: str) -> np.ndarray:
        """The (read-only) embedding ``(d_model,)`` of ``token``.

        Raises:
            KeyError: ``token`` is not one of ``tokens`` (the message lists them).
        """
        if token not in self.tokens:
            raise KeyError(f"token: {token!r} is not one of {list(self.tokens)}")
        return self.embeddings[self.tokens.index(token)]

    def as_dict(self) -> dict[str, np.ndarray]:
        """``{token: embedding (d_model,)}`` in token order (what plot_vectors_2d takes)."""
        return {t: self.embeddings[i] for i, t in enumerate(self.tokens)}


@dataclass(frozen=True, eq=False)
class Projections:
    """The query, key and value projections of a worked example."""

    w_q: np.ndarray  # (d_model, head_dim) float64, read-only; Q = E @ w_q
    w_k: np.ndarray  # (d_model, head_dim) float64, read-only; K = E @ w_k
    w_v: np.ndarray  # (d_model, head_dim) float64, read-only; V = E @ w_v
    source: str  # which study note the numbers come from


@dataclass(frozen=True, eq=False)
class StretchExample:
    """Four 2-D vectors and a linear map that stretches the x-axis."""

    v1: np.ndarray  # (2,) read-only, the x unit vector (1, 0)
    v2: np.ndarray  # (2,) read-only, the y unit vector (0, 1)
    v3: np.ndarray  # (2,) read-only, (1, 1)
    v4: np.ndarray  # (2,) read-only, (-1, 0)
    A: np.ndarray  # (2, 2) read-only, diag(3, 1): the note's name for the stretch (not weights)
    source: str  # which study note the numbers come from

    @property
    def vectors(self) -> np.ndarray:
        """``v1 ... v4`` stacked as rows, shape ``(4, 2)``, read-only."""
        return _frozen([self.v1, self.v2, self.v3, self.v4])


_NOTE_002 = "study note 002, 'Mathematical details behind self-attention'"
_NOTE_004 = "study note 004, 'Self Attention' hand-written notes (Money Bank Grows)"

# Study note 004 gives one 3-d embedding per word; "Bank" has the same vector
# in both sentences.
_BANK_WORDS: dict[str, tuple[float, float, float]] = {
    "Money": (0.1, 0.2, 0.3),
    "Bank": (0.4, 0.5, 0.6),
    "Grows": (0.7, 0.8, 0.9),
    "River": (0.2, 0.1, 0.4),
    "Flows": (0.5, 0.3, 0.2),
}


def _sentence(text: str, source: str) -> TokenEmbeddings:
    tokens = tuple(text.split())
    return TokenEmbeddings(text=text, tokens=tokens,
                           embeddings=_frozen([_BANK_WORDS[t] for t in tokens]), source=source)


def bat_cave_racket() -> TokenEmbeddings:
    """Three words placed by hand in a 2-D embedding space (study note 002).

    Note 002 places "racket" at ``[0, 5]``, "bat" at ``[3, 3]`` (between the
    sports word and the animal word: without context, "bat" is ambiguous) and
    "cave" at ``[4, 0]``. The note's two sentences are "A bat lives in the
    cave" (tokens bat, cave) and "A tennis racket and a baseball bat" (tokens
    racket, bat).

    Returns:
        :class:`TokenEmbeddings` with tokens ``("bat", "cave", "racket")`` (the
        order of the note's similarity table) and embeddings ``(3, 2)``.
    """
    return TokenEmbeddings(
        text="bat cave racket",
        tokens=("bat", "cave", "racket"),
        embeddings=_frozen([[3.0, 3.0], [4.0, 0.0], [0.0, 5.0]]),
        source=_NOTE_002,
    )


def bank_vocabulary() -> TokenEmbeddings:
    """The five word embeddings of study note 004, in the note's order.

    Note 004 stacks Money, Bank, Grows, River, Flows into one ``(5, 3)`` matrix.
    The two sentences use three of these rows each; see :func:`money_bank_grows`
    and :func:`river_bank_flows`.

    Returns:
        :class:`TokenEmbeddings` with 5 tokens and embeddings ``(5, 3)``.
    """
    return _sentence("Money Bank Grows River Flows", _NOTE_004)


def money_bank_grows() -> TokenEmbeddings:
    """The sentence "Money Bank Grows" of study note 004: ``E`` with shape ``(3, 3)``.

    Rows: Money ``[0.1, 0.2, 0.3]``, Bank ``[0.4, 0.5, 0.6]``, Grows
    ``[0.7, 0.8, 0.9]`` (seq_len = 3, d_model = 3).
    """
    return _sentence("Money Bank Grows", _NOTE_004)


def river_bank_flows() -> TokenEmbeddings:
    """The sentence "River Bank Flows" of study note 004: ``E`` with shape ``(3, 3)``.

    Rows: River ``[0.2, 0.1, 0.4]``, Bank ``[0.4, 0.5, 0.6]`` (the same vector
    as in "Money Bank Grows"), Flows ``[0.5, 0.3, 0.2]``.
    """
    return _sentence("River Bank Flows", _NOTE_004)


def money_bank_projections() -> Projections:
    """The ``W_Q``, ``W_K``, ``W_V`` of study note 004's worked example (each ``(3, 3)``).

    The note applies them to row embeddings as ``E @ W``, the book's convention.
    Only these inputs are taken from the note; its products ``E_Bank @ W`` are
    recomputed by the book.
    """
    return Projections(
        w_q=_frozen([[0.3, 0.6, 0.9], [0.1, 0.4, 0.7], [0.2, 0.5, 0.8]]),
        w_k=_frozen([[0.5, 0.2, 0.1], [0.4, 0.3, 0.6], [0.7, 0.8, 0.9]]),
        w_v=_frozen([[0.6, 0.1, 0.4], [0.3, 0.5, 0.2], [0.8, 0.7, 0.9]]),
        source=_NOTE_004,
    )


def stretch_example() -> StretchExample:
    """Vectors ``v1 ... v4`` and the stretch ``A = diag(3, 1)`` of study note 002.

    ``v1 = (1, 0)``, ``v2 = (0, 1)``, ``v3 = (1, 1)``, ``v4 = (-1, 0)``. The note
    writes vectors as columns and applies ``A v``; with the book's rows this is
    ``v @ A.T``, the same thing here because ``A`` is diagonal. ``A`` is the
    note's name for the map; it is not a matrix of attention weights.
    """
    return StretchExample(
        v1=_frozen([1.0, 0.0]),
        v2=_frozen([0.0, 1.0]),
        v3=_frozen([1.0, 1.0]),
        v4=_frozen([-1.0, 0.0]),
        A=_frozen([[3.0, 0.0], [0.0, 1.0]]),
        source=_NOTE_002,
    )
