"""Self-attention, from the parameter-free version to scaled dot-product attention.

The computation is written out step by step, exactly as the book derives it::

    S = Q Kᵀ · scale          scores,   (..., q_len, k_len)   scale = 1/sqrt(head_dim)
    S[~M] = -inf              mask      (bool M: True = may attend; or S + M if M is additive)
    A = softmax(S, rows)      weights,  (..., q_len, k_len)   each row sums to 1
    C = A V                   context,  (..., q_len, head_dim_v)

This readable path *is* the implementation; the tests check it against
``torch.nn.functional.scaled_dot_product_attention``. With torch tensors,
step 4 is ``torch.softmax`` (the same stable softmax, in one fused kernel)
and the scale multiplies Q before the product (L x head_dim numbers, not
L x L). ``need_weights=False`` skips S and A altogether and calls PyTorch's
fused kernel for C; it returns the same context (to rounding) and ``None``.

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
additive mask, ``scale <= 0``, scores that overflow). Messages name the
argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfattn._checks import (
    check_array,
    check_dim,
    check_finite,
    check_min_ndim,
    check_nonempty,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array
from selfattn.softmax import _check_float, softmax

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None  # type: ignore[assignment]

__all__ = ["attention_scores", "scaled_dot_product_attention", "simple_self_attention"]

_Q_LEGEND = "(..., q_len, head_dim)"
_K_LEGEND = "(..., k_len, head_dim)"
_V_LEGEND = "(..., k_len, head_dim_v)"


# ---------------------------------------------------------------- validation
def _check_same_backend(name: str, x: Any, ref_name: str, ref: Any) -> None:
    """``TypeError`` unless ``x`` and ``ref`` are both NumPy or both torch, with one dtype."""
    if is_tensor(x) != is_tensor(ref):
        want = "torch.Tensor" if is_tensor(ref) else "numpy.ndarray"
        raise TypeError(
            f"{name}: expected a {want} like {ref_name} (mixing NumPy and torch is not "
            f"supported), got {type(x).__name__} with shape {shape_of(x)}"
        )
    if x.dtype != ref.dtype:
        raise TypeError(
            f"{name}: expected dtype {ref.dtype} (dtype of {ref_name}), got {x.dtype} "
            f"with shape {shape_of(x)}"
        )


def _check_operand(name: str, x: Any, legend: str) -> None:
    """Float array/tensor with >= 2 dims, non-empty and finite."""
    _check_float(name, x)
    check_min_ndim(name, x, 2, legend)
    check_nonempty(name, x)
    check_finite(name, x)


def _broadcast_leading(names: list[str], arrays: list[Any]) -> tuple[int, ...]:
    """Broadcast the leading (batch/head) dims of ``arrays``; ``ValueError`` if impossible."""
    leads = [shape_of(a)[:-2] for a in arrays]
    try:
        return tuple(np.broadcast_shapes(*leads))
    except ValueError:
        shapes = ", ".join(f"{n} {shape_of(a)}" for n, a in zip(names, arrays, strict=True))
        raise ValueError(
            f"{names[-1]}: leading (batch/head) dims {leads[-1]} do not broadcast with "
            f"{leads[:-1]}; got shapes {shapes}, expected {_Q_LEGEND}, {_K_LEGEND}, {_V_LEGEND}"
        ) from None


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


def _check_qk(query: Any, key: Any) -> None:
    """Validate ``query`` (..., q_len, head_dim) and ``key`` (..., k_len, head_dim)."""
    _check_operand("query", query, _Q_LEGEND)
    check_array("key", key)
    _check_same_backend("key", key, "query", query)
    _check_operand("key", key, _K_LEGEND)
    check_dim("key", key, -1, shape_of(query)[-1],
              f"head_dim of query, whose shape is {shape_of(query)}")
    _broadcast_leading(["query", "key"], [query, key])


def _check_qkv(query: Any, key: Any, value: Any, value_legend: str = _V_LEGEND) -> None:
    """Validate ``query`` and ``key`` (see :func:`_check_qk`) and ``value``
    (..., k_len, head_dim_v): same backend and dtype, as many rows as ``key``."""
    _check_qk(query, key)
    check_array("value", value)
    _check_same_backend("value", value, "query", query)
    _check_operand("value", value, value_legend)
    check_dim("value", value, -2, shape_of(key)[-2],
              f"k_len of key, whose shape is {shape_of(key)}")
    _broadcast_leading(["query", "key", "value"], [query, key, value])


def _prepare_mask(mask: Any, query: Any, scores_shape: tuple[int, ...]) -> Any:
    """Validate ``mask`` and return it in the backend / dtype / device of ``query``.

    Returns a bool mask (True = may attend) or an additive float mask.
    """
    check_array("mask", mask)
    if is_tensor(mask):
        if not is_tensor(query):
            raise TypeError(
                f"mask: expected a numpy.ndarray like query (mixing NumPy and torch is not "
                f"supported), got Tensor with shape {shape_of(mask)}"
            )
        is_bool = mask.dtype == torch.bool
        is_float = mask.is_floating_point()
    else:
        is_bool = mask.dtype == np.bool_
        is_float = bool(np.issubdtype(mask.dtype, np.floating))
        if is_tensor(query) and not is_bool:
            raise TypeError(
                f"mask: a NumPy mask with torch inputs must be bool, got dtype {mask.dtype} "
                f"with shape {shape_of(mask)}; pass a torch tensor for an additive mask"
            )
    if not (is_bool or is_float):
        raise TypeError(
            f"mask: expected a bool mask (True = may attend) or a floating additive mask, "
            f"got dtype {mask.dtype} with shape {shape_of(mask)}"
        )
    try:
        fits = tuple(np.broadcast_shapes(shape_of(mask), scores_shape)) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask: expected a shape broadcastable to the scores (..., q_len, k_len) = "
            f"{scores_shape}, got shape {shape_of(mask)}"
        )
    if is_float and (mask.numel() if is_tensor(mask) else mask.size):
        top = float((mask.detach() if is_tensor(mask) else mask).max())  # NaN propagates
        if math.isnan(top) or top == math.inf:
            raise ValueError(
                f"mask: an additive mask may hold finite values and -inf only, found NaN or "
                f"+inf (shape {shape_of(mask)})"
            )
    if is_tensor(query):
        if not is_tensor(mask):
            mask = torch.from_numpy(mask)
        return mask.to(device=query.device, dtype=torch.bool if is_bool else query.dtype)
    return mask if is_bool else mask.astype(query.dtype, copy=False)


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
    _check_operand("x", x, "(..., seq_len, d_model)")
    scores = _scores(x, x, 1.0, "x")  # unscaled X Xᵀ: (..., seq_len, seq_len)
    weights = softmax(scores, axis=-1)  # (..., seq_len, seq_len)
    context = weights @ x  # (..., seq_len, d_model)
    return context, weights


def attention_scores(query: Array, key: Array, *, scale: float | None = None) -> Array:
    """Attention scores ``S = Q Kᵀ · scale`` (before the mask and softmax).

    Args:
        query: ``(..., q_len, head_dim)`` float, NumPy or torch.
        key: ``(..., k_len, head_dim)`` float, same backend and dtype as ``query``;
            leading dims broadcast with ``query``'s.
        scale: multiplier, default ``1/sqrt(head_dim)``; pass ``1.0`` for plain
            dot products. Must be a positive finite number.

    Returns:
        scores ``(..., q_len, k_len)``, same backend and dtype as the inputs.

    Raises:
        ValueError: a bad shape (see the module docstring).
        TypeError: a wrong type or dtype.
    """
    _check_qk(query, key)
    factor = _resolve_scale(scale, shape_of(query)[-1])
    return _scores(query, key, factor)


def scaled_dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    mask: Array | None = None,
    *,
    scale: float | None = None,
    need_weights: bool = True,
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
    _check_qkv(query, key, value)
    factor = _resolve_scale(scale, shape_of(query)[-1])
    lead = tuple(np.broadcast_shapes(shape_of(query)[:-2], shape_of(key)[:-2]))
    scores_shape = lead + (shape_of(query)[-2], shape_of(key)[-2])  # (..., q_len, k_len)
    if mask is not None:
        mask = _prepare_mask(mask, query, scores_shape)
    if is_tensor(query):
        return _torch_attention(query, key, value, mask, factor, scores_shape, need_weights)

    # 2. scores S = Q Kᵀ · scale
    scores = _scores(query, key, factor)  # (..., q_len, k_len)

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


def _blocked_rows(mask: Any) -> Any:
    """``(..., q_len, 1)`` bool, True where a query row may attend to no key (torch mask)."""
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return mask.amax(dim=-1, keepdim=True) == float("-inf")  # one reduction


def _torch_attention(
    query: Any, key: Any, value: Any, mask: Any, factor: float,
    scores_shape: tuple[int, ...], need_weights: bool,
) -> tuple[Any, Any]:
    """Steps 2-5 for validated torch tensors (see :func:`scaled_dot_product_attention`)."""
    blocked = None if mask is None else _blocked_rows(mask)  # (..., q_len, 1)
    if blocked is not None and not bool(blocked.any()):
        blocked = None
    if not need_weights:
        # PyTorch's fused kernel: C without forming S or A. Its leading dims must match.
        lead = scores_shape[:-2]
        q, k, v = (x.expand(*lead, *x.shape[-2:]) if x.shape[:-2] != lead else x
                   for x in (query, key, value))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=factor)
        if blocked is not None:
            context = context.masked_fill(blocked, 0.0)  # (..., q_len, hd_v)
        _check_overflow(context, scores_shape, "query, key")
        return context, None

    # 2. scores S = Q Kᵀ · scale (checked through the context below)
    scores = _scores(query, key, factor, check=False)  # (..., q_len, k_len)

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
    return context, weights
