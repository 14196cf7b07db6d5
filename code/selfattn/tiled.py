"""Tiled attention with the online softmax: FlashAttention's idea in NumPy.

Plain attention forms the whole ``L x L`` score matrix S, then the weights A,
then ``C = A V``: memory grows like ``L²``. The output, though, is only ``L x
d_v``. The **online softmax** computes ``softmax(s) @ v`` for one query while
reading the keys **a block at a time**, keeping three running quantities:

* ``m``, the largest score seen so far (for numerical safety);
* ``l``, the sum of ``exp(s_j - m)`` over the keys seen so far;
* ``acc``, the sum of ``exp(s_j - m) v_j`` over the keys seen so far.

When a new block raises the maximum from ``m`` to ``m'``, the old sums are
rescaled by ``exp(m - m')`` -- every old term was computed relative to ``m``.
After the last block ``acc / l`` is exactly ``softmax(s) @ v``. Done for a
block of queries at once, the largest temporary array is one ``block_q x
block_k`` tile of scores, so memory grows like ``L`` instead of ``L²``.
FlashAttention (Dao et al.) does exactly this inside GPU on-chip memory; here
the point is the arithmetic, which is the same.

Shape legend: ``L`` (q_len / k_len) tokens, ``d_k`` query/key width, ``d_v``
value width. Arrays are NumPy, float32 or float64, 2-D ``(L, d)`` or batched
``(..., L, d)``.

Bad input raises ``TypeError`` (not a float NumPy array) or ``ValueError``
(shapes that do not match, a non-positive block size, NaN/inf).
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from selfattn._checks import check_positive_int, shape_of

__all__ = [
    "attention_full",
    "online_softmax",
    "peak_memory",
    "tiled_attention",
]


def _check_qkv(q: Any, k: Any, v: Any) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
            kind = type(x).__name__ if not isinstance(x, np.ndarray) else f"dtype {x.dtype}"
            raise TypeError(f"{name}: expected a float NumPy array (..., L, d), got {kind}")
        if x.ndim < 2 or 0 in x.shape:
            raise ValueError(f"{name}: expected a non-empty shape (..., L, d), got {shape_of(x)}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name}: contains NaN or inf (shape {shape_of(x)})")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"k: expected last dimension d_k = {q.shape[-1]} (from q, shape {shape_of(q)}), "
            f"got shape {shape_of(k)}"
        )
    if k.shape[-2] != v.shape[-2] or k.shape[:-2] != v.shape[:-2] or q.shape[:-2] != k.shape[:-2]:
        raise ValueError(
            f"v: expected the batch dims of q and k and k's length, got q {shape_of(q)}, "
            f"k {shape_of(k)}, v {shape_of(v)}"
        )


def attention_full(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False
                   ) -> np.ndarray:
    """Plain attention ``softmax(Q Kᵀ / sqrt(d_k)) V``, forming the whole score matrix.

    Args:
        q: ``(..., q_len, d_k)``; k: ``(..., k_len, d_k)``; v: ``(..., k_len, d_v)``.
        causal: mask keys after each query (bottom-right aligned, as the book's masks).

    Returns:
        ``(..., q_len, d_v)``, in the dtype of ``q``. Temporaries of shape
        ``(..., q_len, k_len)``: memory O(L²).
    """
    _check_qkv(q, k, v)
    scale = np.asarray(1.0 / math.sqrt(q.shape[-1]), dtype=q.dtype)
    scores = (q * scale) @ np.swapaxes(k, -1, -2)  # (..., q_len, k_len): the one L x L array
    if causal:
        q_len, k_len = q.shape[-2], k.shape[-2]
        future = np.arange(k_len)[None, :] > np.arange(k_len - q_len, k_len)[:, None]
        scores[..., future] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)  # stable softmax
    np.exp(scores, out=scores)  # in place: the weights, still unnormalised
    scores /= scores.sum(axis=-1, keepdims=True)  # (..., q_len, k_len) = A
    return scores @ v  # (..., q_len, d_v)


def online_softmax(scores: np.ndarray, block_size: int) -> tuple[np.ndarray, list[dict]]:
    """Softmax of one score vector computed a block at a time, with its running statistics.

    Args:
        scores: ``(k_len,)`` float scores.
        block_size: keys per block, a positive int.

    Returns:
        ``(weights, trace)``: ``weights`` ``(k_len,)`` equal to ``softmax(scores)``;
        ``trace`` one dict per block with the running max ``m`` and running sum
        ``l`` after that block.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores: expected a non-empty 1-D shape (k_len,), got {scores.shape}")
    check_positive_int("block_size", block_size)
    m, total, trace = -np.inf, 0.0, []
    for start in range(0, scores.size, block_size):
        block = scores[start : start + block_size]
        m_new = max(m, float(block.max()))
        # old terms were exp(s - m): rescale them to exp(s - m_new), then add the new ones
        total = total * math.exp(m - m_new) + float(np.exp(block - m_new).sum())
        m = m_new
        trace.append({"keys": (start, start + block.size), "m": m, "l": total})
    return np.exp(scores - m) / total, trace


def tiled_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, block_q: int = 128, block_k: int = 128,
    causal: bool = False,
) -> np.ndarray:
    """Attention ``softmax(Q Kᵀ / sqrt(d_k)) V`` without ever forming the score matrix.

    Queries are processed ``block_q`` at a time; for each query block the keys
    and values stream past ``block_k`` at a time, and the online softmax
    (running max ``m``, running sum ``l``, running output ``acc``) combines the
    blocks. The largest temporary is a ``(..., block_q, block_k)`` tile.
    With ``causal=True`` key blocks entirely in the future are skipped.

    Args:
        q: ``(..., q_len, d_k)``; k: ``(..., k_len, d_k)``; v: ``(..., k_len, d_v)``.
        block_q, block_k: tile sizes, positive ints (need not divide the lengths).
        causal: mask keys after each query (bottom-right aligned).

    Returns:
        ``(..., q_len, d_v)``, equal to :func:`attention_full` up to rounding.
    """
    _check_qkv(q, k, v)
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    q_len, k_len, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    if causal and k_len < q_len:
        raise ValueError(
            f"k: causal attention needs k_len >= q_len = {q_len} (the first queries would see "
            f"no key), got shape {shape_of(k)}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1])
    shift = k_len - q_len  # query t sits at key position t + shift
    out = np.empty(q.shape[:-1] + (d_v,), dtype=np.result_type(q, k, v))  # (..., q_len, d_v)
    for qs in range(0, q_len, block_q):
        qb = q[..., qs : qs + block_q, :]  # (..., bq, d_k)
        bq = qb.shape[-2]
        m = np.full(qb.shape[:-1] + (1,), -np.inf, dtype=out.dtype)  # (..., bq, 1) running max
        l_sum = np.zeros_like(m)  # (..., bq, 1) running sum of exp(s - m)
        acc = np.zeros(qb.shape[:-1] + (d_v,), dtype=out.dtype)  # (..., bq, d_v)
        last_key = k_len if not causal else min(k_len, qs + bq + shift)
        for ks in range(0, last_key, block_k):
            s = qb @ np.swapaxes(k[..., ks : ks + block_k, :], -1, -2) * scale  # (..., bq, bk)
            if causal:
                q_pos = np.arange(qs, qs + bq)[:, None] + shift
                k_pos = np.arange(ks, ks + s.shape[-1])[None, :]
                s = np.where(k_pos > q_pos, -np.inf, s)  # (..., bq, bk)
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., bq, 1)
            rescale = np.exp(m - m_new)  # (..., bq, 1): old terms were relative to m
            p = np.exp(s - m_new)  # (..., bq, bk)
            l_sum = l_sum * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ v[..., ks : ks + block_k, :]  # (..., bq, d_v)
            m = m_new
        out[..., qs : qs + bq, :] = acc / l_sum
    return out


def peak_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Run ``fn(*args, **kwargs)`` and return ``(result, peak bytes allocated during the call)``.

    Uses ``tracemalloc``, which sees NumPy's array buffers (NumPy reports
    them to it) and Python objects, not memory allocated by other libraries'
    own allocators (PyTorch tensors are invisible to it). Memory that existed
    before the call (the inputs) is not counted.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, int(peak)
