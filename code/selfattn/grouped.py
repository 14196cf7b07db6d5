"""Grouped-query attention (GQA) and multi-query attention (MQA), with RoPE or ALiBi.

Multi-head attention gives each of the h heads its own keys and values. During
generation the :class:`~selfattn.layers.KVCache` holds all of them, for every
token and every layer, and that memory, not arithmetic, limits long contexts.
**Grouped-query attention** keeps h query heads but only ``num_kv_heads``
key/value heads; each key/value head serves a group of ``num_heads //
num_kv_heads`` query heads. ``num_kv_heads == num_heads`` is ordinary
multi-head attention, ``num_kv_heads == 1`` is **multi-query attention**. The
cache shrinks by the factor ``num_heads / num_kv_heads``:
:func:`kv_cache_bytes` gives the formula.

The layer can also place the tokens itself, inside attention:
``positional="rope"`` rotates queries and keys
(:func:`selfattn.positional.apply_rotary`), ``positional="alibi"`` adds
:func:`selfattn.positional.alibi_bias` to the scores. Both make the score of
query ``i`` and key ``j`` depend on ``j - i`` only.

Shape legend: ``batch``, ``seq_len`` (L; ``q_len`` queries, ``k_len`` keys),
``d_model``, ``num_heads`` (h), ``num_kv_heads``, ``head_dim = d_model // h``,
``cached_len``.

Bad input raises ``TypeError`` / ``ValueError`` naming the argument, the shape
seen and the shape expected (``num_kv_heads`` not dividing ``num_heads``, wrong
widths, a cache of another layout, RoPE/ALiBi with a separate key sequence).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from selfattn._checks import check_positive_int, shape_of
from selfattn.layers import (
    KVCache,
    MultiHeadAttention,
    _add_causal,
    _attend,
    _check_dropout,
    _check_input,
    _check_mask_shape,
    _mask_to_tensor,
    merge_heads,
    split_heads,
)
from selfattn.positional import alibi_bias, apply_rotary

__all__ = ["GroupedQueryAttention", "kv_cache_bytes"]

_POSITIONAL = (None, "rope", "alibi")


def kv_cache_bytes(
    *, batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
    bytes_per_value: int = 2,
) -> int:
    """Bytes a KV cache needs: ``2 * batch * seq_len * num_layers * num_kv_heads * head_dim * b``.

    The 2 counts keys and values; ``b`` is the size of one number (2 for
    float16/bfloat16, 4 for float32).

    Raises:
        ValueError: any argument not a positive int (TypeError if not an int).
    """
    sizes = {"batch": batch, "seq_len": seq_len, "num_layers": num_layers,
             "num_kv_heads": num_kv_heads, "head_dim": head_dim,
             "bytes_per_value": bytes_per_value}
    for name, value in sizes.items():
        check_positive_int(name, value)
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value


class GroupedQueryAttention(nn.Module):
    """Attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads.

    Query head ``i`` uses key/value head ``i // (num_heads // num_kv_heads)``.

    Args:
        d_model: width of the tokens.
        num_heads: h, query heads (divides ``d_model``).
        num_kv_heads: key/value heads (divides ``num_heads``); h gives MHA, 1 gives MQA.
        dropout: drop probability of the attention weights in training.
        bias: biases in the four projections.
        causal: mask the future (self-attention of a decoder).
        positional: None, ``"rope"`` or ``"alibi"`` (position inside attention).
        rope_base: RoPE's wavelength base.

    Attributes:
        w_q: the query projection, ``Linear(d_model, d_model)``.
        w_k: the key projection, ``Linear(d_model, num_kv_heads * head_dim)``.
        w_v: the value projection, of the same shape as ``w_k``.
        w_o: the output projection, ``Linear(d_model, d_model)``.
    """

    def __init__(
        self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float = 0.0,
        bias: bool = True, causal: bool = False, positional: str | None = None,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("num_heads", num_heads),
                            ("num_kv_heads", num_kv_heads)):
            check_positive_int(name, value)
        if d_model % num_heads:
            raise ValueError(f"num_heads: num_heads={num_heads} does not divide d_model={d_model}")
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads: num_kv_heads={num_kv_heads} does not divide "
                f"num_heads={num_heads} (each key/value head serves a whole group)"
            )
        if positional not in _POSITIONAL:
            raise ValueError(f"positional: expected one of {_POSITIONAL}, got {positional!r}")
        if positional == "rope" and (d_model // num_heads) % 2:
            raise ValueError(
                f"positional: RoPE rotates column pairs and needs an even head_dim, got "
                f"head_dim={d_model // num_heads}"
            )
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.group = num_heads // num_kv_heads  # query heads per key/value head
        self.causal, self.positional, self.rope_base = bool(causal), positional, rope_base
        kv_width = num_kv_heads * self.head_dim
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, kv_width, bias=bias)
        self.w_v = nn.Linear(d_model, kv_width, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    @classmethod
    @torch.no_grad()
    def from_multi_head(
        cls, mha: MultiHeadAttention, num_kv_heads: int, **kwargs: Any
    ) -> GroupedQueryAttention:
        """Convert a trained :class:`~selfattn.layers.MultiHeadAttention` layer.

        As in the GQA paper, the key and value projections of the heads of each
        group are **averaged** into one head; queries and ``W_O`` are copied.
        With ``num_kv_heads == mha.num_heads`` nothing is averaged and the new
        layer computes exactly what ``mha`` computes. ``kwargs`` go to the
        constructor (``positional``, ...); ``causal`` and dropout follow ``mha``.
        """
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"mha: expected a MultiHeadAttention, got {type(mha).__name__}")
        kwargs.setdefault("causal", mha.causal)
        kwargs.setdefault("dropout", mha.dropout.p)
        layer = cls(mha.d_model, mha.num_heads, num_kv_heads,
                    bias=mha.w_q.bias is not None, **kwargs)
        layer.to(dtype=mha.w_q.weight.dtype, device=mha.w_q.weight.device)
        layer.w_q.load_state_dict(mha.w_q.state_dict())
        layer.w_o.load_state_dict(mha.w_o.state_dict())
        h, g, hd = mha.num_heads, layer.group, mha.head_dim
        for ours, theirs in ((layer.w_k, mha.w_k), (layer.w_v, mha.w_v)):
            w = theirs.weight.reshape(h // g, g, hd, mha.d_model)  # (kv_heads, group, hd, d)
            ours.weight.copy_(w.mean(1).reshape(-1, mha.d_model))  # (kv_heads * hd, d_model)
            if theirs.bias is not None:
                ours.bias.copy_(theirs.bias.reshape(h // g, g, hd).mean(1).reshape(-1))
        return layer

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Any = None,
        *,
        need_weights: bool = False,
        average_weights: bool = True,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Grouped-query attention of ``query`` over ``key``/``value``.

        Args:
            query: ``(batch, q_len, d_model)``.
            key, value: ``(batch, k_len, d_model)``; default ``query``
                (self-attention, required with RoPE/ALiBi).
            mask: optional bool (True = may attend) or additive mask
                broadcastable to ``(batch, num_heads, q_len, k_len)``.
            need_weights: return the weights; ``average_weights`` averages them
                over heads ``(batch, q_len, k_len)``, else ``(batch, num_heads,
                q_len, k_len)``.
            kv_cache: optional :class:`~selfattn.layers.KVCache`; it stores
                ``(batch, num_kv_heads, cached_len, head_dim)`` keys and values,
                ``num_heads / num_kv_heads`` times fewer than multi-head
                attention. New tokens sit at positions ``cached_len ..``.

        Returns:
            ``(output (batch, q_len, d_model), weights or None)``.
        """
        legend = "(batch, seq_len, d_model)"
        if self.positional is not None and key is not None:
            raise ValueError(
                f"key: positional={self.positional!r} places tokens of one sequence; "
                "pass key=None (self-attention)"
            )
        key = query if key is None else key
        value = key if value is None else value
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_input(name, t, self.d_model, "d_model", legend, self.w_q.weight)
            if t.ndim != 3:
                raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(t)}")
        batch = query.shape[0]
        if key.shape[0] != batch or value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"key, value: expected batch {batch} and equal lengths, got key "
                f"{shape_of(key)} and value {shape_of(value)}"
            )
        cached = 0
        if kv_cache is not None:
            if not isinstance(kv_cache, KVCache):
                raise TypeError(f"kv_cache: expected a KVCache, got {type(kv_cache).__name__}")
            cached = len(kv_cache)
            if cached and shape_of(kv_cache.keys)[:2] != (batch, self.num_kv_heads):
                raise ValueError(
                    f"kv_cache: holds keys of shape {shape_of(kv_cache.keys)}, expected "
                    f"(batch={batch}, num_kv_heads={self.num_kv_heads}, cached_len, "
                    f"head_dim={self.head_dim}); call kv_cache.reset() for a new batch"
                )

        q = split_heads(self.w_q(query), self.num_heads)  # (batch, h, q_len, head_dim)
        k = split_heads(self.w_k(key), self.num_kv_heads)  # (batch, kv_heads, new_len, head_dim)
        v = split_heads(self.w_v(value), self.num_kv_heads)  # (batch, kv_heads, new_len, hd)
        if self.positional == "rope":  # rotate by absolute position; scores see offsets only
            q = apply_rotary(q, torch.arange(cached, cached + q.shape[2]), self.rope_base)
            k = apply_rotary(k, torch.arange(cached, cached + k.shape[2]), self.rope_base)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (batch, kv_heads, cached_len + new_len, head_dim)
        # every key/value head serves `group` consecutive query heads
        k = k.repeat_interleave(self.group, dim=1)  # (batch, h, k_len, head_dim)
        v = v.repeat_interleave(self.group, dim=1)  # (batch, h, k_len, head_dim)
        q_len, k_len = q.shape[2], k.shape[2]

        if mask is not None:
            seen = shape_of(mask)
            mask = _mask_to_tensor(mask, q)
            if mask.ndim == 3:
                mask = mask.unsqueeze(1)  # (batch, 1, q_len, k_len)
            _check_mask_shape(mask, seen, (batch, self.num_heads, q_len, k_len),
                              "(batch, num_heads, q_len, k_len)")
        if self.causal:
            mask = _add_causal(mask, q_len, k_len, q)
        if self.positional == "alibi":  # additive bias -m_h |i - j| on the scores
            bias = alibi_bias(self.num_heads, q_len, k_len, like=q)  # (h, q_len, k_len)
            if mask is None:
                mask = bias
            elif mask.dtype == torch.bool:
                mask = torch.where(mask, bias, float("-inf"))  # (..., h, q_len, k_len)
            else:
                mask = mask + bias

        context, weights = _attend(q, k, v, mask, self.dropout, use_fused=False)
        output = self.w_o(merge_heads(context))  # (batch, q_len, d_model)
        if not need_weights:
            return output, None
        return output, weights.mean(1) if average_weights else weights

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, causal={self.causal}, "
                f"positional={self.positional!r}")
