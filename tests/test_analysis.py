"""selfattn.analysis: per-head attention maps, head patterns, longer contexts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattn.analysis import (
    ablate_heads,
    attention_maps,
    head_patterns,
    prefix_matching_scores,
    previous_token_scores,
    windowed_nll,
    with_context,
)
from selfattn.kv_cache import RollingKVCache
from selfattn.language_model import LMConfig, TinyLM
from selfattn.masks import sliding_window_mask
from selfattn.perplexity import token_nll


def _model(positional: str = "learned") -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(LMConfig(vocab_size=9, seq_len=8, d_model=16, num_heads=4, num_layers=2,
                           positional=positional)).eval()


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_maps_are_the_weights_the_model_uses(positional: str) -> None:
    model = _model(positional)
    idx = torch.randint(0, 9, (3, 8))
    maps = attention_maps(model, idx)
    assert maps.shape == (2, 3, 4, 8, 8)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-6)
    assert np.abs(np.triu(maps, k=1)).max() == 0.0
    # block 0's weights recomputed from the model's own parameters
    with torch.no_grad():
        x = model.pos(model.tok_emb(idx))
        _, w = model.blocks[0].attn(model.blocks[0].ln1(x), need_weights=True,
                                    average_weights=False)
    np.testing.assert_allclose(maps[0], w.double().numpy(), atol=1e-7)


def test_head_patterns_on_known_maps() -> None:
    L = 6
    prev = np.zeros((L, L))
    prev[0, 0] = 1.0
    prev[np.arange(1, L), np.arange(L - 1)] = 1.0  # pure previous-token head
    first = np.zeros((L, L))
    first[:, 0] = 1.0  # pure sink
    maps = np.stack([prev, first, np.eye(L)])[None, None]  # (1, 1, 3, L, L)
    p = head_patterns(maps)
    np.testing.assert_allclose(p["previous"], [[1, 0, 0]])
    np.testing.assert_allclose(p["first"], [[0, 1, 0]])
    np.testing.assert_allclose(p["self"], [[0, 0, 1]])
    with pytest.raises(ValueError, match="maps"):
        head_patterns(np.zeros((2, 3, 3)))


def test_with_context_keeps_outputs_on_short_inputs() -> None:
    for positional in ("learned", "sinusoidal", "rope", "alibi", "none"):
        model = _model(positional)
        longer = with_context(model, 20)
        idx = torch.randint(0, 9, (2, 8))
        with torch.no_grad():
            assert torch.allclose(longer(idx), model(idx), atol=1e-6)
            assert longer(torch.randint(0, 9, (1, 20))).shape == (1, 20, 9)
    with pytest.raises(ValueError, match="seq_len"):
        with_context(_model(), 4)
    with pytest.raises(TypeError, match="model"):
        attention_maps(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))


def _uniform_causal(L: int) -> np.ndarray:
    """Even weights over the visible keys: row t is 1 / (t + 1) on keys 0..t."""
    return np.tril(np.ones((L, L))) / np.arange(1, L + 1)[:, None]


def test_previous_token_scores_on_known_maps() -> None:
    L = 7
    prev = np.eye(L, k=-1)
    prev[0, 0] = 1.0  # pure previous-token head (position 0 can only see itself)
    maps = np.stack([prev, _uniform_causal(L), np.eye(L)])[None, None]  # (1, 1, 3, L, L)
    t = np.arange(1, L)
    np.testing.assert_allclose(previous_token_scores(maps), [[1.0, np.mean(1 / (t + 1)), 0.0]])
    np.testing.assert_allclose(previous_token_scores(maps, first_query=3)[0, 1],
                               np.mean(1 / (np.arange(3, L) + 1)))
    # head_patterns' "previous" is the same score from t = 2
    np.testing.assert_allclose(head_patterns(maps)["previous"],
                               previous_token_scores(maps, first_query=2))
    for bad in (0, L, 1.5):
        with pytest.raises(ValueError, match="first_query"):
            previous_token_scores(maps, first_query=bad)


def test_prefix_matching_scores_on_a_repeated_sequence() -> None:
    n = 4
    idx = np.array([[3, 1, 4, 0, 3, 1, 4, 0]])  # n tokens, then the same n again
    L = 2 * n
    induction = np.zeros((L, L))  # query t of the second repeat -> key t - n + 1
    for t in range(L):
        induction[t, t - n + 1 if t >= n else 0] = 1.0
    prev = np.eye(L, k=-1)
    prev[0, 0] = 1.0
    maps = np.stack([induction, prev, _uniform_causal(L)])[None, None]  # (1, 1, 3, L, L)
    scores = prefix_matching_scores(maps, idx, first_query=n)
    # the uniform head: one prefix-matching key among t + 1 visible ones
    uniform = np.mean(1 / (np.arange(n, L) + 1))
    np.testing.assert_allclose(scores, [[1.0, 0.0, uniform]])
    # no token repeats in the first half: scoring from 0 scores the same queries
    np.testing.assert_allclose(prefix_matching_scores(maps, torch.from_numpy(idx)), scores)


def _prefix_matching_loop(maps: np.ndarray, idx: np.ndarray, first_query: int) -> np.ndarray:
    """Reference: one query at a time, one earlier occurrence at a time."""
    layers, batch, heads, L, _ = maps.shape
    total, count = np.zeros((layers, heads)), 0
    for b in range(batch):
        for t in range(first_query, L):
            keys = [s + 1 for s in range(t) if idx[b, s] == idx[b, t]]
            if keys:
                total += maps[:, b, :, t][..., keys].sum(axis=-1)  # (layers, heads)
                count += 1
    return total / count


@pytest.mark.parametrize("first_query", [0, 5])
def test_prefix_matching_scores_equal_a_loop(first_query: int) -> None:
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 4, (3, 12))  # a small vocabulary: tokens repeat, often twice
    maps = rng.random((2, 3, 2, 12, 12)) * np.tril(np.ones((12, 12)))
    maps /= maps.sum(-1, keepdims=True)
    np.testing.assert_allclose(prefix_matching_scores(maps, idx, first_query),
                               _prefix_matching_loop(maps, idx, first_query), atol=1e-12)


def test_prefix_matching_scores_errors() -> None:
    maps = np.ones((1, 2, 1, 5, 5)) / 5
    with pytest.raises(ValueError, match=r"idx.*\(2, 5\)"):
        prefix_matching_scores(maps, np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match="idx"):
        prefix_matching_scores(maps, np.zeros((2, 5)))  # float ids
    with pytest.raises(ValueError, match="nothing to score"):
        prefix_matching_scores(maps, np.arange(10).reshape(2, 5))  # no token repeats
    with pytest.raises(ValueError, match="first_query"):
        prefix_matching_scores(maps, np.zeros((2, 5), dtype=int), first_query=5)
    with pytest.raises(ValueError, match="maps"):
        prefix_matching_scores(np.ones((2, 5, 5)), np.zeros((2, 5), dtype=int))


def _stream_without(model: TinyLM, idx: torch.Tensor, layer: int, head: int) -> torch.Tensor:
    """Logits of ``model`` computed by hand, with head ``head`` of block ``layer`` removed:
    the block's attention output minus that head's term C_j W_O^(j)."""
    x = model.pos(model.tok_emb(idx))
    for i, block in enumerate(model.blocks):
        h = block.ln1(x)
        out, w = block.attn(h, need_weights=True, average_weights=False)
        if i == layer:
            cols = slice(head * block.attn.head_dim, (head + 1) * block.attn.head_dim)
            v = block.attn.w_v(h)[..., cols]  # (batch, L, head_dim): V_j
            context = w[:, head] @ v  # (batch, L, head_dim): C_j = A_j V_j
            out = out - context @ block.attn.w_o.weight[:, cols].T  # minus C_j W_O^(j)
        x = x + out
        x = x + block.mlp(block.ln2(x))
    return model.head(model.ln_f(x))


def test_ablating_a_head_removes_exactly_its_term() -> None:
    model = _model().double()
    idx = torch.randint(0, 9, (3, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(idx)
        for layer, head in ((0, 2), (1, 0)):
            with ablate_heads(model, [(layer, head)]) as ablated:
                assert ablated is model
                logits = model(idx)
            np.testing.assert_allclose(logits, _stream_without(model, idx, layer, head),
                                       atol=1e-12)
            assert (logits - before).abs().max() > 1e-3  # the head mattered
        # hooks are gone on exit, also after an error inside the block
        with pytest.raises(RuntimeError, match="inside"):
            with ablate_heads(model, [(0, 0), (1, 3)]):
                raise RuntimeError("inside")
        assert torch.equal(model(idx), before)
        with ablate_heads(model, []):  # nothing ablated: nothing changes
            assert torch.equal(model(idx), before)
        # every head of block 0 off: its attention adds only W_O's bias
        with ablate_heads(model, [(0, h) for h in range(4)]):
            maps_off = attention_maps(model, idx)
        x = model.pos(model.tok_emb(idx)) + model.blocks[0].attn.w_o.bias
        x = x + model.blocks[0].mlp(model.blocks[0].ln2(x))
        _, w = model.blocks[1].attn(model.blocks[1].ln1(x), average_weights=False)
        np.testing.assert_allclose(maps_off[1], w.numpy(), atol=1e-12)


def test_ablate_heads_errors() -> None:
    model = _model()
    for bad in ([(2, 0)], [(0, 4)], [(0, -1)], [0], [(0, 1, 2)], [(0.0, 1)]):
        with pytest.raises(ValueError, match="heads"):
            with ablate_heads(model, bad):
                pass
    with pytest.raises(TypeError, match="heads"):
        with ablate_heads(model, 3):
            pass
    with pytest.raises(TypeError, match="model"):
        with ablate_heads(torch.nn.Linear(2, 2), []):
            pass


def _stream_model(positional: str = "none", seq_len: int = 8) -> TinyLM:
    torch.manual_seed(3)
    return TinyLM(LMConfig(vocab_size=9, seq_len=seq_len, d_model=16, num_heads=4,
                           num_layers=2, positional=positional)).double().eval()


@pytest.mark.parametrize("recompute", [False, True])
def test_windowed_nll_is_the_plain_pass_when_the_window_holds_everything(recompute: bool) -> None:
    model = _stream_model(seq_len=12)
    ids = torch.randint(0, 9, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain, _ = token_nll(model(ids[:, :-1]).double(), ids[:, 1:])
    for sinks in (0, 2):
        got = windowed_nll(model, ids, window=12, sinks=sinks, recompute=recompute)
        np.testing.assert_allclose(got, plain.numpy(), atol=1e-12)


@pytest.mark.parametrize("sinks", [0, 1, 3])
def test_windowed_nll_cache_equals_token_by_token_and_the_masked_pass(sinks: int) -> None:
    """The rolling cache, fed in chunks, equals feeding one token at a time, and equals a
    full pass with the sliding-window mask (with sinks) in every block."""
    model = _stream_model(seq_len=8)
    n, w = 30, 6
    ids = torch.randint(0, 9, (2, n), generator=torch.Generator().manual_seed(1))
    got = windowed_nll(model, ids, window=w, sinks=sinks)
    longer = with_context(model, n)
    assert longer.tok_emb.weight.dtype == torch.float64  # the model's dtype
    caches = [RollingKVCache(w, sinks) for _ in longer.blocks]
    with torch.no_grad():
        steps = torch.cat([longer(ids[:, t : t + 1], kv_caches=caches)
                           for t in range(n - 1)], dim=1)
        one_by_one, _ = token_nll(steps.double(), ids[:, 1:])
        mask = sliding_window_mask(n - 1, window=w, sinks=sinks, like=steps)
        x = longer.pos(longer.tok_emb(ids[:, :-1]))
        for block in longer.blocks:
            x = block.update(x, mask=mask)
        masked, _ = token_nll(longer.head(longer.ln_f(x)).double(), ids[:, 1:])
    np.testing.assert_allclose(got, one_by_one.numpy(), atol=1e-12)
    np.testing.assert_allclose(got, masked.numpy(), atol=1e-12)


@pytest.mark.parametrize(("positional", "sinks"), [("none", 0), ("none", 2), ("learned", 1),
                                                   ("rope", 2)])
def test_windowed_nll_recompute_equals_a_loop(positional: str, sinks: int) -> None:
    model = _stream_model(positional)
    n, w = 20, 5
    ids = torch.randint(0, 9, (2, n), generator=torch.Generator().manual_seed(2))
    got = windowed_nll(model, ids, window=w, sinks=sinks, recompute=True, batch_size=7)
    expected = np.empty((2, n - 1))
    with torch.no_grad():
        for t in range(n - 1):
            if t < w:
                seen = list(range(t + 1))
            else:
                seen = list(range(sinks)) + list(range(t - (w - sinks) + 1, t + 1))
            assert len(seen) <= w
            logits = model(ids[:, seen])[:, -1].double()  # (2, V)
            expected[:, t] = -torch.log_softmax(logits, -1)[torch.arange(2), ids[:, t + 1]]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # the cache and recomputation see the same tokens but differ from the second block up
    cached = windowed_nll(model, ids, window=w, sinks=sinks) if positional != "learned" \
        else windowed_nll(model, ids[:, :9], window=w, sinks=sinks)
    assert np.abs(cached - got[:, : cached.shape[1]]).max() > 1e-3


def test_windowed_nll_errors() -> None:
    model = _stream_model()
    ids = torch.zeros(2, 12, dtype=torch.long)
    with pytest.raises(ValueError, match="window"):
        windowed_nll(model, ids, window=9)
    with pytest.raises(ValueError, match="window"):
        windowed_nll(model, ids, window=0)
    with pytest.raises(ValueError, match="sinks"):
        windowed_nll(model, ids, window=4, sinks=4)
    with pytest.raises(ValueError, match="learned position table"):
        windowed_nll(_stream_model("learned"), ids, window=4)
    with pytest.raises(ValueError, match="causal"):
        windowed_nll(TinyLM(LMConfig(vocab_size=9, seq_len=8, causal=False)), ids, window=4)
    with pytest.raises(ValueError, match="tokens"):
        windowed_nll(model, torch.full((2, 12), 9), window=4)
    with pytest.raises(TypeError, match="tokens"):
        windowed_nll(model, ids.float(), window=4)
    with pytest.raises(TypeError, match="model"):
        windowed_nll(torch.nn.Linear(2, 2), ids, window=4)
