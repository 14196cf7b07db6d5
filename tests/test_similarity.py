"""Tests for selfattn.similarity: hand values, torch parity, properties, bad input.

Tolerances: float64 ``rtol=1e-12, atol=1e-14``; float32 ``rtol=1e-5, atol=1e-6``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from checking import msg
from selfattn import additive_scores, cosine_similarity, dot_similarity, scaled_dot_similarity

TOL = {np.float64: dict(rtol=1e-12, atol=1e-14), np.float32: dict(rtol=1e-5, atol=1e-6)}


# ------------------------------------------------------------------ hand values
A = np.array([[1.0, 0.0], [1.0, 1.0]])


def test_dot_hand_values():
    np.testing.assert_array_equal(dot_similarity(A), [[1.0, 1.0], [1.0, 2.0]])
    b = np.array([[2.0, 3.0]])
    np.testing.assert_array_equal(dot_similarity(A, b), [[2.0], [5.0]])


def test_cosine_hand_values():
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(cosine_similarity(A), [[1.0, r], [r, 1.0]], rtol=1e-15)
    # opposite and orthogonal directions
    b = np.array([[-3.0, 0.0], [0.0, 5.0]])
    np.testing.assert_allclose(cosine_similarity(A, b), [[-1.0, 0.0], [-r, r]], atol=1e-15)


def test_scaled_dot_hand_values():
    np.testing.assert_allclose(
        scaled_dot_similarity(A), np.array([[1.0, 1.0], [1.0, 2.0]]) / math.sqrt(2), rtol=1e-15
    )


# ------------------------------------------------------------------ torch parity
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cosine_matches_torch(dtype):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 7)).astype(dtype)
    b = rng.normal(size=(3, 7)).astype(dtype)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ref = F.cosine_similarity(ta[:, None, :], tb[None, :, :], dim=-1).numpy()  # (5, 3)
    np.testing.assert_allclose(cosine_similarity(a, b), ref, **TOL[dtype])
    # (5, 1, 7) against (1, 5, 7) -> (5, 5)
    ref_self = F.cosine_similarity(ta[:, None, :], ta[None, :, :], dim=-1).numpy()
    np.testing.assert_allclose(cosine_similarity(a), ref_self, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_and_scaled_match_torch(dtype):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 16)).astype(dtype)
    b = rng.normal(size=(6, 16)).astype(dtype)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    dots = (ta @ tb.T).numpy()  # tb.T: (16, 6) -> dots (4, 6)
    np.testing.assert_allclose(dot_similarity(a, b), dots, **TOL[dtype])
    np.testing.assert_allclose(scaled_dot_similarity(a, b), dots / 4.0, **TOL[dtype])


def test_torch_inputs_work_and_match_numpy():
    gen = torch.Generator().manual_seed(2)
    ta = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    tb = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    for fn in (dot_similarity, scaled_dot_similarity, cosine_similarity):
        out = fn(ta, tb)
        assert isinstance(out, torch.Tensor) and out.shape == (3, 2)
        np.testing.assert_allclose(out.numpy(), fn(ta.numpy(), tb.numpy()), rtol=1e-12)
    ref = F.cosine_similarity(ta[:, None, :], tb[None, :, :], dim=-1)  # (3, 1, 5) vs (1, 2, 5)
    torch.testing.assert_close(cosine_similarity(ta, tb), ref, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ properties
nonzero_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 5), st.integers(1, 6)),
    elements=st.floats(-10, 10, allow_nan=False),
)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(nonzero_rows, st.floats(0.01, 100))
def test_property_cosine_scale_invariant_and_bounded(a, c):
    assume(np.all(np.linalg.norm(a, axis=1) > 1e-3))
    cos = cosine_similarity(a)
    assert np.all(np.abs(cos) <= 1 + 1e-12)
    np.testing.assert_allclose(np.diag(cos), 1.0, rtol=1e-12)
    np.testing.assert_allclose(cosine_similarity(a * c), cos, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cos, cos.T, rtol=0, atol=1e-15)  # symmetric (cos.T: transpose)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(nonzero_rows)
def test_property_scaled_is_dot_over_sqrt_d_and_symmetric(a):
    d = a.shape[1]
    dot = dot_similarity(a)
    np.testing.assert_allclose(scaled_dot_similarity(a) * math.sqrt(d), dot, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(dot, dot.T)  # symmetric (dot.T: transpose)
    assert np.all(np.diag(dot) >= 0)  # a · a = |a|^2


def test_scaled_dot_has_unit_variance_for_unit_variance_components():
    # Var(a · b) = d for independent N(0, 1) components, so dividing by sqrt(d) gives ~1
    rng = np.random.default_rng(3)
    for d in (4, 64, 256):
        a = rng.normal(size=(400, d))
        b = rng.normal(size=(400, d))
        var_plain = dot_similarity(a, b).var()
        var_scaled = scaled_dot_similarity(a, b).var()
        assert abs(var_plain / d - 1) < 0.1
        assert abs(var_scaled - 1) < 0.1


# ------------------------------------------------------------------ bad input
def test_bad_zero_vector_in_a():
    a = np.array([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]])
    with pytest.raises(ValueError, match=msg("a:", "row(s) [1]", "zero vector", "(3, 2)")):
        cosine_similarity(a)


def test_bad_zero_vector_in_b():
    a = np.ones((2, 3))
    b = np.zeros((4, 3))
    with pytest.raises(ValueError, match=msg("b:", "row(s) [0, 1, 2, 3]", "(4, 3)")):
        cosine_similarity(a, b)


def test_bad_width_mismatch():
    expected = msg("b:", "last dimension 3", "(2, 3)", "got shape (4, 5)")
    with pytest.raises(ValueError, match=expected):
        dot_similarity(np.ones((2, 3)), np.ones((4, 5)))


def test_bad_one_dimensional():
    with pytest.raises(ValueError, match=msg("a:", "expected shape (n, d)", "got shape (3,)")):
        scaled_dot_similarity(np.ones(3))


def test_bad_integer_dtype():
    with pytest.raises(TypeError, match=msg("a:", "floating-point", "int64")):
        dot_similarity(np.ones((2, 2), dtype=np.int64))


def test_bad_mixed_backends():
    with pytest.raises(TypeError, match=msg("b:", "same backend as a", "ndarray", "Tensor")):
        dot_similarity(np.ones((2, 2)), torch.ones(2, 2, dtype=torch.float64))


def test_bad_dtype_mismatch():
    with pytest.raises(TypeError, match=msg("b:", "float64", "float32")):
        cosine_similarity(np.ones((2, 2)), np.ones((2, 2), dtype=np.float32))


def test_bad_nan():
    with pytest.raises(ValueError, match=msg("a:", "NaN", "(1, 2)")):
        cosine_similarity(np.array([[np.nan, 1.0]]))


def test_bad_empty():
    with pytest.raises(ValueError, match=msg("b:", "non-empty", "(0, 2)")):
        dot_similarity(np.ones((1, 2)), np.ones((0, 2)))


# ------------------------------------------------------------------ additive (Bahdanau) scores
# tanh(ln x) = (x² - 1) / (x² + 1): arguments that are logs give exact rational tanh values.
def _tanh_log(x: float) -> float:
    return (x * x - 1) / (x * x + 1)


U_Q_HAND = np.array([[1.0, 0.0], [1.0, 1.0]])  # q U_Q = [q0 + q1, q1]
U_K_HAND = np.array([[0.0, 1.0], [1.0, 0.0]])  # k U_K = [k1, k0]
U_HAND = np.array([1.0, -2.0])


def test_additive_hand_values():
    ln = math.log
    query = np.array([[ln(2), ln(3)],            # q U_Q = [ln 6, ln 3]
                      [0.0, 0.0]])               # q U_Q = [0, 0]
    key = np.array([[0.0, 0.0],                  # k U_K = [0, 0]
                    [-ln(3), ln(2)]])            # k U_K = [ln 2, -ln 3]
    # pair (0, 0): tanh([ln 6, ln 3]) = [35/37, 4/5]; pair (0, 1): tanh([ln 12, 0]) = [143/145, 0]
    # pair (1, 0): tanh([0, 0]) = [0, 0];         pair (1, 1): tanh([ln 2, -ln 3]) = [3/5, -4/5]
    assert _tanh_log(6) == 35 / 37 and _tanh_log(12) == 143 / 145
    expected = np.array([[35 / 37 - 2 * 4 / 5, 143 / 145],
                         [0.0, 3 / 5 + 2 * 4 / 5]])
    got = additive_scores(query, key, U_Q_HAND, U_K_HAND, U_HAND)
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-15)
    # the order of the product matters: U_Q q instead of q U_Q gives other numbers
    wrong = np.tanh((query @ U_Q_HAND.T)[:, None] + (key @ U_K_HAND)[None]) @ U_HAND
    assert not np.allclose(wrong, expected)


def _additive_loop(query, key, u_q, u_k, u):
    """One pair at a time: s = Σ_a u_a tanh(Σ_m q_m U_Q[m, a] + Σ_m k_m U_K[m, a])."""
    out = np.zeros((len(query), len(key)))
    for i, q in enumerate(query):
        for j, k in enumerate(key):
            out[i, j] = sum(
                u[a] * math.tanh(sum(q[m] * u_q[m, a] for m in range(len(q)))
                                 + sum(k[m] * u_k[m, a] for m in range(len(k))))
                for a in range(len(u)))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_additive_batching_equals_looping(seed):
    rng = np.random.default_rng(seed)
    query, key = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(3, 6, 2))  # d_q=5, d_k=2
    u_q, u_k, u = rng.normal(size=(5, 7)), rng.normal(size=(2, 7)), rng.normal(size=7)
    got = additive_scores(query, key, u_q, u_k, u)
    assert got.shape == (2, 3, 4, 6)
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(
                got[b, h], _additive_loop(query[b, h], key[h], u_q, u_k, u), rtol=1e-12,
                atol=1e-13)


def test_additive_matches_a_torch_nn_scorer():
    """Reference built from torch.nn layers: Linear (no bias), Tanh, Linear, pair by pair."""
    rng = np.random.default_rng(7)
    query, key = rng.normal(size=(4, 3)), rng.normal(size=(5, 6))
    u_q, u_k, u = rng.normal(size=(3, 8)), rng.normal(size=(6, 8)), rng.normal(size=8)
    lin_q = torch.nn.Linear(3, 8, bias=False, dtype=torch.float64)
    lin_k = torch.nn.Linear(6, 8, bias=False, dtype=torch.float64)
    lin_out = torch.nn.Linear(8, 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin_q.weight.copy_(torch.from_numpy(u_q.T))  # nn.Linear stores (out, in)
        lin_k.weight.copy_(torch.from_numpy(u_k.T))
        lin_out.weight.copy_(torch.from_numpy(u[None]))
        ref = torch.stack([
            torch.cat([lin_out(torch.tanh(lin_q(torch.from_numpy(q)) + lin_k(torch.from_numpy(k))))
                       for k in key])
            for q in query])
    np.testing.assert_allclose(additive_scores(query, key, u_q, u_k, u), ref.numpy(),
                               rtol=1e-12, atol=1e-13)
    # torch in, torch out, differentiable in the parameters
    t = {n: torch.tensor(x, requires_grad=True) for n, x in
         dict(query=query, key=key, u_q=u_q, u_k=u_k, u=u).items()}
    s = additive_scores(t["query"], t["key"], t["u_q"], t["u_k"], t["u"])
    assert isinstance(s, torch.Tensor)
    np.testing.assert_allclose(s.detach().numpy(), ref.numpy(), rtol=1e-12, atol=1e-13)
    s.sum().backward()
    assert all(t[n].grad is not None for n in ("u_q", "u_k", "u"))


def test_additive_scores_are_bounded_by_the_l1_norm_of_u():
    """|s| <= |u|₁ whatever the lengths of q and k; dot products grow without bound."""
    rng = np.random.default_rng(8)
    u_q, u_k, u = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=4)
    bound = np.abs(u).sum()
    for length in (1.0, 10.0, 1e3, 1e6):
        query, key = length * rng.normal(size=(5, 3)), length * rng.normal(size=(6, 3))
        assert np.abs(additive_scores(query, key, u_q, u_k, u)).max() <= bound


def test_additive_bad_input_names_argument_and_shapes():
    q, k = np.zeros((4, 3)), np.zeros((5, 2))
    u_q, u_k, u = np.zeros((3, 6)), np.zeros((2, 6)), np.zeros(6)
    with pytest.raises(ValueError, match=msg("u_q: expected dimension 0 3", "(2, 6)")):
        additive_scores(q, k, np.zeros((2, 6)), u_k, u)
    with pytest.raises(ValueError, match=msg("u_k: expected dimension 0 2", "(3, 6)")):
        additive_scores(q, k, u_q, np.zeros((3, 6)), u)
    with pytest.raises(ValueError, match=msg("u_k: expected dimension 1 6", "(2, 5)")):
        additive_scores(q, k, u_q, np.zeros((2, 5)), u)
    with pytest.raises(ValueError, match=msg("u: expected shape (d_a,)", "(6, 1)")):
        additive_scores(q, k, u_q, u_k, np.zeros((6, 1)))
    with pytest.raises(ValueError, match=msg("u: expected dimension 0 6", "(5,)")):
        additive_scores(q, k, u_q, u_k, np.zeros(5))
    with pytest.raises(ValueError, match=msg("query: expected shape (..., q_len, d_q)", "(3,)")):
        additive_scores(np.zeros(3), k, u_q, u_k, u)
    with pytest.raises(ValueError, match=msg("key: leading (batch) dims (3,)", "(2,)")):
        additive_scores(np.zeros((2, 4, 3)), np.zeros((3, 5, 2)), u_q, u_k, u)
    with pytest.raises(TypeError, match=msg("u: expected dtype float64", "float32")):
        additive_scores(q, k, u_q, u_k, u.astype(np.float32))
    with pytest.raises(TypeError, match=msg("key: expected the same backend as query")):
        additive_scores(q, torch.zeros(5, 2, dtype=torch.float64), u_q, u_k, u)
    with pytest.raises(ValueError, match=msg("key: contains NaN or infinity")):
        additive_scores(q, np.full((5, 2), np.nan), u_q, u_k, u)
    with pytest.raises(ValueError, match=msg("overflowed")):
        big = np.full((1, 3), 1e308)
        additive_scores(big, np.full((1, 2), -1e308), np.full((3, 6), 1e10),
                        np.full((2, 6), 1e10), np.ones(6))
