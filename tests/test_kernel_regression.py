"""Tests for selfattn.kernel_regression: Nadaraya–Watson is softmax attention.

References: the textbook formula Σ K v / Σ K with K = exp(-|q-k|²/(2ρ²)) written
as a plain loop; the package's scaled_dot_product_attention (with the scores as
an additive mask, and with scale 1/ρ² plus the key bias); limits ρ -> 0 and
ρ -> ∞. Tolerance float64: 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from checking import msg
from selfattn import (
    gaussian_kernel_scores,
    gaussian_key_bias,
    nadaraya_watson,
    scaled_dot_product_attention,
)

TOL = dict(rtol=1e-12, atol=1e-12)


def _loop_nw(q: np.ndarray, k: np.ndarray, v: np.ndarray, rho: float) -> np.ndarray:
    """The textbook estimator, one query at a time, with math.exp on each kernel value."""
    out = np.zeros((len(q), v.shape[1]))
    for i, qi in enumerate(q):
        kern = [math.exp(-float(((qi - kj) ** 2).sum()) / (2 * rho**2)) for kj in k]
        out[i] = sum(w * vj for w, vj in zip(kern, v, strict=True)) / sum(kern)
    return out


# ------------------------------------------------------------------ hand values
def test_scores_hand_values() -> None:
    q = np.array([[0.0, 0.0], [1.0, 1.0]])
    k = np.array([[0.0, 0.0], [3.0, 4.0]])
    # |q-k|² = [[0, 25], [2, 13]], divided by -2ρ² = -8
    np.testing.assert_array_equal(
        gaussian_kernel_scores(q, k, bandwidth=2.0), [[0.0, -25 / 8], [-2 / 8, -13 / 8]]
    )


def test_two_keys_hand_value() -> None:
    # keys 0 and 1, ρ = 1: at q = 0 the weights are 1 : e^{-1/2}
    k = np.array([[0.0], [1.0]])
    v = np.array([[0.0], [1.0]])
    pred, w = nadaraya_watson(np.array([[0.0]]), k, v, bandwidth=1.0)
    e = math.exp(-0.5)
    np.testing.assert_allclose(w, [[1 / (1 + e), e / (1 + e)]], rtol=1e-15)
    np.testing.assert_allclose(pred, [[e / (1 + e)]], rtol=1e-15)


# ------------------------------------------------------- reference: the loop
@pytest.mark.parametrize("seed", range(5))
def test_equals_the_textbook_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(7, 3)), rng.normal(size=(11, 3))
    v = rng.normal(size=(11, 2))
    rho = float(rng.uniform(0.3, 3.0))
    pred, w = nadaraya_watson(q, k, v, bandwidth=rho)
    np.testing.assert_allclose(pred, _loop_nw(q, k, v, rho), **TOL)
    np.testing.assert_allclose(w.sum(-1), 1.0, **TOL)


# ------------------------------------------- it IS softmax attention
@pytest.mark.parametrize("seed", range(5))
def test_is_attention_with_kernel_scores(seed: int) -> None:
    """softmax(s) V with s = -|q-k|²/(2ρ²), computed by the package's attention: a zero
    query makes Q Kᵀ = 0, and the scores enter as the additive mask."""
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 9, 4))
    v = rng.normal(size=(2, 9, 3))
    rho = float(rng.uniform(0.3, 3.0))
    scores = gaussian_kernel_scores(q, k, rho)  # (2, 6, 9)
    ref, ref_w = scaled_dot_product_attention(np.zeros_like(q), k, v, mask=scores)
    pred, w = nadaraya_watson(q, k, v, rho)
    np.testing.assert_allclose(pred, ref, **TOL)
    np.testing.assert_allclose(w, ref_w, **TOL)


@pytest.mark.parametrize("seed", range(10))
def test_is_dot_product_attention_with_scale_and_key_bias(seed: int) -> None:
    """-|q-k|²/(2ρ²) = q·k/ρ² - |q|²/(2ρ²) - |k|²/(2ρ²): the |q|² term cancels in the softmax."""
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(5, 3)), rng.normal(size=(8, 3)) * rng.uniform(0.2, 3.0, (8, 1))
    v = rng.normal(size=(8, 2))
    rho = float(rng.uniform(0.3, 3.0))
    ref, ref_w = scaled_dot_product_attention(
        q, k, v, mask=gaussian_key_bias(k, rho), scale=1 / rho**2
    )
    pred, w = nadaraya_watson(q, k, v, rho)
    np.testing.assert_allclose(pred, ref, **TOL)
    np.testing.assert_allclose(w, ref_w, **TOL)


def test_equal_norm_keys_give_dot_product_weights() -> None:
    """Property over 200 random draws: keys of one length r, any queries -> the Gaussian
    weights are the weights of dot-product attention with scale 1/ρ²."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        d, n_q, n_k = rng.integers(1, 6), rng.integers(1, 6), rng.integers(2, 10)
        k = rng.normal(size=(n_k, d))
        k *= rng.uniform(0.1, 3.0) / np.linalg.norm(k, axis=1, keepdims=True)  # |k_j| = r
        q = rng.normal(size=(n_q, d)) * rng.uniform(0.1, 3.0)
        v = rng.normal(size=(n_k, 2))
        rho = float(rng.uniform(0.3, 3.0))
        _, w_kernel = nadaraya_watson(q, k, v, rho)
        _, w_dot = scaled_dot_product_attention(q, k, v, scale=1 / rho**2)
        worst = max(worst, float(np.abs(w_kernel - w_dot).max()))
    assert worst < 1e-12


def test_unequal_norm_keys_break_the_equality() -> None:
    """The converse: keys of different lengths -> the two sets of weights differ."""
    rng = np.random.default_rng(1)
    for _ in range(50):
        k = rng.normal(size=(6, 3))
        k *= rng.uniform(0.5, 3.0, size=(6, 1)) / np.linalg.norm(k, axis=1, keepdims=True)
        q, v = rng.normal(size=(4, 3)), rng.normal(size=(6, 1))
        _, w_kernel = nadaraya_watson(q, k, v, 1.0)
        _, w_dot = scaled_dot_product_attention(q, k, v, scale=1.0)
        assert np.abs(w_kernel - w_dot).max() > 1e-3


# ------------------------------------------------------------------ limits
@pytest.mark.parametrize("seed", range(20))
def test_small_bandwidth_picks_the_nearest_key(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, q = rng.uniform(0, 10, size=(15, 2)), rng.uniform(0, 10, size=(8, 2))
    v = rng.normal(size=(15, 3))
    dist = np.linalg.norm(q[:, None] - k[None], axis=-1)  # (8, 15)
    ordered = np.sort(dist, axis=1)
    # ρ well below the gap between the nearest and the second-nearest distance squared
    gap = float((ordered[:, 1] ** 2 - ordered[:, 0] ** 2).min())
    rho = math.sqrt(gap / (2 * 50))  # second-nearest weight <= e^-50 of the nearest
    pred, w = nadaraya_watson(q, k, v, rho)
    nearest = dist.argmin(axis=1)
    np.testing.assert_array_equal(w.argmax(axis=1), nearest)
    np.testing.assert_allclose(pred, v[nearest], rtol=0, atol=1e-15 * 15 * 3 + 1e-19)


@pytest.mark.parametrize("seed", range(20))
def test_large_bandwidth_gives_the_mean_of_the_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, q = rng.normal(size=(12, 2)), rng.normal(size=(5, 2))
    v = rng.normal(size=(12, 3))
    pred, w = nadaraya_watson(q, k, v, 1e7)
    np.testing.assert_allclose(w, 1 / 12, rtol=1e-12)
    np.testing.assert_allclose(pred, np.broadcast_to(v.mean(0), pred.shape), **TOL)


def test_larger_bandwidth_flattens_the_weights() -> None:
    """Entropy of each weight row grows with ρ (for keys at distinct distances)."""
    rng = np.random.default_rng(3)
    k, q = rng.normal(size=(10, 2)), rng.normal(size=(4, 2))
    v = rng.normal(size=(10, 1))
    entropies = []
    for rho in (0.1, 0.3, 1.0, 3.0, 10.0):
        _, w = nadaraya_watson(q, k, v, rho)
        entropies.append(-(w * np.log(np.maximum(w, 1e-300))).sum(-1))
    assert (np.diff(np.array(entropies), axis=0) > 0).all()


# ------------------------------------------------------------------ batching, torch
def test_batching_equals_looping_and_broadcasts() -> None:
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(3, 5, 2)), rng.normal(size=(1, 7, 2)), rng.normal(size=(3, 7, 4))
    pred, w = nadaraya_watson(q, k, v, 0.8)
    assert pred.shape == (3, 5, 4) and w.shape == (3, 5, 7)
    for b in range(3):
        p_b, w_b = nadaraya_watson(q[b], k[0], v[b], 0.8)
        np.testing.assert_allclose(pred[b], p_b, **TOL)
        np.testing.assert_allclose(w[b], w_b, **TOL)


def test_torch_matches_numpy_and_is_differentiable() -> None:
    rng = np.random.default_rng(5)
    q, k, v = rng.normal(size=(4, 2)), rng.normal(size=(6, 2)), rng.normal(size=(6, 3))
    ref, _ = nadaraya_watson(q, k, v, 0.7)
    qt = torch.tensor(q, requires_grad=True)
    pred, w = nadaraya_watson(qt, torch.tensor(k), torch.tensor(v), 0.7)
    assert isinstance(pred, torch.Tensor) and pred.dtype == torch.float64
    np.testing.assert_allclose(pred.detach().numpy(), ref, **TOL)
    pred.sum().backward()
    assert qt.grad is not None and torch.isfinite(qt.grad).all()


def test_query_equal_to_key_gives_positive_zero_score() -> None:
    s = gaussian_kernel_scores(np.array([[1.0]]), np.array([[1.0]]), 1.0)
    assert s[0, 0] == 0.0 and not np.signbit(s[0, 0])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_bandwidth_value(bad: float) -> None:
    x = np.zeros((2, 1))
    with pytest.raises(ValueError, match=msg("bandwidth: expected a positive finite float")):
        nadaraya_watson(x, x, x, bad)


@pytest.mark.parametrize("bad", [None, "1.0", True, np.array(1.0)])
def test_bad_bandwidth_type(bad: object) -> None:
    x = np.zeros((2, 1))
    with pytest.raises(TypeError, match=msg("bandwidth: expected a positive float")):
        nadaraya_watson(x, x, x, bad)


def test_bandwidth_too_small_raises_instead_of_nan() -> None:
    q, k = np.array([[0.0]]), np.array([[1.0], [2.0]])
    with pytest.raises(ValueError, match=msg("bandwidth: 1e-200 is too small", "(1, 2)")):
        nadaraya_watson(q, k, np.ones((2, 1)), 1e-200)
    with pytest.raises(ValueError, match=msg("bandwidth: 1e-200 is too small")):
        gaussian_key_bias(k, 1e-200)


def test_shape_errors_name_argument_and_shapes() -> None:
    q, k, v = np.zeros((4, 2)), np.zeros((5, 2)), np.zeros((5, 3))
    with pytest.raises(ValueError, match=msg("query: expected shape", "got shape (4,)")):
        nadaraya_watson(np.zeros(4), k, v, 1.0)
    with pytest.raises(ValueError, match=msg("key: expected last dimension 2", "(5, 3)")):
        nadaraya_watson(q, np.zeros((5, 3)), v, 1.0)
    with pytest.raises(ValueError, match=msg("value: expected dimension -2 5", "(4, 3)")):
        nadaraya_watson(q, k, np.zeros((4, 3)), 1.0)
    with pytest.raises(ValueError, match=msg("value: leading", "(2,)")):
        nadaraya_watson(np.zeros((3, 4, 2)), k, np.zeros((2, 5, 3)), 1.0)


def test_type_and_nan_errors() -> None:
    q = np.zeros((4, 2))
    with pytest.raises(TypeError, match=msg("query: expected a floating-point dtype")):
        nadaraya_watson(q.astype(int), q, q, 1.0)
    with pytest.raises(TypeError, match=msg("key: expected a torch.Tensor like query")):
        nadaraya_watson(torch.zeros(4, 2), q, q, 1.0)
    with pytest.raises(TypeError, match=msg("value: expected dtype float64")):
        nadaraya_watson(q, q, q.astype(np.float32), 1.0)
    bad = q.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match=msg("key: contains NaN or infinity", "(4, 2)")):
        nadaraya_watson(q, bad, q, 1.0)
