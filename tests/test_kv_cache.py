"""Tests for selfattn.kv_cache: the KV cache's bookkeeping and the rolling cache.

The rolling cache must reproduce the full windowed pass exactly: float64 outputs
agree to atol=1e-12 (a handful of roundings of O(1) numbers; the cached and the
full pass add the same terms, masked keys contributing exact zeros). Its memory
must not grow with the sequence: the bytes it holds are compared with the formula.
(The plain KVCache's append and its use by the layer are tested in test_layers.)
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checking import raises
from selfattn.kv_cache import KVCache, RollingKVCache, kv_cache_bytes
from selfattn.layers import MultiHeadAttention
from selfattn.masks import causal_mask, combine_masks, sliding_window_mask

ATOL = dict(rtol=0, atol=1e-12)


@pytest.fixture(autouse=True)
def _one_thread():
    """Small layers run fastest (and steadiest on a busy machine) on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _kv(new_len: int, seed: int, batch: int = 2, heads: int = 3, head_dim: int = 4):
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, heads, new_len, head_dim)
    return (torch.randn(shape, generator=gen, dtype=torch.float64),
            torch.randn(shape, generator=gen, dtype=torch.float64))


def _feed(layer, x, cache, chunks):
    """Run ``x`` through ``layer`` in chunks of the given sizes; the outputs side by side."""
    outs, t = [], 0
    for n in chunks:
        outs.append(layer(x[:, t : t + n], kv_cache=cache)[0])
        t += n
    assert t == x.shape[1]
    return torch.cat(outs, dim=1)


# ------------------------------------------------------------------ bookkeeping
def test_kv_cache_tokens_seen_and_bytes():
    cache = KVCache()
    assert cache.tokens_seen == 0 and cache.nbytes == 0
    for n, seed in ((3, 0), (1, 1), (2, 2)):
        cache.append(*_kv(n, seed))
    assert cache.tokens_seen == len(cache) == 6
    assert cache.nbytes == kv_cache_bytes(batch=2, seq_len=6, num_layers=1, num_kv_heads=3,
                                          head_dim=4, bytes_per_value=8)


def test_rolling_cache_keeps_the_last_window_tokens():
    cache = RollingKVCache(4)
    keys = []
    for t in range(11):
        k, v = _kv(1, t)
        keys.append(k)
        out_k, out_v = cache.append(k, v)
        # the append returns what was held and the new token, at their positions
        held_before = list(range(max(0, t - 4), t))
        assert cache.key_positions.tolist() == held_before + [t]
        torch.testing.assert_close(out_k, torch.cat([keys[p] for p in held_before + [t]], 2),
                                   **ATOL)
        assert len(cache) == min(t + 1, 4) and cache.tokens_seen == t + 1
    assert cache.held_positions().tolist() == [7, 8, 9, 10]
    torch.testing.assert_close(cache.keys, torch.cat(keys[7:], 2), **ATOL)


def test_rolling_cache_with_sinks_keeps_the_first_tokens():
    cache = RollingKVCache(5, sinks=2)
    keys = []
    for t, n in enumerate((1, 3, 1, 4, 1, 2)):  # chunks of several sizes
        k, v = _kv(n, t)
        keys.append(k)
        cache.append(k, v)
    seen = cache.tokens_seen
    assert seen == 12 and cache.held_positions().tolist() == [0, 1, 9, 10, 11]
    everything = torch.cat(keys, 2)  # (batch, heads, 12, head_dim)
    torch.testing.assert_close(cache.keys, everything[:, :, [0, 1, 9, 10, 11]], **ATOL)
    cache.reset()
    assert len(cache) == 0 and cache.tokens_seen == 0 and cache.key_positions is None


@pytest.mark.parametrize("seq_len", [10, 100, 1000])
def test_rolling_cache_memory_is_the_window_whatever_the_length(seq_len):
    """Bytes held = 2 * batch * window * kv_heads * head_dim * bytes: independent of L.

    Counted from the tensors' storage, so a view into the bigger concatenation
    (window + 1 tokens) would be caught."""
    cache = RollingKVCache(8, sinks=1)
    for t in range(seq_len):
        cache.append(*_kv(1, t, batch=1, heads=2, head_dim=16))
    formula = kv_cache_bytes(batch=1, seq_len=8, num_layers=1, num_kv_heads=2, head_dim=16,
                             bytes_per_value=8)
    assert cache.nbytes == formula == 2 * 1 * 8 * 2 * 16 * 8
    assert cache.keys.is_contiguous() and cache.keys.untyped_storage().nbytes() == formula // 2


def test_full_cache_memory_grows_with_the_length():
    cache = KVCache()
    for t in range(50):
        cache.append(*_kv(1, t, batch=1, heads=2, head_dim=16))
    assert cache.nbytes == kv_cache_bytes(batch=1, seq_len=50, num_layers=1, num_kv_heads=2,
                                          head_dim=16, bytes_per_value=8)


# ------------------------------------------------------------------ exactness in a layer
@settings(max_examples=40, deadline=None)
@given(
    window=st.integers(1, 6),
    seq_len=st.integers(1, 24),
    chunks_seed=st.integers(0, 2**16),
    kv_heads=st.sampled_from([1, 2, 4]),
    positional=st.sampled_from([None, "rope", "alibi"]),
    use_fused=st.booleans(),
)
def test_rolling_cache_equals_the_full_windowed_pass(window, seq_len, chunks_seed, kv_heads,
                                                     positional, use_fused):
    torch.manual_seed(chunks_seed)
    layer = MultiHeadAttention(16, 4, causal=True, window=window, num_kv_heads=kv_heads,
                               positional=positional, use_fused=use_fused).double().eval()
    x = torch.randn(2, seq_len, 16, dtype=torch.float64)
    with torch.no_grad():
        full, _ = layer(x)
        # one token at a time, then random chunks (some longer than the window)
        by_token = _feed(layer, x, RollingKVCache(window), [1] * seq_len)
        gen = torch.Generator().manual_seed(chunks_seed)
        chunks, left = [], seq_len
        while left:
            chunks.append(min(left, int(torch.randint(1, 2 * window + 2, (1,), generator=gen))))
            left -= chunks[-1]
        cache = RollingKVCache(window)
        by_chunk = _feed(layer, x, cache, chunks)
    torch.testing.assert_close(by_token, full, **ATOL)
    torch.testing.assert_close(by_chunk, full, **ATOL)
    assert len(cache) == min(window, seq_len)


def test_rolling_cache_weights_equal_the_full_weights_by_position():
    torch.manual_seed(1)
    layer = MultiHeadAttention(8, 2, causal=True, window=3).double().eval()
    x = torch.randn(1, 9, 8, dtype=torch.float64)
    with torch.no_grad():
        _, w_full = layer(x, average_weights=False)  # (1, 2, 9, 9)
        cache = RollingKVCache(3)
        for t in range(9):
            _, w = layer(x[:, t : t + 1], kv_cache=cache, average_weights=False)
            positions = cache.key_positions
            torch.testing.assert_close(w[:, :, 0], w_full[:, :, t, positions], **ATOL)
            # the weight the step gave is all the weight the full pass gave
            torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), **ATOL)


def test_windowed_layer_with_the_full_cache_equals_the_full_pass():
    """The window mask is bottom-right aligned, so a growing KVCache works too."""
    torch.manual_seed(2)
    layer = MultiHeadAttention(8, 2, causal=True, window=3).double().eval()
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    with torch.no_grad():
        full, _ = layer(x)
        cached = _feed(layer, x, KVCache(), [2, 1, 5, 1, 3])
    torch.testing.assert_close(cached, full, **ATOL)


@pytest.mark.parametrize("window,sinks", [(4, 1), (5, 2), (3, 2), (1, 0)])
def test_sink_cache_on_a_full_attention_layer_equals_the_sink_mask(window, sinks):
    """A layer without a window, read through a rolling cache: the cache is the window.
    Its outputs are the full pass under sliding_window_mask(window, sinks)."""
    torch.manual_seed(window * 10 + sinks)
    layer = MultiHeadAttention(8, 2, causal=True, positional="rope").double().eval()
    x = torch.randn(2, 15, 8, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = layer(x, mask=sliding_window_mask(15, window=window, sinks=sinks))
        full, _ = layer(x)
        by_token = _feed(layer, x, RollingKVCache(window, sinks=sinks), [1] * 15)
        by_chunk = _feed(layer, x, RollingKVCache(window, sinks=sinks), [4, 1, 7, 3])
    torch.testing.assert_close(by_token, ref, **ATOL)
    torch.testing.assert_close(by_chunk, ref, **ATOL)
    # the first `window` tokens saw everything; later ones lost keys
    torch.testing.assert_close(by_token[:, :window], full[:, :window], **ATOL)
    assert (by_token[:, window:] - full[:, window:]).abs().max() > 1e-3


def test_the_cache_never_adds_keys_a_windowed_layer_would_not_see():
    """Layer window 3, cache window 6 with 2 sinks: the layer's own window still rules."""
    torch.manual_seed(3)
    layer = MultiHeadAttention(8, 2, causal=True, window=3).double().eval()
    x = torch.randn(1, 14, 8, dtype=torch.float64)
    both = combine_masks(sliding_window_mask(14, window=3),
                         sliding_window_mask(14, window=6, sinks=2))
    with torch.no_grad():
        full, _ = layer(x)
        ref, _ = layer(x, mask=both)
        out = _feed(layer, x, RollingKVCache(6, sinks=2), [3, 1, 1, 6, 3])
    torch.testing.assert_close(out, ref, **ATOL)
    torch.testing.assert_close(out, full, **ATOL)  # the cache window covers the layer's


def test_a_too_small_cache_changes_the_output():
    """The exactness is not automatic: a cache shorter than the layer's window drops keys
    the layer uses, and the outputs differ from the full pass."""
    torch.manual_seed(4)
    layer = MultiHeadAttention(8, 2, causal=True, window=5).double().eval()
    x = torch.randn(1, 10, 8, dtype=torch.float64)
    with torch.no_grad():
        full, _ = layer(x)
        short = _feed(layer, x, RollingKVCache(3), [1] * 10)
        exact_mask = combine_masks(causal_mask(10), sliding_window_mask(10, window=3))
        ref, _ = layer(x, mask=exact_mask)
    torch.testing.assert_close(short, ref, **ATOL)
    assert (short[:, 3:] - full[:, 3:]).abs().max() > 1e-3


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("args", "exc", "parts"), [
    ((0,), ValueError, ("window: expected a positive int, got 0",)),
    ((-3,), ValueError, ("window: expected a positive int, got -3",)),
    (("4",), TypeError, ("window: expected a positive int, got str",)),
    ((4.0,), TypeError, ("window: expected a positive int, got float",)),
    ((4, 4), ValueError, ("sinks: expected fewer sinks than the window", "got sinks=4")),
    ((4, 9), ValueError, ("sinks: expected fewer sinks than the window", "got sinks=9")),
    ((4, -1), ValueError, ("sinks: expected an int >= 0, got -1",)),
    ((4, None), TypeError, ("sinks: expected an int >= 0, got NoneType",)),
])
def test_bad_rolling_cache_settings(args, exc, parts):
    with raises(exc, *parts):
        RollingKVCache(*args)


def test_bad_rolling_cache_use():
    cache = RollingKVCache(3)
    with raises(ValueError, "q_len: the cache has no keys yet"):
        cache.attention_mask(1)
    cache.append(*_kv(2, 0))
    with raises(ValueError, "q_len: expected at most new_len = 2 queries", "got 3"):
        cache.attention_mask(3)
    with raises(ValueError, "k: expected shape (batch, num_heads, new_len, head_dim) = "
                "(2, 3, 1, 4)", "got shape (2, 2, 1, 4)"):
        cache.append(*_kv(1, 1, heads=2))
    with raises(TypeError, "k: expected a torch.Tensor"):
        cache.append([1.0], [1.0])
    alibi = MultiHeadAttention(8, 2, causal=True, positional="alibi")
    with raises(ValueError, "kv_cache: ALiBi's bias needs keys at consecutive positions",
                "sinks=1"):
        alibi(torch.zeros(1, 2, 8), kv_cache=RollingKVCache(3, sinks=1))
