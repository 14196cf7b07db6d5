"""Looking inside a trained :class:`~selfattn.language_model.TinyLM`.

* :func:`attention_maps` returns the attention weights of every head of every
  block for a batch of token ids (the model's own forward pass, step by step).
* :func:`head_patterns` scores each head on three patterns trained models are
  known to show: attending to the **previous** token, to the **first** token
  (an "attention sink") and to **itself**.
* :func:`with_context` copies a trained model into one with a longer context,
  to test how its position scheme extrapolates beyond the training length.

Shape legend: ``num_layers`` blocks, ``batch`` sequences, ``num_heads`` (h),
``L`` tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from selfattn._checks import check_token_ids
from selfattn.language_model import LMConfig, TinyLM

__all__ = ["attention_maps", "head_patterns", "with_context"]


@torch.no_grad()
def attention_maps(model: TinyLM, idx: Tensor) -> np.ndarray:
    """Attention weights of every head of every block of ``model`` on ``idx``.

    Runs the forward pass of :class:`~selfattn.language_model.TinyLM` in eval
    mode, asking each block's self-attention for its per-head weights; the
    final logits are not needed.

    Args:
        model: a :class:`~selfattn.language_model.TinyLM`.
        idx: ``(batch, L)`` integer token ids, ``L <= config.seq_len``.

    Returns:
        ``(num_layers, batch, num_heads, L, L)`` float64 NumPy array; every row
        (query) sums to 1 and, for a causal model, is zero right of the diagonal.

    Raises:
        ValueError: as :meth:`~selfattn.language_model.TinyLM.forward` (TypeError for a wrong type).
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    check_token_ids(idx, model.config.vocab_size, seq_len=model.config.seq_len)
    was_training = model.training
    model.eval()
    try:
        x = model.pos(model.tok_emb(idx))  # (batch, L, d_model)
        maps = []
        for block in model.blocks:  # idx was checked above: the unchecked paths from here
            h = block.ln1(x)  # (batch, L, d_model), what the self-attention reads
            _, w = block.attn.attend(h, h, h, need_weights=True, average_weights=False)
            maps.append(w.double().numpy())  # (batch, num_heads, L, L)
            x = block.update(x)  # (batch, L, d_model)
    finally:
        model.train(was_training)
    return np.stack(maps)  # (num_layers, batch, num_heads, L, L)


def head_patterns(maps: np.ndarray) -> dict[str, np.ndarray]:
    """Mean weight each head puts on the previous token, the first token and itself.

    Averages are over the batch and over query positions ``t >= 2`` (at
    ``t = 0`` all three patterns coincide and at ``t = 1`` "previous" and
    "first" do).

    Args:
        maps: ``(num_layers, batch, num_heads, L, L)`` from :func:`attention_maps`, ``L >= 3``.

    Returns:
        ``{"previous", "first", "self"}``, each ``(num_layers, num_heads)`` in [0, 1].
    """
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim != 5 or maps.shape[-1] != maps.shape[-2] or maps.shape[-1] < 3:
        raise ValueError(
            "maps: expected shape (num_layers, batch, num_heads, L, L) with L >= 3, "
            f"got shape {maps.shape}"
        )
    L = maps.shape[-1]
    t = np.arange(2, L)  # query positions scored
    return {
        "previous": maps[..., t, t - 1].mean(axis=(1, 3)),  # (num_layers, num_heads)
        "first": maps[..., t, 0].mean(axis=(1, 3)),
        "self": maps[..., t, t].mean(axis=(1, 3)),
    }


def with_context(model: TinyLM, seq_len: int) -> TinyLM:
    """A copy of ``model`` that accepts sequences up to ``seq_len`` tokens.

    Every parameter is copied. With learned positions the table grows: rows
    ``0 .. config.seq_len - 1`` are the trained ones, the new rows keep the
    random initial values of a fresh table (drawn from PyTorch's global
    generator), since no training ever reached them. Sinusoidal positions are
    a formula and simply extend; RoPE, ALiBi and "none" have no table.

    Args:
        model: a :class:`~selfattn.language_model.TinyLM`.
        seq_len: the new context length, ``>= config.seq_len``.

    Returns:
        A new :class:`~selfattn.language_model.TinyLM` in eval mode.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    old = model.config
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < old.seq_len:
        raise ValueError(f"seq_len: expected an int >= config.seq_len = {old.seq_len}, "
                         f"got {seq_len!r}")
    config: LMConfig = dataclasses.replace(old, seq_len=seq_len)
    longer = TinyLM(config)
    state = model.state_dict()
    key = "pos.embedding.weight"
    if key in state:  # learned table: trained rows first, untrained rows after
        table = longer.state_dict()[key].clone()  # (seq_len, d_model)
        table[: old.seq_len] = state[key]
        state = {**state, key: table}
    longer.load_state_dict(state)
    return longer.eval()
