"""Attention as kernel regression: the Nadaraya–Watson estimator.

Nadaraya–Watson predicts a value at a query point ``q`` from sample points
``k_j`` (the keys) and what was observed there, ``v_j`` (the values), as a
weighted average whose weights come from a kernel::

    f(q) = Σ_j K(q, k_j) v_j / Σ_j K(q, k_j)

With the Gaussian kernel ``K(q, k) = exp(-|q - k|² / (2 ρ²))`` the weights are a
softmax, so the estimator *is* softmax attention::

    s_j = -|q - k_j|² / (2 ρ²)      scores,  (..., q_len, k_len)
    a_j = softmax(s)_j              weights, (..., q_len, k_len), each row sums to 1
    f(q) = Σ_j a_j v_j              prediction (the context vector), (..., q_len, d_v)

``ρ`` (``bandwidth``) sets how far a sample point reaches: ``ρ -> 0`` gives the
value of the nearest key, ``ρ -> ∞`` the mean of all values. (The book keeps
``σ`` for the spread of random entries, hence ``ρ``.)

Expanding the square links it to dot-product attention::

    s_j = q·k_j / ρ²  -  |q|² / (2 ρ²)  -  |k_j|² / (2 ρ²)

The ``|q|²`` term is the same for every key of a row and cancels in the
softmax; the ``|k_j|²`` term is a bias per key (:func:`gaussian_key_bias`). So
:func:`nadaraya_watson` equals
``scaled_dot_product_attention(q, k, v, mask=gaussian_key_bias(k, ρ), scale=1/ρ²)``,
and when every key has the same length the bias is a constant and cancels too:
the weights are those of dot-product attention with ``scale = 1/ρ²``.

Shape legend (the book's notation):

* ``...``       leading batch dims, broadcast between ``query`` and ``key``
* ``q_len``     number of query points; ``k_len`` number of sample points (keys = values)
* ``d``         width of the points (1 for the usual regression on a line)
* ``d_v``       width of the values (the predicted quantity)

Backends: NumPy in -> NumPy out; torch in -> torch out (differentiable in the
inputs; ``bandwidth`` is a plain number).

Bad input raises ``TypeError`` (not an array, non-float dtype, mixed backends or
dtypes, a bandwidth that is not a real number) or ``ValueError`` (fewer than 2
dims, empty, widths or lengths that differ, leading dims that do not broadcast,
NaN/inf, ``bandwidth <= 0`` or not finite, a bandwidth so small that the scores
overflow). Messages name the argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfattn._checks import check_finite, check_operand, check_qk, check_qkv, shape_of
from selfattn.array_types import Array
from selfattn.softmax import softmax

__all__ = ["gaussian_kernel_scores", "gaussian_key_bias", "nadaraya_watson"]

_V_LEGEND = "(..., k_len, d_v)"


def _check_bandwidth(bandwidth: Any) -> float:
    """``bandwidth`` as a positive finite float, else ``TypeError``/``ValueError``."""
    if isinstance(bandwidth, bool) or not isinstance(
        bandwidth, (int, float, np.integer, np.floating)
    ):
        raise TypeError(
            f"bandwidth: expected a positive float (the kernel width ρ), "
            f"got {type(bandwidth).__name__}"
        )
    value = float(bandwidth)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"bandwidth: expected a positive finite float, got {value}")
    return value


def _check_scores(scores: Any, bandwidth: float) -> None:
    """``ValueError`` if the scores overflowed (a bandwidth too small for the dtype)."""
    try:
        check_finite("scores", scores)
    except ValueError:
        raise ValueError(
            f"bandwidth: {bandwidth} is too small for the inputs' dtype: the scores "
            f"-|q - k|² / (2 ρ²) overflow to -inf (shape {shape_of(scores)})"
        ) from None


def gaussian_kernel_scores(query: Array, key: Array, bandwidth: float) -> Array:
    """Gaussian-kernel scores ``s[..., i, j] = -|q_i - k_j|² / (2 ρ²)`` (before the softmax).

    The squared distance is computed from the differences themselves (not from
    ``|q|² - 2 q·k + |k|²``), so it is never negative, even for equal points.

    Args:
        query: ``(..., q_len, d)`` float, the points where a prediction is wanted.
        key: ``(..., k_len, d)`` float, the sample points; same backend and dtype as
            ``query``, leading dims broadcast with ``query``'s.
        bandwidth: ``ρ > 0``, the kernel width, in the units of the points.

    Returns:
        scores ``(..., q_len, k_len)``, all ``<= 0``; ``0`` where a query equals a key.

    Raises:
        TypeError, ValueError: see the module docstring.

    Example:
        >>> import numpy as np
        >>> q = np.array([[0.0]])
        >>> k = np.array([[0.0], [1.0], [2.0]])
        >>> gaussian_kernel_scores(q, k, bandwidth=1.0)
        array([[ 0. , -0.5, -2. ]])
    """
    check_qk(query, key)
    rho = _check_bandwidth(bandwidth)
    # (..., q_len, 1, d) - (..., 1, k_len, d) -> (..., q_len, k_len, d)
    diff = query[..., :, None, :] - key[..., None, :, :]
    squared = (diff * diff).sum(-1)  # (..., q_len, k_len)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # checked below
        # (..., q_len, k_len); "0.0 -" gives +0 rather than -0 where q equals k
        scores = 0.0 - squared / (2.0 * rho * rho)
    _check_scores(scores, rho)
    return scores


def gaussian_key_bias(key: Array, bandwidth: float) -> Array:
    """The per-key bias ``-|k_j|² / (2 ρ²)`` that turns dot-product attention into
    Nadaraya–Watson.

    Pass it as the additive ``mask`` of
    :func:`~selfattn.attention.scaled_dot_product_attention` with ``scale=1/ρ²``;
    it broadcasts over the queries.

    Args:
        key: ``(..., k_len, d)`` float, the sample points.
        bandwidth: ``ρ > 0``.

    Returns:
        bias ``(..., 1, k_len)``: one number per key, the same for every query row.

    Raises:
        TypeError, ValueError: see the module docstring.

    Example:
        >>> import numpy as np
        >>> gaussian_key_bias(np.array([[1.0], [2.0]]), bandwidth=1.0)
        array([[-0.5, -2. ]])
    """
    check_operand("key", key, "(..., k_len, d)")
    rho = _check_bandwidth(bandwidth)
    squared = (key * key).sum(-1)  # (..., k_len)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # checked below
        bias = 0.0 - squared[..., None, :] / (2.0 * rho * rho)  # (..., 1, k_len)
    _check_scores(bias, rho)
    return bias


def nadaraya_watson(
    query: Array, key: Array, value: Array, bandwidth: float
) -> tuple[Array, Array]:
    """Nadaraya–Watson kernel regression with a Gaussian kernel, written as attention.

    ``f(q_i) = Σ_j softmax_j(-|q_i - k_j|² / (2 ρ²)) v_j``.

    Args:
        query: ``(..., q_len, d)`` float, the points where a prediction is wanted.
        key: ``(..., k_len, d)`` float, the sample points; same backend and dtype.
        value: ``(..., k_len, d_v)`` float, what was observed at each sample point.
            The leading dims of the three broadcast against each other.
        bandwidth: ``ρ > 0``, the kernel width. Small: each prediction copies the
            nearest sample; large: every prediction is the mean of the values.

    Returns:
        ``(prediction, weights)`` with shapes ``(..., q_len, d_v)`` and
        ``(..., q_len, k_len)``; each row of the weights sums to 1.

    Raises:
        TypeError, ValueError: see the module docstring.

    Example:
        >>> import numpy as np
        >>> k = np.array([[0.0], [1.0]])
        >>> v = np.array([[0.0], [10.0]])
        >>> prediction, weights = nadaraya_watson(np.array([[0.5]]), k, v, bandwidth=0.5)
        >>> prediction  # halfway between the two keys: the mean of the two values
        array([[5.]])
    """
    check_qkv(query, key, value, _V_LEGEND)
    scores = gaussian_kernel_scores(query, key, bandwidth)  # (..., q_len, k_len)
    weights = softmax(scores, axis=-1)  # (..., q_len, k_len), rows sum to 1
    prediction = weights @ value  # (..., q_len, k_len) @ (..., k_len, d_v) -> (..., q_len, d_v)
    return prediction, weights
