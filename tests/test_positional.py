"""Tests for selfattn.positional: hand values, the rotation property, modules, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfattn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)

# ---------------------------------------------------------------- hand values


def test_position_zero_is_zero_one_pattern():
    pe = sinusoidal_encoding(3, 8)
    np.testing.assert_array_equal(pe[0], [0, 1, 0, 1, 0, 1, 0, 1])


def test_hand_checked_values_d4():
    # d_model = 4: frequencies are 1 (i=0) and 1/10000^(2/4) = 1/100 (i=1)
    pe = sinusoidal_encoding(3, 4)
    expected = np.array(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ]
    )
    np.testing.assert_allclose(pe, expected, rtol=0, atol=1e-15)
    # concrete decimals, checked with a calculator: sin(1) = 0.8414709848
    assert pe[1, 0] == pytest.approx(0.8414709848, abs=1e-10)
    assert pe[2, 3] == pytest.approx(0.9998000067, abs=1e-10)


def test_formula_at_scattered_positions():
    d, base = 16, 10000.0
    pe = sinusoidal_encoding(60, d, base)
    for pos, i in [(5, 0), (17, 3), (59, 7), (42, 5)]:
        angle = pos / base ** (2 * i / d)
        assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-14)
        assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-14)


def test_custom_base_changes_frequencies():
    pe = sinusoidal_encoding(4, 4, base=4.0)  # second frequency 4^(-1/2) = 0.5
    assert pe[3, 2] == pytest.approx(math.sin(1.5), abs=1e-15)


def test_shape_dtype_and_range():
    pe = sinusoidal_encoding(50, 10)
    assert pe.shape == (50, 10) and pe.dtype == np.float64
    assert np.abs(pe).max() <= 1.0
    # every (sin, cos) pair lies on the unit circle
    np.testing.assert_allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, 1.0, atol=1e-14)


# ---------------------------------------------------------------- relative positions


@settings(max_examples=30, deadline=None)
@given(
    k=st.integers(-40, 40),
    half_d=st.integers(1, 12),
    base=st.sampled_from([10.0, 100.0, 10000.0]),
)
def test_shift_is_a_fixed_rotation(k, half_d, base):
    d = 2 * half_d
    pe = sinusoidal_encoding(100, d, base)
    rot = sinusoidal_shift_matrix(k, d, base)
    lo, hi = max(0, -k), min(100, 100 - k)
    # PE[pos + k] = PE[pos] @ R_k for every pos (same R for all of them)
    np.testing.assert_allclose(pe[lo:hi] @ rot, pe[lo + k : hi + k], atol=1e-10)
    # R_k is orthogonal: it preserves lengths, so it is a rotation
    np.testing.assert_allclose(rot @ rot.T, np.eye(d), atol=1e-12)
    assert np.linalg.det(rot) == pytest.approx(1.0, abs=1e-9)


def test_shift_matrix_recovered_by_least_squares():
    # fit R from data alone: the best linear map PE[pos] -> PE[pos+3] is the formula's R_3
    d = 8
    pe = sinusoidal_encoding(64, d, base=50.0)
    fitted, *_ = np.linalg.lstsq(pe[:-3], pe[3:], rcond=None)
    np.testing.assert_allclose(fitted, sinusoidal_shift_matrix(3, d, base=50.0), atol=1e-8)


def test_shifts_compose():
    d = 6
    np.testing.assert_allclose(
        sinusoidal_shift_matrix(2, d) @ sinusoidal_shift_matrix(5, d),
        sinusoidal_shift_matrix(7, d),
        atol=1e-12,
    )
    np.testing.assert_allclose(sinusoidal_shift_matrix(0, d), np.eye(d), atol=0)


# ---------------------------------------------------------------- modules


def test_sinusoidal_module_adds_table_and_respects_offset():
    torch.manual_seed(0)
    mod = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    table = torch.from_numpy(sinusoidal_encoding(20, 8))
    torch.testing.assert_close(mod(x), x + table[:5], rtol=0, atol=0)
    torch.testing.assert_close(mod(x, offset=7), x + table[7:12], rtol=0, atol=0)
    # unbatched input, float32 result
    x32 = torch.zeros(3, 8)
    out = mod(x32, offset=2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, table[2:5].float())
    assert list(mod.parameters()) == []


def test_offset_equals_slicing_a_longer_sequence():
    # cached decoding: encoding tokens one at a time with offset = position
    # gives the same result as encoding the whole sequence at once
    torch.manual_seed(1)
    for mod in (SinusoidalPositionalEncoding(6, max_len=10), LearnedPositionalEmbedding(10, 6)):
        x = torch.randn(2, 7, 6)
        full = mod(x)
        steps = torch.cat([mod(x[:, t : t + 1], offset=t) for t in range(7)], dim=1)
        torch.testing.assert_close(steps, full, rtol=0, atol=0)


def test_max_len_exactly_fits():
    mod = SinusoidalPositionalEncoding(4, max_len=6)
    x = torch.zeros(1, 6, 4)
    torch.testing.assert_close(mod(x)[0, 5], torch.from_numpy(sinusoidal_encoding(6, 4)[5]).float())


def test_learned_embedding_adds_its_rows_and_learns():
    torch.manual_seed(0)
    mod = LearnedPositionalEmbedding(12, 4)
    x = torch.randn(3, 5, 4)
    torch.testing.assert_close(mod(x, offset=4), x + mod.embedding.weight[4:9], rtol=0, atol=0)
    # gradient reaches exactly the rows that were used
    mod(x, offset=4).sum().backward()
    grad = mod.embedding.weight.grad
    assert torch.all(grad[4:9] == 3.0)  # 3 sequences in the batch, d(sum)/dP = 1 each
    assert torch.all(grad[:4] == 0) and torch.all(grad[9:] == 0)


def test_sinusoidal_breaks_translation_invariance_of_rows():
    # same token embedding at two positions becomes two different vectors
    mod = SinusoidalPositionalEncoding(8, max_len=10)
    x = torch.ones(1, 4, 8)
    out = mod(x)
    assert not torch.allclose(out[0, 0], out[0, 1])


# ---------------------------------------------------------------- bad input


def test_odd_d_model_raises():
    with pytest.raises(ValueError, match=r"d_model.*even.*d_model=7"):
        sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match=r"d_model.*d_model=5"):
        SinusoidalPositionalEncoding(5)


def test_seq_len_beyond_max_len_raises_with_both_numbers():
    mod = SinusoidalPositionalEncoding(4, max_len=8)
    with pytest.raises(ValueError, match=r"x: .*seq_len=9.*\(1, 9, 4\).*max_len=8"):
        mod(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match=r"offset=6, seq_len=3.*max_len=8"):
        mod(torch.zeros(1, 3, 4), offset=6)


def test_learned_beyond_max_len_raises():
    mod = LearnedPositionalEmbedding(5, 4)
    with pytest.raises(ValueError, match=r"seq_len=6.*\(2, 6, 4\).*max_len=5"):
        mod(torch.zeros(2, 6, 4))


def test_wrong_d_model_of_x_raises():
    with pytest.raises(ValueError, match=r"x: expected last dimension 8 \(d_model.*\(2, 3, 6\)"):
        SinusoidalPositionalEncoding(8)(torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match=r"x: expected last dimension 4 \(d_model.*\(3, 5\)"):
        LearnedPositionalEmbedding(10, 4)(torch.zeros(3, 5))


def test_wrong_ndim_and_dtype_raise():
    mod = SinusoidalPositionalEncoding(4)
    legend = r"x: expected shape \(batch, seq_len, d_model\).*\(1, 1, 2, 4\)"
    with pytest.raises(ValueError, match=legend):
        mod(torch.zeros(1, 1, 2, 4))
    with pytest.raises(TypeError, match=r"x: expected a floating-point dtype, got torch.int64"):
        mod(torch.zeros(2, 4, dtype=torch.long))


def test_bad_offset_and_base_raise():
    mod = SinusoidalPositionalEncoding(4, max_len=8)
    with pytest.raises(ValueError, match=r"offset: expected a non-negative int, got -1"):
        mod(torch.zeros(1, 2, 4), offset=-1)
    with pytest.raises(TypeError, match=r"offset: expected a non-negative int, got float"):
        mod(torch.zeros(1, 2, 4), offset=1.0)
    with pytest.raises(ValueError, match=r"base: expected a finite float > 1, got 1.0"):
        sinusoidal_encoding(3, 4, base=1.0)
    with pytest.raises(ValueError, match=r"seq_len: expected a positive int, got 0"):
        sinusoidal_encoding(0, 4)
    with pytest.raises(TypeError, match=r"k: expected an int offset, got float"):
        sinusoidal_shift_matrix(1.5, 4)
