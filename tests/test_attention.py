"""Tests for selfattn.attention.

Reference: torch.nn.functional.scaled_dot_product_attention (context) and
torch.softmax of masked scores (weights), on random shapes with batch and heads.

Tolerances (written down once):

* float64: ``rtol=1e-10, atol=1e-12`` (measured max abs diff up to ~9e-16).
* float32: ``rtol=1e-5, atol=2e-6`` (torch's CPU kernel orders the sums
  differently; measured max abs diff up to ~7e-7).
* properties that should hold exactly up to rounding: ``rtol=1e-12, atol=1e-13``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from checking import msg
from selfattn import (
    attention_scores,
    causal_mask,
    key_padding_to_attention_mask,
    padding_mask,
    scaled_dot_product_attention,
    simple_self_attention,
    to_additive_mask,
)

TOL = {
    torch.float64: dict(rtol=1e-10, atol=1e-12),
    torch.float32: dict(rtol=1e-5, atol=2e-6),
}
EXACT = dict(rtol=1e-12, atol=1e-13)


def reference_weights(q, k, mask, scale):
    """Weights A from torch ops only: softmax of masked scores; fully masked rows -> 0."""
    scores = (q @ k.transpose(-1, -2)) * scale  # (..., q_len, k_len)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)


# ------------------------------------------------------------------ hand values
def test_two_token_attention_by_hand_default_scale():
    # head_dim = 2, so scale = 1/sqrt(2); q . k_0 = sqrt(2) ln 3, q . k_1 = 0
    # scores = [ln 3, 0] -> weights = [3/4, 1/4] -> context = 3/4 v_0 + 1/4 v_1
    q = np.array([[math.sqrt(2.0), 0.0]])
    k = np.array([[math.log(3.0), 0.0], [0.0, 5.0]])
    v = np.array([[4.0, 0.0], [0.0, 8.0]])
    context, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(weights, [[0.75, 0.25]], rtol=1e-15)
    np.testing.assert_allclose(context, [[3.0, 2.0]], rtol=1e-15)
    np.testing.assert_allclose(attention_scores(q, k), [[math.log(3.0), 0.0]], rtol=1e-15)


def test_two_token_self_attention_by_hand_with_mask_and_scale():
    q = k = np.eye(2)
    v = np.array([[1.0, 2.0], [3.0, 4.0]])
    # scale ln 3: scores = ln3 * I -> rows [3/4, 1/4] and [1/4, 3/4]
    context, weights = scaled_dot_product_attention(q, k, v, scale=math.log(3.0))
    np.testing.assert_allclose(weights, [[0.75, 0.25], [0.25, 0.75]], rtol=1e-15)
    np.testing.assert_allclose(context, [[1.5, 2.5], [2.5, 3.5]], rtol=1e-15)
    # causal: token 0 sees only itself
    context, weights = scaled_dot_product_attention(q, k, v, causal_mask(2), scale=math.log(3.0))
    np.testing.assert_allclose(weights, [[1.0, 0.0], [0.25, 0.75]], rtol=1e-15)
    np.testing.assert_allclose(context, [[1.0, 2.0], [2.5, 3.5]], rtol=1e-15)


def test_simple_self_attention_by_hand():
    # x = [[a, 0], [0, 0]] with a^2 = ln 3: S = [[ln 3, 0], [0, 0]]
    a = math.sqrt(math.log(3.0))
    x = np.array([[a, 0.0], [0.0, 0.0]])
    context, weights = simple_self_attention(x)
    np.testing.assert_allclose(weights, [[0.75, 0.25], [0.5, 0.5]], rtol=1e-15)
    np.testing.assert_allclose(context, [[0.75 * a, 0.0], [0.5 * a, 0.0]], rtol=1e-15)


def test_simple_self_attention_identity_by_hand():
    context, weights = simple_self_attention(np.eye(2))
    e = math.e
    want = np.array([[e, 1.0], [1.0, e]]) / (e + 1)
    np.testing.assert_allclose(weights, want, rtol=1e-15)
    np.testing.assert_allclose(context, want, rtol=1e-15)  # C = A I = A


def test_simple_self_attention_is_unscaled_sdpa_batched_and_torch():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 5))  # (batch, seq_len, d_model)
    context, weights = simple_self_attention(x)
    assert context.shape == (3, 4, 5) and weights.shape == (3, 4, 4)
    c2, w2 = scaled_dot_product_attention(x, x, x, scale=1.0)
    np.testing.assert_allclose(context, c2, **EXACT)
    np.testing.assert_allclose(weights, w2, **EXACT)
    for b in range(3):  # batching = a loop over sequences
        cb, wb = simple_self_attention(x[b])
        np.testing.assert_allclose(context[b], cb, **EXACT)
    tx = torch.from_numpy(x)
    ref = F.scaled_dot_product_attention(tx, tx, tx, scale=1.0)
    ct, _ = simple_self_attention(tx)
    assert isinstance(ct, torch.Tensor)
    torch.testing.assert_close(ct, ref, **TOL[torch.float64])


def test_attention_scores_match_torch_and_scale():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 5, 8, generator=gen, dtype=torch.float64)
    dots = q @ k.transpose(-1, -2)  # k.transpose: (2, 3, 8, 5) -> dots (2, 3, 4, 5)
    torch.testing.assert_close(attention_scores(q, k), dots / math.sqrt(8))
    torch.testing.assert_close(attention_scores(q, k, scale=1.0), dots)
    np.testing.assert_allclose(
        attention_scores(q.numpy(), k.numpy(), scale=0.5), dots.numpy() * 0.5, **EXACT
    )


# ------------------------------------------------------------------ reference parity
MASK_KINDS = ["none", "bool", "bool_with_empty_row", "bool_2d", "causal", "padding",
              "additive", "additive_inf"]


def make_mask(kind, gen, b, h, lq, lk, dtype):
    if kind == "none":
        return None
    if kind == "bool":
        m = torch.rand(b, h, lq, lk, generator=gen) < 0.7
        m[..., 0] = True  # every row keeps one key
        return m
    if kind == "bool_with_empty_row":
        m = torch.rand(b, h, lq, lk, generator=gen) < 0.7
        m[0, 0, 0, :] = False  # query 0 of head 0 of batch 0 sees nothing
        return m
    if kind == "bool_2d":
        m = torch.rand(lq, lk, generator=gen) < 0.6
        m[:, -1] = True
        return m
    if kind == "causal":
        return causal_mask(lq, lk, like=torch.zeros(1))
    if kind == "padding":
        lengths = torch.randint(1, lk + 1, (b,), generator=gen)
        return key_padding_to_attention_mask(padding_mask(lengths, lk))  # (b, 1, 1, lk)
    if kind == "additive":
        return torch.randn(b, 1, lq, lk, generator=gen, dtype=dtype)  # a finite bias
    if kind == "additive_inf":
        m = torch.randn(lq, lk, generator=gen, dtype=dtype)
        return m.masked_fill(~causal_mask(lq, lk, like=m), float("-inf"))
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_torch_sdpa(dtype, kind, seed):
    gen = torch.Generator().manual_seed(seed * 100 + MASK_KINDS.index(kind))
    b, h = (int(n) for n in torch.randint(1, 4, (2,), generator=gen))
    lq = int(torch.randint(1, 7, (1,), generator=gen))
    lk = lq + int(torch.randint(0, 4, (1,), generator=gen))  # k_len >= q_len
    d, dv = (int(n) for n in torch.randint(1, 9, (2,), generator=gen))
    q = torch.randn(b, h, lq, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, lk, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, lk, dv, generator=gen, dtype=dtype)
    mask = make_mask(kind, gen, b, h, lq, lk, dtype)
    scale = None if seed == 0 else 0.37
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    context, weights = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    assert context.dtype == dtype and context.shape == (b, h, lq, dv)
    assert weights.shape == (b, h, lq, lk)
    torch.testing.assert_close(context, ref, **TOL[dtype])
    ref_w = reference_weights(q, k, mask, 1 / math.sqrt(d) if scale is None else scale)
    torch.testing.assert_close(weights, ref_w, **TOL[dtype])
    # the NumPy path gives the same numbers
    np_mask = None if mask is None else mask.numpy()
    c_np, w_np = scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), np_mask, scale=scale)
    assert isinstance(c_np, np.ndarray) and c_np.dtype == q.numpy().dtype
    np.testing.assert_allclose(c_np, ref.numpy(), **TOL[dtype])
    np.testing.assert_allclose(w_np, ref_w.numpy(), **TOL[dtype])


def test_numpy_bool_mask_with_torch_inputs_is_converted():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    m = causal_mask(4)  # NumPy
    c, w = scaled_dot_product_attention(q, k, v, m)
    assert isinstance(c, torch.Tensor)
    torch.testing.assert_close(c, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_leading_dims_broadcast_like_expand():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)  # (batch, heads, q_len, hd)
    k = torch.randn(2, 1, 6, 5, generator=gen, dtype=torch.float64)  # shared across heads
    v = torch.randn(1, 1, 6, 2, generator=gen, dtype=torch.float64)  # shared across all
    c, w = scaled_dot_product_attention(q, k, v)
    k_full = k.expand(2, 3, 6, 5)  # (batch, heads, k_len, hd), a view
    v_full = v.expand(2, 3, 6, 2)  # (batch, heads, k_len, hd_v), a view
    c2, w2 = scaled_dot_product_attention(q, k_full, v_full)
    assert c.shape == (2, 3, 4, 2)
    torch.testing.assert_close(c, c2, **EXACT)
    torch.testing.assert_close(w, w2, **EXACT)


def test_unbatched_2d_inputs():
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    c, w = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(z) for z in (q, k, v)))
    np.testing.assert_allclose(c, ref.numpy(), **TOL[torch.float64])
    assert w.shape == (3, 5)


# ------------------------------------------------------------------ properties
@st.composite
def qkv_and_mask(draw):
    lq, lk = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d, dv = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, lq, d)) * draw(st.sampled_from([0.1, 1.0, 5.0]))
    k = rng.normal(size=(2, lk, d))
    v = rng.normal(size=(2, lk, dv))
    mask = rng.random((2, lq, lk)) < draw(st.floats(0.2, 1.0))
    # every (batch, query) row keeps one random key: index arrays (2, 1), (1, lq), (2, lq)
    mask[np.arange(2)[:, None], np.arange(lq)[None, :], rng.integers(0, lk, size=(2, lq))] = True
    return q, k, v, mask, rng


@settings(max_examples=40, deadline=None, derandomize=True)
@given(qkv_and_mask())
def test_property_weight_rows_sum_to_one_and_masked_are_zero(case):
    q, k, v, mask, _ = case
    for m in (None, mask):
        _, w = scaled_dot_product_attention(q, k, v, m)
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)
        assert np.all(w >= 0)
    assert np.all(w[~mask] == 0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(qkv_and_mask())
def test_property_permuting_keys_and_values_together_changes_nothing(case):
    q, k, v, mask, rng = case
    perm = rng.permutation(k.shape[-2])
    c, w = scaled_dot_product_attention(q, k, v, mask)
    c_p, w_p = scaled_dot_product_attention(q, k[:, perm], v[:, perm], mask[..., perm])
    np.testing.assert_allclose(c_p, c, **EXACT)
    np.testing.assert_allclose(w_p, w[..., perm], **EXACT)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(qkv_and_mask())
def test_property_permuting_queries_permutes_outputs(case):
    q, k, v, mask, rng = case
    perm = rng.permutation(q.shape[-2])
    c, w = scaled_dot_product_attention(q, k, v, mask)
    c_p, w_p = scaled_dot_product_attention(q[:, perm], k, v, mask[:, perm])
    np.testing.assert_allclose(c_p, c[:, perm], **EXACT)
    np.testing.assert_allclose(w_p, w[:, perm], **EXACT)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.integers(2, 7),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
    st.data(),
)
def test_property_causal_future_tokens_do_not_change_the_past(seq_len, d_model, seed, data):
    t = data.draw(st.integers(0, seq_len - 2), label="last unchanged position")
    rng = np.random.default_rng(seed)
    w_q, w_k, w_v = (rng.normal(size=(d_model, d_model)) for _ in range(3))
    x = rng.normal(size=(seq_len, d_model))
    x2 = x.copy()
    x2[t + 1 :] = rng.normal(size=(seq_len - t - 1, d_model)) * 10  # rewrite the future
    m = causal_mask(seq_len)
    c, w = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, m)
    c2, w2 = scaled_dot_product_attention(x2 @ w_q, x2 @ w_k, x2 @ w_v, m)
    np.testing.assert_allclose(c2[: t + 1], c[: t + 1], **EXACT)
    np.testing.assert_allclose(w2[: t + 1], w[: t + 1], **EXACT)


def test_without_causal_mask_future_tokens_do_change_the_past():
    # the control for the property above: it is not vacuous
    rng = np.random.default_rng(11)
    x = rng.normal(size=(5, 3))
    x2 = x.copy()
    x2[3:] = rng.normal(size=(2, 3))
    c, _ = scaled_dot_product_attention(x, x, x)
    c2, _ = scaled_dot_product_attention(x2, x2, x2)
    assert np.abs(c[:3] - c2[:3]).max() > 1e-2
    cm, _ = scaled_dot_product_attention(x, x, x, causal_mask(5))
    cm2, _ = scaled_dot_product_attention(x2, x2, x2, causal_mask(5))
    np.testing.assert_allclose(cm[:3], cm2[:3], **EXACT)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(qkv_and_mask())
def test_property_numpy_and_torch_paths_agree(case):
    q, k, v, mask, _ = case
    c, w = scaled_dot_product_attention(q, k, v, mask)
    ct, wt = scaled_dot_product_attention(*(torch.from_numpy(z) for z in (q, k, v, mask)))
    np.testing.assert_allclose(ct.numpy(), c, **EXACT)
    np.testing.assert_allclose(wt.numpy(), w, **EXACT)


# ------------------------------------------------------------------ numerics
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_of_plus_minus_1e4_stay_finite(dtype):
    q = np.array([[1.0], [-1.0]], dtype=dtype)
    k = np.array([[1e4], [-1e4], [0.0]], dtype=dtype)
    v = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], dtype=dtype)
    # scores [[1e4, -1e4, 0], [-1e4, 1e4, 0]]
    c, w = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert np.isfinite(c).all() and np.isfinite(w).all()
    np.testing.assert_allclose(w, [[1, 0, 0], [0, 1, 0]], atol=1e-30)
    np.testing.assert_allclose(c, [[1, 0], [0, 1]], atol=1e-30)
    tq, tk, tv = (torch.from_numpy(z) for z in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, scale=1.0)
    np.testing.assert_allclose(c, ref.numpy(), atol=1e-30)
    ct, wt = scaled_dot_product_attention(tq, tk, tv, scale=1.0)  # the torch path too
    torch.testing.assert_close(ct, ref, rtol=0, atol=1e-30)


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_fully_masked_row_gives_zeros_like_torch(mask_kind):
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 3, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    m = torch.ones(3, 3, dtype=torch.bool)
    m[1] = False  # query 1 may attend to nothing
    mask = m if mask_kind == "bool" else to_additive_mask(m, torch.float64)
    c, w = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # what torch 2.13 does on CPU: zeros for the empty row (no NaN)
    torch.testing.assert_close(ref[0, 1], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(c, ref, **TOL[torch.float64])
    torch.testing.assert_close(w[0, 1], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(w[0, [0, 2]].sum(-1), torch.ones(2, dtype=torch.float64))
    c_np, w_np = scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    np.testing.assert_array_equal(c_np[0, 1], 0.0)
    np.testing.assert_array_equal(w_np[0, 1], 0.0)


def test_fully_masked_row_has_finite_zero_gradient():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    m = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    c, _ = scaled_dot_product_attention(q, k, v, m)
    c.pow(2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    torch.testing.assert_close(q.grad[1], torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool_empty_row"])
def test_gradcheck_float64(mask_kind):
    gen = torch.Generator().manual_seed(8)
    shape_q, shape_kv = (1, 2, 3, 2), (1, 2, 4, 2)
    q = torch.randn(*shape_q, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*shape_kv, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*shape_kv, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = None
    if mask_kind == "causal":
        mask = causal_mask(3, 4, like=q)
    elif mask_kind == "bool_empty_row":
        mask = torch.rand(3, 4, generator=gen) < 0.6
        mask[0] = False
        mask[1:, 0] = True

    def context(q_, k_, v_):
        return scaled_dot_product_attention(q_, k_, v_, mask)[0]

    def weights(q_, k_):
        return scaled_dot_product_attention(q_, k_, v.detach(), mask)[1]

    assert torch.autograd.gradcheck(context, (q, k, v))
    assert torch.autograd.gradcheck(weights, (q, k))


def test_gradcheck_through_additive_mask():
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    bias = torch.randn(3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q_, k_, v_, b_: scaled_dot_product_attention(q_, k_, v_, b_)[0], (q, k, v, bias)
    )


def test_gradients_match_torch_sdpa():
    gen = torch.Generator().manual_seed(10)
    ours = [torch.randn(2, 2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
            for _ in range(3)]
    theirs = [t.detach().clone().requires_grad_(True) for t in ours]
    g = torch.randn(2, 2, 5, 3, generator=gen, dtype=torch.float64)
    mask = causal_mask(5, like=g)
    (scaled_dot_product_attention(*ours, mask)[0] * g).sum().backward()
    (F.scaled_dot_product_attention(*theirs, attn_mask=mask) * g).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, **TOL[torch.float64])


# ------------------------------------------------------------------ bad input
Q = np.zeros((2, 3, 4))  # (batch, q_len, head_dim)
K = np.zeros((2, 5, 4))  # (batch, k_len, head_dim)
V = np.zeros((2, 5, 6))  # (batch, k_len, head_dim_v)


def test_bad_head_dim_mismatch():
    with pytest.raises(ValueError, match=msg("key:", "last dimension 4", "head_dim of query",
                                             "(2, 3, 4)", "got shape (2, 5, 3)")):
        scaled_dot_product_attention(Q, np.zeros((2, 5, 3)), V)


def test_bad_key_value_length_mismatch():
    with pytest.raises(ValueError, match=msg("value:", "dimension -2 5", "k_len of key",
                                             "(2, 5, 4)", "got shape (2, 4, 6)")):
        scaled_dot_product_attention(Q, K, np.zeros((2, 4, 6)))


def test_bad_mask_shape():
    with pytest.raises(ValueError, match=msg("mask:", "broadcastable", "(..., q_len, k_len)",
                                             "(2, 3, 5)", "got shape (3, 4)")):
        scaled_dot_product_attention(Q, K, V, np.ones((3, 4), dtype=bool))


def test_bad_mask_would_enlarge_the_scores():
    with pytest.raises(ValueError, match=msg("mask:", "(2, 3, 5)", "got shape (7, 2, 3, 5)")):
        scaled_dot_product_attention(Q, K, V, np.ones((7, 2, 3, 5), dtype=bool))


def test_bad_integer_mask():
    with pytest.raises(TypeError, match=msg("mask:", "bool mask", "dtype int64", "(3, 5)")):
        scaled_dot_product_attention(Q, K, V, np.ones((3, 5), dtype=np.int64))


def test_bad_integer_mask_torch():
    tq, tk, tv = (torch.from_numpy(z) for z in (Q, K, V))
    with pytest.raises(TypeError, match=msg("mask:", "torch.int32", "(3, 5)")):
        scaled_dot_product_attention(tq, tk, tv, torch.ones(3, 5, dtype=torch.int32))


def test_bad_nan_in_query():
    q = Q.copy()
    q[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=msg("query:", "NaN", "(2, 3, 4)")):
        scaled_dot_product_attention(q, K, V)


def test_bad_inf_in_value_torch():
    v = torch.zeros(2, 5, 6, dtype=torch.float64)
    v[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match=msg("value:", "infinity", "(2, 5, 6)")):
        scaled_dot_product_attention(torch.from_numpy(Q), torch.from_numpy(K), v)


def test_bad_empty_query_sequence():
    with pytest.raises(ValueError, match=msg("query:", "non-empty", "(2, 0, 4)")):
        scaled_dot_product_attention(np.zeros((2, 0, 4)), K, V)


def test_bad_empty_key_sequence():
    with pytest.raises(ValueError, match=msg("key:", "non-empty", "(2, 0, 4)")):
        scaled_dot_product_attention(Q, np.zeros((2, 0, 4)), np.zeros((2, 0, 6)))


def test_bad_integer_query():
    with pytest.raises(TypeError, match=msg("query:", "floating-point", "int64", "(2, 3, 4)")):
        scaled_dot_product_attention(Q.astype(np.int64), K, V)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scale_value(scale):
    with pytest.raises(ValueError, match=msg("scale:", "positive finite float", str(scale))):
        scaled_dot_product_attention(Q, K, V, scale=scale)


@pytest.mark.parametrize("scale", ["0.5", True, np.array(0.5)])
def test_bad_scale_type(scale):
    with pytest.raises(TypeError, match=msg("scale:", "positive float or None")):
        attention_scores(Q, K, scale=scale)


def test_bad_one_dimensional_query():
    with pytest.raises(ValueError, match=msg("query:", "(..., q_len, head_dim)", "got shape (4,)")):
        scaled_dot_product_attention(np.zeros(4), K, V)


def test_bad_mixed_backends():
    with pytest.raises(TypeError, match=msg("key:", "torch.Tensor like query", "ndarray",
                                            "(2, 5, 4)")):
        scaled_dot_product_attention(torch.from_numpy(Q), K, torch.from_numpy(V))


def test_bad_torch_mask_with_numpy_inputs():
    with pytest.raises(TypeError, match=msg("mask:", "numpy.ndarray like query", "(3, 5)")):
        scaled_dot_product_attention(Q, K, V, torch.ones(3, 5, dtype=torch.bool))


def test_bad_numpy_additive_mask_with_torch_inputs():
    tq, tk, tv = (torch.from_numpy(z) for z in (Q, K, V))
    with pytest.raises(TypeError, match=msg("mask:", "must be bool", "float64", "(3, 5)")):
        scaled_dot_product_attention(tq, tk, tv, np.zeros((3, 5)))


def test_bad_dtype_mismatch():
    with pytest.raises(TypeError, match=msg("value:", "dtype float64", "got float32",
                                            "(2, 5, 6)")):
        scaled_dot_product_attention(Q, K, V.astype(np.float32))


def test_bad_leading_dims_do_not_broadcast():
    with pytest.raises(ValueError, match=msg("key:", "(3,)", "do not broadcast", "query (2, 3, 4)",
                                             "key (3, 5, 4)")):
        scaled_dot_product_attention(Q, np.zeros((3, 5, 4)), np.zeros((3, 5, 6)))


def test_bad_value_leading_dims_do_not_broadcast():
    with pytest.raises(ValueError, match=msg("value:", "(4,)", "value (4, 5, 6)")):
        scaled_dot_product_attention(Q, K, np.zeros((4, 5, 6)))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bad_additive_mask_values(bad):
    m = np.zeros((3, 5))
    m[0, 0] = bad
    with pytest.raises(ValueError, match=msg("mask:", "finite values and -inf only", "(3, 5)")):
        scaled_dot_product_attention(Q, K, V, m)


def test_bad_scores_overflow():
    q = np.full((1, 2, 4), 1e200)
    with pytest.raises(ValueError, match=msg("query, key:", "overflowed", "(1, 2, 2)")):
        scaled_dot_product_attention(q, q, q)


def test_bad_simple_self_attention_overflow():
    with pytest.raises(ValueError, match=msg("x:", "overflowed", "(2, 2)")):
        simple_self_attention(np.full((2, 3), 1e200))


def test_bad_simple_self_attention_inputs():
    with pytest.raises(ValueError, match=msg("x:", "(..., seq_len, d_model)", "got shape (3,)")):
        simple_self_attention(np.zeros(3))
    with pytest.raises(TypeError, match=msg("x:", "numpy.ndarray or torch.Tensor", "list")):
        simple_self_attention([[1.0, 0.0]])


def test_bad_attention_scores_head_dim():
    with pytest.raises(ValueError, match=msg("key:", "last dimension 4", "got shape (5, 2)")):
        attention_scores(np.zeros((3, 4)), np.zeros((5, 2)))


# ======================================================== need_weights=False: the fused path
# The context is computed twice, on separate code paths (S and A formed, or PyTorch's
# fused kernel): the two must agree, for every kind of mask, with gradients too.


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_need_weights_false_gives_the_same_context(dtype, kind):
    gen = torch.Generator().manual_seed(50 + MASK_KINDS.index(kind))
    b, h, lq, lk, d, dv = 2, 3, 5, 7, 4, 6
    q = torch.randn(b, h, lq, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, lk, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, lk, dv, generator=gen, dtype=dtype)
    mask = make_mask(kind, gen, b, h, lq, lk, dtype)
    for scale in (None, 0.37):
        context, weights = scaled_dot_product_attention(q, k, v, mask, scale=scale)
        fused, none = scaled_dot_product_attention(q, k, v, mask, scale=scale, need_weights=False)
        assert none is None and fused.dtype == dtype and fused.shape == context.shape
        torch.testing.assert_close(fused, context, **TOL[dtype])
        torch.testing.assert_close(context, weights @ v, **TOL[dtype])  # A explains C
    # the NumPy path: same context, no weights
    np_mask = None if mask is None else mask.numpy()
    c_np, w_np = scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), np_mask,
                                              scale=0.37, need_weights=False)
    assert w_np is None
    np.testing.assert_allclose(c_np, context.numpy(), **TOL[dtype])


def test_need_weights_false_broadcasts_leading_dims_and_takes_2d_inputs():
    gen = torch.Generator().manual_seed(60)
    q = torch.randn(2, 1, 3, 4, generator=gen, dtype=torch.float64)  # heads broadcast
    k = torch.randn(1, 5, 6, 4, generator=gen, dtype=torch.float64)  # batch broadcast
    v = torch.randn(6, 2, generator=gen, dtype=torch.float64)  # no leading dims at all
    context, _ = scaled_dot_product_attention(q, k, v)
    fused, _ = scaled_dot_product_attention(q, k, v, need_weights=False)
    assert fused.shape == (2, 5, 3, 2)
    torch.testing.assert_close(fused, context, **TOL[torch.float64])
    c2, _ = scaled_dot_product_attention(q[0, 0], k[0, 0], v)
    f2, _ = scaled_dot_product_attention(q[0, 0], k[0, 0], v, need_weights=False)
    torch.testing.assert_close(f2, c2, **TOL[torch.float64])


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_need_weights_false_gradients_match_and_stay_finite(mask_kind):
    gen = torch.Generator().manual_seed(61)
    q, k, v = (torch.randn(2, 4, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query 1 attends to nothing: zeros, and no NaN in any gradient
    if mask_kind == "additive":
        mask = torch.zeros(4, 4, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    grads = []
    for need in (True, False):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        context, _ = scaled_dot_product_attention(*leaves, mask, need_weights=need)
        assert torch.all(context[:, 1] == 0)
        (context * torch.arange(3.0, dtype=torch.float64)).sum().backward()
        grads.append([t.grad for t in leaves])
    for g_weights, g_fused in zip(*grads, strict=True):
        assert torch.isfinite(g_fused).all()
        torch.testing.assert_close(g_fused, g_weights, **TOL[torch.float64])


@pytest.mark.parametrize("need_weights", [True, False])
def test_bad_scores_overflow_torch(need_weights):
    q = torch.full((1, 2, 4), 1e20)  # q . k = 4e40 > float32 max: the scores are inf
    with pytest.raises(ValueError, match=msg("query, key:", "overflowed", "(1, 2, 2)")):
        scaled_dot_product_attention(q, q, q, need_weights=need_weights)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_one_non_finite_entry_anywhere_is_found(bad, backend):
    """The finiteness check is one min/max reduction: it must still see one bad entry
    among many, in every position and dtype."""
    for dtype in (np.float16, np.float32, np.float64):
        for where in (0, 17, 63):
            q = np.zeros((2, 4, 8), dtype=dtype)
            q.flat[where] = bad
            arg = torch.from_numpy(q) if backend == "torch" else q
            k = torch.zeros(2, 4, 8, dtype=arg.dtype) if backend == "torch" else np.zeros_like(q)
            with pytest.raises(ValueError, match=msg("query: contains NaN or infinity")):
                scaled_dot_product_attention(arg, k, k, need_weights=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_bad_additive_mask_found_by_one_reduction(bad):
    q = torch.zeros(1, 3, 2)
    mask = torch.zeros(3, 3)
    mask[2, 1] = bad
    for need in (True, False):
        with pytest.raises(ValueError, match=msg("mask: an additive mask may hold finite")):
            scaled_dot_product_attention(q, q, q, mask, need_weights=need)


# ================================================================ soft-capping (softcap=c)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_softcap_is_c_tanh_of_the_scores_before_the_mask(backend):
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(2, 5, 4)) * 1.5 for _ in range(3))
    mask = np.tril(np.ones((5, 5), dtype=bool))  # causal: True = may attend
    if backend == "torch":
        q, k, v = (torch.from_numpy(a) for a in (q, k, v))
    c = 1.5
    raw = attention_scores(q, k)
    capped = attention_scores(q, k, softcap=c)
    raw_np, capped_np = np.asarray(raw), np.asarray(capped)
    assert np.allclose(capped_np, c * np.tanh(raw_np / c), atol=1e-12)
    assert np.abs(capped_np).max() <= c < np.abs(raw_np).max()  # the cap binds here
    context, weights = scaled_dot_product_attention(q, k, v, mask, softcap=c)
    s = np.where(mask, c * np.tanh(raw_np / c), -np.inf)  # cap, then mask
    expected = np.exp(s - s.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert np.allclose(np.asarray(weights), expected, atol=1e-12)
    assert np.allclose(np.asarray(context), expected @ np.asarray(v), atol=1e-12)
    assert np.all(np.asarray(weights)[..., ~mask] == 0)  # masked keys stay at weight 0
    # without the cap the weights differ: the test can fail
    _, plain = scaled_dot_product_attention(q, k, v, mask)
    assert np.abs(np.asarray(plain) - expected).max() > 1e-2


def test_softcap_need_weights_false_same_context_and_large_cap_changes_little():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8, dtype=torch.float64) for _ in range(3))
    c1, w1 = scaled_dot_product_attention(q, k, v, softcap=2.0)
    c2, w2 = scaled_dot_product_attention(q, k, v, softcap=2.0, need_weights=False)
    assert w2 is None and torch.allclose(c1, c2, atol=1e-12)
    # |c tanh(s/c) - s| <= |s|^3 / (3 c^2): a cap far above the scores is nearly no cap
    s = attention_scores(q, k)
    big = 1e3
    assert (attention_scores(q, k, softcap=big) - s).abs().max() <= (
        s.abs().max() ** 3 / (3 * big**2))
    plain, _ = scaled_dot_product_attention(q, k, v)
    capped, _ = scaled_dot_product_attention(q, k, v, softcap=big)
    assert torch.allclose(plain, capped, atol=1e-4)


def test_softcap_gradient_is_finite_and_checked():
    q = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, mask, softcap=0.7)[0], (q, k, v))


@pytest.mark.parametrize(("cap", "exc"), [(0.0, ValueError), (-2.0, ValueError),
                                          (float("inf"), ValueError), (float("nan"), ValueError),
                                          ("5", TypeError), (True, TypeError)])
def test_bad_softcap(cap, exc):
    q = np.zeros((2, 3))
    with pytest.raises(exc, match=msg("softcap:")):
        scaled_dot_product_attention(q, q, q, softcap=cap)
    with pytest.raises(exc, match=msg("softcap:")):
        attention_scores(q, q, softcap=cap)
