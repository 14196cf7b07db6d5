"""Tests for selfattn.masks: hand values, torch conventions, round trips, bad input.

Tolerances for the nn.MultiheadAttention comparisons (float64): ``rtol=1e-10, atol=1e-12``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checking import msg
from selfattn import (
    causal_mask,
    combine_masks,
    key_padding_to_attention_mask,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
    to_additive_mask,
    to_blocked_mask,
    window_mask_from_positions,
)
from selfattn.masks import fully_masked_rows

TOL64 = dict(rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ causal_mask
def test_causal_square_hand_values():
    expected = np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=bool)
    out = causal_mask(3)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(causal_mask(3, 3), expected)


def test_causal_bottom_right_hand_values():
    # 2 new queries are positions 2 and 3 of a 4-token sequence (cached decoding)
    expected = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(causal_mask(2, 4), expected)
    # one new token sees every cached key and itself
    np.testing.assert_array_equal(causal_mask(1, 5), np.ones((1, 5), dtype=bool))


def test_causal_more_queries_than_keys_has_empty_first_rows():
    expected = np.array([[0, 0], [0, 0], [1, 0], [1, 1]], dtype=bool)
    np.testing.assert_array_equal(causal_mask(4, 2), expected)


@pytest.mark.parametrize("q_len,k_len", [(3, 3), (2, 5), (1, 4), (5, 2), (4, 7)])
def test_causal_matches_torch_causal_lower_right(q_len, k_len):
    bias_mod = pytest.importorskip("torch.nn.attention.bias")
    with pytest.warns(UserWarning, match="NaN") if q_len > k_len else _no_warning():
        bias = bias_mod.causal_lower_right(q_len, k_len)
    # the private materialisation, if present, gives the mask itself
    if hasattr(bias, "_materialize"):
        np.testing.assert_array_equal(causal_mask(q_len, k_len), bias._materialize().numpy())
    # public route: the CausalBias object as attn_mask of torch's SDPA
    gen = torch.Generator().manual_seed(q_len * 10 + k_len)
    q = torch.randn(2, q_len, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, k_len, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, k_len, 3, generator=gen, dtype=torch.float64)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ours, _ = scaled_dot_product_attention(q, k, v, causal_mask(q_len, k_len, like=q))
    if q_len > k_len:  # rows with nothing to attend: ours are zeros; torch's may be NaN
        n_empty = q_len - k_len
        torch.testing.assert_close(ours[:, :n_empty], torch.zeros_like(ours[:, :n_empty]))
        ours, ref = ours[:, n_empty:], ref[:, n_empty:]
    torch.testing.assert_close(ours, ref, **TOL64)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_causal_square_equals_is_causal_and_tril():
    np.testing.assert_array_equal(causal_mask(6), torch.tril(torch.ones(6, 6)).bool().numpy())
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(ours, ref, **TOL64)


def test_causal_like_torch_gives_tensor_on_device():
    like = torch.zeros(1, dtype=torch.float32)
    out = causal_mask(2, 3, like=like)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.device == like.device
    np.testing.assert_array_equal(out.numpy(), causal_mask(2, 3))
    assert isinstance(causal_mask(2, like=np.zeros(1)), np.ndarray)


# ------------------------------------------------------------------ padding_mask
def test_padding_hand_values_and_seq_len():
    np.testing.assert_array_equal(padding_mask([2, 3]), [[1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(
        padding_mask(np.array([0, 1]), seq_len=3), [[0, 0, 0], [1, 0, 0]]
    )


def test_padding_torch_lengths_give_tensor():
    out = padding_mask(torch.tensor([1, 3]), 4)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool
    torch.testing.assert_close(out, torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool))
    assert isinstance(padding_mask([1, 2], like=torch.zeros(1)), torch.Tensor)


def test_key_padding_shapes_broadcast_against_scores():
    pad = padding_mask([2, 4])  # (2, 4)
    m4 = key_padding_to_attention_mask(pad)
    m3 = key_padding_to_attention_mask(pad, with_heads=False)
    assert m4.shape == (2, 1, 1, 4) and m3.shape == (2, 1, 4)
    full4 = np.broadcast_to(m4, (2, 3, 5, 4))  # (batch, heads, q_len, k_len)
    full3 = np.broadcast_to(m3, (2, 5, 4))  # (batch, q_len, k_len)
    # every query row of sequence 0 allows exactly keys 0 and 1
    np.testing.assert_array_equal(full4[0, 1, 3], [1, 1, 0, 0])
    np.testing.assert_array_equal(full3[0, 4], [1, 1, 0, 0])
    np.testing.assert_array_equal(full3[1, 0], [1, 1, 1, 1])


# ------------------------------------------------------------------ combine / convert
def test_combine_and_broadcasting_and_none():
    causal = causal_mask(3)  # (3, 3)
    pad = key_padding_to_attention_mask(padding_mask([2, 3]))  # (2, 1, 1, 3)
    both = combine_masks(causal, None, pad)
    assert both.shape == (2, 1, 3, 3)
    np.testing.assert_array_equal(both[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
    np.testing.assert_array_equal(both[1, 0], causal)
    assert combine_masks(None, None) is None
    assert combine_masks() is None
    np.testing.assert_array_equal(combine_masks(causal), causal)


def test_combine_mixed_backends_returns_torch():
    out = combine_masks(causal_mask(2), torch.tensor([True, False]))
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.tensor([[True, False], [True, False]]))


def test_blocked_round_trip_and_values():
    m = causal_mask(3)
    blocked = to_blocked_mask(m)
    np.testing.assert_array_equal(blocked, np.triu(np.ones((3, 3), dtype=bool), k=1))
    np.testing.assert_array_equal(to_blocked_mask(blocked), m)
    t = causal_mask(3, like=torch.zeros(1))
    torch.testing.assert_close(to_blocked_mask(to_blocked_mask(t)), t)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, torch.float64])
def test_additive_values_and_round_trip(dtype):
    m = causal_mask(2, 3)
    add = to_additive_mask(m, dtype)
    want = np.float64 if dtype in (np.float64, torch.float64) else np.float32
    assert add.dtype == want
    np.testing.assert_array_equal(add, [[0.0, 0.0, -np.inf], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(add == 0, m)


def test_additive_torch_default_and_numpy_dtype():
    t = causal_mask(2, like=torch.zeros(1))
    assert to_additive_mask(t).dtype == torch.float32
    add = to_additive_mask(t, np.float64)
    assert add.dtype == torch.float64
    torch.testing.assert_close(add == 0, t)
    assert torch.isneginf(add[0, 1])


def test_additive_and_bool_masks_give_same_attention():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    pad = key_padding_to_attention_mask(padding_mask([3, 4], like=q), with_heads=False)
    m = combine_masks(causal_mask(4, like=q), pad)  # (2, 4, 4)
    c_bool, w_bool = scaled_dot_product_attention(q, k, v, m)
    c_add, w_add = scaled_dot_product_attention(q, k, v, to_additive_mask(m, torch.float64))
    torch.testing.assert_close(c_bool, c_add, rtol=0, atol=0)
    torch.testing.assert_close(w_bool, w_add, rtol=0, atol=0)


def _mha_manual(mha, x, mask):
    """nn.MultiheadAttention's forward rebuilt from our SDPA (batch_first, float64)."""
    e, h = mha.embed_dim, mha.num_heads
    b, t, _ = x.shape
    qkv = x @ mha.in_proj_weight.T + mha.in_proj_bias  # (b, t, 3e)
    q, k, v = qkv.chunk(3, dim=-1)  # each (b, t, e)
    q, k, v = (z.reshape(b, t, h, e // h).transpose(1, 2) for z in (q, k, v))  # (b, h, t, e/h)
    ctx, w = scaled_dot_product_attention(q, k, v, mask)  # (b, h, t, e/h), (b, h, t, t)
    ctx = ctx.transpose(1, 2).reshape(b, t, e)  # (b, t, e)
    return mha.out_proj(ctx), w.mean(dim=1)  # (b, t, e), (b, t, t)


def test_fully_masked_rows_bool_and_additive_both_backends():
    # row 0 may attend to key 1 only, row 1 to nothing, row 2 to everything
    keep = np.array([[False, True, False], [False, False, False], [True, True, True]])
    expected = np.array([[False], [True], [False]])
    for mask in (keep, to_additive_mask(keep, np.float64)):
        rows = fully_masked_rows(mask)
        assert isinstance(rows, np.ndarray) and rows.shape == (3, 1)
        np.testing.assert_array_equal(rows, expected)
        as_torch = fully_masked_rows(torch.from_numpy(mask)[None])  # (1, 3, 1)
        assert as_torch.dtype == torch.bool
        np.testing.assert_array_equal(as_torch[0].numpy(), expected)
    # a finite bias is not a block: only -inf everywhere makes a row fully masked
    assert not fully_masked_rows(np.array([[-1e30, -np.inf]])).any()


def test_conversions_match_nn_multihead_attention_conventions():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    causal = causal_mask(5, like=x)  # (5, 5), True = may attend
    pad = padding_mask([3, 5], like=x)  # (2, 5), True = real token
    ours_mask = combine_masks(causal, key_padding_to_attention_mask(pad))  # (2, 1, 5, 5)
    want_out, want_w = _mha_manual(mha, x, ours_mask)
    with torch.no_grad():
        out_b, w_b = mha(x, x, x, attn_mask=to_blocked_mask(causal),
                         key_padding_mask=to_blocked_mask(pad))
        out_a, w_a = mha(x, x, x, attn_mask=to_additive_mask(causal, torch.float64),
                         key_padding_mask=to_additive_mask(pad, torch.float64))
    for out, w in ((out_b, w_b), (out_a, w_a)):
        torch.testing.assert_close(out, want_out.detach(), **TOL64)
        torch.testing.assert_close(w, want_w.detach(), **TOL64)
    # the wrong convention (passing the may-attend mask as is) gives something else
    with torch.no_grad():
        wrong, _ = mha(x, x, x, attn_mask=causal)
    assert not torch.allclose(wrong, want_out)  # (differs, or NaN where all keys are blocked)


# ------------------------------------------------------------------ bad input
def test_bad_negative_length():
    with pytest.raises(ValueError, match=msg("lengths:", "non-negative", "-1 at index 1", "(3,)")):
        padding_mask([2, -1, 3])


def test_bad_length_exceeds_seq_len():
    expected = msg("lengths:", "length 5 at index 0", "seq_len=4", "(2,)")
    with pytest.raises(ValueError, match=expected):
        padding_mask([5, 2], seq_len=4)


def test_bad_float_lengths():
    with pytest.raises(TypeError, match=msg("lengths:", "integer", "float64")):
        padding_mask([1.5, 2.0])


def test_bad_float_tensor_lengths():
    with pytest.raises(TypeError, match=msg("lengths:", "integer", "torch.float32")):
        padding_mask(torch.tensor([1.0, 2.0]))


def test_bad_lengths_shape():
    with pytest.raises(ValueError, match=msg("lengths:", "1-D shape (batch,)", "(2, 2)")):
        padding_mask([[1, 2], [3, 4]])


def test_bad_seq_len_zero():
    with pytest.raises(ValueError, match=msg("seq_len:", "positive int", "0")):
        padding_mask([0, 0], seq_len=0)


def test_bad_non_bool_mask_blocked():
    with pytest.raises(TypeError, match=msg("mask:", "bool mask", "dtype int64", "(2, 2)")):
        to_blocked_mask(np.ones((2, 2), dtype=np.int64))


def test_bad_non_bool_mask_additive_torch():
    with pytest.raises(TypeError, match=msg("mask:", "bool mask", "torch.float32", "(3,)")):
        to_additive_mask(torch.zeros(3))


def test_bad_additive_integer_dtype():
    with pytest.raises(TypeError, match=msg("dtype:", "floating dtype", "int32")):
        to_additive_mask(causal_mask(2), np.int32)


def test_bad_combine_non_bool_names_position():
    with pytest.raises(TypeError, match=msg("masks[2]:", "dtype float64", "(3, 3)")):
        combine_masks(causal_mask(3), None, np.zeros((3, 3)))


def test_bad_combine_shapes_do_not_broadcast():
    with pytest.raises(ValueError, match=msg("masks:", "(3, 3)", "(2, 4)", "do not broadcast")):
        combine_masks(causal_mask(3), np.ones((2, 4), dtype=bool))


def test_bad_causal_q_len():
    with pytest.raises(ValueError, match=msg("q_len:", "positive int", "0")):
        causal_mask(0)
    with pytest.raises(TypeError, match=msg("k_len:", "positive int", "float")):
        causal_mask(2, 3.0)


def test_bad_like():
    with pytest.raises(TypeError, match=msg("like:", "numpy.ndarray or torch.Tensor", "list")):
        causal_mask(2, like=[1])


def test_bad_key_padding_ndim():
    with pytest.raises(ValueError, match=msg("pad:", "(batch, seq_len)", "(2, 1, 3)")):
        key_padding_to_attention_mask(np.ones((2, 1, 3), dtype=bool))


# ------------------------------------------------------------------ sliding_window_mask
def _window_loop(q_len: int, k_len: int, window: int, sinks: int = 0) -> np.ndarray:
    """The rule in words: query i sits at position p = i + k_len - q_len and sees the
    window - sinks most recent keys up to p, and the first sinks keys up to p."""
    out = np.zeros((q_len, k_len), dtype=bool)
    for i in range(q_len):
        p = i + k_len - q_len
        recent = range(max(0, p - (window - sinks) + 1), p + 1)
        first = range(0, min(sinks, p + 1))
        for j in set(recent) | set(first):
            out[i, j] = True
    return out


def test_sliding_window_hand_values():
    expected = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(sliding_window_mask(4, window=2), expected)
    # 2 new queries at positions 3 and 4 of 5 tokens (cached decoding), window 3
    expected = np.array([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(sliding_window_mask(2, 5, window=3), expected)
    # one sink: key 0 stays visible, the window keeps the 2 most recent keys
    expected = np.array([[1, 0, 1, 1, 0], [1, 0, 0, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(sliding_window_mask(2, 5, window=3, sinks=1), expected)


@pytest.mark.parametrize("q_len,k_len", [(1, 1), (4, 4), (9, 9), (2, 7), (1, 12), (6, 3)])
@pytest.mark.parametrize("window,sinks", [(w, k) for w in (1, 2, 3, 5, 20) for k in (0, 1, 2)
                                          if k < w])
def test_sliding_window_equals_a_loop(q_len, k_len, window, sinks):
    mask = sliding_window_mask(q_len, k_len, window=window, sinks=sinks)
    assert mask.shape == (q_len, k_len) and mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, _window_loop(q_len, k_len, window, sinks))
    assert (mask.sum(-1) <= window).all()  # never more than window keys per query
    assert not (mask & ~causal_mask(q_len, k_len)).any()  # never a future key


@pytest.mark.parametrize("q_len,k_len", [(5, 5), (2, 9), (1, 4)])
def test_sliding_window_limits(q_len, k_len):
    # a window at least as long as the keys is the causal mask
    np.testing.assert_array_equal(sliding_window_mask(q_len, k_len, window=k_len),
                                  causal_mask(q_len, k_len))
    np.testing.assert_array_equal(sliding_window_mask(q_len, k_len, window=100),
                                  causal_mask(q_len, k_len))
    # window 1: each query sees itself only (the bottom-right diagonal)
    np.testing.assert_array_equal(sliding_window_mask(q_len, k_len, window=1),
                                  np.eye(q_len, k_len, k=k_len - q_len, dtype=bool))


def _band(q_len: int, k_len: int, window: int) -> torch.Tensor:
    """The sliding window written with torch's own ops: a band of the all-ones matrix."""
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
    offset = k_len - q_len
    return ones.tril(offset) & ~ones.tril(offset - window)


@pytest.mark.parametrize("q_len,k_len,window", [(8, 8, 3), (3, 10, 4), (1, 6, 2), (7, 7, 1)])
def test_sliding_window_attention_matches_torch_sdpa(q_len, k_len, window):
    gen = torch.Generator().manual_seed(q_len * 100 + k_len * 10 + window)
    q = torch.randn(2, 3, q_len, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, k_len, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, k_len, 5, generator=gen, dtype=torch.float64)
    mask = sliding_window_mask(q_len, k_len, window=window, like=q)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, _band(q_len, k_len, window))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=_band(q_len, k_len, window))
    ours, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ours, ref, **TOL64)
    assert (weights[..., ~mask] == 0).all()  # blocked keys get weight exactly 0


def test_sliding_window_composes_with_padding():
    lengths, L, w = [6, 3, 8], 8, 3
    pad = padding_mask(lengths, L)  # (batch, L)
    mask = combine_masks(sliding_window_mask(L, window=w),
                         key_padding_to_attention_mask(pad))  # (batch, 1, L, L)
    assert mask.shape == (3, 1, L, L)
    for b, n in enumerate(lengths):
        expected = _window_loop(L, L, w) & (np.arange(L) < n)[None, :]
        np.testing.assert_array_equal(mask[b, 0], expected)
    # against torch's SDPA on the real tokens (padding queries are never scored)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 2, L, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    tmask = torch.from_numpy(mask)
    ours, _ = scaled_dot_product_attention(q, k, v, tmask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=tmask)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(ours[b, :, :n], ref[b, :, :n], **TOL64)


def test_window_mask_from_positions_with_gaps_equals_the_loop():
    # keys held by a cache with 2 sinks that has dropped positions 2..5
    k_pos = np.array([0, 1, 6, 7, 8, 9])
    q_pos = np.array([8, 9])
    mask = window_mask_from_positions(q_pos, k_pos, window=5, sinks=2)
    full = _window_loop(10, 10, 5, 2)  # every position 0..9
    np.testing.assert_array_equal(mask, full[np.ix_(q_pos, k_pos)])
    tmask = window_mask_from_positions(torch.from_numpy(q_pos), torch.from_numpy(k_pos),
                                       window=5, sinks=2)
    assert tmask.dtype == torch.bool and torch.equal(tmask, torch.from_numpy(mask))
    mixed = window_mask_from_positions(q_pos, torch.from_numpy(k_pos), window=5, sinks=2)
    assert torch.equal(mixed, tmask)


def test_sliding_window_like_torch_gives_tensor():
    out = sliding_window_mask(3, 5, window=2, like=torch.zeros(1, dtype=torch.float64))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool
    np.testing.assert_array_equal(out.numpy(), sliding_window_mask(3, 5, window=2))


@pytest.mark.parametrize(("kwargs", "exc", "parts"), [
    (dict(window=0), ValueError, ("window: expected a positive int, got 0",)),
    (dict(window=-2), ValueError, ("window: expected a positive int, got -2",)),
    (dict(window=2.0), TypeError, ("window: expected a positive int, got float",)),
    (dict(window=True), TypeError, ("window: expected a positive int, got bool",)),
    (dict(window=3, sinks=3), ValueError, ("sinks: expected fewer sinks than the window",
                                           "window = 3", "got sinks=3")),
    (dict(window=3, sinks=5), ValueError, ("sinks: ", "got sinks=5")),
    (dict(window=3, sinks=-1), ValueError, ("sinks: expected an int >= 0, got -1",)),
    (dict(window=3, sinks=1.0), TypeError, ("sinks: expected an int >= 0, got float",)),
])
def test_bad_sliding_window(kwargs, exc, parts):
    with pytest.raises(exc, match=msg(*parts)):
        sliding_window_mask(4, **kwargs)


def test_bad_sliding_window_sizes_and_positions():
    with pytest.raises(ValueError, match=msg("q_len: expected a positive int, got 0")):
        sliding_window_mask(0, window=2)
    with pytest.raises(TypeError, match=msg("window: expected a positive int, got NoneType")):
        sliding_window_mask(3, window=None)
    with pytest.raises(TypeError, match=msg("key_positions: expected integer positions",
                                            "float64")):
        window_mask_from_positions(np.arange(2), np.arange(3.0), window=2)
    with pytest.raises(ValueError, match=msg("query_positions: expected", "(q_len,)",
                                             "(2, 1)")):
        window_mask_from_positions(np.zeros((2, 1), dtype=int), np.arange(3), window=2)
