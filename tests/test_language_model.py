"""Tests for selfattn.language_model: causality, KV cache, sampling, training, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from selfattn.data import MarkovSource
from selfattn.kv_cache import KVCache, RollingKVCache, kv_cache_bytes
from selfattn.language_model import LMConfig, TinyLM, evaluate_perplexity
from selfattn.perplexity import perplexity
from selfattn.training import train_language_model


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest (and steadiest on a busy machine) on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(causal: bool = True, positional: str = "learned", seed: int = 0, **kw) -> TinyLM:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=11, seq_len=12, d_model=16, num_heads=2, num_layers=2,
                   causal=causal, positional=positional, **kw)
    return TinyLM(cfg).eval()


def _ids(shape: tuple[int, ...], seed: int, vocab: int = 11) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ structure


def test_forward_shape_and_parameter_count():
    m = _model()
    logits = m(_ids((3, 12), 0))
    assert logits.shape == (3, 12, 11) and logits.dtype == torch.float32
    d, ff, v, L = 16, 64, 11, 12
    block = 2 * 2 * d + 4 * (d * d + d) + (d * ff + ff) + (ff * d + d)  # 2 LN, MHA, MLP
    expected = v * d + L * d + 2 * block + 2 * d + (d * v + v)
    assert m.num_parameters() == expected
    # sinusoidal positions have no parameters
    assert _model(positional="sinusoidal").num_parameters() == expected - L * d
    assert m.config.ff_dim == 64 and LMConfig(5, 4, d_ff=7).ff_dim == 7


def test_attention_layers_follow_the_config():
    m = _model(causal=False, dropout=0.1)
    assert all(not b.attn.causal and b.attn.dropout.p == 0.1 for b in m.blocks)
    assert all(b.attn.causal for b in _model().blocks)


# ------------------------------------------------------------------ causality


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 11), seed=st.integers(0, 1000), positional=st.sampled_from(
    ["learned", "sinusoidal"]))
def test_changing_future_tokens_leaves_earlier_logits_unchanged(k, seed, positional):
    m = _model(positional=positional)
    idx = _ids((2, 12), seed)
    changed = idx.clone()
    changed[:, k:] = (changed[:, k:] + 1 + _ids((2, 12 - k), seed + 1, 10)) % 11  # all differ
    with torch.no_grad():
        a, b = m(idx), m(changed)
    torch.testing.assert_close(a[:, :k], b[:, :k], rtol=0, atol=1e-5)
    assert not torch.allclose(a[:, k:], b[:, k:])
    # a prefix on its own gives the same logits as inside the longer sequence
    with torch.no_grad():
        torch.testing.assert_close(m(idx[:, :k]), a[:, :k], rtol=1e-5, atol=1e-5)


def test_non_causal_model_sees_the_future():
    m = _model(causal=False)
    idx = _ids((2, 12), 3)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    with torch.no_grad():
        a, b = m(idx), m(changed)
    assert (a[:, 0] - b[:, 0]).abs().max() > 1e-4  # position 0 reacted to the last token


# ------------------------------------------------------------------ KV cache and generation


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_cached_forward_equals_full_forward(positional):
    m = _model(positional=positional)
    idx = _ids((2, 12), 4)
    with torch.no_grad():
        full = m(idx)
        caches = m.new_caches()
        parts = [m(idx[:, :5], caches), m(idx[:, 5:6], caches), m(idx[:, 6:], caches)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)
    assert all(len(c) == 12 for c in caches)


@pytest.mark.parametrize(("prompt_len", "new"), [(1, 11), (3, 30), (12, 5), (20, 4)])
def test_greedy_generation_same_with_and_without_cache(prompt_len, new):
    # (3, 30) and (12, 5) go past the 12-token window, (20, 4) starts past it
    m = _model(seed=5)
    prompt = _ids((3, prompt_len), 6)
    a = m.generate(prompt, new, greedy=True, use_cache=True)
    b = m.generate(prompt, new, greedy=True, use_cache=False)
    assert a.shape == (3, prompt_len + new) and a.dtype == torch.int64
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a[:, :prompt_len], prompt, rtol=0, atol=0)
    # greedy = argmax of the model's own logits at every step (inside the window)
    with torch.no_grad():
        for t in range(prompt_len, min(prompt_len + new, 12)):
            assert torch.equal(m(a[:, :t])[:, -1].argmax(-1), a[:, t])


# ------------------------------------------------------------------ sliding window


def _windowed(window: int, positional: str = "learned", num_layers: int = 3,
              seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    cfg = LMConfig(vocab_size=11, seq_len=48, d_model=16, num_heads=2, num_layers=num_layers,
                   positional=positional, window=window)
    return TinyLM(cfg).double().eval()


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("window", [1, 3, 5])
def test_rolling_caches_equal_the_full_windowed_pass_at_every_depth(positional, window):
    """A sliding-window model read through rolling caches holding `window` tokens per block:
    the logits equal the full pass to 1e-12 in float64, token by token and in chunks, at
    every position of a sequence many windows long (4 blocks deep)."""
    model = _windowed(window, positional, num_layers=4)
    idx = _ids((2, 48), seed=window)
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches()
        assert all(isinstance(c, RollingKVCache) and c.window == window for c in caches)
        by_token = torch.cat([model(idx[:, t : t + 1], kv_caches=caches) for t in range(48)], 1)
        assert all(len(c) == window and c.tokens_seen == 48 for c in caches)
        caches, outs, t = model.new_caches(), [], 0
        for n in (5, 1, 11, 2, 29):
            outs.append(model(idx[:, t : t + n], kv_caches=caches))
            t += n
    torch.testing.assert_close(by_token, full, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-12)


def test_windowed_model_reach_grows_by_window_minus_one_per_block():
    """Each block looks back window - 1 tokens, so after `layers` blocks a logit depends on
    the last layers * (window - 1) + 1 tokens: one more is exactly without effect."""
    window, layers = 3, 3
    model = _windowed(window, num_layers=layers)
    idx = _ids((1, 30), seed=7)
    reach = layers * (window - 1)  # how far back the last position can see
    with torch.no_grad():
        last = model(idx)[:, -1]
        for back, changes in ((reach, True), (reach + 1, False)):
            other = idx.clone()
            other[0, -1 - back] = (other[0, -1 - back] + 1) % 11
            diff = (model(other)[:, -1] - last).abs().max().item()
            assert (diff > 1e-6) if changes else (diff == 0.0), (back, diff)


def test_windowed_model_cache_memory_does_not_grow():
    model = _windowed(4, num_layers=2)
    idx = _ids((1, 40), seed=2)
    sizes = []
    with torch.no_grad():
        caches = model.new_caches()
        for t in range(40):
            model(idx[:, t : t + 1], kv_caches=caches)
            if t + 1 in (10, 20, 40):
                sizes.append(sum(c.nbytes for c in caches))
    formula = kv_cache_bytes(batch=1, seq_len=4, num_layers=2, num_kv_heads=2, head_dim=8,
                             bytes_per_value=8)
    assert sizes == [formula] * 3


def test_windowed_greedy_generation_same_with_and_without_cache():
    model = _windowed(4, "rope")
    prompt = _ids((2, 3), seed=4)
    # 60 new tokens: past the 48-token context, where the cache is rebuilt
    with_cache = model.generate(prompt, 60, greedy=True)
    without = model.generate(prompt, 60, greedy=True, use_cache=False)
    assert torch.equal(with_cache, without)


def test_default_model_keeps_the_growing_cache():
    assert all(type(c) is KVCache for c in _model().new_caches())
    assert _model().config.window is None


def test_sampling_follows_softmax_of_logits_over_temperature():
    m = _model(seed=7)
    prompt = _ids((1, 4), 8).expand(6000, 4)
    temperature = 1.7
    out = m.generate(prompt, 1, temperature=temperature,
                     generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        p = torch.softmax(m(prompt[:1])[0, -1].double() / temperature, -1).numpy()
    freq = np.bincount(out[:, -1].numpy(), minlength=11) / 6000
    sd = np.sqrt(p * (1 - p) / 6000)
    assert (np.abs(freq - p) < 5 * sd + 1e-9).all()


def test_sampling_is_reproducible_and_low_temperature_is_greedy():
    m = _model(seed=9)
    prompt = _ids((2, 3), 10)
    a = m.generate(prompt, 15, generator=torch.Generator().manual_seed(1))
    b = m.generate(prompt, 15, generator=torch.Generator().manual_seed(1), use_cache=False)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    cold = m.generate(prompt, 15, temperature=1e-6, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(cold, m.generate(prompt, 15, greedy=True), rtol=0, atol=0)


def test_generate_restores_training_mode():
    m = _model().train()
    m.generate(_ids((1, 2), 0), 3, greedy=True)
    assert m.training


# ------------------------------------------------------------------ evaluation


def test_evaluate_perplexity_on_single_windows_matches_perplexity():
    m = _model(seed=11)
    rows = _ids((5, 13), 12)  # 12 inputs + 12 targets: exactly one window per row
    with torch.no_grad():
        expected = float(perplexity(m(rows[:, :-1]).double(), rows[:, 1:]))
    assert evaluate_perplexity(m, rows) == pytest.approx(expected, rel=1e-12)
    assert evaluate_perplexity(m, rows.numpy(), batch_size=2) == pytest.approx(expected, 1e-12)


@pytest.mark.parametrize("stride", [1, 5, 12, None])
def test_evaluate_perplexity_windows_match_a_reference_loop(stride):
    m = _model(seed=13)
    row = _ids((40,), 14)
    L, s = 12, 12 if stride is None else stride
    # Reference, one target at a time. Window k holds inputs [k*s, k*s + L) and
    # scores the targets it adds, (L + (k-1)*s, L + k*s]; so target p > L is
    # predicted from the context row[k*s : p] with k = ceil((p - L) / s).
    nll = []
    with torch.no_grad():
        for p in range(1, 40):
            k = max(0, math.ceil((p - L) / s))
            logp = torch.log_softmax(m(row[None, k * s : p])[0, -1].double(), -1)  # (V,)
            nll.append(-float(logp[row[p]]))
    got = evaluate_perplexity(m, row, stride=stride)
    assert got == pytest.approx(math.exp(np.mean(nll)), rel=1e-6)  # float32 model


def test_sliding_window_gives_each_target_the_longest_context():
    m = _model(seed=15)
    row = _ids((30,), 16)
    with torch.no_grad():  # stride 1: target p sees the L tokens before it (or all if fewer)
        nll = [-float(torch.log_softmax(m(row[None, max(0, p - 12) : p])[0, -1].double(), -1)[
            row[p]]) for p in range(1, 30)]
    assert evaluate_perplexity(m, row, stride=1) == pytest.approx(math.exp(np.mean(nll)), 1e-6)
    assert evaluate_perplexity(m, row, stride=1) != pytest.approx(evaluate_perplexity(m, row))


# ------------------------------------------------------------------ training


def _tiny_run(causal: bool = True, steps: int = 60):
    src = MarkovSource.random(8, branching=2, seed=0)
    train = src.sample(64, 33, seed=1)
    held = src.sample(16, 33, seed=2)
    torch.manual_seed(0)
    m = TinyLM(LMConfig(vocab_size=8, seq_len=16, d_model=16, num_heads=2, num_layers=1,
                        causal=causal))
    hist = train_language_model(m, train, steps=steps, batch_size=16, lr=1e-2, seed=3,
                                eval_tokens=held, eval_every=20)
    return src, m, hist


def test_training_reduces_loss_and_is_deterministic():
    src, m, h1 = _tiny_run()
    _, _, h2 = _tiny_run()
    assert h1 == h2  # identical losses and perplexities, bit for bit
    assert [r["step"] for r in h1] == [0, 20, 40, 60]
    assert h1[0]["train_loss"] == pytest.approx(math.log(8), abs=0.5)  # fresh model ~ uniform
    assert h1[-1]["train_loss"] < math.log(8) - 0.5
    assert h1[-1]["eval_ppl"] < h1[0]["eval_ppl"]
    # an honest model cannot beat the source's floor (2.0) on held-out data
    assert h1[-1]["eval_ppl"] > src.perplexity_floor()
    assert not m.training


def test_non_causal_model_cheats_below_the_floor():
    src, m, hist = _tiny_run(causal=False, steps=200)
    # seeing the target lets it go below exp(entropy rate) = 2, impossible for a real predictor
    assert hist[-1]["eval_ppl"] < 0.75 * src.perplexity_floor()
    assert math.exp(hist[-1]["train_loss"]) < src.perplexity_floor()


# ------------------------------------------------------------------ bad input

_M = _model()


def _cases():
    long_ids = torch.zeros(1, 13, dtype=torch.long)
    return [
        (lambda: _M(torch.zeros(2, 5)), TypeError,
         "idx: expected an integer dtype (token ids), got torch.float32"),
        (lambda: _M(np.zeros((2, 5), dtype=np.int64)), TypeError,
         "idx: expected a torch.Tensor (batch, seq_len), got ndarray"),
        (lambda: _M(torch.zeros(5, dtype=torch.long)), ValueError,
         "idx: expected shape (batch, seq_len), got shape (5,)"),
        (lambda: _M(long_ids), ValueError,
         "idx: expected seq_len <= config.seq_len = 12, got shape (1, 13)"),
        (lambda: _M(torch.tensor([[1, 11]])), ValueError,
         "idx: expected token ids in [0, 11), got values in [1, 11] (shape (1, 2))"),
        (lambda: _M(torch.zeros(2, 4, dtype=torch.long), [_M.new_caches()[0]]), ValueError,
         "kv_caches: expected 2 caches (config.num_layers), got 1"),
        (lambda: LMConfig(vocab_size=5, seq_len=4, d_model=10, num_heads=3), ValueError,
         "num_heads: num_heads=3 does not divide d_model=10"),
        (lambda: LMConfig(vocab_size=5, seq_len=4, positional="rotary"), ValueError,
         "positional: expected one of ('learned', 'sinusoidal', 'rope', 'alibi', 'none'), "
         "got 'rotary'"),
        (lambda: LMConfig(vocab_size=0, seq_len=4), ValueError,
         "vocab_size: expected a positive int, got 0"),
        (lambda: _model(causal=False).generate(torch.zeros(1, 2, dtype=torch.long), 3),
         ValueError, "use_cache: a KV cache is only valid for a causal model"),
        (lambda: _M.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=0.0),
         ValueError, "temperature: expected a float > 0, got 0.0"),
        (lambda: evaluate_perplexity(_M, np.zeros(30, dtype=np.int64), stride=13), ValueError,
         "stride: expected 1 <= stride <= config.seq_len = 12, got 13"),
        (lambda: evaluate_perplexity(_M, np.zeros((3, 1), dtype=np.int64)), ValueError,
         "tokens: expected at least 2 tokens per row (one input, one target), got shape (3, 1)"),
        (lambda: train_language_model(_M, np.full((2, 20), 11), steps=1), ValueError,
         "train_tokens: expected token ids in [0, 11), got values in [11, 11] (shape (2, 20))"),
        (lambda: train_language_model(_M, np.zeros((2, 10), dtype=np.int64), steps=1),
         ValueError,
         "train_tokens: expected at least config.seq_len + 1 = 13 tokens per row, "
         "got shape (2, 10)"),
        (lambda: TinyLM({"vocab_size": 5}), TypeError, "config: expected an LMConfig, got dict"),
        (lambda: LMConfig(vocab_size=5, seq_len=4, window=0), ValueError,
         "window: expected a positive int, got 0"),
        (lambda: LMConfig(vocab_size=5, seq_len=4, window=2, causal=False), ValueError,
         "window: a sliding window looks back only; window=2 needs causal=True"),
        (lambda: LMConfig(vocab_size=5, seq_len=4, window=2.0), TypeError,
         "window: expected a positive int, got float"),
    ]


@pytest.mark.parametrize("case", range(len(_cases())))
def test_bad_input(case):
    fn, exc, msg = _cases()[case]
    with pytest.raises(exc, match=re.escape(msg)):
        fn()


def test_cache_overflow_names_cached_len():
    m = _model()
    caches = m.new_caches()
    with torch.no_grad():
        m(torch.zeros(1, 10, dtype=torch.long), caches)
    msg = "idx: expected seq_len <= config.seq_len - cached_len = 12 - 10 = 2, got shape (1, 3)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        m(torch.zeros(1, 3, dtype=torch.long), caches)
