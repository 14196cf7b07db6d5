"""Similarity between token vectors: dot product, cosine, scaled dot product.

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
"""

from __future__ import annotations

import math
from typing import Any

from selfattn._checks import (
    check_dim,
    check_finite,
    check_ndim,
    check_nonempty,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array
from selfattn.softmax import _check_float

__all__ = ["cosine_similarity", "dot_similarity", "scaled_dot_similarity"]


def _check_pair(a: Any, b: Any | None) -> Any:
    """Validate ``a`` (n, d) and ``b`` (m, d); return ``b`` (``a`` if None)."""
    _check_float("a", a)
    check_ndim("a", a, 2, "(n, d)")
    check_nonempty("a", a)
    check_finite("a", a)
    if b is None:
        return a
    _check_float("b", b)
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
