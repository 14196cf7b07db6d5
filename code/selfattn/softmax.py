"""Numerically stable softmax and log-softmax.

softmax turns attention **scores** S into attention **weights** A = softmax(S),
one distribution per row: every entry is in [0, 1] and each slice along
``axis`` sums to 1.

Both functions work on NumPy arrays (the book's first chapters) and on torch
tensors (the modules; differentiable, built from torch ops only). The result
has the backend, dtype and shape of the input.

Two rules make them safe to use inside attention:

* **Stable.** The maximum of each slice is subtracted before ``exp``
  (softmax is unchanged by adding a constant to every logit), so logits of
  +/-1e4 give finite results instead of ``inf / inf = nan``.
* **Fully masked slices give zeros.** Masking writes ``-inf`` into blocked
  scores. If *every* entry of a slice is ``-inf`` (a query that may attend to
  nothing) the textbook formula is ``0 / 0 = nan``; here such a slice returns
  **all zeros** for :func:`softmax` and **all -inf** for :func:`log_softmax`
  (the log of those zeros). This matches what
  ``torch.nn.functional.scaled_dot_product_attention`` returns for a query
  row whose mask is entirely ``False``.

Bad input: a non-floating dtype raises ``TypeError``; NaN or ``+inf`` in ``x``,
an empty slice, or an ``axis`` out of range raise ``ValueError``. Messages
name the argument and the shape seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from selfattn._checks import check_floating, is_tensor, shape_of
from selfattn.array_types import Array

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = ["log_softmax", "softmax"]


def _validate(x: Any, axis: int) -> int:
    """Check ``x`` and ``axis``; return ``axis`` as a non-negative int."""
    check_floating("x", x)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    ndim = x.ndim
    if ndim == 0:
        raise ValueError("x: expected at least one dimension, got shape ()")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"axis: expected an int in [{-ndim}, {ndim}) for x of shape {shape_of(x)}, got {axis}"
        )
    axis = int(axis) % ndim
    if x.shape[axis] == 0:
        raise ValueError(
            f"x: expected a non-empty slice along axis {axis}, got shape {shape_of(x)}"
        )
    if is_tensor(x):
        bad = bool(torch.isnan(x).any() or torch.isposinf(x).any())
    else:
        bad = bool(np.isnan(x).any() or np.isposinf(x).any())
    if bad:
        raise ValueError(
            f"x: contains NaN or +inf (shape {shape_of(x)}); only -inf (a masked entry) is allowed"
        )
    return axis


def _shifted(x: Any, axis: int) -> tuple[Any, Any]:
    """Return ``(x - m, sum(exp(x - m)))`` with ``m`` the slice maximum.

    A slice that is entirely ``-inf`` has maximum ``-inf``; its shift is replaced
    by 0 so that ``x - m`` stays ``-inf`` (not ``-inf - -inf = nan``) and its sum
    of exponentials is exactly 0. Shapes: ``x`` (..., n, ...) with ``n`` along
    ``axis``; the sum keeps ``axis`` with size 1.
    """
    if is_tensor(x):
        # the max is a constant shift: softmax does not depend on it, so no gradient through it
        m = torch.amax(x, dim=axis, keepdim=True).detach()  # (..., 1, ...)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        z = x - m
        total = torch.exp(z).sum(dim=axis, keepdim=True)  # (..., 1, ...)
    else:
        m = np.max(x, axis=axis, keepdims=True)  # (..., 1, ...)
        m = np.where(np.isfinite(m), m, np.zeros_like(m))
        z = x - m
        total = np.exp(z).sum(axis=axis, keepdims=True)  # (..., 1, ...)
    return z, total


def softmax(x: Array, axis: int = -1) -> Array:
    """Numerically stable softmax along ``axis``.

    ``softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m)`` with ``m = max_j x_j``.

    Args:
        x: scores, any shape ``(..., n, ...)`` with ``n`` along ``axis``; a NumPy
            array or torch tensor with a floating dtype. Entries may be ``-inf``
            (masked); NaN and ``+inf`` are rejected.
        axis: the axis to normalise over (default: the last one, i.e. rows of an
            ``(q_len, k_len)`` score matrix).

    Returns:
        weights with the shape, dtype and backend of ``x``; each slice along
        ``axis`` sums to 1, except a slice that is entirely ``-inf``, which is
        returned as all zeros (no NaN).

    Raises:
        TypeError: ``x`` is not a float array/tensor, or ``axis`` is not an int.
        ValueError: ``x`` contains NaN or ``+inf``, is 0-d, has an empty slice,
            or ``axis`` is out of range.

    Example:
        >>> import numpy as np
        >>> softmax(np.log(np.array([1.0, 2.0, 3.0]))).round(4)
        array([0.1667, 0.3333, 0.5   ])
    """
    axis = _validate(x, axis)
    z, total = _shifted(x, axis)
    if is_tensor(x):
        safe = torch.where(total > 0, total, torch.ones_like(total))
        return torch.exp(z) / safe
    safe = np.where(total > 0, total, np.ones_like(total))
    return np.exp(z) / safe


def log_softmax(x: Array, axis: int = -1) -> Array:
    """Numerically stable log-softmax along ``axis``.

    ``log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))``; computed this way
    it is accurate even where ``softmax(x)_i`` underflows to 0.

    Args:
        x: scores, any shape ``(..., n, ...)``; NumPy array or torch tensor with a
            floating dtype; ``-inf`` entries allowed, NaN and ``+inf`` rejected.
        axis: the axis to normalise over (default: last).

    Returns:
        log-weights with the shape, dtype and backend of ``x``. A slice that is
        entirely ``-inf`` is returned as all ``-inf`` (the log of the zeros that
        :func:`softmax` returns there), never NaN.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: as for :func:`softmax`.
    """
    axis = _validate(x, axis)
    z, total = _shifted(x, axis)
    if is_tensor(x):
        empty = total == 0
        log_total = torch.log(torch.where(empty, torch.ones_like(total), total))
        out = z - log_total
        return torch.where(empty, torch.full_like(out, float("-inf")), out)
    empty = total == 0
    log_total = np.log(np.where(empty, np.ones_like(total), total))
    out = z - log_total
    return np.where(empty, np.full_like(out, -np.inf), out)
