"""The worked-example inputs: exact values from the study notes, shapes, read-only."""

from __future__ import annotations

import numpy as np
import pytest

from selfattn import examples

# --- exact values, transcribed from the notes' inputs (reference) -------------


def test_bat_cave_racket_exact_coordinates() -> None:
    ex = examples.bat_cave_racket()
    assert ex.tokens == ("bat", "cave", "racket")
    np.testing.assert_array_equal(ex.embeddings, [[3.0, 3.0], [4.0, 0.0], [0.0, 5.0]])
    np.testing.assert_array_equal(ex.vector("racket"), [0.0, 5.0])
    np.testing.assert_array_equal(ex.vector("bat"), [3.0, 3.0])
    np.testing.assert_array_equal(ex.vector("cave"), [4.0, 0.0])
    assert "002" in ex.source


def test_money_bank_grows_exact_embeddings() -> None:
    tokens, E = examples.money_bank_grows()
    assert tokens == ("Money", "Bank", "Grows")
    np.testing.assert_array_equal(E, [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])
    assert "004" in examples.money_bank_grows().source


def test_river_bank_flows_exact_embeddings() -> None:
    tokens, E = examples.river_bank_flows()
    assert tokens == ("River", "Bank", "Flows")
    np.testing.assert_array_equal(E, [[0.2, 0.1, 0.4], [0.4, 0.5, 0.6], [0.5, 0.3, 0.2]])


def test_bank_vocabulary_is_the_notes_five_by_three_matrix() -> None:
    vocab = examples.bank_vocabulary()
    assert vocab.tokens == ("Money", "Bank", "Grows", "River", "Flows")
    np.testing.assert_array_equal(
        vocab.embeddings,
        [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [0.2, 0.1, 0.4], [0.5, 0.3, 0.2]],
    )


def test_projections_exact_values() -> None:
    p = examples.money_bank_projections()
    np.testing.assert_array_equal(p.w_q, [[0.3, 0.6, 0.9], [0.1, 0.4, 0.7], [0.2, 0.5, 0.8]])
    np.testing.assert_array_equal(p.w_k, [[0.5, 0.2, 0.1], [0.4, 0.3, 0.6], [0.7, 0.8, 0.9]])
    np.testing.assert_array_equal(p.w_v, [[0.6, 0.1, 0.4], [0.3, 0.5, 0.2], [0.8, 0.7, 0.9]])


def test_stretch_example_exact_values() -> None:
    s = examples.stretch_example()
    np.testing.assert_array_equal(s.v1, [1.0, 0.0])
    np.testing.assert_array_equal(s.v2, [0.0, 1.0])
    np.testing.assert_array_equal(s.v3, [1.0, 1.0])
    np.testing.assert_array_equal(s.v4, [-1.0, 0.0])
    np.testing.assert_array_equal(s.A, np.diag([3.0, 1.0]))
    np.testing.assert_array_equal(s.vectors, [[1, 0], [0, 1], [1, 1], [-1, 0]])


# --- consistency between examples (property of the notes' data) --------------


def test_bank_has_the_same_vector_in_both_sentences_and_the_vocabulary() -> None:
    vocab = examples.bank_vocabulary()
    mbg = examples.money_bank_grows()
    rbf = examples.river_bank_flows()
    np.testing.assert_array_equal(mbg.vector("Bank"), rbf.vector("Bank"))
    for sentence in (mbg, rbf):
        for token in sentence.tokens:
            np.testing.assert_array_equal(sentence.vector(token), vocab.vector(token))


def test_projection_shapes_fit_the_sentence() -> None:
    _, E = examples.money_bank_grows()
    p = examples.money_bank_projections()
    for W in (p.w_q, p.w_k, p.w_v):
        assert W.shape == (E.shape[1], 3)
        assert (E @ W).shape == (3, 3)


# --- dtype, shape, read-only, fresh copies -------------------------------------


def _all_arrays() -> list[tuple[str, np.ndarray]]:
    s = examples.stretch_example()
    p = examples.money_bank_projections()
    out = [
        ("bat_cave_racket", examples.bat_cave_racket().embeddings),
        ("bank_vocabulary", examples.bank_vocabulary().embeddings),
        ("money_bank_grows", examples.money_bank_grows().embeddings),
        ("river_bank_flows", examples.river_bank_flows().embeddings),
        ("w_q", p.w_q), ("w_k", p.w_k), ("w_v", p.w_v),
        ("v1", s.v1), ("v2", s.v2), ("v3", s.v3), ("v4", s.v4), ("A", s.A),
        ("vectors", s.vectors),
    ]
    return out


@pytest.mark.parametrize("name,arr", _all_arrays(), ids=[n for n, _ in _all_arrays()])
def test_arrays_are_float64_and_read_only(name: str, arr: np.ndarray) -> None:
    assert arr.dtype == np.float64, name
    assert not arr.flags.writeable, name
    with pytest.raises(ValueError, match="read-only"):
        arr[0] = 99.0


def test_vector_views_are_read_only_too() -> None:
    v = examples.money_bank_grows().vector("Bank")
    with pytest.raises(ValueError, match="read-only"):
        v[0] = 1.0
    for vec in examples.bat_cave_racket().as_dict().values():
        assert not vec.flags.writeable


def test_each_call_returns_fresh_arrays() -> None:
    a = examples.money_bank_grows().embeddings
    b = examples.money_bank_grows().embeddings
    assert a is not b and not np.shares_memory(a, b)
    # a writable copy can be changed without touching the next call's data
    c = a.copy()
    c[0, 0] = 42.0
    assert examples.money_bank_grows().embeddings[0, 0] == 0.1


def test_shapes_and_lengths() -> None:
    assert examples.bat_cave_racket().embeddings.shape == (3, 2)
    assert examples.bank_vocabulary().embeddings.shape == (5, 3)
    assert len(examples.money_bank_grows()) == 3
    assert examples.stretch_example().A.shape == (2, 2)


def test_dataclasses_are_frozen() -> None:
    mbg = examples.money_bank_grows()
    with pytest.raises(AttributeError):
        mbg.tokens = ("x",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        examples.money_bank_projections().w_q = np.eye(3)  # type: ignore[misc]


# --- bad input ------------------------------------------------------------------


def test_unknown_token_raises_key_error_listing_the_tokens() -> None:
    with pytest.raises(KeyError, match=r"'bank' is not one of \['Money', 'Bank', 'Grows'\]"):
        examples.money_bank_grows().vector("bank")


def test_token_embeddings_rejects_row_count_mismatch() -> None:
    with pytest.raises(ValueError, match=r"embeddings: expected shape \(2, d_model\).*\(3, 2\)"):
        examples.TokenEmbeddings(text="a b", tokens=("a", "b"), embeddings=np.zeros((3, 2)),
                                 source="test")
