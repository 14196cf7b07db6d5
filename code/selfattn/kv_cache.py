"""The KV cache: keys and values of the tokens seen so far, for generation.

A decoder that generates one token at a time attends each new query to the
keys and values of every earlier token. :class:`KVCache` keeps them, so each
step computes the keys and values of the new token only; a
:class:`~selfattn.layers.MultiHeadAttention` layer appends to it when it is
passed one. The cache holds, for every token and every layer, one key and one
value of ``head_dim`` numbers per key/value head: that memory, not arithmetic,
limits long contexts (:func:`kv_cache_bytes`). Grouped-query attention shrinks
it by giving the layer fewer key/value heads than query heads.

Shape legend: ``batch`` sequences, ``num_heads`` key/value heads,
``cached_len`` tokens held, ``new_len`` tokens added, ``head_dim`` d_k = d_v.

Bad input raises ``TypeError`` / ``ValueError`` naming the argument, the shape
seen and the shape expected.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from selfattn._checks import check_positive_int, is_tensor, shape_of

__all__ = ["KVCache", "kv_cache_bytes"]


class KVCache:
    """Keys and values of the tokens processed so far, for incremental decoding.

    A decoder that generates one token at a time would recompute ``K`` and
    ``V`` of all earlier tokens at every step; the cache stores them instead.
    :meth:`selfattn.layers.MultiHeadAttention.forward` appends the new tokens'
    keys/values and attends the new queries to everything cached.

    Attributes:
        keys, values: ``(batch, num_heads, cached_len, head_dim)`` or ``None``
            while empty; ``num_heads`` counts the layer's key/value heads
            (``num_kv_heads``).

    The tensors keep their autograd history; use the cache under
    ``torch.no_grad()`` for generation.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        """``cached_len``, the number of tokens held."""
        return 0 if self.keys is None else int(self.keys.shape[2])

    def __repr__(self) -> str:
        shape = None if self.keys is None else shape_of(self.keys)
        return f"KVCache(cached_len={len(self)}, keys_shape={shape})"

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.keys = None
        self.values = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the keys/values of new tokens and return the full cache.

        Args:
            k: ``(batch, num_heads, new_len, head_dim)`` keys of the new tokens.
            v: ``(batch, num_heads, new_len, head_dim)`` values, same shape as ``k``.

        Returns:
            ``(keys, values)``, each ``(batch, num_heads, cached_len + new_len, head_dim)``.

        Raises:
            TypeError: not tensors, or dtype differs from the cache's.
            ValueError: not 4-D, ``k`` and ``v`` shapes differ, or ``batch``,
                ``num_heads``, ``head_dim`` differ from what is cached.
        """
        legend = "(batch, num_heads, new_len, head_dim)"
        for name, t in (("k", k), ("v", v)):
            if not is_tensor(t):
                raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(t).__name__}")
            if t.ndim != 4:
                raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(t)}")
        if k.shape != v.shape:
            raise ValueError(f"v: expected the shape of k {shape_of(k)}, got shape {shape_of(v)}")
        if self.keys is not None:
            held = shape_of(self.keys)
            want = (held[0], held[1], k.shape[2], held[3])
            if shape_of(k) != want:
                raise ValueError(
                    f"k: expected shape (batch, num_heads, new_len, head_dim) = {want} to match "
                    f"the cache (batch, num_heads, cached_len, head_dim) = {held}, "
                    f"got shape {shape_of(k)}"
                )
            if k.dtype != self.keys.dtype:
                raise TypeError(f"k: expected dtype {self.keys.dtype} (the cache's), got {k.dtype}")
            # both: (batch, num_heads, cached_len + new_len, head_dim)
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        else:
            self.keys, self.values = k, v  # (batch, num_heads, new_len, head_dim)
        return self.keys, self.values


def check_kv_cache(
    kv_cache: Any, num_kv_heads: int, head_dim: int, query_shape: tuple[int, ...]
) -> None:
    """``TypeError`` unless ``kv_cache`` is a :class:`KVCache`; ``ValueError`` unless what it
    holds is ``(batch, num_kv_heads, cached_len, head_dim)``, the layout of a layer with
    these heads attending queries of shape ``query_shape`` ``(batch, q_len, d_model)``."""
    if not isinstance(kv_cache, KVCache):
        raise TypeError(f"kv_cache: expected a KVCache, got {type(kv_cache).__name__}")
    if kv_cache.keys is None:
        return
    held = shape_of(kv_cache.keys)
    want = (query_shape[0], num_kv_heads, held[2], head_dim)
    if held != want:
        raise ValueError(
            f"kv_cache: holds keys of shape (batch, num_heads, cached_len, head_dim) = {held}, "
            f"expected {want} for query of shape {query_shape} with "
            f"num_kv_heads={num_kv_heads}; call kv_cache.reset() for a new batch"
        )


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
