"""Multi-head latent attention: against the paper's equations, explicit vs absorbed, the cache.

The reference (:func:`_reference`) rebuilds every step of DeepSeek-V2's section 2.1
from the layer's weight matrices with PyTorch's ``scaled_dot_product_attention``
and its own RoPE (complex multiplication), not with the package's code. Then the
absorbed form must equal the explicit one, cached decoding the full pass, and the
measured cache bytes the formula.

Tolerances: float64 results agree to atol=1e-12 (a handful of roundings of O(1)
numbers).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from checking import raises
from selfattn.block import BlockConfig, TransformerBlock
from selfattn.kv_cache import KVCache, kv_cache_bytes
from selfattn.language_model import LMConfig, TinyLM
from selfattn.latent import (
    LatentAttentionConfig,
    LatentKVCache,
    MultiHeadLatentAttention,
    check_latent_cache,
    latent_cache_bytes,
)
from selfattn.layers import MultiHeadAttention
from selfattn.masks import key_padding_to_attention_mask, padding_mask

TOL = dict(rtol=0, atol=1e-12)
# (rope_dim, q_latent_dim): no positions, decoupled RoPE, RoPE with a query latent
SETTINGS = [(0, None), (4, None), (4, 6)]


def _layer(rope_dim=4, q_latent_dim=None, *, causal=True, seed=0, **kwargs):
    """A float64 layer: d_model 16, 4 heads of 4, latent of 6, random non-zero biases."""
    torch.manual_seed(seed)
    layer = MultiHeadLatentAttention(16, 4, 6, rope_dim=rope_dim, q_latent_dim=q_latent_dim,
                                     causal=causal, **kwargs).double()
    with torch.no_grad():
        for p in layer.parameters():
            if p.ndim == 1:
                p.normal_()
    return layer


def _rope(x, positions, base=10000.0):
    """RoPE by complex multiplication: pair (2i, 2i+1) is a + ib, times exp(i p base^(-2i/d))."""
    d = x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions.double()[:, None] * freqs[None]  # (L, d/2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def _reference(layer, x, mask=None, start=0):
    """Section 2.1 step by step from the weights: (output, per-head weights)."""
    h, d_k, d_r = layer.num_heads, layer.head_dim, layer.rope_dim
    batch, length, _ = x.shape
    pos = torch.arange(start, start + length)

    def lin(m, t):  # t W + b, with the book's W = weight.T
        return t @ m.weight.T + (0 if m.bias is None else m.bias)

    def heads(t, width):  # (batch, L, h * width) -> (batch, h, L, width)
        return t.reshape(batch, length, h, width).transpose(1, 2)

    c = lin(layer.w_dkv, x)  # (batch, L, d_c)
    k_c, v = heads(lin(layer.w_uk, c), d_k), heads(lin(layer.w_uv, c), d_k)
    source = x if layer.q_latent_dim is None else lin(layer.w_dq, x)
    q = heads(lin(layer.w_q, source), d_k)
    k = k_c
    if d_r:
        q_r = _rope(heads(lin(layer.w_qr, source), d_r), pos)  # per head
        k_r = _rope(lin(layer.w_kr, x), pos)  # (batch, L, d_R): one for all heads
        q = torch.cat([q, q_r], -1)
        k = torch.cat([k_c, k_r[:, None].expand(-1, h, -1, -1)], -1)
    allowed = torch.ones(length, length, dtype=torch.bool)
    if layer.causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & mask
    scale = 1 / math.sqrt(d_k + d_r)
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, -1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    out = out.transpose(1, 2).reshape(batch, length, h * d_k)
    return lin(layer.w_o, out), weights


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize(("rope_dim", "q_latent_dim"), SETTINGS)
def test_both_forms_follow_the_paper_equations(rope_dim, q_latent_dim, absorb):
    layer = _layer(rope_dim, q_latent_dim, absorb=absorb)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    pad = key_padding_to_attention_mask(padding_mask([7, 5], 7, like=x))  # (2, 1, 1, 7)
    out, weights = layer(x, mask=pad, average_weights=False)
    ref_out, ref_weights = _reference(layer, x, mask=pad)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("rope_dim", "q_latent_dim"), SETTINGS)
def test_absorbed_equals_explicit(rope_dim, q_latent_dim, causal):
    layer = _layer(rope_dim, q_latent_dim, causal=causal, seed=1)
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    pad = key_padding_to_attention_mask(padding_mask([9, 6, 2], 9, like=x))
    additive = torch.randn(9, 9, dtype=torch.float64)  # a float mask: a bias on the scores
    for mask in (None, pad, additive):
        layer.absorb = False
        explicit, w_explicit = layer(x, mask=mask, average_weights=False)
        layer.absorb = True
        absorbed, w_absorbed = layer(x, mask=mask, average_weights=False)
        torch.testing.assert_close(absorbed, explicit, **TOL)
        torch.testing.assert_close(w_absorbed, w_explicit, **TOL)
    assert not torch.allclose(explicit, torch.zeros_like(explicit))


def test_absorbed_form_never_builds_keys_or_values():
    """With absorb=True the up-projections never see the k_len cached latents."""
    layer = _layer(4, absorb=True)
    seen = []
    for name in ("w_uk", "w_uv"):
        getattr(layer, name).register_forward_hook(lambda *args, name=name: seen.append(name))
    layer(torch.randn(2, 5, 16, dtype=torch.float64))
    assert seen == []
    layer.absorb = False
    layer(torch.randn(2, 5, 16, dtype=torch.float64))
    assert seen == ["w_uk", "w_uv"]


@pytest.mark.parametrize(("rope_dim", "q_latent_dim"), SETTINGS)
def test_folded_matrices_give_the_same_output(rope_dim, q_latent_dim):
    """W_Q,i W_UK,iᵀ scores queries against latents; W_UV,i W_O,i maps latent contexts out."""
    layer = _layer(rope_dim, q_latent_dim, seed=2)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    expected, weights = layer(x, average_weights=False)
    w_qk, b_qk, w_vo = layer.absorbed_weights()
    assert w_qk.shape == (4, q_latent_dim or 16, 6) and w_vo.shape == (4, 6, 16)
    with torch.no_grad():
        source = x if q_latent_dim is None else layer.w_dq(x)  # (2, 6, d_in)
        latent, rope_key = layer.latent_and_rope_key(x)  # (2, 6, 6), (2, 6, d_R)
        q_latent = source[:, None] @ w_qk + b_qk[:, None]  # (2, 4, 6, d_c)
        scores = q_latent @ latent[:, None].transpose(-1, -2)  # (2, 4, 6, 6)
        if rope_dim:
            _, q_rope = layer.queries(x)
            scores = scores + q_rope @ rope_key[:, None].transpose(-1, -2)
        scores = scores / math.sqrt(4 + rope_dim)
        scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
        a = torch.softmax(scores, -1)  # (2, 4, 6, 6)
        out = ((a @ latent[:, None]) @ w_vo).sum(1) + layer.w_o.bias  # sum over heads
    torch.testing.assert_close(a, weights, **TOL)
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize(("rope_dim", "q_latent_dim"), SETTINGS)
def test_cached_decoding_equals_the_full_pass(rope_dim, q_latent_dim, absorb):
    layer = _layer(rope_dim, q_latent_dim, absorb=absorb, seed=3)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    full, _ = layer(x)
    cache = layer.new_cache()
    parts = [layer(x[:, :3], kv_cache=cache)[0]]  # a prompt of 3, then one token at a time
    parts += [layer(x[:, t : t + 1], kv_cache=cache)[0] for t in range(3, 8)]
    torch.testing.assert_close(torch.cat(parts, 1), full, **TOL)
    assert len(cache) == cache.tokens_seen == 8


@pytest.mark.parametrize("rope_dim", [0, 4])
def test_cache_holds_the_latent_and_the_rope_key_only(rope_dim):
    layer = _layer(rope_dim).float()
    cache = LatentKVCache()
    with torch.no_grad():
        layer(torch.randn(3, 5, 16), kv_cache=cache)
        layer(torch.randn(3, 1, 16), kv_cache=cache)
    assert cache.latent.shape == (3, 6, 6) and cache.rope_keys.shape == (3, 6, rope_dim)
    formula = latent_cache_bytes(batch=3, seq_len=6, num_layers=1, latent_dim=6,
                                 rope_dim=rope_dim, bytes_per_value=4)
    assert cache.nbytes == formula == 3 * 6 * (6 + rope_dim) * 4
    assert layer.config.cached_per_token == 6 + rope_dim
    # multi-head attention with these 4 heads of 4 caches 2 * 4 * 4 = 32 numbers a token
    mha = kv_cache_bytes(batch=3, seq_len=6, num_layers=1, num_kv_heads=4, head_dim=4,
                         bytes_per_value=4)
    assert mha * (6 + rope_dim) == formula * 32
    cache.reset()
    assert len(cache) == cache.tokens_seen == 0 and cache.nbytes == 0


def test_rope_key_is_shared_and_scores_see_offsets_only():
    """q^R R_m . k^R R_n depends on n - m: shifting every position leaves the scores alone."""
    layer = _layer(4)
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    with torch.no_grad():
        scores = []
        for start in (0, 11):
            _, q_rope = layer.queries(x, start)  # (1, 4, 6, 4)
            _, k_rope = layer.latent_and_rope_key(x, start)  # (1, 6, 4): one key for all heads
            scores.append(q_rope @ k_rope[:, None].transpose(-1, -2))  # (1, 4, 6, 6)
        torch.testing.assert_close(scores[0], scores[1], **TOL)
        assert not torch.allclose(layer.queries(x, 0)[1], layer.queries(x, 11)[1])


@pytest.mark.parametrize(("rope_dim", "q_latent_dim"), SETTINGS)
def test_gradients_of_both_forms_agree(rope_dim, q_latent_dim):
    layer = _layer(rope_dim, q_latent_dim, seed=4)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    grads = []
    for absorb in (False, True):
        layer.absorb = absorb
        layer.zero_grad()
        layer(x)[0].square().sum().backward()
        grads.append([p.grad.clone() for p in layer.parameters()])
    for explicit, absorbed in zip(*grads, strict=True):
        torch.testing.assert_close(absorbed, explicit, **TOL)


def test_dropout_drops_the_same_weights_in_both_forms():
    layer = _layer(4, dropout=0.3, seed=5).train()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    outs = []
    for absorb in (False, True):
        layer.absorb = absorb
        torch.manual_seed(9)
        outs.append(layer(x, average_weights=False))
    torch.testing.assert_close(outs[1][0], outs[0][0], **TOL)
    torch.testing.assert_close(outs[1][1], outs[0][1], **TOL)
    assert (outs[0][1] == 0).sum() > 0  # some weights were dropped
    layer.eval()
    assert torch.equal(layer(x)[0], layer(x)[0])


def test_without_rope_the_layer_has_no_positions():
    """rope_dim=0: permuting the tokens permutes the outputs (no causal mask)."""
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    plain = _layer(0, causal=False)
    assert not hasattr(plain, "w_kr") and not hasattr(plain, "w_qr")
    torch.testing.assert_close(plain(x[:, perm])[0], plain(x)[0][:, perm], **TOL)
    rotary = _layer(4, causal=False)
    assert not torch.allclose(rotary(x[:, perm])[0], rotary(x)[0][:, perm], atol=1e-6)


def test_unbatched_input_and_cross_attention_without_rope():
    layer = _layer(0, causal=False, absorb=True)
    x, memory = torch.randn(4, 16, dtype=torch.float64), torch.randn(1, 7, 16, dtype=torch.float64)
    out, weights = layer(x)
    assert out.shape == (4, 16) and weights.shape == (4, 4)
    torch.testing.assert_close(out, layer(x[None])[0][0], **TOL)
    out, weights = layer(x[None], memory)  # queries from x, latents from memory
    assert out.shape == (1, 4, 16) and weights.shape == (1, 4, 7)
    layer.absorb = False
    torch.testing.assert_close(layer(x[None], memory, memory)[0], out, **TOL)


# ---------------------------------------------------------------- in the block and the model
def test_block_and_model_use_latent_attention_only_when_asked():
    default = TransformerBlock(BlockConfig(d_model=16, num_heads=4, causal=True))
    assert type(default.attn) is MultiHeadAttention
    assert TransformerBlock(BlockConfig(d_model=16, num_heads=4)).config.plain_attention
    cfg = BlockConfig(d_model=16, num_heads=4, causal=True, positional="rope", latent_dim=6)
    block = TransformerBlock(cfg)
    assert isinstance(block.attn, MultiHeadLatentAttention) and not cfg.plain_attention
    assert (block.attn.latent_dim, block.attn.rope_dim, block.attn.causal) == (6, 2, True)
    assert TransformerBlock(BlockConfig(d_model=16, num_heads=4, latent_dim=6)).attn.rope_dim == 0
    lm = LMConfig(vocab_size=7, seq_len=8)
    assert (lm.latent_dim, lm.latent_q_dim, lm.latent_rope_dim) == (None, None, None)
    assert type(TinyLM(lm).blocks[0].attn) is MultiHeadAttention
    assert all(type(c) is KVCache for c in TinyLM(lm).new_caches())


@pytest.mark.parametrize("positional", ["rope", "learned"])
def test_tiny_lm_with_latent_attention_caches_decodes_and_generates(positional):
    torch.manual_seed(0)
    config = LMConfig(vocab_size=11, seq_len=12, d_model=16, num_heads=4, positional=positional,
                      latent_dim=6, latent_q_dim=8, latent_rope_dim=4 if positional == "rope"
                      else None)
    model = TinyLM(config).double().eval()
    idx = torch.randint(0, 11, (2, 12))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches()
        parts = [model(idx[:, :5], kv_caches=caches)]
        parts += [model(idx[:, t : t + 1], kv_caches=caches) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, 1), full, **TOL)
    d_r = 4 if positional == "rope" else 0
    measured = sum(c.nbytes for c in caches)
    assert measured == latent_cache_bytes(batch=2, seq_len=12, num_layers=2, latent_dim=6,
                                          rope_dim=d_r, bytes_per_value=8)
    for block in model.blocks:
        block.attn.absorb = True
    with torch.no_grad():
        torch.testing.assert_close(model(idx), full, **TOL)
    prompt = idx[:, :3]
    assert torch.equal(model.generate(prompt, 15, greedy=True),
                       model.generate(prompt, 15, greedy=True, use_cache=False))


def test_tiny_lm_with_latent_attention_trains():
    from selfattn.training import train_language_model

    torch.manual_seed(0)
    tokens = torch.arange(400) % 5  # a cycle: perfectly predictable after one token
    model = TinyLM(LMConfig(vocab_size=5, seq_len=8, d_model=16, num_heads=2,
                            positional="rope", latent_dim=4))
    history = train_language_model(model, tokens.numpy(), steps=40, batch_size=8, lr=1e-2)
    assert history[-1]["train_loss"] < 0.2 * history[0]["train_loss"]


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("kwargs", "exc", "parts"), [
    (dict(latent_dim=0), ValueError, ("latent_dim: expected a positive int, got 0",)),
    (dict(latent_dim=-2), ValueError, ("latent_dim: expected a positive int, got -2",)),
    (dict(latent_dim=2.5), TypeError, ("latent_dim: expected a positive int, got float",)),
    (dict(rope_dim=3), ValueError, ("rope_dim: RoPE rotates column pairs", "got 3")),
    (dict(rope_dim=-2), ValueError, ("rope_dim: expected an even int >= 0, got -2",)),
    (dict(q_latent_dim=0), ValueError, ("q_latent_dim: expected a positive int, got 0",)),
    (dict(head_dim=0), ValueError, ("head_dim: expected a positive int, got 0",)),
    (dict(num_heads=3), ValueError, ("num_heads=3 does not divide d_model=16", "head_dim")),
    (dict(dropout=1.0), ValueError, ("dropout: expected a probability in [0, 1), got 1.0",)),
    (dict(absorb=1), TypeError, ("absorb: expected a bool, got int",)),
])
def test_bad_settings(kwargs, exc, parts):
    settings = dict(d_model=16, num_heads=4, latent_dim=6) | kwargs
    with raises(exc, *parts):
        LatentAttentionConfig(**settings)
    with raises(exc, *parts):
        MultiHeadLatentAttention(**settings)


def test_bad_input():
    layer = _layer(4)
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with raises(ValueError, "query: expected last dimension 16 (d_model)", "(2, 3, 8)"):
        layer(torch.randn(2, 3, 8, dtype=torch.float64))
    with raises(TypeError, "query: expected dtype torch.float64", "got torch.float32"):
        layer(x.float())
    with raises(ValueError, "query: contains NaN or infinity (shape (2, 3, 16))"):
        layer(x.masked_fill(x > 1, float("nan")))
    with raises(ValueError, "key: rope_dim=4 places tokens of one sequence", "key=None"):
        layer(x, x)
    with raises(ValueError, "value: multi-head latent attention rebuilds keys and values",
                "pass value=None", "(2, 3, 16)"):
        _layer(0)(x, x, x.clone())
    with raises(ValueError, "mask: expected a shape broadcastable to",
                "(2, 4, 3, 3), got shape (3, 4)"):
        layer(x, mask=torch.ones(3, 4, dtype=torch.bool))
    with raises(TypeError, "kv_cache: expected a LatentKVCache", "got KVCache"):
        layer(x, kv_cache=KVCache())
    cache = LatentKVCache()
    layer(x, kv_cache=cache)
    with raises(ValueError, "kv_cache: holds latent and rope_keys of shapes (2, 3, 6) and "
                "(2, 3, 4), expected (1, 3, 6) and (1, 3, 4)", "kv_cache.reset()"):
        layer(x[:1], kv_cache=cache)
    with raises(ValueError, "expected (2, 3, 5) and (2, 3, 4)", "latent_dim=5"):
        check_latent_cache(cache, 5, 4, (2, 1, 16))


def test_bad_cache_appends_and_sizes():
    cache = LatentKVCache()
    with raises(TypeError, "latent: expected a torch.Tensor (batch, new_len, latent_dim)"):
        cache.append([1.0], torch.zeros(1, 1, 2))
    with raises(ValueError, "rope_keys: expected shape (batch, new_len, rope_dim), "
                "got shape (1, 2)"):
        cache.append(torch.zeros(1, 1, 6), torch.zeros(1, 2))
    with raises(ValueError, "rope_keys: expected (batch, new_len) = (1, 3)", "(1, 2, 4)"):
        cache.append(torch.zeros(1, 3, 6), torch.zeros(1, 2, 4))
    cache.append(torch.zeros(1, 3, 6), torch.zeros(1, 3, 4))
    with raises(ValueError, "latent: expected shape (batch, new_len, latent_dim) = (1, 1, 6)",
                "got shape (1, 1, 5)"):
        cache.append(torch.zeros(1, 1, 5), torch.zeros(1, 1, 4))
    with raises(TypeError, "latent: expected dtype torch.float32 (the cache's), got torch.float64"):
        cache.append(torch.zeros(1, 1, 6, dtype=torch.float64), torch.zeros(1, 1, 4))
    assert len(cache) == 3  # nothing was added by the failed calls
    with raises(ValueError, "rope_dim: RoPE rotates column pairs", "got 5"):
        latent_cache_bytes(batch=1, seq_len=1, num_layers=1, latent_dim=4, rope_dim=5)
    with raises(ValueError, "latent_dim: expected a positive int, got 0"):
        latent_cache_bytes(batch=1, seq_len=1, num_layers=1, latent_dim=0, rope_dim=0)


def test_scores_that_overflow_raise_in_both_forms():
    layer = _layer(4).float()
    x = torch.full((1, 3, 16), 1e30)
    for absorb in (False, True):
        layer.absorb = absorb
        with pytest.raises(ValueError, match="overflow"):
            layer(x)


@pytest.mark.parametrize(("kwargs", "parts"), [
    (dict(latent_q_dim=4), ("latent_q_dim: set latent_dim too",)),
    (dict(latent_rope_dim=2), ("latent_rope_dim: set latent_dim too",)),
    (dict(latent_dim=0), ("latent_dim: expected a positive int, got 0",)),
    (dict(latent_dim=6, num_kv_heads=2), ("num_kv_heads: multi-head latent attention",
                                          "leave num_kv_heads=None, got 2")),
    (dict(latent_dim=6, positional="alibi"), ("positional: multi-head latent attention",
                                              "got 'alibi'")),
    (dict(latent_dim=6, causal=True, window=4), ("window: multi-head latent attention has no "
                                                 "sliding window", "window=4")),
    (dict(latent_dim=6, latent_rope_dim=2), ("latent_rope_dim: the decoupled RoPE key needs "
                                             "positional='rope'",)),
    (dict(latent_dim=6, positional="rope", latent_rope_dim=3), ("latent_rope_dim: RoPE rotates",
                                                                "got 3")),
    (dict(d_model=24, latent_dim=6, positional="rope"), ("got 3", "the default head_dim // 2",
                                                         "head_dim = 6")),
])
def test_bad_block_settings(kwargs, parts):
    settings = dict(d_model=16, num_heads=4) | kwargs
    with raises(ValueError, *parts):
        BlockConfig(**settings)
    with raises(ValueError, *parts):  # the language model passes them on
        LMConfig(vocab_size=5, seq_len=4, **settings)


def test_model_with_latent_attention_rejects_key_value_caches():
    model = TinyLM(LMConfig(vocab_size=5, seq_len=6, d_model=16, num_heads=4, latent_dim=6))
    with raises(TypeError, "kv_cache: expected a LatentKVCache", "got KVCache"):
        model(torch.zeros(1, 2, dtype=torch.long), kv_caches=[KVCache(), KVCache()])
    mha = TinyLM(LMConfig(vocab_size=5, seq_len=6, d_model=16, num_heads=4))
    with raises(TypeError, "kv_caches: expected a list of KVCache"):
        mha(torch.zeros(1, 2, dtype=torch.long), kv_caches=[object(), object()])
    with raises(TypeError, "kv_cache: expected a KVCache, got LatentKVCache"):
        mha(torch.zeros(1, 2, dtype=torch.long), kv_caches=model.new_caches())
