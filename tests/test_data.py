"""Tests for selfattn.data: Markov source closed forms, sampling, bigram fit, tokenizer, batches."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfattn.data import CharTokenizer, MarkovSource, batches, fit_bigram
from selfattn.perplexity import negative_log_likelihood, perplexity


def _h2(p: float) -> float:
    """Binary entropy in nats."""
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


# ------------------------------------------------------------------ MarkovSource: closed forms


@pytest.mark.parametrize(("a", "b"), [(0.2, 0.6), (0.5, 0.5), (0.05, 0.9)])
def test_two_state_chain_closed_form(a, b):
    # P = [[1-a, a], [b, 1-b]]: pi = (b, a) / (a + b), H = (b h(a) + a h(b)) / (a + b)
    src = MarkovSource(np.array([[1 - a, a], [b, 1 - b]]))
    np.testing.assert_allclose(src.stationary_distribution(), [b / (a + b), a / (a + b)], 1e-12)
    h = (b * _h2(a) + a * _h2(b)) / (a + b)
    assert src.entropy_rate() == pytest.approx(h, rel=1e-12)
    assert src.perplexity_floor() == pytest.approx(math.exp(h), rel=1e-12)
    assert src.stationary_entropy() == pytest.approx(_h2(b / (a + b)), rel=1e-12)


def test_expected_perplexity_with_and_without_first_token():
    src = MarkovSource(np.array([[0.8, 0.2], [0.6, 0.4]]))
    h, h0 = src.entropy_rate(), src.stationary_entropy()
    assert src.expected_perplexity(10) == pytest.approx(math.exp(h), rel=1e-12)
    assert src.expected_perplexity(10, predict_first=True) == pytest.approx(
        math.exp((h0 + 9 * h) / 10), rel=1e-12
    )
    assert src.expected_perplexity(1, predict_first=True) == pytest.approx(math.exp(h0), 1e-12)
    # H(pi) >= H: predicting without context is never easier
    assert src.expected_perplexity(10, predict_first=True) > src.perplexity_floor()


def test_deterministic_cycle_has_floor_one():
    src = MarkovSource(np.roll(np.eye(4), 1, axis=1))  # 0 -> 1 -> 2 -> 3 -> 0
    assert src.entropy_rate() == 0.0
    assert src.perplexity_floor() == 1.0
    np.testing.assert_allclose(src.stationary_distribution(), np.full(4, 0.25), 1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stationary_distribution_is_the_fixed_point(seed):
    src = MarkovSource.random(12, branching=4, seed=seed, concentration=0.5)
    pi = src.stationary_distribution()
    np.testing.assert_allclose(pi @ src.transition, pi, atol=1e-13)
    assert pi.sum() == pytest.approx(1.0, abs=1e-13) and (pi > 0).all()
    # reference: left eigenvector of P for eigenvalue 1
    vals, vecs = np.linalg.eig(src.transition.T)
    ref = np.real(vecs[:, np.argmin(np.abs(vals - 1))])
    np.testing.assert_allclose(pi, ref / ref.sum(), atol=1e-10)


@pytest.mark.parametrize("branching", [1, 3, 5])
def test_random_uniform_rows_give_floor_equal_to_branching(branching):
    src = MarkovSource.random(16, branching=branching, seed=3)
    assert ((src.transition > 0).sum(axis=1) == branching).all()
    assert src.perplexity_floor() == pytest.approx(branching, rel=1e-12)
    # the cycle i -> i + 1 is always present
    assert (src.transition[np.arange(16), (np.arange(16) + 1) % 16] > 0).all()


def test_random_is_deterministic_and_below_log_vocab():
    a = MarkovSource.random(20, branching=4, seed=7, concentration=1.0)
    b = MarkovSource.random(20, branching=4, seed=7, concentration=1.0)
    c = MarkovSource.random(20, branching=4, seed=8, concentration=1.0)
    np.testing.assert_array_equal(a.transition, b.transition)
    assert not np.array_equal(a.transition, c.transition)
    assert a.entropy_rate() < math.log(4) < math.log(20)


# ------------------------------------------------------------------ sampling


def test_sample_shape_dtype_and_determinism():
    src = MarkovSource.random(8, branching=2, seed=0)
    x = src.sample(5, 9, seed=1)
    assert x.shape == (5, 9) and x.dtype == np.int64
    np.testing.assert_array_equal(x, src.sample(5, 9, seed=1))
    assert not np.array_equal(x, src.sample(5, 9, seed=2))


def test_sample_never_makes_impossible_transitions():
    src = MarkovSource.random(10, branching=2, seed=4)
    x = src.sample(50, 40, seed=0)
    assert (src.transition[x[:, :-1], x[:, 1:]] > 0).all()


def test_first_token_follows_stationary_distribution():
    src = MarkovSource(np.array([[0.1, 0.9, 0.0], [0.0, 0.2, 0.8], [0.7, 0.0, 0.3]]))
    n = 40_000
    first = src.sample(n, 1, seed=5)[:, 0]
    freq = np.bincount(first, minlength=3) / n
    pi = src.stationary_distribution()
    sd = np.sqrt(pi * (1 - pi) / n)
    assert (np.abs(freq - pi) < 5 * sd).all()


def test_oracle_nll_approaches_entropy_rate():
    # The true matrix's empirical NLL on a long sample is an unbiased estimate of
    # the entropy rate (sampling starts in pi). Rows are independent, so the
    # standard error of the mean of row NLLs gives a CLT tolerance.
    src = MarkovSource.random(16, branching=4, seed=11, concentration=0.7)
    x = src.sample(400, 201, seed=12)
    logits, targets = src.log_probs(x[:, :-1]), x[:, 1:]
    per_row = [negative_log_likelihood(logits[i : i + 1], targets[i : i + 1]) for i in range(400)]
    se = np.std(per_row, ddof=1) / math.sqrt(400)
    assert se < 0.01
    assert abs(np.mean(per_row) - src.entropy_rate()) < 5 * se
    assert negative_log_likelihood(logits, targets) == pytest.approx(np.mean(per_row), 1e-12)


def test_oracle_perplexity_is_exactly_branching_for_uniform_rows():
    src = MarkovSource.random(16, branching=3, seed=0)
    x = src.sample(4, 30, seed=1)
    assert perplexity(src.log_probs(x[:, :-1]), x[:, 1:]) == pytest.approx(3.0, rel=1e-12)


# ------------------------------------------------------------------ fit_bigram


def test_fit_bigram_hand_counts_and_smoothing():
    tokens = np.array([0, 1, 0, 1])  # bigrams 0->1, 1->0, 0->1
    np.testing.assert_allclose(
        fit_bigram(tokens, 3), [[0, 1, 0], [1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-12
    )
    np.testing.assert_allclose(
        fit_bigram(tokens, 3, smoothing=1.0),
        [[1 / 5, 3 / 5, 1 / 5], [2 / 4, 1 / 4, 1 / 4], [1 / 3, 1 / 3, 1 / 3]],
        rtol=1e-12,
    )


def test_fit_bigram_does_not_count_across_rows():
    rows = np.array([[0, 1], [2, 2]])  # the pair (1, 2) spans two rows and is not a bigram
    est = fit_bigram(rows, 3)
    np.testing.assert_allclose(est[1], [1 / 3] * 3)  # 1 was never a predecessor
    np.testing.assert_allclose(est[2], [0, 0, 1])
    np.testing.assert_allclose(fit_bigram(torch.from_numpy(rows), 3), est)


def test_fit_bigram_recovers_transition_matrix():
    src = MarkovSource.random(8, branching=3, seed=2, concentration=1.0)
    x = src.sample(200, 501, seed=3)
    est = fit_bigram(x, 8)
    n_from = np.bincount(x[:, :-1].ravel(), minlength=8)[:, None]  # (V, 1)
    p = src.transition
    sd = np.sqrt(p * (1 - p) / n_from)  # binomial standard error per entry
    assert (np.abs(est - p) <= 5 * sd + 1e-12).all()
    assert np.abs(est - p).max() < 0.03


# ------------------------------------------------------------------ CharTokenizer


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="abcdefgh xyz.,!\n", min_size=1, max_size=60))
def test_char_tokenizer_round_trip(text):
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.vocab_size == len(set(text))
    assert list(tok.alphabet) == sorted(set(text))


def test_char_tokenizer_hand_values_and_explicit_alphabet():
    tok = CharTokenizer("hello")
    assert tok.alphabet == "ehlo" and tok.encode("hole") == [1, 3, 2, 0]
    tok2 = CharTokenizer(["z", "a"])  # explicit order is kept
    assert tok2.encode("aaz") == [1, 1, 0]
    assert tok2.decode(np.array([0, 1])) == "za"


def test_char_tokenizer_bad_input():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"text: character 'z' at position 2 is not in the alpha"):
        tok.encode("abz")
    with pytest.raises(ValueError, match=r"ids: token id 3 at position 1 is outside \[0, 3\)"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match=r"text: expected at least one character"):
        CharTokenizer("")
    with pytest.raises(ValueError, match=r"text: character 'a' appears more than once"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(TypeError, match=r"text: expected a str, got int"):
        tok.encode(5)


# ------------------------------------------------------------------ batches


def test_batches_are_shifted_contiguous_windows():
    stream = np.arange(100)
    gen = batches(stream, seq_len=6, batch_size=4, seed=0, num_batches=3)
    out = list(gen)
    assert len(out) == 3
    for inputs, targets in out:
        assert inputs.shape == targets.shape == (4, 6) and inputs.dtype == np.int64
        np.testing.assert_array_equal(targets, inputs + 1)  # next token of a counting stream
        np.testing.assert_array_equal(np.diff(inputs, axis=1), 1)  # contiguous
        assert inputs.min() >= 0 and targets.max() <= 99


def test_batches_stay_inside_rows_and_follow_seed():
    rows = np.arange(5)[:, None] * 1000 + np.arange(20)[None, :]  # (5, 20): row * 1000 + col
    a = next(batches(rows, 19, 8, seed=3))
    b = next(batches(torch.from_numpy(rows), 19, 8, seed=3))
    assert isinstance(b[0], torch.Tensor)
    np.testing.assert_array_equal(a[0], b[0].numpy())
    w = np.concatenate([a[0], a[1][:, -1:]], axis=1)  # (batch, 20)
    assert (w // 1000 == w[:, :1] // 1000).all()  # one row per window
    np.testing.assert_array_equal(w % 1000, np.tile(np.arange(20), (8, 1)))


_I64 = np.int64
_BATCHES_BAD = [
    ((np.zeros((3, 10), dtype=_I64), 10, 2), ValueError,
     "tokens: expected at least seq_len + 1 = 11 tokens per row, got shape (3, 10)"),
    ((np.zeros((2, 2, 20), dtype=_I64), 4, 2), ValueError,
     "tokens: expected shape (n,) or (num_sequences, n), got shape (2, 2, 20)"),
    ((np.zeros(20), 4, 2), TypeError,
     "tokens: expected an integer dtype (token ids), got float64"),
    ((np.zeros(20, dtype=_I64), 4, 0), ValueError, "batch_size: expected a positive int, got 0"),
]


@pytest.mark.parametrize(("args", "exc", "msg"), _BATCHES_BAD)
def test_batches_bad_input(args, exc, msg):
    with pytest.raises(exc, match=re.escape(msg)):
        batches(*args)


# ------------------------------------------------------------------ MarkovSource bad input


_SRC4 = MarkovSource.random(4, branching=2)
_MARKOV_BAD = [
    (MarkovSource, (np.array([[0.5, 0.5], [0.5, 0.6]]),), ValueError,
     "transition: expected every row to sum to 1 (shape (2, 2)), row 1 sums to 1.1"),
    (MarkovSource, (np.full((2, 3), 1 / 3),), ValueError,
     "transition: expected shape (V, V) with V >= 1, got shape (2, 3)"),
    (MarkovSource, (np.array([[1.5, -0.5], [0.5, 0.5]]),), ValueError,
     "transition: expected finite non-negative probabilities (shape (2, 2))"),
    (MarkovSource, (np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]),), ValueError,
     "transition: the chain is reducible (shape (3, 3)); token 0 cannot reach"),
    (MarkovSource, (np.eye(2, dtype=_I64),), TypeError,
     "transition: expected a floating-point dtype, got int64"),
    (MarkovSource.random, (4, 5), ValueError,
     "branching: expected an int in [1, vocab_size=4], got 5"),
    (_SRC4.log_probs, (np.array([[0, 4]]),), ValueError,
     "inputs: expected token ids in [0, 4), got values in [0, 4] (shape (1, 2))"),
    (_SRC4.log_probs, (np.array([0, 1, 2]),), ValueError,
     "inputs: expected shape (batch, L), got shape (3,)"),
    (_SRC4.sample, (0, 5), ValueError, "num_sequences: expected a positive int, got 0"),
    (fit_bigram, (np.array([0, 1]), 2, -1), ValueError,
     "smoothing: expected a float >= 0, got -1"),
    (fit_bigram, (np.array([0, 2]), 2), ValueError,
     "tokens: expected token ids in [0, 2), got values in [0, 2] (shape (2,))"),
]


@pytest.mark.parametrize(("fn", "args", "exc", "msg"), _MARKOV_BAD)
def test_markov_source_and_fit_bigram_bad_input(fn, args, exc, msg):
    with pytest.raises(exc, match=re.escape(msg)):
        fn(*args)
