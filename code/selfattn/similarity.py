"""Similarity between token vectors: dot product, cosine, scaled dot product, additive.

Tokens are **rows**. For ``a`` of shape ``(n, d)`` and ``b`` of shape ``(m, d)``
each function returns the ``(n, m)`` matrix whose entry ``[i, j]`` compares row
``i`` of ``a`` with row ``j`` of ``b``. With ``b`` omitted, ``b = a`` and the
result is the square self-similarity matrix used in chapter 1 (``S = E Eᵀ``).

Shape legend: ``n``, ``m`` numbers of vectors (tokens), ``d`` their width
(``d_model`` for embeddings, ``head_dim`` for queries and keys).

The functions are written for NumPy; torch tensors work too (same ops), but
``a`` and ``b`` must use the same backend and dtype.

Bad input raises ``TypeError`` (not an array, non-float dtype, mixed backends or
dtypes) or ``ValueError`` (not 2-D, empty, widths differ, NaN/inf, and for
cosine a zero vector); the message names the argument and the shapes.

:func:`additive_scores` is the score of additive (Bahdanau) attention, a small
network instead of a dot product: ``s(q, k) = tanh(q U_Q + k U_K) · u``. It takes
queries and keys with leading batch dims, ``(..., q_len, d_q)`` and
``(..., k_len, d_k)``, and parameters ``U_Q (d_q, d_a)``, ``U_K (d_k, d_a)``,
``u (d_a,)``; ``d_a`` is the width of its hidden layer. ``d_q`` and ``d_k``
may differ. Same backends and errors as above, plus a ``ValueError`` when a
parameter's shape does not fit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfattn._checks import (
    check_array,
    check_dim,
    check_finite,
    check_floating,
    check_min_ndim,
    check_ndim,
    check_nonempty,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = ["additive_scores", "cosine_similarity", "dot_similarity", "scaled_dot_similarity"]


def _check_pair(a: Any, b: Any | None) -> Any:
    """Validate ``a`` (n, d) and ``b`` (m, d); return ``b`` (``a`` if None)."""
    check_floating("a", a)
    check_ndim("a", a, 2, "(n, d)")
    check_nonempty("a", a)
    check_finite("a", a)
    if b is None:
        return a
    check_floating("b", b)
    if is_tensor(a) != is_tensor(b):
        raise TypeError(
            f"b: expected the same backend as a ({type(a).__name__}), got {type(b).__name__}"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"b: expected dtype {a.dtype} (dtype of a), got {b.dtype}")
    check_ndim("b", b, 2, "(m, d)")
    check_nonempty("b", b)
    check_dim("b", b, -1, shape_of(a)[-1], f"d of a, whose shape is {shape_of(a)}")
    check_finite("b", b)
    return b


def dot_similarity(a: Array, b: Array | None = None) -> Array:
    """Dot-product similarity ``a @ bᵀ``.

    Args:
        a: ``(n, d)`` float array, one vector per row.
        b: ``(m, d)`` float array, or ``None`` to use ``a`` (self-similarity).

    Returns:
        ``(n, m)`` array, entry ``[i, j] = a[i] · b[j]``. Grows with the vectors'
        lengths as well as their directions.

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    b = _check_pair(a, b)
    return a @ b.T  # b.T: (d, m) -> result (n, m)


def scaled_dot_similarity(a: Array, b: Array | None = None) -> Array:
    """Scaled dot product ``a @ bᵀ / sqrt(d)``, the score of scaled dot-product attention.

    Dividing by ``sqrt(d)`` keeps the variance of the entries near 1 when the
    components of ``a`` and ``b`` are independent with variance 1, whatever ``d``.

    Args:
        a: ``(n, d)`` float array.
        b: ``(m, d)`` float array, or ``None`` to use ``a``.

    Returns:
        ``(n, m)`` array ``a @ bᵀ / sqrt(d)``.

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    b = _check_pair(a, b)
    d = shape_of(a)[-1]
    return (a @ b.T) / math.sqrt(d)  # b.T: (d, m) -> result (n, m)


def _row_norms(name: str, x: Any) -> Any:
    """Euclidean norm of each row of ``x`` (k, d) as a (k, 1) column; zero rows raise."""
    norms = ((x * x).sum(-1, keepdims=True) if not is_tensor(x) else (x * x).sum(-1, keepdim=True))
    norms = norms**0.5  # (k, 1)
    zero = (norms[:, 0] == 0).nonzero()
    zero_rows = zero[0] if not is_tensor(x) else zero[:, 0]
    if len(zero_rows) > 0:
        rows = [int(i) for i in zero_rows]
        raise ValueError(
            f"{name}: row(s) {rows} are zero vectors (norm 0), cosine similarity is "
            f"undefined for them; got shape {shape_of(x)}"
        )
    return norms


def cosine_similarity(a: Array, b: Array | None = None) -> Array:
    """Cosine similarity ``(a[i] · b[j]) / (|a[i]| |b[j]|)``, in ``[-1, 1]``.

    Only the directions count: scaling a row does not change its similarities.

    Args:
        a: ``(n, d)`` float array, no zero rows.
        b: ``(m, d)`` float array, no zero rows, or ``None`` to use ``a``.

    Returns:
        ``(n, m)`` array of cosines; with ``b=None`` the diagonal is 1.

    Raises:
        ValueError: a row of ``a`` or ``b`` is the zero vector (the message
            names the argument and the row), plus the checks in the module
            docstring.
        TypeError: see the module docstring.

    Example:
        >>> import numpy as np
        >>> cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0], [-2.0, 0.0]])).round(4)
        array([[ 1.    ,  0.7071, -1.    ],
               [ 0.7071,  1.    , -0.7071],
               [-1.    , -0.7071,  1.    ]])
    """
    b_checked = _check_pair(a, b)
    norm_a = _row_norms("a", a)  # (n, 1)
    norm_b = norm_a if b is None else _row_norms("b", b_checked)  # (m, 1)
    # normalise the rows first, then the dot product of unit vectors is the cosine
    return (a / norm_a) @ (b_checked / norm_b).T  # (n, d) @ (d, m) -> (n, m)


def _check_like(
    name: str, x: Any, ref_name: str, ref: Any, ndim: int | None, legend: str
) -> None:
    """``x`` is a finite, non-empty float array with the backend and dtype of ``ref`` and
    ``ndim`` dims (``None``: at least 2)."""
    check_array(name, x)
    check_floating(name, x)
    if is_tensor(x) != is_tensor(ref):
        raise TypeError(
            f"{name}: expected the same backend as {ref_name} ({type(ref).__name__}), "
            f"got {type(x).__name__} with shape {shape_of(x)}"
        )
    if x.dtype != ref.dtype:
        raise TypeError(
            f"{name}: expected dtype {ref.dtype} (dtype of {ref_name}), got {x.dtype} "
            f"with shape {shape_of(x)}"
        )
    if ndim is None:
        check_min_ndim(name, x, 2, legend)
    else:
        check_ndim(name, x, ndim, legend)
    check_nonempty(name, x)
    check_finite(name, x)


def additive_scores(query: Array, key: Array, u_q: Array, u_k: Array, u: Array) -> Array:
    """Additive (Bahdanau) attention scores ``s[..., i, j] = tanh(q_i U_Q + k_j U_K) · u``.

    A one-hidden-layer network scores each (query, key) pair. Each score lies in
    ``[-|u|₁, |u|₁]`` (``tanh`` is in ``[-1, 1]``), however long ``q`` and ``k``
    are. Cost: ``q U_Q`` and ``k U_K`` once per token, then about ``4 d_a``
    operations per pair (add, ``tanh``, multiply, add) and a
    ``(..., q_len, k_len, d_a)`` array in memory.

    Args:
        query: ``(..., q_len, d_q)`` float, NumPy or torch.
        key: ``(..., k_len, d_k)`` float, same backend and dtype; its leading dims
            broadcast with ``query``'s. ``d_k`` may differ from ``d_q``.
        u_q: ``(d_q, d_a)``, the query's weights ``U_Q`` (applied as ``q U_Q``).
        u_k: ``(d_k, d_a)``, the key's weights ``U_K``.
        u: ``(d_a,)``, the output vector ``u``.

    Returns:
        scores ``(..., q_len, k_len)``, same backend and dtype as the inputs.

    Raises:
        TypeError: not an array, not float, mixed backends or dtypes.
        ValueError: a shape that does not fit (the message names the argument,
            the shape seen and where the expected size comes from), empty
            inputs, NaN/inf in the inputs or in the scores.

    Example:
        >>> import numpy as np
        >>> q = np.array([[np.log(2.0)]])             # (q_len=1, d_q=1)
        >>> k = np.array([[0.0], [np.log(3.0)]])      # (k_len=2, d_k=1)
        >>> one = np.array([[1.0]])
        >>> additive_scores(q, k, one, one, np.array([2.0])).round(12)
        array([[1.2       , 1.89189189]])
    """
    check_floating("query", query)
    check_min_ndim("query", query, 2, "(..., q_len, d_q)")
    check_nonempty("query", query)
    check_finite("query", query)
    _check_like("key", key, "query", query, None, "(..., k_len, d_k)")
    leads = (shape_of(query)[:-2], shape_of(key)[:-2])
    try:
        np.broadcast_shapes(*leads)
    except ValueError:
        raise ValueError(
            f"key: leading (batch) dims {leads[1]} do not broadcast with query's {leads[0]}; "
            f"got shapes query {shape_of(query)}, key {shape_of(key)}"
        ) from None
    d_q, d_k = shape_of(query)[-1], shape_of(key)[-1]
    _check_like("u_q", u_q, "query", query, 2, "(d_q, d_a)")
    check_dim("u_q", u_q, 0, d_q, f"d_q of query, whose shape is {shape_of(query)}")
    d_a = shape_of(u_q)[1]
    _check_like("u_k", u_k, "query", query, 2, "(d_k, d_a)")
    check_dim("u_k", u_k, 0, d_k, f"d_k of key, whose shape is {shape_of(key)}")
    check_dim("u_k", u_k, 1, d_a, f"d_a of u_q, whose shape is {shape_of(u_q)}")
    _check_like("u", u, "query", query, 1, "(d_a,)")
    check_dim("u", u, 0, d_a, f"d_a of u_q, whose shape is {shape_of(u_q)}")

    tanh = torch.tanh if is_tensor(query) else np.tanh
    with np.errstate(over="ignore", invalid="ignore"):  # reported below instead
        q_proj = query @ u_q  # (..., q_len, d_q) @ (d_q, d_a) -> (..., q_len, d_a)
        k_proj = key @ u_k  # (..., k_len, d_k) @ (d_k, d_a) -> (..., k_len, d_a)
        # every pair: (..., q_len, 1, d_a) + (..., 1, k_len, d_a) -> (..., q_len, k_len, d_a)
        hidden = tanh(q_proj[..., :, None, :] + k_proj[..., None, :, :])
        scores = hidden @ u  # (..., q_len, k_len, d_a) @ (d_a,) -> (..., q_len, k_len)
    try:
        check_finite("scores", scores)
    except ValueError:
        raise ValueError(
            f"query, key: the projections q U_Q or k U_K overflowed (scores of shape "
            f"{shape_of(scores)} hold NaN); the inputs are too large for their dtype"
        ) from None
    return scores
