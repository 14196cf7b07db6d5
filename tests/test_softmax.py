"""Tests for selfattn.softmax: hand values, torch parity, properties, numerics, bad input.

Tolerances (written down once): float64 results must match torch / exact values
to ``rtol=1e-12, atol=1e-15``; float32 to ``rtol=1e-5, atol=1e-6`` (log-softmax
values near 0 lose a few float32 ulps to cancellation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from checking import msg
from selfattn import log_softmax, softmax

TOL = {np.float64: dict(rtol=1e-12, atol=1e-15), np.float32: dict(rtol=1e-5, atol=1e-6)}


# ------------------------------------------------------------------ hand values
def test_softmax_hand_values_log_1_2_3():
    # exp(0) : exp(ln 2) : exp(ln 3) = 1 : 2 : 3, total 6
    out = softmax(np.array([0.0, math.log(2.0), math.log(3.0)]))
    np.testing.assert_allclose(out, [1 / 6, 2 / 6, 3 / 6], rtol=1e-15, atol=1e-16)


def test_log_softmax_hand_values():
    out = log_softmax(np.array([0.0, math.log(2.0), math.log(3.0)]))
    np.testing.assert_allclose(out, np.log([1 / 6, 2 / 6, 3 / 6]), rtol=1e-14)


def test_softmax_equal_logits_is_uniform_and_axis_respected():
    x = np.zeros((2, 5))
    np.testing.assert_array_equal(softmax(x, axis=-1), np.full((2, 5), 0.2))
    np.testing.assert_array_equal(softmax(x, axis=0), np.full((2, 5), 0.5))


def test_softmax_axis0_columns_sum_to_one_hand():
    x = np.array([[0.0, 1.0], [math.log(3.0), 1.0]])
    np.testing.assert_allclose(softmax(x, axis=0), [[0.25, 0.5], [0.75, 0.5]], rtol=1e-15)


# ------------------------------------------------------------------ torch parity
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", [((7,), -1), ((3, 4), -1), ((3, 4), 0), ((2, 3, 5), 1)])
def test_softmax_matches_torch(dtype, shape, axis):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 3).astype(dtype)
    ref = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
    out = softmax(x, axis=axis)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, **TOL[dtype])
    ref_log = torch.log_softmax(torch.from_numpy(x), dim=axis).numpy()
    np.testing.assert_allclose(log_softmax(x, axis=axis), ref_log, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_backend_matches_torch_and_stays_torch(dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=gen, dtype=dtype) * 5
    out = softmax(x)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    tol = TOL[np.float64] if dtype == torch.float64 else TOL[np.float32]
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), **tol)
    torch.testing.assert_close(log_softmax(x), torch.log_softmax(x, dim=-1), **tol)


def test_torch_softmax_gradcheck_float64():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax(t, axis=-1), (x,))
    assert torch.autograd.gradcheck(lambda t: log_softmax(t, axis=0), (x,))


def test_torch_gradient_matches_torch_softmax():
    gen = torch.Generator().manual_seed(3)
    x1 = torch.randn(2, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    w = torch.randn(2, 7, generator=gen, dtype=torch.float64)
    (softmax(x1) * w).sum().backward()
    (torch.softmax(x2, -1) * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ properties
finite_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 4), st.integers(1, 6)),
    elements=st.floats(-50, 50, allow_nan=False),
)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(finite_rows)
def test_property_rows_sum_to_one_and_in_unit_interval(x):
    out = softmax(x)
    assert np.all(out >= 0) and np.all(out <= 1)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-12)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(finite_rows, st.floats(-1e3, 1e3))
def test_property_shift_invariance(x, c):
    np.testing.assert_allclose(softmax(x + c), softmax(x), rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(finite_rows)
def test_property_log_softmax_is_log_of_softmax(x):
    np.testing.assert_allclose(np.exp(log_softmax(x)), softmax(x), rtol=1e-12, atol=1e-15)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(finite_rows, st.randoms(use_true_random=False))
def test_property_permutation_equivariant(x, rnd):
    perm = list(range(x.shape[-1]))
    rnd.shuffle(perm)
    np.testing.assert_allclose(softmax(x[:, perm]), softmax(x)[:, perm], rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------ numerics
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_huge_logits_are_finite_and_correct(dtype):
    x = np.array([[1e4, 0.0, -1e4], [1e4, 1e4, -1e4], [-1e4, -1e4, -1e4]], dtype=dtype)
    out = softmax(x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)
    # a naive exp(x) / sum(exp(x)) overflows: inf / inf = nan
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    assert np.isnan(naive).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_logits_are_finite_and_correct_torch(dtype):
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, -1e4]], dtype=dtype, requires_grad=True)
    out = softmax(x)
    want = torch.tensor([[1, 0, 0], [0.5, 0.5, 0]], dtype=dtype)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-30)
    torch.testing.assert_close(log_softmax(x)[0], torch.tensor([0, -1e4, -2e4], dtype=dtype))
    (out * torch.arange(3, dtype=dtype)).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_log_softmax_stays_accurate_where_softmax_underflows():
    x = np.array([1e4, 0.0])
    np.testing.assert_allclose(log_softmax(x), [0.0, -1e4], rtol=1e-15)
    with np.errstate(divide="ignore"):
        assert np.isneginf(np.log(softmax(x))[1])  # the naive route loses it


def test_fully_masked_slice_gives_zeros_numpy():
    x = np.array([[0.0, -np.inf, math.log(3.0)], [-np.inf, -np.inf, -np.inf]])
    out = softmax(x)
    np.testing.assert_allclose(out, [[0.25, 0.0, 0.75], [0.0, 0.0, 0.0]], rtol=1e-15)
    lout = log_softmax(x)
    assert np.isneginf(lout[1]).all() and np.isneginf(lout[0, 1])
    np.testing.assert_allclose(lout[0, [0, 2]], np.log([0.25, 0.75]), rtol=1e-14)


def test_fully_masked_slice_gives_zeros_and_finite_gradient_torch():
    x = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    blocked = torch.tensor([[False, True, False], [True, True, True]])
    out = softmax(x.masked_fill(blocked, float("-inf")))
    torch.testing.assert_close(out[1], torch.zeros(3, dtype=torch.float64))
    ref = torch.softmax(torch.tensor([0.5, 2.0], dtype=torch.float64), -1)
    torch.testing.assert_close(out[0, [0, 2]], ref, rtol=1e-12, atol=1e-15)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad[1], torch.zeros(3, dtype=torch.float64))


def test_float32_dtype_preserved():
    x = np.array([1.0, 2.0], dtype=np.float32)
    assert softmax(x).dtype == np.float32 and log_softmax(x).dtype == np.float32


# ------------------------------------------------------------------ bad input
def test_bad_integer_dtype():
    with pytest.raises(TypeError, match=msg("x:", "floating-point dtype", "int64")):
        softmax(np.array([1, 2, 3], dtype=np.int64))


def test_bad_list_input():
    with pytest.raises(TypeError, match=msg("x:", "numpy.ndarray or torch.Tensor", "list")):
        softmax([1.0, 2.0])


def test_bad_nan():
    with pytest.raises(ValueError, match=msg("x:", "NaN or +inf", "(2, 2)")):
        softmax(np.array([[0.0, np.nan], [1.0, 2.0]]))


def test_bad_posinf_torch():
    with pytest.raises(ValueError, match=msg("x:", "NaN or +inf", "(3,)")):
        log_softmax(torch.tensor([0.0, float("inf"), 1.0]))


def test_bad_axis_out_of_range():
    with pytest.raises(ValueError, match=msg("axis:", "[-2, 2)", "(2, 3)", "got 2")):
        softmax(np.zeros((2, 3)), axis=2)


def test_bad_axis_type():
    with pytest.raises(TypeError, match=msg("axis:", "int", "float")):
        softmax(np.zeros((2, 3)), axis=1.0)


def test_bad_empty_slice():
    with pytest.raises(ValueError, match=msg("x:", "non-empty slice along axis 1", "(2, 0)")):
        softmax(np.zeros((2, 0)))


def test_bad_zero_dim():
    with pytest.raises(ValueError, match=msg("x:", "at least one dimension", "()")):
        softmax(np.array(1.0))
