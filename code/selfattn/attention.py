"""Self-attention, from the parameter-free version to scaled dot-product attention.

The computation is written out step by step, exactly as the book derives it::

    S = Q Kᵀ · scale          scores,   (..., q_len, k_len)   scale = 1/sqrt(head_dim)
    S = c tanh(S / c)         soft-capping, only with softcap=c (off by default)
    S[~M] = -inf              mask      (bool M: True = may attend; or S + M if M is additive)
    A = softmax(S, rows)      weights,  (..., q_len, k_len)   each row sums to 1
    C = A V                   context,  (..., q_len, head_dim_v)

This readable path *is* the implementation; the tests check it against
``torch.nn.functional.scaled_dot_product_attention``. With torch tensors,
step 4 is ``torch.softmax`` (the same stable softmax, in one fused kernel)
and the scale multiplies Q before the product (L x head_dim numbers, not
L x L). ``need_weights=False`` skips S and A altogether and calls PyTorch's
fused kernel for C; it returns the same context (to rounding) and ``None``.

**Soft-capping** (``softcap=c``, as in Gemma 2) squashes every score into
``[-c, c]`` with ``c tanh(S / c)`` before the mask: a score much smaller than
``c`` is nearly unchanged (``tanh u ≈ u``), a large one can never pass ``c``.
PyTorch's fused kernel has no such step, so with a cap the weights are always
formed, also for ``need_weights=False``.

Shape legend (the book's notation):

* ``...``        leading batch / head dims (``batch``, ``num_heads``), broadcast
* ``seq_len``    L, the number of tokens in self-attention
* ``q_len``      number of queries; ``k_len`` number of keys (= values)
* ``d_model``    embedding width; ``head_dim`` = d_k, width of queries and keys
* ``head_dim_v`` = d_v, width of values and of the context vectors

Backends: NumPy in -> NumPy out; torch in -> torch out, computed with torch ops
only and therefore differentiable. Mixing the two is a ``TypeError`` (one
exception: a NumPy *bool* mask is accepted with torch inputs and moved to
their device).

Fully masked rows: if a query may attend to no key, its weights and its
context are all **zeros** (not NaN). PyTorch 2.13's
``scaled_dot_product_attention`` returns the same zeros on CPU, both for a bool
mask row that is all ``False`` and for an additive mask row that is all
``-inf`` (checked in ``tests/test_attention.py``).

Checks cost one reduction per argument, not a pass per rule: finiteness of
an input is one ``aminmax`` (NaN propagates through min and max); an
additive mask is one ``max``. Overflow of the scores is caught on the torch
path by checking the context, L x head_dim_v numbers: finite inputs give a
non-finite context only when a score overflowed.

Bad input raises ``TypeError`` (not an array, non-float inputs, mixed
backends or dtypes, an integer mask, a non-numeric scale) or ``ValueError``
(too few dims, empty sequences, ``head_dim`` of query and key differ, key and
value lengths differ, leading dims that do not broadcast, a mask shape that
does not broadcast to the scores, NaN/inf in the inputs, NaN/+inf in an
additive mask, ``scale <= 0``, ``softcap <= 0``, scores that overflow). Messages name the
argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfattn._checks import (
    as_mask,
    check_finite,
    check_mask_shape,
    check_operand,
    check_qk,
    check_qkv,
    check_softcap,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array
from selfattn.masks import fully_masked_rows
from selfattn.softmax import softmax

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None  # type: ignore[assignment]

__all__ = ["attention_scores", "scaled_dot_product_attention", "simple_self_attention"]


# ---------------------------------------------------------------- helpers
def _resolve_scale(scale: Any, head_dim: int) -> float:
    """``1/sqrt(head_dim)`` if ``scale`` is None, else ``scale`` as a float (> 0, finite)."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale: expected a positive float or None, got {type(scale).__name__}")
    value = float(scale)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"scale: expected a positive finite float (default 1/sqrt(head_dim)), "
                         f"got {value}")
    return value


def _scores_shape(query: Any, key: Any) -> tuple[int, ...]:
    """``(..., q_len, k_len)``: the leading dims of ``query`` and ``key`` broadcast."""
    lead = tuple(np.broadcast_shapes(shape_of(query)[:-2], shape_of(key)[:-2]))
    return lead + (shape_of(query)[-2], shape_of(key)[-2])


def _swap_last(x: Any) -> Any:
    """Transpose the last two axes: (..., n, d) -> (..., d, n). Works for NumPy and torch."""
    return x.swapaxes(-1, -2)  # (..., d, n)


def _scores(
    query: Any, key: Any, factor: float, names: str = "query, key", check: bool = True
) -> Any:
    """``Q Kᵀ · factor``: (..., q_len, head_dim) @ (..., head_dim, k_len) -> (..., q_len, k_len).

    With ``check``, raises ``ValueError`` instead of returning inf when the product
    overflows. Torch scales ``Q`` first: (..., q_len, head_dim) numbers to multiply
    instead of (..., q_len, k_len).
    """
    if is_tensor(query):
        scaled = query if factor == 1.0 else query * factor  # (..., q_len, head_dim)
        scores = scaled @ _swap_last(key)  # (..., q_len, k_len)
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # reported below instead
            scores = (query @ _swap_last(key)) * factor  # (..., q_len, k_len)
    if check:
        _check_overflow(scores, shape_of(scores), names)
    return scores


def _soft_cap(scores: Any, cap: float | None) -> Any:
    """``cap * tanh(scores / cap)`` (NumPy or torch), or ``scores`` unchanged if ``cap`` is None.

    Applied before the mask: capped after it, a blocked score of -inf would become
    -cap and its key would get a weight."""
    if cap is None:
        return scores
    if is_tensor(scores):
        return cap * torch.tanh(scores / cap)  # (..., q_len, k_len), in [-cap, cap]
    return cap * np.tanh(scores / cap)  # (..., q_len, k_len), in [-cap, cap]


def _check_overflow(result: Any, scores_shape: tuple[int, ...], names: str) -> None:
    """``ValueError`` if ``result`` (the scores, or the context computed from them) is not
    finite: the inputs were finite, so a score overflowed. One reduction."""
    try:
        check_finite(names, result)
    except ValueError:
        raise ValueError(
            f"{names}: the scores overflowed to inf (shape {scores_shape}); "
            "the inputs are too large for their dtype"
        ) from None


# ---------------------------------------------------------------- public API
def simple_self_attention(x: Array) -> tuple[Array, Array]:
    """Self-attention with no parameters (the book's chapter 1).

    Every token is its own query, key and value::

        S = X Xᵀ              (unscaled dot products), (..., seq_len, seq_len)
        A = softmax(S, rows)  weights,                 (..., seq_len, seq_len)
        C = A X               context vectors,         (..., seq_len, d_model)

    Args:
        x: ``(seq_len, d_model)`` or ``(..., seq_len, d_model)`` float embeddings,
            one token per row (NumPy; torch tensors work the same way).

    Returns:
        ``(context, weights)`` with shapes ``(..., seq_len, d_model)`` and
        ``(..., seq_len, seq_len)``; ``weights[..., i, :]`` says how much token
        ``i`` takes from every token.

    Raises:
        TypeError: ``x`` is not a float array/tensor.
        ValueError: ``x`` has fewer than 2 dims, is empty, holds NaN/inf, or the
            scores overflow.
    """
    check_operand("x", x, "(..., seq_len, d_model)")
    scores = _scores(x, x, 1.0, "x")  # unscaled X Xᵀ: (..., seq_len, seq_len)
    weights = softmax(scores, axis=-1)  # (..., seq_len, seq_len)
    context = weights @ x  # (..., seq_len, d_model)
    return context, weights


def attention_scores(
    query: Array, key: Array, *, scale: float | None = None, softcap: float | None = None
) -> Array:
    """Attention scores ``S = Q Kᵀ · scale`` (before the mask and softmax).

    Args:
        query: ``(..., q_len, head_dim)`` float, NumPy or torch.
        key: ``(..., k_len, head_dim)`` float, same backend and dtype as ``query``;
            leading dims broadcast with ``query``'s.
        scale: multiplier, default ``1/sqrt(head_dim)``; pass ``1.0`` for plain
            dot products. Must be a positive finite number.
        softcap: optional cap ``c > 0``: return ``c tanh(S / c)``, no score
            beyond ``±c`` (Gemma 2's soft-capping). None: no cap.

    Returns:
        scores ``(..., q_len, k_len)``, same backend and dtype as the inputs.

    Raises:
        ValueError: a bad shape (see the module docstring).
        TypeError: a wrong type or dtype.
    """
    check_qk(query, key)
    factor = _resolve_scale(scale, shape_of(query)[-1])
    cap = check_softcap(softcap)
    return _soft_cap(_scores(query, key, factor), cap)  # (..., q_len, k_len)


def scaled_dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    mask: Array | None = None,
    *,
    scale: float | None = None,
    need_weights: bool = True,
    softcap: float | None = None,
) -> tuple[Array, Array | None]:
    """Scaled dot-product attention, ``C = softmax(Q Kᵀ · scale + mask) V``.

    Args:
        query: ``(..., q_len, head_dim)`` float, NumPy array or torch tensor.
        key: ``(..., k_len, head_dim)``, same backend and dtype as ``query``.
        value: ``(..., k_len, head_dim_v)``, same backend and dtype.
            The leading dims ``...`` (e.g. ``(batch, num_heads)``) of the three
            broadcast against each other.
        mask: optional, broadcastable to the scores ``(..., q_len, k_len)``:

            * bool, **True = may attend** (False entries get score ``-inf``), or
            * floating, added to the scores (0 = keep, ``-inf`` = block; finite
              values act as a bias).

            A NumPy bool mask is accepted with torch inputs. Integer masks are
            rejected (``TypeError``): convert with ``mask.astype(bool)``.
        scale: multiplier of the scores, default ``1/sqrt(head_dim)``.
        need_weights: return the weights (default). ``False`` returns ``None``
            instead and, for torch tensors, computes the context with PyTorch's
            fused kernel, which never forms the ``(q_len, k_len)`` matrices.
        softcap: optional cap ``c > 0``: the scores become ``c tanh(S / c)``
            before the mask (Gemma 2's soft-capping); the fused kernel is then
            never used. None (default): no cap.

    Returns:
        ``(context, weights)``:

        * context ``(..., q_len, head_dim_v)``, the attention output;
        * weights ``(..., q_len, k_len)``, each row sums to 1 -- except a
          query row with every key masked, whose weights and context are
          all zeros (no NaN; same as PyTorch 2.13 on CPU); ``None`` if
          ``need_weights`` is False.

        NumPy in -> NumPy out, torch in -> torch out (differentiable).

    Raises:
        ValueError: a bad shape, length or mask; the message names the argument,
            the shape seen and the shape expected (see the module docstring).
        TypeError: a wrong type or dtype, or mixed NumPy and torch inputs.

    Example:
        >>> import numpy as np
        >>> q = k = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> v = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> context, weights = scaled_dot_product_attention(q, k, v, scale=float(np.log(3)))
        >>> weights.round(4)  # exp(ln 3) = 3 against exp(0) = 1
        array([[0.75, 0.25],
               [0.25, 0.75]])
    """
    # 1. validate the inputs (see the module docstring)
    check_qkv(query, key, value)
    factor = _resolve_scale(scale, shape_of(query)[-1])
    cap = check_softcap(softcap)
    scores_shape = _scores_shape(query, key)  # (..., q_len, k_len)
    if mask is not None:
        mask = as_mask(mask, query)  # backend, device and dtype of query
        check_mask_shape(mask, scores_shape, "the scores (..., q_len, k_len)")
    if is_tensor(query):
        return _torch_attention(query, key, value, mask, factor, scores_shape, need_weights,
                                cap)

    # 2. scores S = Q Kᵀ · scale, soft-capped to [-c, c] if a cap c is given
    scores = _soft_cap(_scores(query, key, factor), cap)  # (..., q_len, k_len)

    # 3. mask: blocked scores become -inf, so softmax gives them weight 0
    if mask is not None:
        if mask.dtype == np.bool_:
            scores = np.where(mask, scores, -np.inf)  # (..., q_len, k_len)
        else:
            scores = scores + mask  # (..., q_len, k_len)

    # 4. weights A = softmax(S) along the keys; a row of all -inf gives zeros
    weights = softmax(scores, axis=-1)  # (..., q_len, k_len)

    # 5. context C = A V
    context = weights @ value  # (..., q_len, k_len) @ (..., k_len, hd_v) -> (..., q_len, hd_v)
    return context, (weights if need_weights else None)


def scaled_dot_product_attention_unchecked(
    query: Any, key: Any, value: Any, mask: Any = None, *, need_weights: bool = True,
    softcap: float | None = None,
) -> tuple[Any, Any]:
    """:func:`scaled_dot_product_attention` of torch tensors a caller has already checked.

    The layers check their inputs once, where they come in, and then call this:
    the same computation with the default scale ``1/sqrt(head_dim)``, without
    checking the inputs again. Only an overflow of the scores is still reported
    (``ValueError``): it depends on the numbers, not on the input's form.

    Args:
        query, key, value: float tensors as for :func:`scaled_dot_product_attention`,
            one dtype and device, finite.
        mask: None, or a bool (True = may attend) or additive tensor on the
            device of ``query`` (additive: in its dtype), broadcastable to
            ``(..., q_len, k_len)``.
        need_weights: as for :func:`scaled_dot_product_attention`.
        softcap: None or a checked cap ``c > 0`` (see
            :func:`scaled_dot_product_attention`).
    """
    factor = 1.0 / math.sqrt(shape_of(query)[-1])
    return _torch_attention(query, key, value, mask, factor, _scores_shape(query, key),
                            need_weights, softcap)


def _torch_attention(
    query: Any, key: Any, value: Any, mask: Any, factor: float,
    scores_shape: tuple[int, ...], need_weights: bool, cap: float | None = None,
) -> tuple[Any, Any]:
    """Steps 2-5 for validated torch tensors (see :func:`scaled_dot_product_attention`)."""
    blocked = None if mask is None else fully_masked_rows(mask)  # (..., q_len, 1)
    if blocked is not None and not bool(blocked.any()):
        blocked = None
    if not need_weights and cap is None:
        # PyTorch's fused kernel: C without forming S or A. Its leading dims must match.
        lead = scores_shape[:-2]
        q, k, v = (x.expand(*lead, *x.shape[-2:]) if x.shape[:-2] != lead else x
                   for x in (query, key, value))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=factor)
        if blocked is not None:
            context = context.masked_fill(blocked, 0.0)  # (..., q_len, hd_v)
        _check_overflow(context, scores_shape, "query, key")
        return context, None

    # 2. scores S = Q Kᵀ · scale (checked through the context below), capped if asked
    scores = _soft_cap(_scores(query, key, factor, check=False), cap)  # (..., q_len, k_len)

    # 3. mask: blocked scores become -inf, so softmax gives them weight 0
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))  # (..., q_len, k_len)
        else:
            scores = scores + mask  # (..., q_len, k_len)
    if blocked is not None:
        # a row with every key blocked: finite scores now (no NaN, also in the
        # gradient), zero weights after the softmax
        scores = scores.masked_fill(blocked, 0.0)  # (..., q_len, k_len)

    # 4. weights A = softmax(S) along the keys
    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)
    if blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)  # (..., q_len, k_len)

    # 5. context C = A V
    context = weights @ value  # (..., q_len, k_len) @ (..., k_len, hd_v) -> (..., q_len, hd_v)
    _check_overflow(context, scores_shape, "query, key")
    return context, (weights if need_weights else None)
