"""selfattn.analysis: per-head attention maps, head patterns, longer contexts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattn.analysis import attention_maps, head_patterns, with_context
from selfattn.language_model import LMConfig, TinyLM


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
