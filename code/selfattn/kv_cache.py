"""The KV cache: keys and values of the tokens seen so far, for generation.

A decoder that generates one token at a time attends each new query to the
keys and values of every earlier token. :class:`KVCache` keeps them, so each
step computes the keys and values of the new token only; a
:class:`~selfattn.layers.MultiHeadAttention` layer appends to it when it is
passed one. The cache holds, for every token and every layer, one key and one
value of ``head_dim`` numbers per key/value head: that memory, not arithmetic,
limits long contexts (:func:`kv_cache_bytes`). Grouped-query attention shrinks
it by giving the layer fewer key/value heads than query heads.

A layer with a sliding window (``MultiHeadAttention(..., window=w)``) never
looks further back than ``w`` tokens, so a :class:`RollingKVCache` keeps only
the last ``w`` keys and values: its memory stays the same however long the
sequence grows, and the outputs equal the full windowed pass. It can also keep
the first few tokens for good ("attention sinks").

Shape legend: ``batch`` sequences, ``num_heads`` key/value heads,
``cached_len`` tokens held, ``new_len`` tokens added, ``head_dim`` d_k = d_v,
``k_len`` keys returned by an append (``cached_len + new_len``).

Bad input raises ``TypeError`` / ``ValueError`` naming the argument, the shape
seen and the shape expected.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from selfattn._checks import check_positive_int, is_tensor, shape_of
from selfattn.masks import sliding_window_mask, window_mask_from_positions

__all__ = ["KVCache", "RollingKVCache", "kv_cache_bytes"]


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

    @property
    def tokens_seen(self) -> int:
        """Tokens appended since the last :meth:`reset`: the position of the next token.

        Equal to ``len(self)`` here; a :class:`RollingKVCache` sees more tokens than it holds.
        """
        return len(self)

    @property
    def nbytes(self) -> int:
        """Bytes of memory behind the held keys and values (0 while empty).

        Counted from the tensors' storage, so a view that keeps a larger
        tensor alive counts the whole of it.
        """
        if self.keys is None or self.values is None:
            return 0
        return self.keys.untyped_storage().nbytes() + self.values.untyped_storage().nbytes()

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
        _check_new(self, k, v)
        if self.keys is not None:
            # both: (batch, num_heads, cached_len + new_len, head_dim)
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        else:
            self.keys, self.values = k, v  # (batch, num_heads, new_len, head_dim)
        return self.keys, self.values


def _check_new(cache: KVCache, k: Any, v: Any) -> None:
    """The checks of :meth:`KVCache.append`: ``k`` and ``v`` against each other and ``cache``."""
    legend = "(batch, num_heads, new_len, head_dim)"
    for name, t in (("k", k), ("v", v)):
        if not is_tensor(t):
            raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(t)}")
    if k.shape != v.shape:
        raise ValueError(f"v: expected the shape of k {shape_of(k)}, got shape {shape_of(v)}")
    if cache.keys is not None:
        held = shape_of(cache.keys)
        want = (held[0], held[1], k.shape[2], held[3])
        if shape_of(k) != want:
            raise ValueError(
                f"k: expected shape (batch, num_heads, new_len, head_dim) = {want} to match "
                f"the cache (batch, num_heads, cached_len, head_dim) = {held}, "
                f"got shape {shape_of(k)}"
            )
        if k.dtype != cache.keys.dtype:
            raise TypeError(f"k: expected dtype {cache.keys.dtype} (the cache's), got {k.dtype}")


class RollingKVCache(KVCache):
    """A KV cache that keeps only the last ``window`` tokens (and optionally the first few).

    A layer with a sliding window of ``w`` (``MultiHeadAttention(..., causal=True,
    window=w)``) lets a query see its own key and the ``w - 1`` before it, never
    more. Once the keys of a step have been attended to, the cache forgets every
    key that no later query can see: it holds at most ``window`` keys and values
    per layer, however long the sequence grows, and the layer's outputs equal
    those of the full windowed pass over the whole sequence (the tests check it
    to 1e-12 in float64, one token at a time and in chunks).

    With ``sinks = k > 0`` the first ``k`` tokens are kept for good and the
    window keeps the last ``window - k`` (StreamingLLM's "attention sinks"): a
    query then sees the keys :func:`~selfattn.masks.sliding_window_mask` with
    ``sinks=k`` allows, at most ``window`` in all.

    An append returns every held key plus the new ones, ``k_len = cached_len +
    new_len`` keys (as :class:`KVCache`), and the layer masks them by position
    with :meth:`attention_mask`: a held key outside a new query's window gets
    weight 0. Used with a layer without a window, the cache itself is the
    window (a model trained with full attention, read through a window).

    Args:
        window: w, the most keys and values held, a positive int.
        sinks: k, leading tokens kept for good, ``0 <= k < window``.

    Attributes:
        keys, values: ``(batch, num_heads, cached_len, head_dim)`` with
            ``cached_len <= window``, or ``None`` while empty; a tensor of their own
            (no view into a larger one), so :attr:`KVCache.nbytes` is what they hold.
        key_positions: ``(k_len,)`` int64 positions of the keys the last append
            returned, or ``None`` before the first append.

    Raises:
        TypeError: ``window`` or ``sinks`` not an int.
        ValueError: ``window < 1``, ``sinks < 0`` or ``sinks >= window``.
    """

    def __init__(self, window: int, sinks: int = 0) -> None:
        super().__init__()
        check_positive_int("window", window)
        sliding_window_mask(1, window=window, sinks=sinks)  # its checks: 0 <= sinks < window
        self.window, self.sinks = int(window), int(sinks)
        self._seen = 0  # tokens appended since the last reset
        self._new_len = 0  # tokens added by the last append
        self.key_positions: Tensor | None = None

    def __repr__(self) -> str:
        shape = None if self.keys is None else shape_of(self.keys)
        return (f"RollingKVCache(window={self.window}, sinks={self.sinks}, "
                f"tokens_seen={self._seen}, cached_len={len(self)}, keys_shape={shape})")

    @property
    def tokens_seen(self) -> int:
        """Tokens appended since the last :meth:`reset` (more than it holds, once it rolls)."""
        return self._seen

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        super().reset()
        self._seen = self._new_len = 0
        self.key_positions = None

    def held_positions(self) -> Tensor:
        """``(cached_len,)`` int64: the positions of the tokens held, in order."""
        seen, k = self._seen, self.sinks
        first_recent = max(min(seen, k), seen - (self.window - k))
        return torch.cat([torch.arange(min(seen, k)), torch.arange(first_recent, seen)])

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the keys/values of new tokens; return the held ones and the new ones.

        Args:
            k: ``(batch, num_heads, new_len, head_dim)`` keys of the new tokens,
                at positions ``tokens_seen .. tokens_seen + new_len - 1``.
            v: ``(batch, num_heads, new_len, head_dim)`` values, same shape as ``k``.

        Returns:
            ``(keys, values)``, each ``(batch, num_heads, cached_len + new_len,
            head_dim)``, at positions :attr:`key_positions`. Afterwards the cache
            holds the first ``sinks`` and the last ``window - sinks`` of them.

        Raises:
            TypeError, ValueError: as :meth:`KVCache.append`.
        """
        _check_new(self, k, v)
        new_len = k.shape[2]
        positions = torch.cat([self.held_positions(),
                               torch.arange(self._seen, self._seen + new_len)])  # (k_len,)
        if self.keys is not None:
            k = torch.cat([self.keys, k], dim=2)  # (batch, num_heads, k_len, head_dim)
            v = torch.cat([self.values, v], dim=2)  # (batch, num_heads, k_len, head_dim)
        self._seen += new_len
        self._new_len = new_len
        self.key_positions = positions
        # keep what a later query can see: the sinks and the last window - sinks tokens
        keep = (positions < self.sinks) | (positions >= self._seen - (self.window - self.sinks))
        index = torch.nonzero(keep).squeeze(1).to(k.device)  # (cached_len,)
        # index_select copies: the held tensors own exactly their memory, no larger storage
        self.keys = k.index_select(2, index)  # (batch, num_heads, cached_len, head_dim)
        self.values = v.index_select(2, index)  # (batch, num_heads, cached_len, head_dim)
        return k, v

    def attention_mask(self, q_len: int, *, window: int | None = None,
                       like: Tensor | None = None) -> Tensor:
        """Which keys of the last append each of its last ``q_len`` tokens may attend.

        The queries are the last ``q_len`` tokens appended. A key is allowed when
        it is causal (not after the query) and this cache's rule keeps it
        (:func:`~selfattn.masks.window_mask_from_positions` with ``window`` and
        ``sinks``), and, if the layer has a sliding window ``window``, it is
        inside that window too: the cache can only take keys away, never give a
        query a key its layer would not.

        Args:
            q_len: number of queries, ``1 <= q_len <=`` the last append's ``new_len``.
            window: the layer's sliding window, or ``None`` (none).
            like: optional tensor fixing the device of the result.

        Returns:
            ``(q_len, k_len)`` bool tensor, True = may attend.

        Raises:
            ValueError: nothing appended yet, or ``q_len`` out of range.
        """
        if self.key_positions is None:
            raise ValueError("q_len: the cache has no keys yet; append before asking for a mask")
        check_positive_int("q_len", q_len)
        if q_len > self._new_len:
            raise ValueError(
                f"q_len: expected at most new_len = {self._new_len} queries (the tokens of "
                f"the last append), got {q_len}"
            )
        k_pos = self.key_positions  # (k_len,)
        q_pos = k_pos[-q_len:]  # (q_len,): the queries are the newest tokens
        mask = window_mask_from_positions(q_pos, k_pos, window=self.window, sinks=self.sinks)
        if window is not None:
            mask = mask & window_mask_from_positions(q_pos, k_pos, window=window)
        return mask if like is None else mask.to(like.device)  # (q_len, k_len)


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
