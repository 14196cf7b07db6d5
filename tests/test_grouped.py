"""Grouped-query attention: head mapping against PyTorch, conversion, cache bytes, RoPE/ALiBi.

With 1 or h key/value heads every mapping of query heads to key/value heads is
the same one; the tests that pin the mapping use 4 query heads over 2 key/value
heads, where sharing heads (0, 1) and (2, 3) differs from sharing (0, 2) and (1, 3).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from selfattn.grouped import GroupedQueryAttention
from selfattn.kv_cache import KVCache, kv_cache_bytes
from selfattn.layers import MultiHeadAttention, merge_heads, split_heads
from selfattn.masks import key_padding_to_attention_mask, padding_mask


@pytest.mark.parametrize("causal", [False, True])
def test_equals_mha_when_groups_equal_heads(causal: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, causal=causal).double()
    gqa = GroupedQueryAttention.from_multi_head(mha, num_kv_heads=4)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    pad = key_padding_to_attention_mask(padding_mask([7, 4], 7, like=x))
    out, w = mha(x, mask=pad, average_weights=False)
    out2, w2 = gqa(x, mask=pad, need_weights=True, average_weights=False)
    assert torch.allclose(out, out2, atol=1e-12) and torch.allclose(w, w2, atol=1e-12)


@pytest.mark.parametrize("use_fused", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_four_query_heads_over_two_kv_heads_match_torch_enable_gqa(causal: bool,
                                                                    use_fused: bool) -> None:
    """Query heads 0, 1 read key/value head 0 and heads 2, 3 read head 1, as PyTorch pairs them."""
    torch.manual_seed(4)
    layer = MultiHeadAttention(16, 4, causal=causal, num_kv_heads=2, use_fused=use_fused).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pad = key_padding_to_attention_mask(padding_mask([6, 4], 6, like=x))  # (2, 1, 1, 6)
    out, _ = layer(x, mask=pad)
    with torch.no_grad():
        q = split_heads(layer.w_q(x), 4)  # (2, 4, 6, 4)
        k = split_heads(layer.w_k(x), 2)  # (2, 2, 6, 4): two key/value heads
        v = split_heads(layer.w_v(x), 2)
        mask = pad & torch.ones(6, 6, dtype=torch.bool).tril() if causal else pad
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        reference = layer.w_o(merge_heads(context))  # (2, 6, 16)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-12)


def test_from_multi_head_averages_consecutive_heads() -> None:
    """Key/value heads 0 = 1 and 2 = 3: averaging consecutive heads changes nothing."""
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, causal=True).double()
    with torch.no_grad():
        for lin in (mha.w_k, mha.w_v):  # rows [4h, 4h + 4) are head h
            lin.weight[4:8] = lin.weight[0:4]
            lin.weight[12:16] = lin.weight[8:12]
            lin.bias[4:8] = lin.bias[0:4]
            lin.bias[12:16] = lin.bias[8:12]
    gqa = GroupedQueryAttention.from_multi_head(mha, num_kv_heads=2)
    assert gqa.w_k.weight.shape == (8, 16)  # two heads of head_dim 4
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(gqa(x)[0], mha(x)[0], rtol=0, atol=1e-12)


def test_grouping_shares_keys_and_mean_pools() -> None:
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).double()
    mqa = GroupedQueryAttention.from_multi_head(mha, num_kv_heads=1)
    assert mqa.w_k.weight.shape == (4, 16)  # one head of head_dim 4
    assert torch.allclose(mqa.w_k.weight, mha.w_k.weight.reshape(4, 4, 16).mean(0))
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    out, _ = mqa(x)
    assert not torch.allclose(out, mha(x)[0], atol=1e-3)  # averaging changes the layer
    # by hand: every query head attends with the same keys and values
    q = mqa.w_q(x).reshape(1, 5, 4, 4).transpose(1, 2)  # (1, h, 5, 4)
    k = mqa.w_k(x)[:, None]  # (1, 1, 5, 4): shared
    v = mqa.w_v(x)[:, None]
    a = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1)
    ref = mqa.w_o((a @ v).transpose(1, 2).reshape(1, 5, 16))
    assert torch.allclose(out, ref, atol=1e-12)


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cache_equals_full_and_stores_fewer_heads(positional, kv_heads: int) -> None:
    torch.manual_seed(2)
    layer = GroupedQueryAttention(16, 4, kv_heads, causal=True, positional=positional).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    full, _ = layer(x)
    cache = KVCache()
    steps = [layer(x[:, t : t + 1], kv_cache=cache)[0] for t in range(6)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-12)
    assert cache.keys.shape == (2, kv_heads, 6, 4)
    measured = cache.keys.element_size() * (cache.keys.numel() + cache.values.numel())
    assert measured == kv_cache_bytes(batch=2, seq_len=6, num_layers=1, num_kv_heads=kv_heads,
                                      head_dim=4, bytes_per_value=8)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_relative_positions_translation_invariant(positional: str) -> None:
    """With RoPE/ALiBi and no absolute positions, a shifted window gives the same outputs."""
    torch.manual_seed(3)
    layer = GroupedQueryAttention(16, 4, 2, causal=True, positional=positional).double()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    out, _ = layer(x)
    cache = KVCache()  # pretend 4 tokens came before: positions start at 4
    layer(torch.randn(1, 4, 16, dtype=torch.float64), kv_cache=cache)
    # the same tokens later in the sequence, attending only to themselves (mask the prefix)
    mask = torch.ones(9, 13, dtype=torch.bool)
    mask[:, :4] = False
    shifted, _ = layer(x, mask=mask, kv_cache=cache)
    assert torch.allclose(out, shifted, atol=1e-10)


def test_kv_cache_bytes_formula_and_errors() -> None:
    assert kv_cache_bytes(batch=1, seq_len=4096, num_layers=32, num_kv_heads=32,
                          head_dim=128) == 2 * 4096 * 32 * 32 * 128 * 2
    with pytest.raises(ValueError, match="num_kv_heads"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="positional"):
        GroupedQueryAttention(16, 4, 2, positional="learned")
    with pytest.raises(ValueError, match="key"):
        GroupedQueryAttention(16, 4, 2, positional="rope")(torch.randn(1, 3, 16),
                                                           torch.randn(1, 3, 16))
    with pytest.raises((TypeError, ValueError), match="batch"):
        kv_cache_bytes(batch=0, seq_len=1, num_layers=1, num_kv_heads=1, head_dim=1)


@pytest.mark.parametrize("positional", ["rope", "alibi", "none"])
def test_tinylm_with_relative_positions_and_gqa(positional: str) -> None:
    from selfattn.language_model import LMConfig, TinyLM

    cfg = LMConfig(vocab_size=7, seq_len=8, d_model=16, num_heads=4, num_layers=2,
                   positional=positional, num_kv_heads=2)
    torch.manual_seed(0)
    model = TinyLM(cfg).eval()
    attn = model.blocks[0].attn  # the one attention layer, with 2 key/value heads
    assert type(attn) is MultiHeadAttention and attn.num_kv_heads == 2
    idx = torch.randint(0, 7, (2, 8))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches()
        steps = [model(idx[:, t : t + 1], kv_caches=caches) for t in range(8)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert caches[0].keys.shape == (2, 2, 8, 4)  # 2 kv heads, not 4
    with pytest.raises(ValueError, match="num_kv_heads"):
        LMConfig(vocab_size=7, seq_len=8, d_model=16, num_heads=4, num_kv_heads=3)
