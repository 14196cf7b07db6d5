"""Tests for selfattn.perplexity: torch/torchmetrics parity, hand values, properties, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from selfattn.perplexity import bits_per_token, negative_log_likelihood, perplexity, token_nll


def _random_case(seed: int, batch: int = 3, seq_len: int = 7, vocab: int = 11, ignore: int = 4):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, seq_len, vocab, generator=g, dtype=torch.float64) * 3
    targets = torch.randint(0, vocab, (batch, seq_len), generator=g)
    flat = targets.view(-1)  # (batch * seq_len,)
    flat[torch.randperm(flat.numel(), generator=g)[:ignore]] = -100
    return logits, targets


# ------------------------------------------------------------------ references


def test_matches_exp_of_torch_cross_entropy_with_ignore_index():
    logits, targets = _random_case(0)
    ce = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(negative_log_likelihood(logits, targets), ce)
    torch.testing.assert_close(perplexity(logits, targets), torch.exp(ce))
    # the NumPy path (float64, Python float) gives the same number
    assert perplexity(logits.numpy(), targets.numpy()) == pytest.approx(
        float(torch.exp(ce)), rel=1e-12
    )


def test_custom_ignore_index_matches_torch():
    logits, targets = _random_case(1)
    targets = torch.where(targets == -100, torch.full_like(targets, 3), targets)
    ce = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=3)
    assert float(perplexity(logits, targets, ignore_index=3)) == pytest.approx(
        math.exp(float(ce)), rel=1e-12
    )


def test_gradient_matches_torch_cross_entropy():
    logits, targets = _random_case(2)
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    negative_log_likelihood(a, targets).backward()
    F.cross_entropy(b.reshape(-1, 11), targets.reshape(-1)).backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_matches_torchmetrics_perplexity():
    text = pytest.importorskip("torchmetrics.text")
    for seed in range(3):
        logits, targets = _random_case(seed)
        logits = logits.float()
        metric = text.Perplexity(ignore_index=-100)
        expected = metric(logits, targets)
        torch.testing.assert_close(perplexity(logits, targets), expected)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    seq_len=st.integers(1, 6),
    vocab=st.integers(2, 9),
    seed=st.integers(0, 10_000),
)
def test_numpy_and_torch_agree_with_cross_entropy(batch, seq_len, vocab, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=4.0, size=(batch, seq_len, vocab))
    targets = rng.integers(0, vocab, size=(batch, seq_len))
    ce = F.cross_entropy(
        torch.from_numpy(logits).reshape(-1, vocab), torch.from_numpy(targets).reshape(-1)
    )
    assert negative_log_likelihood(logits, targets) == pytest.approx(float(ce), rel=1e-10)
    got_t = perplexity(torch.from_numpy(logits), torch.from_numpy(targets))
    assert got_t.dtype == torch.float64 and got_t.ndim == 0
    assert float(got_t) == pytest.approx(math.exp(float(ce)), rel=1e-10)


# ------------------------------------------------------------------ hand values


@pytest.mark.parametrize("vocab", [2, 7, 50])
def test_uniform_logits_give_vocab_size(vocab):
    targets = np.arange(12).reshape(3, 4) % vocab
    logits = np.full((3, 4, vocab), 0.37)
    assert perplexity(logits, targets) == pytest.approx(vocab, rel=1e-12)
    assert negative_log_likelihood(logits, targets) == pytest.approx(math.log(vocab), rel=1e-12)
    t = perplexity(torch.from_numpy(logits), torch.from_numpy(targets))
    assert float(t) == pytest.approx(vocab, rel=1e-12)


def test_token_versus_sequence_averaging_hand_example():
    # vocab 2. Sequence 0: three tokens at p = 1/2. Sequence 1: one token at
    # p = 1/4 (logits [log 3, 0], target 1) then two padding positions.
    logits = np.zeros((2, 3, 2))
    logits[1, 0] = [math.log(3.0), 0.0]
    targets = np.array([[0, 1, 0], [1, -100, -100]])
    # per token: exp((3 ln 2 + ln 4) / 4) = 2 ** (5/4)
    assert perplexity(logits, targets) == pytest.approx(2 ** 1.25, rel=1e-12)
    # per sequence: (2 + 4) / 2 = 3
    assert perplexity(logits, targets, reduction="sequence") == pytest.approx(3.0, rel=1e-12)
    # NLL per sequence: (ln 2 + ln 4) / 2 = 1.5 ln 2
    assert negative_log_likelihood(logits, targets, reduction="sequence") == pytest.approx(
        1.5 * math.log(2.0), rel=1e-12
    )
    nll, scored = token_nll(logits, targets)
    np.testing.assert_allclose(nll, [[math.log(2)] * 3, [math.log(4), 0, 0]], rtol=1e-12)
    np.testing.assert_array_equal(scored, [[True] * 3, [True, False, False]])


def test_fully_padded_sequence_is_left_out_of_sequence_mean():
    logits = np.zeros((2, 2, 4))
    targets = np.array([[1, 2], [-100, -100]])
    assert perplexity(logits, targets, reduction="sequence") == pytest.approx(4.0, rel=1e-12)


def test_bits_are_nats_over_ln2():
    logits, targets = _random_case(5)
    nats = float(negative_log_likelihood(logits, targets))
    bits = float(bits_per_token(logits, targets))
    assert bits == pytest.approx(nats / math.log(2.0), rel=1e-12)
    assert 2.0**bits == pytest.approx(float(perplexity(logits, targets)), rel=1e-12)
    # uniform over 8 tokens is exactly 3 bits
    assert bits_per_token(np.zeros((1, 2, 8)), np.array([[0, 5]])) == pytest.approx(3.0, 1e-12)


def test_confidently_wrong_prediction_is_finite():
    # logit gap 1e4 on the wrong token: p(target) = e^-1e4 underflows, its log does not
    logits = np.zeros((1, 1, 3))
    logits[0, 0, 0] = 1e4
    targets = np.array([[2]])
    assert negative_log_likelihood(logits, targets) == pytest.approx(1e4, rel=1e-12)
    with np.errstate(divide="ignore"):
        naive = -np.log(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    assert np.isinf(naive[0, 0, 2])  # what log(softmax) would have reported
    t = negative_log_likelihood(torch.from_numpy(logits).float(), torch.from_numpy(targets))
    assert torch.isfinite(t) and float(t) == pytest.approx(1e4, rel=1e-6)
    # perplexity of a batch with a gap of 500 nats stays finite in float64
    logits[0, 0, 0] = 500.0
    assert perplexity(logits, targets) == pytest.approx(math.exp(500.0), rel=1e-9)


def test_minus_inf_logit_on_target_gives_inf_not_nan():
    logits = np.array([[[0.0, -np.inf]]])
    assert perplexity(logits, np.array([[0]])) == pytest.approx(1.0)
    assert perplexity(logits, np.array([[1]])) == math.inf


# ------------------------------------------------------------------ properties


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), ignore=st.integers(1, 20))
def test_ignored_positions_do_not_matter(seed, ignore):
    logits, targets = _random_case(seed, ignore=ignore)
    scored = targets != -100
    changed = logits.clone()
    g = torch.Generator().manual_seed(seed + 1)
    changed[~scored] = torch.randn(int((~scored).sum()), 11, generator=g, dtype=torch.float64) * 50
    assert float(perplexity(changed, targets)) == float(perplexity(logits, targets))
    # and equals the perplexity of the kept positions alone
    kept = perplexity(logits[scored][None], targets[scored][None])
    torch.testing.assert_close(perplexity(logits, targets), kept)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-100, 100))
def test_shifting_a_row_of_logits_changes_nothing(seed, shift):
    logits, targets = _random_case(seed)
    shifted = logits + shift
    torch.testing.assert_close(perplexity(shifted, targets), perplexity(logits, targets))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_sequence_mean_is_at_least_token_mean_for_equal_lengths(seed):
    logits, targets = _random_case(seed, ignore=0)  # every sequence has 7 scored tokens
    tok = float(perplexity(logits, targets))
    seq = float(perplexity(logits, targets, reduction="sequence"))
    assert 1.0 <= tok <= seq * (1 + 1e-12)  # Jensen: mean of exp >= exp of mean


# ------------------------------------------------------------------ bad input


def test_float_targets_raise_type_error():
    with pytest.raises(TypeError, match=r"targets: expected an integer dtype.*float"):
        perplexity(np.zeros((1, 2, 3)), np.zeros((1, 2)))


def test_integer_logits_raise_type_error():
    with pytest.raises(TypeError, match=r"logits: expected a floating-point dtype"):
        perplexity(np.zeros((1, 2, 3), dtype=np.int64), np.zeros((1, 2), dtype=np.int64))


def test_mixed_backends_raise_type_error():
    with pytest.raises(TypeError, match=r"targets: expected the same backend as logits"):
        perplexity(torch.zeros(1, 2, 3), np.zeros((1, 2), dtype=np.int64))


def test_logits_wrong_ndim():
    msg = "logits: expected shape (batch, seq_len, vocab), got shape (2, 3)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        perplexity(np.zeros((2, 3)), np.zeros((2,), dtype=np.int64))


def test_shape_mismatch_names_both_shapes():
    msg = "targets: expected shape (batch, seq_len) = (2, 5) to match logits of shape (2, 5, 7), "
    msg += "got shape (2, 4)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        perplexity(torch.zeros(2, 5, 7), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("bad", [7, -1, -99])
def test_target_out_of_range(bad):
    targets = np.array([[0, 1], [2, bad]])
    with pytest.raises(ValueError, match=rf"targets: expected token ids in \[0, 7\).*got {bad} "):
        perplexity(np.zeros((2, 2, 7)), targets)


def test_all_ignored_raises_instead_of_nan():
    with pytest.raises(ValueError, match=r"targets: every position equals ignore_index=-100"):
        perplexity(np.zeros((2, 3, 4)), np.full((2, 3), -100))
    with pytest.raises(ValueError, match=r"targets: every position equals ignore_index"):
        perplexity(torch.zeros(2, 3, 4), torch.full((2, 3), -100), reduction="sequence")


def test_nan_logits_raise():
    logits = np.zeros((1, 2, 3))
    logits[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match=r"logits: contains NaN or \+inf \(shape \(1, 2, 3\)\)"):
        perplexity(logits, np.array([[0, 1]]))


def test_unknown_reduction_and_bad_ignore_index():
    with pytest.raises(ValueError, match=r"reduction: expected one of \('token', 'sequence'\)"):
        perplexity(np.zeros((1, 2, 3)), np.array([[0, 1]]), reduction="mean")
    with pytest.raises(TypeError, match=r"ignore_index: expected an int, got float"):
        perplexity(np.zeros((1, 2, 3)), np.array([[0, 1]]), ignore_index=-100.0)


def test_empty_input_raises():
    msg = "logits: expected a non-empty array, got shape (1, 0, 3)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        perplexity(np.zeros((1, 0, 3)), np.zeros((1, 0), dtype=np.int64))


# ------------------------------------------------------------------ ignore_index, exactly


def _case_with_ignore(ignore_index: int, seed: int = 0, vocab: int = 11):
    """Logits and targets where ``ignore_index`` marks exactly the positions in ``holes``.

    Every other target is a valid id different from ``ignore_index``, so a
    position is scored if and only if its target is not ``ignore_index``.
    """
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(3, 7, vocab))
    ids = [i for i in range(vocab) if i != ignore_index]
    targets = rng.choice(ids, size=(3, 7)).astype(np.int64)
    holes = rng.random((3, 7)) < 0.3
    holes[0, 0], holes[2, 6] = True, False
    targets[holes] = ignore_index
    return logits, targets, holes


# ignore_index >= 0 is legal (a vocabulary's own padding id): only that value is skipped,
# not "every negative target" and not "every target below 0 or equal to ignore_index".
@pytest.mark.parametrize("ignore_index", [-100, -1, 0, 3, 10])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_token_nll_skips_exactly_the_ignore_index_positions(ignore_index, backend):
    logits, targets, holes = _case_with_ignore(ignore_index)
    ref = F.cross_entropy(
        torch.from_numpy(logits).reshape(-1, 11), torch.from_numpy(targets).reshape(-1),
        ignore_index=ignore_index, reduction="none",
    ).reshape(3, 7)  # 0 at ignored positions, like token_nll
    if backend == "torch":
        logits, targets = torch.from_numpy(logits), torch.from_numpy(targets)
    nll, scored = token_nll(logits, targets, ignore_index=ignore_index)
    scored = np.asarray(scored)
    np.testing.assert_array_equal(scored, ~holes)
    np.testing.assert_allclose(np.asarray(nll), ref.numpy(), rtol=1e-12, atol=1e-12)
    mean = ref.sum().item() / (~holes).sum()
    assert float(negative_log_likelihood(logits, targets, ignore_index)) == pytest.approx(
        mean, rel=1e-12
    )
    assert float(perplexity(logits, targets, ignore_index)) == pytest.approx(
        math.exp(mean), rel=1e-12
    )


@pytest.mark.parametrize("ignore_index", [-100, 0, 3])
def test_negative_target_other_than_ignore_index_is_an_error_in_both_backends(ignore_index):
    logits, targets, _ = _case_with_ignore(ignore_index)
    targets[1, 2] = -7  # never a token id, and not ignore_index
    for lg, tg in ((logits, targets), (torch.from_numpy(logits), torch.from_numpy(targets))):
        with pytest.raises(ValueError, match=r"targets: expected token ids in \[0, 11\).*"
                                             r"got -7 at index \(1, 2\)"):
            token_nll(lg, tg, ignore_index=ignore_index)


# ------------------------------------------------------------------ siblings must agree
# Values that are computed on separate code paths and must agree: NumPy vs torch,
# nats vs bits vs perplexity, token vs sequence reduction.


@pytest.mark.parametrize("ignore_index", [-100, 3])
@pytest.mark.parametrize("reduction", ["token", "sequence"])
def test_numpy_and_torch_paths_and_units_agree(ignore_index, reduction):
    logits, targets, _ = _case_with_ignore(ignore_index, seed=7)
    targets[1, :] = ignore_index  # a fully ignored sequence, left out of the sequence mean
    lt, tt = torch.from_numpy(logits), torch.from_numpy(targets)
    kw = dict(ignore_index=ignore_index, reduction=reduction)
    nll_np = negative_log_likelihood(logits, targets, **kw)
    nll_t = negative_log_likelihood(lt, tt, **kw)
    assert nll_np == pytest.approx(float(nll_t), rel=1e-12)
    assert bits_per_token(logits, targets, **kw) == pytest.approx(nll_np / math.log(2), rel=1e-12)
    ppl_np, ppl_t = perplexity(logits, targets, **kw), perplexity(lt, tt, **kw)
    assert ppl_np == pytest.approx(float(ppl_t), rel=1e-12)
    # by hand from the per-position values
    nll, scored = token_nll(logits, targets, ignore_index)
    if reduction == "token":
        assert nll_np == pytest.approx(nll[scored].mean(), rel=1e-12)
        assert ppl_np == pytest.approx(math.exp(nll_np), rel=1e-12)
    else:
        per_seq = [nll[b][scored[b]].mean() for b in (0, 2)]  # sequence 1 is all ignored
        assert nll_np == pytest.approx(np.mean(per_seq), rel=1e-12)
        assert ppl_np == pytest.approx(np.mean(np.exp(per_seq)), rel=1e-12)
