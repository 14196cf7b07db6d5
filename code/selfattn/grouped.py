"""Grouped-query attention (GQA) and multi-query attention (MQA), with RoPE or ALiBi.

Multi-head attention gives each of the h heads its own keys and values. During
generation the :class:`~selfattn.kv_cache.KVCache` holds all of them, for every
token and every layer, and that memory, not arithmetic, limits long contexts.
**Grouped-query attention** keeps h query heads but only ``num_kv_heads``
key/value heads; each key/value head serves a group of ``num_heads //
num_kv_heads`` consecutive query heads. ``num_kv_heads == num_heads`` is
ordinary multi-head attention, ``num_kv_heads == 1`` is **multi-query
attention**. The cache shrinks by the factor ``num_heads / num_kv_heads``:
:func:`~selfattn.kv_cache.kv_cache_bytes` gives the formula (importable from
here too, as before).

All of this is :class:`~selfattn.layers.MultiHeadAttention` with its
``num_kv_heads`` and ``positional`` options: there is one attention layer.
:class:`GroupedQueryAttention` is that layer under the name, and with the
argument order, that the book used before, plus :meth:`~GroupedQueryAttention.from_multi_head`,
the GQA paper's conversion of a trained multi-head layer.

Shape legend: ``batch``, ``seq_len`` (L; ``q_len`` queries, ``k_len`` keys),
``d_model``, ``num_heads`` (h), ``num_kv_heads``, ``head_dim = d_model // h``.
"""

from __future__ import annotations

from typing import Any

import torch

from selfattn.kv_cache import kv_cache_bytes  # noqa: F401  (its old home: still importable)
from selfattn.layers import MultiHeadAttention

__all__ = ["GroupedQueryAttention"]


class GroupedQueryAttention(MultiHeadAttention):
    """:class:`~selfattn.layers.MultiHeadAttention` with ``num_kv_heads`` as third argument.

    ``GroupedQueryAttention(d_model, num_heads, num_kv_heads, ...)`` is
    ``MultiHeadAttention(d_model, num_heads, ..., num_kv_heads=num_kv_heads)``:
    query head ``i`` uses key/value head ``i // (num_heads // num_kv_heads)``.
    Everything else (forward, the KV cache, RoPE/ALiBi) is the one layer's.

    Args:
        d_model: width of the tokens.
        num_heads: h, query heads (divides ``d_model``).
        num_kv_heads: key/value heads (divides ``num_heads``); h gives MHA, 1 gives MQA.
        dropout: drop probability of the attention weights in training.
        bias: biases in the four projections.
        causal: mask the future (self-attention of a decoder).
        positional: None, ``"rope"`` or ``"alibi"`` (position inside attention).
        rope_base: RoPE's wavelength base.
        kwargs: further settings of :class:`~selfattn.layers.MultiHeadAttention`
            (``use_fused``, ``head_dim``).
    """

    def __init__(
        self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float = 0.0,
        bias: bool = True, causal: bool = False, positional: str | None = None,
        rope_base: float = 10000.0, **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, dropout, bias, causal, num_kv_heads=num_kv_heads,
                         positional=positional, rope_base=rope_base, **kwargs)

    @classmethod
    @torch.no_grad()
    def from_multi_head(
        cls, mha: MultiHeadAttention, num_kv_heads: int, **kwargs: Any
    ) -> GroupedQueryAttention:
        """Convert a trained :class:`~selfattn.layers.MultiHeadAttention` layer.

        As in the GQA paper, the key and value projections of the heads of each
        group (``num_heads // num_kv_heads`` consecutive heads) are **averaged**
        into one head; queries and ``W_O`` are copied. With ``num_kv_heads ==
        mha.num_heads`` nothing is averaged and the new layer computes exactly
        what ``mha`` computes. ``kwargs`` go to the constructor (``positional``,
        ...); ``causal``, dropout, ``head_dim``, ``use_fused`` and ``window`` follow ``mha``.
        """
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"mha: expected a MultiHeadAttention, got {type(mha).__name__}")
        kwargs.setdefault("causal", mha.causal)
        kwargs.setdefault("dropout", mha.dropout.p)
        kwargs.setdefault("head_dim", mha.head_dim)
        kwargs.setdefault("use_fused", mha.use_fused)
        kwargs.setdefault("window", mha.window)
        layer = cls(mha.d_model, mha.num_heads, num_kv_heads,
                    bias=mha.w_q.bias is not None, **kwargs)
        layer.to(dtype=mha.w_q.weight.dtype, device=mha.w_q.weight.device)
        layer.w_q.load_state_dict(mha.w_q.state_dict())
        layer.w_o.load_state_dict(mha.w_o.state_dict())
        h, g, hd = mha.num_heads, layer.group, mha.head_dim
        for ours, theirs in ((layer.w_k, mha.w_k), (layer.w_v, mha.w_v)):
            # heads i*g .. i*g + g - 1 (consecutive) become key/value head i
            w = theirs.weight.reshape(h // g, g, hd, mha.d_model)  # (kv_heads, group, hd, d)
            ours.weight.copy_(w.mean(1).reshape(-1, mha.d_model))  # (kv_heads * hd, d_model)
            if theirs.bias is not None:
                ours.bias.copy_(theirs.bias.reshape(h // g, g, hd).mean(1).reshape(-1))
        return layer
