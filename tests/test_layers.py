"""Tests for selfattn.layers.

Reference tests compare with torch.nn.MultiheadAttention (weights copied across)
and with hand computation; property tests use hypothesis; bad-input tests check
that each message names the argument and the shapes.

Tolerances: float64 results agree to atol=1e-12 (a handful of roundings of
O(1) numbers); float32 results to atol=1e-5 (about 100 float32 ulps of O(1)
numbers, covering the different summation orders of the two implementations).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checking import checked_names, raises
from selfattn.kv_cache import KVCache
from selfattn.layers import (
    CausalSelfAttention,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    SelfAttention,
    merge_heads,
    split_heads,
)
from selfattn.masks import (
    causal_mask,
    combine_masks,
    key_padding_to_attention_mask,
    padding_mask,
    sliding_window_mask,
)
from selfattn.positional import SinusoidalPositionalEncoding

TOL = {torch.float64: dict(rtol=0, atol=1e-12), torch.float32: dict(rtol=0, atol=1e-5)}
DTYPES = [torch.float32, torch.float64]


def _pair(d_model, num_heads, *, bias=True, dtype=torch.float64, seed=0):
    """A torch MultiheadAttention and our copy of it, with non-zero biases."""
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True)
    if bias:  # torch initialises biases to 0; make them matter
        with torch.no_grad():
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    ref = ref.to(dtype)
    ours = MultiHeadAttention.from_torch(ref)
    return ref.eval(), ours.eval()


# ================================================================ split / merge heads


def test_split_heads_shapes_and_columns():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
    s = split_heads(x, 4)
    assert s.shape == (2, 4, 3, 2)
    for h in range(4):
        torch.testing.assert_close(s[:, h], x[..., 2 * h : 2 * h + 2], rtol=0, atol=0)
    # token 1 of batch 0 is [8..15]; head 2 gets columns 4, 5 -> values 12, 13
    assert s[0, 2, 1].tolist() == [12.0, 13.0]


def test_merge_heads_inverts_split():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 12)
    for h in (1, 2, 3, 4, 6, 12):
        torch.testing.assert_close(merge_heads(split_heads(x, h)), x, rtol=0, atol=0)
    y = torch.randn(2, 3, 4, 5)  # (batch, heads, seq, head_dim)
    torch.testing.assert_close(split_heads(merge_heads(y), 3), y, rtol=0, atol=0)
    # merged token t = concat over heads
    torch.testing.assert_close(merge_heads(y)[1, 2], torch.cat([y[1, i, 2] for i in range(3)]))


# ================================================================ SelfAttention


def test_self_attention_equals_hand_computation():
    torch.manual_seed(0)
    sa = SelfAttention(5, 3).double()
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    w_q, w_k, w_v = sa.w_q.weight.T, sa.w_k.weight.T, sa.w_v.weight.T  # (d_in, d_out)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(1, 2) / math.sqrt(3)
    weights = torch.softmax(scores, dim=-1)
    context, got_w = sa(x)
    torch.testing.assert_close(got_w, weights, **TOL[torch.float64])
    torch.testing.assert_close(context, weights @ v, **TOL[torch.float64])


def test_self_attention_exact_small_numbers():
    # X = I (2 tokens, d_in = 2), W_Q = W_K = W_V = I  ->  S = I / sqrt(2)
    sa = SelfAttention(2, 2).double()
    with torch.no_grad():
        for lin in (sa.w_q, sa.w_k, sa.w_v):
            lin.weight.copy_(torch.eye(2))
    context, weights = sa(torch.eye(2, dtype=torch.float64))  # unbatched
    e = math.exp(1 / math.sqrt(2))
    expected = torch.tensor([[e, 1.0], [1.0, e]], dtype=torch.float64) / (e + 1)
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(context, expected, rtol=0, atol=1e-15)  # A V with V = I
    assert weights.shape == (2, 2) and context.shape == (2, 2)


def test_self_attention_bias_and_mask():
    torch.manual_seed(1)
    sa = SelfAttention(4, 4, bias=True).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    pad = padding_mask([3, 2], like=x)
    mask = key_padding_to_attention_mask(pad, with_heads=False)  # (batch, 1, seq_len)
    _, w = sa(x, mask=mask)
    assert torch.all(w[1, :, 2] == 0)  # padding key of sequence 1 gets no weight
    q = x @ sa.w_q.weight.T + sa.w_q.bias
    k = x @ sa.w_k.weight.T + sa.w_k.bias
    s = (q @ k.transpose(1, 2) / 2.0).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(w, torch.softmax(s, -1), **TOL[torch.float64])


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_attention_fused_agrees(dtype):
    torch.manual_seed(2)
    sa = SelfAttention(6, 4).to(dtype)
    x = torch.randn(3, 5, 6, dtype=dtype)
    mask = causal_mask(5)  # NumPy bool mask is accepted
    ctx, _ = sa(x, mask)
    sa.use_fused = True
    ctx_f, w_f = sa(x, mask)
    assert w_f is None
    torch.testing.assert_close(ctx_f, ctx, **TOL[dtype])


# ================================================================ CausalSelfAttention


def test_causal_self_attention_weights_are_lower_triangular_and_padding_masked():
    torch.manual_seed(3)
    csa = CausalSelfAttention(4, 4).double().eval()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    pad = padding_mask([5, 3])
    _, w = csa(x, padding_mask=pad)
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert torch.all(w[:, upper] == 0)
    assert torch.all(w[1, :, 3:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    assert w[0, 0, 0] == 1.0  # the first token can only look at itself
    # equals SelfAttention (same weights) with an explicit combined mask
    sa = SelfAttention(4, 4).double()
    sa.load_state_dict(csa.state_dict())
    mask = combine_masks(causal_mask(5), key_padding_to_attention_mask(pad, with_heads=False))
    ctx_ref, w_ref = sa(x, mask)
    ctx, _ = csa(x, padding_mask=pad)
    torch.testing.assert_close(ctx, ctx_ref, **TOL[torch.float64])
    torch.testing.assert_close(w, w_ref, **TOL[torch.float64])


def test_causal_self_attention_unbatched_equals_batch_of_one():
    torch.manual_seed(7)
    csa = CausalSelfAttention(4, 2).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    pad = torch.tensor([True, True, True, False, False])
    ctx, w = csa(x, padding_mask=pad)
    ctx_b, w_b = csa(x[None], padding_mask=pad[None])
    assert ctx.shape == (5, 2) and w.shape == (5, 5)
    torch.testing.assert_close(ctx, ctx_b[0], rtol=0, atol=0)
    torch.testing.assert_close(w, w_b[0], rtol=0, atol=0)
    assert torch.all(w[:, 3:] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_self_attention_fused_agrees(dtype):
    torch.manual_seed(4)
    csa = CausalSelfAttention(6, 4, dropout=0.3).to(dtype).eval()
    x = torch.randn(2, 7, 6, dtype=dtype)
    pad = padding_mask([7, 4])
    ctx, _ = csa(x, pad)
    csa.use_fused = True
    torch.testing.assert_close(csa(x, pad)[0], ctx, **TOL[dtype])


def test_dropout_keeps_expectation_and_scales_survivors():
    torch.manual_seed(5)
    p, n = 0.4, 2000
    csa = CausalSelfAttention(4, 4, dropout=p).double()
    x = torch.randn(1, 6, 4, dtype=torch.float64)
    csa.eval()
    ctx_eval, w = csa(x)
    csa.train()
    with torch.no_grad():  # a batch of n copies of x draws n independent dropout masks
        ctx_samples, samples = csa(x.expand(n, 6, 4))  # (n, 6, 4), (n, 6, 6)
    # survivors are exactly w / (1 - p); dropped entries are 0
    kept = samples != 0
    ratio = samples[kept] / w.expand_as(samples)[kept]  # w: (1, 6, 6)
    torch.testing.assert_close(ratio, torch.full_like(ratio, 1 / (1 - p)), rtol=1e-12, atol=0)
    assert abs(1 - kept[:, w[0] > 0].double().mean().item() - p) < 0.02  # drop rate ~ p
    # E[dropped] = w, with std w*sqrt(p/(1-p)): mean of n is within 5 standard errors
    se = w * math.sqrt(p / (1 - p) / n)
    assert torch.all((samples.mean(0) - w).abs() <= 5 * se + 1e-15)
    # the context is linear in the weights, so its expectation is the eval context
    ctx_mean, ctx_se = ctx_samples.mean(0), ctx_samples.std(0) / math.sqrt(n)
    assert torch.all((ctx_mean - ctx_eval[0]).abs() <= 5 * ctx_se + 1e-12)


def test_eval_mode_is_deterministic_and_equals_no_dropout():
    torch.manual_seed(6)
    x = torch.randn(2, 5, 4)
    csa = CausalSelfAttention(4, 3, dropout=0.5)
    plain = CausalSelfAttention(4, 3, dropout=0.0)
    plain.load_state_dict(csa.state_dict())
    csa.eval()
    a, wa = csa(x)
    b, wb = csa(x)
    assert torch.equal(a, b) and torch.equal(wa, wb)
    torch.testing.assert_close(a, plain(x)[0], rtol=0, atol=0)
    csa.train()
    assert not torch.equal(csa(x)[1], wa)  # dropout is active in training


# ================================================================ MultiHeadAttention vs torch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_torch_no_mask(dtype, bias):
    ref, ours = _pair(16, 4, bias=bias, dtype=dtype)
    torch.manual_seed(10)
    q = torch.randn(2, 5, 16, dtype=dtype)
    kv = torch.randn(2, 7, 16, dtype=dtype)
    v = torch.randn(2, 7, 16, dtype=dtype)
    out_ref, w_ref = ref(q, kv, v)
    out, w = ours(q, kv, v)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(w, w_ref, **TOL[dtype])
    _, wh_ref = ref(q, kv, v, average_attn_weights=False)
    _, wh = ours(q, kv, v, average_weights=False)
    assert wh.shape == (2, 4, 5, 7)
    torch.testing.assert_close(wh, wh_ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_torch_with_padding_and_causal_masks(dtype, bias):
    ref, ours = _pair(24, 3, bias=bias, dtype=dtype, seed=1)
    torch.manual_seed(11)
    x = torch.randn(3, 6, 24, dtype=dtype)
    pad = padding_mask([6, 4, 1], like=x)  # True = real token (book)
    causal = causal_mask(6, like=x)  # True = may attend (book)
    # torch.nn.MultiheadAttention: True = NOT allowed / IS padding -> flip both
    kw = dict(attn_mask=~causal, key_padding_mask=~pad)
    out_ref, w_ref = ref(x, x, x, **kw)
    _, wh_ref = ref(x, x, x, average_attn_weights=False, **kw)
    mask = combine_masks(causal, key_padding_to_attention_mask(pad))  # (3, 1, 6, 6)
    out, w = ours(x, mask=mask)
    _, wh = ours(x, mask=mask, average_weights=False)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(w, w_ref, **TOL[dtype])
    torch.testing.assert_close(wh, wh_ref, **TOL[dtype])
    # a causal layer needs only the padding part of the mask
    ours.causal = True
    out_c, wh_c = ours(x, mask=key_padding_to_attention_mask(pad), average_weights=False)
    torch.testing.assert_close(out_c, out_ref, **TOL[dtype])
    torch.testing.assert_close(wh_c, wh_ref, **TOL[dtype])


def test_mha_matches_torch_with_additive_mask_and_unbatched():
    ref, ours = _pair(8, 2, dtype=torch.float64, seed=2)
    torch.manual_seed(12)
    x = torch.randn(4, 8, dtype=torch.float64)  # unbatched
    bias = torch.randn(4, 4, dtype=torch.float64)  # additive float mask, same in both
    out_ref, w_ref = ref(x, x, x, attn_mask=bias)
    out, w = ours(x, mask=bias)
    assert out.shape == (4, 8) and w.shape == (4, 4)
    torch.testing.assert_close(out, out_ref, **TOL[torch.float64])
    torch.testing.assert_close(w, w_ref, **TOL[torch.float64])


def test_copy_from_torch_places_in_proj_rows():
    ref, ours = _pair(6, 2, dtype=torch.float32, seed=3)
    w = ref.in_proj_weight.detach()
    assert torch.equal(ours.w_k.weight, w[6:12])
    assert torch.equal(ours.w_v.bias, ref.in_proj_bias[12:18])
    # the book's W_Q = w_q.weight.T maps a row x to x @ W_Q
    x = torch.randn(1, 6)
    torch.testing.assert_close(ours.w_q(x), x @ w[:6].T + ref.in_proj_bias[:6])
    assert ours.config == MultiHeadAttentionConfig(6, 2, 0.0, True, False, False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_fused_agrees_with_readable(dtype):
    torch.manual_seed(13)
    mha = MultiHeadAttention(16, 4, dropout=0.2).to(dtype).eval()
    x = torch.randn(2, 6, 16, dtype=dtype)
    mem = torch.randn(2, 9, 16, dtype=dtype)
    pad = key_padding_to_attention_mask(padding_mask([9, 5], like=x))
    cases = [dict(), dict(key=mem, mask=pad), dict(mask=causal_mask(6, like=x))]
    for kw in cases:
        mha.use_fused = False
        out, _ = mha(x, **kw)
        mha.use_fused = True
        out_f, w_f = mha(x, **kw)
        assert w_f is None
        torch.testing.assert_close(out_f, out, **TOL[dtype])
    mha.use_fused, mha.causal = False, True
    out, _ = mha(x)
    mha.use_fused = True
    torch.testing.assert_close(mha(x)[0], out, **TOL[dtype])


def test_fully_masked_query_row_gives_zeros_not_nan():
    torch.manual_seed(14)
    mha = MultiHeadAttention(8, 2, bias=False).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nothing
    additive = torch.zeros(3, 3, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    for fused in (False, True):
        mha.use_fused = fused
        for m in (mask, additive):
            out, _ = mha(x, mask=m)
            assert torch.all(out[0, 1] == 0)  # no bias: W_O @ 0 = 0
            assert torch.isfinite(out).all()
            assert torch.all(out[0, [0, 2]].abs().sum(-1) > 0)  # other rows are not zeroed


def test_need_weights_false_returns_none_and_same_output():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    out, w = mha(x, need_weights=False)
    assert w is None
    # need_weights=False takes PyTorch's fused kernel (no weights formed): the same
    # output up to the order of the sums
    torch.testing.assert_close(out, mha(x)[0], **TOL[torch.float32])


def test_gradcheck_multi_head_attention_float64():
    torch.manual_seed(15)
    mha = MultiHeadAttention(6, 2, causal=True).double()
    x = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    pad = key_padding_to_attention_mask(padding_mask([5, 3], like=x))
    assert torch.autograd.gradcheck(lambda a: mha(a)[0], (x,))
    assert torch.autograd.gradcheck(lambda a, b: mha(a, b, mask=pad)[0], (x, mem))
    # gradients with respect to the parameters, through torch.func.functional_call
    names = [n for n, _ in mha.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in mha.parameters())

    def f(*ps):
        return torch.func.functional_call(mha, dict(zip(names, ps, strict=True)), (x.detach(),))[0]

    assert torch.autograd.gradcheck(f, params)


# ================================================================ head width (head_dim)


def _manual_mha(layer, query, key, value, mask=None):
    """Multi-head attention computed head by head in NumPy float64, from the weights.

    Independent of the package's forward pass: for each head j it slices columns
    j*head_dim:(j+1)*head_dim of W_Q, W_K, W_V (``W = weight.T``), computes
    softmax(Q_j K_jᵀ / sqrt(head_dim)) V_j with its own softmax, concatenates
    the heads and applies W_O. ``mask``: bool (q_len, k_len), True = may attend.
    Returns (output (batch, q_len, d_model), weights (batch, h, q_len, k_len)).
    """
    h, d = layer.num_heads, layer.head_dim

    def lin(m, x):
        w = m.weight.detach().double().numpy().T  # (in, out): the book's W
        b = 0.0 if m.bias is None else m.bias.detach().double().numpy()
        return x.detach().double().numpy() @ w + b

    q_all, k_all, v_all = lin(layer.w_q, query), lin(layer.w_k, key), lin(layer.w_v, value)
    assert q_all.shape[-1] == h * d
    heads, weights = [], []
    for j in range(h):
        cols = slice(j * d, (j + 1) * d)
        s = q_all[..., cols] @ np.swapaxes(k_all[..., cols], -1, -2) / math.sqrt(d)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        a = e / e.sum(axis=-1, keepdims=True)  # (batch, q_len, k_len)
        weights.append(a)
        heads.append(a @ v_all[..., cols])  # (batch, q_len, head_dim)
    concat = np.concatenate(heads, axis=-1)  # (batch, q_len, h * head_dim)
    w_o = layer.w_o.weight.detach().double().numpy().T  # (h * head_dim, d_model)
    b_o = 0.0 if layer.w_o.bias is None else layer.w_o.bias.detach().double().numpy()
    return concat @ w_o + b_o, np.stack(weights, axis=1)


def _randomise_biases(layer):
    with torch.no_grad():
        for m in (layer.w_q, layer.w_k, layer.w_v, layer.w_o):
            if m.bias is not None:
                m.bias.normal_()
    return layer


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_default_head_dim_equals_manual_and_torch(dtype):
    ref, ours = _pair(12, 3, dtype=dtype, seed=20)
    assert ours.head_dim == 4 and ours.inner_dim == 12
    torch.manual_seed(21)
    q = torch.randn(2, 5, 12, dtype=dtype)
    kv = torch.randn(2, 6, 12, dtype=dtype)
    out, wh = ours(q, kv, average_weights=False)
    manual_out, manual_w = _manual_mha(ours, q, kv, kv)
    np.testing.assert_allclose(out.detach().double().numpy(), manual_out, **TOL[dtype])
    np.testing.assert_allclose(wh.detach().double().numpy(), manual_w, **TOL[dtype])
    out_ref, wh_ref = ref(q, kv, kv, average_attn_weights=False)
    torch.testing.assert_close(out, out_ref, **TOL[dtype])
    torch.testing.assert_close(wh, wh_ref, **TOL[dtype])
    # the explicit default is the same layer
    explicit = MultiHeadAttention(12, 3, head_dim=4).to(dtype)
    explicit.load_state_dict(ours.state_dict())
    torch.testing.assert_close(explicit(q, kv)[0], ours(q, kv)[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("d_model", "num_heads", "head_dim"),
    [(10, 3, 4), (8, 2, 16), (12, 4, 2), (7, 1, 5)],  # 10 and 7 not divisible by h
)
@pytest.mark.parametrize("causal", [False, True])
def test_mha_other_head_dim_equals_manual_per_head(d_model, num_heads, head_dim, causal):
    torch.manual_seed(22)
    layer = MultiHeadAttention(d_model, num_heads, head_dim=head_dim, causal=causal)
    layer = _randomise_biases(layer.double()).eval()
    inner = num_heads * head_dim
    assert layer.head_dim == head_dim and layer.inner_dim == inner
    assert layer.w_q.weight.shape == (inner, d_model)  # W_Q = weight.T: (d_model, inner)
    assert layer.w_v.weight.shape == (inner, d_model)
    assert layer.w_o.weight.shape == (d_model, inner)  # W_O = weight.T: (inner, d_model)
    n_params = sum(p.numel() for p in layer.parameters())
    assert n_params == 4 * d_model * inner + 3 * inner + d_model
    x = torch.randn(3, 5, d_model, dtype=torch.float64)
    with torch.no_grad():
        out, wh = layer(x, average_weights=False)
    assert out.shape == (3, 5, d_model) and wh.shape == (3, num_heads, 5, 5)
    mask = np.tril(np.ones((5, 5), dtype=bool)) if causal else None
    manual_out, manual_w = _manual_mha(layer, x, x, x, mask)
    np.testing.assert_allclose(out.numpy(), manual_out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(wh.numpy(), manual_w, rtol=0, atol=1e-12)
    # the fused kernel, a KV cache and unbatched input agree with it
    layer.use_fused = True
    torch.testing.assert_close(layer(x)[0], out, rtol=0, atol=1e-12)
    layer.use_fused = False
    torch.testing.assert_close(layer(x[1])[0], out[1], rtol=0, atol=1e-12)
    if causal:
        cache = KVCache()
        steps = [layer(x[:, t : t + 1], kv_cache=cache)[0] for t in range(5)]
        assert cache.keys.shape == (3, num_heads, 5, head_dim)
        torch.testing.assert_close(torch.cat(steps, 1), out, rtol=0, atol=1e-12)


def test_mha_config_carries_head_dim():
    cfg = MultiHeadAttentionConfig(d_model=10, num_heads=3, head_dim=4)
    assert cfg.head_dim == 4 and cfg.inner_dim == 12
    layer = MultiHeadAttention.from_config(cfg)
    assert layer.config == cfg and layer.head_dim == 4
    assert MultiHeadAttentionConfig(12, 3).head_dim == 4  # default resolved on creation
    assert MultiHeadAttentionConfig(12, 3) == MultiHeadAttentionConfig(12, 3, head_dim=4)
    assert "head_dim=4" in repr(layer)


def test_bad_input_head_dim():
    with raises(ValueError, "head_dim: expected a positive int, got 0"):
        MultiHeadAttention(8, 2, head_dim=0)
    with raises(ValueError, "head_dim: expected a positive int, got -3"):
        MultiHeadAttentionConfig(8, 2, head_dim=-3)
    with raises(TypeError, "head_dim: expected a positive int, got float"):
        MultiHeadAttention(8, 2, head_dim=2.5)
    with raises(TypeError, "head_dim: expected a positive int, got bool"):
        MultiHeadAttention(8, 2, head_dim=True)
    with raises(ValueError, "num_heads=3 does not divide d_model=10", "pass head_dim"):
        MultiHeadAttention(10, 3)
    layer = MultiHeadAttention(8, 2, head_dim=3)
    with raises(ValueError, "module: torch.nn.MultiheadAttention always uses head_dim",
                "= 4, but this layer has head_dim=3", "num_heads * head_dim = 6, d_model = 8"):
        layer.copy_from_torch(torch.nn.MultiheadAttention(8, 2))
    # input width is still d_model, not num_heads * head_dim
    with raises(ValueError, "query: expected last dimension 8 (d_model)", "(1, 2, 6)"):
        layer(torch.zeros(1, 2, 6))


# ================================================================ sliding window


def _windowed_loop(layer, x, window, lengths=None):
    """Windowed multi-head attention one query and one head at a time, from the weights.

    Query t of head j reads the keys t - window + 1 .. t (not before 0, not padding),
    scores them, softmaxes them and sums their values: no mask matrix at all."""
    batch, L, d = x.shape
    h, hd = layer.num_heads, layer.head_dim
    q, k, v = layer.w_q(x), layer.w_k(x), layer.w_v(x)  # (batch, L, d_model) each
    context = torch.zeros(batch, L, h * hd, dtype=x.dtype)
    for b in range(batch):
        n = L if lengths is None else lengths[b]
        for t in range(L):
            keys = [j for j in range(max(0, t - window + 1), t + 1) if j < n]
            for j in range(h):
                cols = slice(j * hd, (j + 1) * hd)
                if not keys:
                    continue  # every visible key is padding: a zero context
                scores = torch.stack([q[b, t, cols] @ k[b, i, cols] for i in keys]) / math.sqrt(hd)
                weights = torch.softmax(scores, dim=0)
                pairs = zip(weights, keys, strict=True)
                context[b, t, cols] = sum(w * v[b, i, cols] for w, i in pairs)
    return layer.w_o(context)  # (batch, L, d_model)


@pytest.mark.parametrize("window", [1, 2, 4, 9, 30])
@pytest.mark.parametrize("use_fused", [False, True])
def test_windowed_mha_equals_a_loop(window, use_fused):
    torch.manual_seed(window)
    layer = MultiHeadAttention(12, 3, causal=True, window=window, use_fused=use_fused).double()
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    with torch.no_grad():
        out, _ = layer(x, need_weights=False)
        ref = _windowed_loop(layer, x, window)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


def test_windowed_mha_with_padding_equals_a_loop():
    torch.manual_seed(5)
    layer = MultiHeadAttention(8, 2, causal=True, window=3).double()
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    lengths = [7, 4, 2]
    pad = key_padding_to_attention_mask(padding_mask(lengths, 7))  # (batch, 1, 1, L)
    with torch.no_grad():
        out, w = layer(x, mask=pad, average_weights=False)
        ref = _windowed_loop(layer, x, 3, lengths)
    for b, n in enumerate(lengths):  # real tokens; padding queries are never scored
        torch.testing.assert_close(out[b, :n], ref[b, :n], **TOL[torch.float64])
    allowed = combine_masks(sliding_window_mask(7, window=3, like=x), pad)  # (batch, 1, L, L)
    assert (w.masked_select(~allowed) == 0).all() and (w > 0).sum(-1).max() <= 3


def test_window_limits_equal_causal_and_the_diagonal():
    torch.manual_seed(6)
    causal = MultiHeadAttention(8, 2, causal=True).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = causal(x)
        for window in (6, 7, 100):  # at least as long as the sequence: plain causal
            wide = MultiHeadAttention(8, 2, causal=True, window=window).double()
            wide.load_state_dict(causal.state_dict())
            out, _ = wide(x)
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
        narrow = MultiHeadAttention(8, 2, causal=True, window=1).double()
        narrow.load_state_dict(causal.state_dict())
        _, w = narrow(x, average_weights=False)
    torch.testing.assert_close(w, torch.eye(6, dtype=torch.float64).expand_as(w), rtol=0, atol=0)


def test_window_is_part_of_the_config_and_repr():
    layer = MultiHeadAttention(8, 2, causal=True, window=5)
    assert layer.window == 5 and layer.config.window == 5
    assert MultiHeadAttention.from_config(layer.config).window == 5
    assert "window=5" in repr(layer)
    assert MultiHeadAttention(8, 2).window is None and "window" not in repr(
        MultiHeadAttention(8, 2))


@pytest.mark.parametrize(("kwargs", "exc", "parts"), [
    (dict(window=3), ValueError, ("window: a sliding window looks back only",
                                  "window=3 needs causal=True", "got causal=False")),
    (dict(causal=True, window=0), ValueError, ("window: expected a positive int, got 0",)),
    (dict(causal=True, window=-1), ValueError, ("window: expected a positive int, got -1",)),
    (dict(causal=True, window=2.5), TypeError, ("window: expected a positive int, got float",)),
    (dict(causal=True, window="4"), TypeError, ("window: expected a positive int, got str",)),
])
def test_bad_input_window(kwargs, exc, parts):
    with raises(exc, *parts):
        MultiHeadAttention(8, 2, **kwargs)


# ================================================================ KV cache


def test_kv_cache_basics():
    cache = KVCache()
    assert len(cache) == 0 and cache.keys is None
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    cache.append(k1, v1)
    keys, values = cache.append(k2, v2)
    assert len(cache) == 5 and keys.shape == (2, 3, 5, 5)
    assert torch.equal(keys[:, :, 4:], k2) and torch.equal(values[:, :, :4], v1)
    cache.reset()
    assert len(cache) == 0 and cache.values is None


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq_len=st.integers(1, 8),
    heads=st.sampled_from([1, 2, 4]),
    prefill=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_kv_cache_token_by_token_equals_full(batch, seq_len, heads, prefill, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, heads, causal=True).double().eval()
    x = torch.randn(batch, seq_len, 8, dtype=torch.float64)
    full, w_full = mha(x, average_weights=False)
    cache = KVCache()
    p = min(prefill, seq_len)
    outs, ws = [], []
    if p:  # a prompt processed in one call, then one token at a time
        o, w = mha(x[:, :p], kv_cache=cache, average_weights=False)
        outs.append(o)
        ws.extend(w[:, :, i, : p] for i in range(p))
    for t in range(p, seq_len):
        o, w = mha(x[:, t : t + 1], kv_cache=cache, average_weights=False)
        assert w.shape == (batch, heads, 1, t + 1) and len(cache) == t + 1
        outs.append(o)
        ws.append(w[:, :, 0])
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=0, atol=1e-12)
    for i, w in enumerate(ws):
        torch.testing.assert_close(w, w_full[:, :, i, : w.shape[-1]], rtol=0, atol=1e-12)


def test_kv_cache_with_fused_path_and_positional_offset():
    torch.manual_seed(16)
    pe = SinusoidalPositionalEncoding(8, max_len=16)
    mha = MultiHeadAttention(8, 2, causal=True, use_fused=True).eval()
    x = torch.randn(2, 6, 8)
    full, _ = mha(pe(x))
    cache = KVCache()
    steps = [mha(pe(x[:, t : t + 1], offset=len(cache)), kv_cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, **TOL[torch.float32])


# ================================================================ properties


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    q_len=st.integers(1, 6),
    k_len=st.integers(1, 6),
    heads=st.sampled_from([1, 2, 3]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_weights_rows_sum_to_one(batch, q_len, k_len, heads, causal, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(6, heads, causal=causal).double()
    q = torch.randn(batch, q_len, 6, dtype=torch.float64) * 3
    kv = torch.randn(batch, k_len, 6, dtype=torch.float64) * 3
    _, w = mha(q, kv, average_weights=False)
    assert torch.all(w >= 0)
    rows = w.sum(-1)
    if causal and k_len < q_len:  # the first q_len - k_len queries see no key at all
        blocked = q_len - k_len
        assert torch.all(rows[..., :blocked] == 0)
        rows = rows[..., blocked:]
    torch.testing.assert_close(rows, torch.ones_like(rows), rtol=0, atol=1e-12)
    csa = CausalSelfAttention(6, 4).double()
    _, w1 = csa(q)
    torch.testing.assert_close(w1.sum(-1), torch.ones(batch, q_len, dtype=torch.float64))


@settings(max_examples=30, deadline=None)
@given(seq_len=st.integers(2, 8), cut=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_causal_future_tokens_do_not_change_the_past(seq_len, cut, seed):
    cut = min(cut, seq_len - 2)  # keep tokens 0..cut, change tokens cut+1..
    torch.manual_seed(seed)
    x = torch.randn(2, seq_len, 8, dtype=torch.float64)
    y = x.clone()
    y[:, cut + 1 :] = torch.randn_like(y[:, cut + 1 :]) * 5
    mha = MultiHeadAttention(8, 2, causal=True).double()
    csa = CausalSelfAttention(8, 4).double()
    for layer in (mha, csa):
        a, b = layer(x)[0], layer(y)[0]
        torch.testing.assert_close(a[:, : cut + 1], b[:, : cut + 1], rtol=0, atol=1e-13)
        assert (a[:, cut + 1 :] - b[:, cut + 1 :]).abs().max() > 1e-6  # the future did change


@settings(max_examples=30, deadline=None)
@given(
    perm=st.permutations(list(range(6))).filter(lambda p: p != list(range(6))),
    seed=st.integers(0, 2**16),
)
def test_permutation_equivariance_without_positions_only(perm, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    idx = torch.tensor(perm)
    out, w = mha(x)
    out_p, w_p = mha(x[:, idx])
    # permuting the tokens permutes the outputs (rows) and the weights (rows and columns)
    torch.testing.assert_close(out_p, out[:, idx], rtol=0, atol=1e-12)
    torch.testing.assert_close(w_p, w[:, idx][:, :, idx], rtol=0, atol=1e-12)
    # with sinusoidal positions added, the same permutation changes the outputs
    pe = SinusoidalPositionalEncoding(8, max_len=6)
    enc, enc_p = mha(pe(x))[0], mha(pe(x[:, idx]))[0]
    assert (enc_p - enc[:, idx]).abs().max() > 1e-4


# ================================================================ bad input


def test_bad_input_wrong_d_in_of_x():
    sa = SelfAttention(5, 3)
    with raises(ValueError, "x: expected last dimension 5 (d_in), got shape (2, 4, 6)"):
        sa(torch.zeros(2, 4, 6))
    with raises(ValueError, "x: expected shape (batch, seq_len, d_in)", "(1, 2, 4, 5)"):
        sa(torch.zeros(1, 2, 4, 5))


def test_bad_input_wrong_d_model_of_query_key_value():
    mha = MultiHeadAttention(8, 2)
    with raises(ValueError, "query: expected last dimension 8 (d_model)", "(2, 3, 6)"):
        mha(torch.zeros(2, 3, 6))
    with raises(ValueError, "value: expected last dimension 8 (d_model)", "(2, 3, 4)"):
        mha(torch.zeros(2, 3, 8), torch.zeros(2, 3, 8), torch.zeros(2, 3, 4))


def test_bad_input_num_heads_not_dividing_d_model():
    with raises(ValueError, "num_heads: num_heads=3 does not divide d_model=10"):
        MultiHeadAttention(10, 3)
    with raises(ValueError, "num_heads=4 does not divide d_model=6", "(1, 2, 6)"):
        split_heads(torch.zeros(1, 2, 6), 4)


def test_bad_input_wrong_mask_shape():
    mha = MultiHeadAttention(8, 2)
    x = torch.zeros(2, 3, 8)
    msg = "mask: expected a shape broadcastable to (batch, num_heads, q_len, k_len) = "
    with raises(ValueError, msg + "(2, 2, 3, 3), got shape (3, 4)"):
        mha(x, mask=torch.ones(3, 4, dtype=torch.bool))
    with raises(ValueError, msg + "(2, 2, 3, 3), got shape (2, 3, 1, 3)"):
        mha(x, mask=torch.ones(2, 3, 1, 3, dtype=torch.bool))  # 3 heads, layer has 2
    with raises(ValueError, "mask: expected shape (q_len, k_len)", "got shape (3,)"):
        mha(x, mask=torch.ones(3, dtype=torch.bool))
    sa = SelfAttention(8, 4)
    with raises(ValueError, "mask: ", "(batch, seq_len, seq_len) = (2, 3, 3), got shape (2, 2)"):
        sa(x, mask=torch.ones(2, 2, dtype=torch.bool))


def test_bad_input_mask_dtype():
    mha = MultiHeadAttention(8, 2)
    x = torch.zeros(1, 3, 8)
    with raises(TypeError, "mask: expected a bool mask", "got dtype torch.int64 with shape (3, 3)"):
        mha(x, mask=torch.ones(3, 3, dtype=torch.long))
    with raises(ValueError, "mask: an additive mask", "NaN or +inf (shape (3, 3))"):
        mha(x, mask=torch.full((3, 3), float("nan")))


def test_bad_input_kv_cache_batch_mismatch():
    mha = MultiHeadAttention(8, 2, causal=True)
    cache = KVCache()
    mha(torch.zeros(2, 3, 8), kv_cache=cache)
    with raises(
        ValueError,
        "kv_cache: holds keys of shape (batch, num_heads, cached_len, head_dim) = (2, 2, 3, 4), "
        "expected (3, 2, 3, 4) for query of shape (3, 1, 8)",
    ):
        mha(torch.zeros(3, 1, 8), kv_cache=cache)
    other = MultiHeadAttention(8, 4)  # head_dim 2 instead of 4
    with raises(ValueError, "kv_cache: ", "(2, 2, 3, 4), expected (2, 4, 3, 2)"):
        other(torch.zeros(2, 1, 8), kv_cache=cache)
    with raises(TypeError, "kv_cache: expected a KVCache, got dict"):
        mha(torch.zeros(2, 1, 8), kv_cache={})


def test_bad_input_kv_cache_append_shapes():
    cache = KVCache()
    with raises(ValueError, "v: expected the shape of k (1, 2, 3, 4), got shape (1, 2, 3, 5)"):
        cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    with raises(ValueError, "k: expected shape (batch, num_heads, new_len, head_dim)", "(2, 3, 4)"):
        cache.append(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with raises(
        ValueError,
        "k: expected shape",
        "= (1, 2, 1, 4) to match the cache",
        "= (1, 2, 3, 4), got shape (1, 2, 1, 6)",
    ):
        cache.append(torch.zeros(1, 2, 1, 6), torch.zeros(1, 2, 1, 6))


def test_bad_input_key_value_mismatch():
    mha = MultiHeadAttention(8, 2)
    q = torch.zeros(2, 3, 8)
    with raises(ValueError, "value: expected (batch, k_len) = (2, 5)", "got shape (2, 4, 8)"):
        mha(q, torch.zeros(2, 5, 8), torch.zeros(2, 4, 8))
    with raises(ValueError, "key: expected batch 2", "(2, 3, 8)", "got shape (1, 5, 8)"):
        mha(q, torch.zeros(1, 5, 8))


def test_bad_input_padding_mask_shape_and_dtype():
    csa = CausalSelfAttention(4, 4)
    x = torch.zeros(2, 3, 4)
    with raises(
        ValueError,
        "padding_mask: expected shape (batch, seq_len) = (2, 3)",
        "(2, 3, 4)",
        "got shape (2, 4)",
    ):
        csa(x, padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with raises(TypeError, "padding_mask: expected a bool mask", "torch.float32 with shape (2, 3)"):
        csa(x, padding_mask=torch.ones(2, 3))


def test_bad_input_types_dtypes_and_settings():
    mha = MultiHeadAttention(8, 2)
    with raises(TypeError, "query: expected a torch.Tensor", "got ndarray"):
        mha(np.zeros((1, 2, 8), dtype=np.float32))
    with raises(TypeError, "query: expected dtype torch.float32", "got torch.float64 with shape"):
        mha(torch.zeros(1, 2, 8, dtype=torch.float64))
    with raises(TypeError, "x: expected a floating-point dtype, got torch.int64"):
        SelfAttention(2, 2)(torch.zeros(3, 2, dtype=torch.long))
    with raises(ValueError, "x: contains NaN or infinity (shape (2, 2))"):
        SelfAttention(2, 2)(torch.tensor([[0.0, float("nan")], [0.0, 0.0]]))
    with raises(ValueError, "dropout: expected a probability in [0, 1), got 1.0"):
        CausalSelfAttention(4, 4, dropout=1.0)
    with raises(ValueError, "dropout: expected a probability in [0, 1), got -0.1"):
        MultiHeadAttention(8, 2, dropout=-0.1)
    with raises(ValueError, "x: expected shape (batch, num_heads, seq_len, head_dim)", "(2, 3, 4)"):
        merge_heads(torch.zeros(2, 3, 4))


def test_bad_input_from_torch_options():
    torch_mha = torch.nn.MultiheadAttention
    with raises(ValueError, "module: kdim=4/vdim=4 differ from embed_dim=8"):
        MultiHeadAttention.from_torch(torch_mha(8, 2, kdim=4, vdim=4))
    with raises(ValueError, "module: add_bias_kv=True is not supported"):
        MultiHeadAttention.from_torch(torch_mha(8, 2, add_bias_kv=True))
    with raises(ValueError, "module: expected embed_dim=8, num_heads=4", "num_heads=2"):
        MultiHeadAttention(8, 4).copy_from_torch(torch_mha(8, 2))
    with raises(ValueError, "module: bias=False but this layer has bias=True"):
        MultiHeadAttention(8, 2).copy_from_torch(torch_mha(8, 2, bias=False))


# ================================================================ PyTorch's two mask conventions


def test_torch_boolean_mask_conventions():
    """The notation page: F.scaled_dot_product_attention reads True as "may attend";
    nn.MultiheadAttention and nn.Transformer's masks read True as "blocked".

    Each bool mask is compared with the same mask written as an additive float
    mask (0 keep, -inf block), whose meaning is unambiguous.
    """
    torch.manual_seed(30)
    dt = torch.float64
    allowed = torch.tensor([[1, 1, 0, 0],  # book convention: True = may attend;
                            [0, 1, 1, 0],  # every row has both True and False,
                            [0, 0, 1, 1],  # so neither reading masks a whole row
                            [1, 0, 0, 1]], dtype=torch.bool)
    additive = torch.zeros(4, 4, dtype=dt).masked_fill(~allowed, float("-inf"))

    def same(a, b):
        return torch.allclose(a, b, rtol=0, atol=1e-12)

    # F.scaled_dot_product_attention: True = may attend
    q, k, v = torch.randn(3, 2, 4, 8, dtype=dt)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref = sdpa(q, k, v, attn_mask=additive)
    assert same(sdpa(q, k, v, attn_mask=allowed), ref)
    assert not same(sdpa(q, k, v, attn_mask=~allowed), ref)

    # nn.MultiheadAttention: attn_mask and key_padding_mask, True = blocked
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).to(dt).eval()
    x = torch.randn(2, 4, 8, dtype=dt)
    ref = mha(x, x, x, attn_mask=additive)[0]
    assert same(mha(x, x, x, attn_mask=~allowed)[0], ref)
    assert not same(mha(x, x, x, attn_mask=allowed)[0], ref)
    assert same(MultiHeadAttention.from_torch(mha)(x, mask=allowed)[0], ref)  # the book's
    real = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)  # True = real token
    pad_add = torch.zeros(2, 4, dtype=dt).masked_fill(~real, float("-inf"))
    ref = mha(x, x, x, key_padding_mask=pad_add)[0]
    assert same(mha(x, x, x, key_padding_mask=~real)[0], ref)
    assert not same(mha(x, x, x, key_padding_mask=real)[0], ref)

    # nn.Transformer (encoder and decoder layers inside): every mask, True = blocked
    model = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1,
                                 num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
                                 batch_first=True).to(dt).eval()
    src, tgt = torch.randn(2, 4, 8, dtype=dt), torch.randn(2, 4, 8, dtype=dt)
    for name in ("src_mask", "tgt_mask", "memory_mask"):
        ref = model(src, tgt, **{name: additive})
        assert same(model(src, tgt, **{name: ~allowed}), ref), name
        assert not same(model(src, tgt, **{name: allowed}), ref), name
    for name in ("src_key_padding_mask", "tgt_key_padding_mask", "memory_key_padding_mask"):
        ref = model(src, tgt, **{name: pad_add})
        assert same(model(src, tgt, **{name: ~real}), ref), name
        assert not same(model(src, tgt, **{name: real}), ref), name

# ================================================================ siblings must agree
# Values computed on separate code paths that must agree, above all in training mode,
# where dropout makes the weights random: the weights a module returns must be the
# weights its context was computed from.


def test_causal_dropout_context_is_computed_from_the_returned_weights():
    torch.manual_seed(21)
    csa = CausalSelfAttention(5, 4, dropout=0.5).double().train()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    context, weights = csa(x)
    eval_weights = csa.eval()(x)[1]
    dropped = (weights == 0) & (eval_weights > 0)
    assert dropped.any() and (~dropped & (eval_weights > 0)).any()  # dropout did act
    v = csa.w_v(x)  # (batch, seq_len, d_out)
    torch.testing.assert_close(context, weights @ v, **TOL[torch.float64])
    # unbatched input: the same rule
    csa.train()
    c1, w1 = csa(x[0])
    torch.testing.assert_close(c1, w1 @ csa.w_v(x[0]), **TOL[torch.float64])


@pytest.mark.parametrize("causal", [False, True])
def test_mha_dropout_output_is_computed_from_the_returned_weights(causal):
    torch.manual_seed(22)
    mha = MultiHeadAttention(12, 3, dropout=0.4, causal=causal).double().train()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    torch.manual_seed(0)
    out, w = mha(x, average_weights=False)  # (batch, q_len, d_model), (batch, heads, q, k)
    assert (w == 0).any() and not torch.allclose(w.sum(-1), torch.ones(2, 3, 5, dtype=w.dtype))
    v = split_heads(mha.w_v(x), 3)  # (batch, heads, k_len, head_dim)
    expected = mha.w_o(merge_heads(w @ v))  # (batch, q_len, d_model)
    torch.testing.assert_close(out, expected, **TOL[torch.float64])
    # The same dropout draw (same seed) with averaged weights or none: the same output,
    # and the averaged weights are the mean of the per-head weights actually used.
    torch.manual_seed(0)
    out_avg, w_avg = mha(x)
    torch.manual_seed(0)
    out_none, w_none = mha(x, need_weights=False)
    assert w_none is None
    torch.testing.assert_close(out_avg, out, rtol=0, atol=0)
    torch.testing.assert_close(out_none, out, rtol=0, atol=0)
    torch.testing.assert_close(w_avg, w.mean(dim=1), rtol=0, atol=0)


def test_mha_eval_weights_explain_the_output_with_masks_and_cache():
    torch.manual_seed(23)
    mha = MultiHeadAttention(8, 2, causal=True).double().eval()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pad = key_padding_to_attention_mask(padding_mask([6, 4], like=x))  # (2, 1, 1, 6)
    out, w = mha(x, mask=pad, average_weights=False)
    v = split_heads(mha.w_v(x), 2)
    torch.testing.assert_close(out, mha.w_o(merge_heads(w @ v)), **TOL[torch.float64])
    # with a KV cache, the last token's weights over the cached keys explain its output
    cache = KVCache()
    mha(x[:, :5], kv_cache=cache, need_weights=False)
    out_last, w_last = mha(x[:, 5:], kv_cache=cache, average_weights=False)
    full_out, full_w = mha(x, average_weights=False)  # no padding mask here
    torch.testing.assert_close(out_last, full_out[:, 5:], **TOL[torch.float64])
    torch.testing.assert_close(w_last, full_w[:, :, 5:], **TOL[torch.float64])


def test_old_module_name_reexports_the_same_objects():
    """``from selfattn.modules import ...`` (chapters, readers' copied code) keeps working."""
    import selfattn.grouped
    import selfattn.kv_cache
    import selfattn.layers
    import selfattn.modules

    for name in selfattn.modules.__all__:
        home = selfattn.kv_cache if name == "KVCache" else selfattn.layers
        assert getattr(selfattn.modules, name) is getattr(home, name), name
    assert selfattn.grouped.kv_cache_bytes is selfattn.kv_cache.kv_cache_bytes
    assert issubclass(selfattn.grouped.GroupedQueryAttention, MultiHeadAttention)


def test_each_input_is_checked_once(monkeypatch):
    """A layer checks query, key and value once each (a tensor passed twice once), in
    forward; the attention function it calls does not check them again, only whether
    its result overflowed ("query, key")."""
    seen = checked_names(monkeypatch)
    mha = MultiHeadAttention(8, 2, num_kv_heads=1)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    mha(x)
    assert seen == ["query", "query, key"]
    seen.clear()
    mha(x, memory)
    assert seen == ["query", "key", "query, key"]
    seen.clear()
    SelfAttention(8, 4)(x)
    assert seen == ["x", "query, key"]
