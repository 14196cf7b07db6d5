"""Attention masks: build them, combine them, convert between conventions.

Convention (the book's and ``torch.nn.functional.scaled_dot_product_attention``'s):
a boolean mask ``M`` has **True = may attend**. Entry ``M[..., i, j]`` says
whether query ``i`` may look at key ``j``.

Other conventions you will meet, and the converters for them:

* ``torch.nn.MultiheadAttention`` (``attn_mask`` and ``key_padding_mask``) and
  ``torch.nn.Transformer*`` use **True = blocked**: :func:`to_blocked_mask`.
* Additive float masks hold 0 where attention is allowed and ``-inf`` where it
  is blocked; they are added to the scores: :func:`to_additive_mask`.

Shape legend: ``batch`` sequences in a batch, ``heads`` attention heads,
``q_len`` number of queries, ``k_len`` number of keys, ``seq_len`` padded
sequence length.

Backends: masks are NumPy ``bool`` arrays by default. Pass ``like=`` a torch
tensor to get a torch ``bool`` tensor on that tensor's device (``like`` is only
used for its backend and device). Functions that take a mask return the
mask's backend.

Bad input: ``TypeError`` for the wrong type or dtype (the message names the
dtype seen), ``ValueError`` for wrong values or shapes (the message names the
argument and the shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from selfattn._checks import check_array, check_ndim, check_positive_int, is_tensor, shape_of
from selfattn.array_types import Array

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = [
    "causal_mask",
    "combine_masks",
    "key_padding_to_attention_mask",
    "padding_mask",
    "sliding_window_mask",
    "to_additive_mask",
    "to_blocked_mask",
    "window_mask_from_positions",
]


def _check_like(like: Any) -> None:
    if like is not None:
        check_array("like", like)


def _to_backend(mask: np.ndarray, like: Any) -> Any:
    """Return the NumPy bool ``mask`` as a torch tensor on ``like``'s device if ``like`` is one."""
    if like is not None and is_tensor(like):
        return torch.from_numpy(mask).to(device=like.device)
    return mask


def _check_bool(name: str, mask: Any) -> None:
    """Raise ``TypeError`` unless ``mask`` is a bool NumPy array or torch tensor."""
    check_array(name, mask)
    ok = mask.dtype == torch.bool if is_tensor(mask) else mask.dtype == np.bool_
    if not ok:
        raise TypeError(
            f"{name}: expected a bool mask (True = may attend), got dtype {mask.dtype} "
            f"with shape {shape_of(mask)}"
        )


def causal_mask(q_len: int, k_len: int | None = None, *, like: Array | None = None) -> Array:
    """Causal (look-back-only) mask, aligned to the bottom-right corner.

    Query ``i`` may attend key ``j`` iff ``j <= i + (k_len - q_len)``. With
    ``k_len == q_len`` this is the lower triangle including the diagonal.
    With ``k_len > q_len`` the queries are the *last* ``q_len`` positions of a
    sequence of ``k_len`` tokens -- the situation of cached (incremental)
    decoding, where new queries see all cached keys plus themselves. This is
    ``torch.nn.attention.bias.causal_lower_right``, not the top-left aligned
    ``is_causal=True`` of ``scaled_dot_product_attention`` (the two agree only
    when ``q_len == k_len``).

    With ``k_len < q_len`` the first ``q_len - k_len`` rows are entirely False
    (those queries have nothing to attend to; attention returns zeros there).

    Args:
        q_len: number of queries, a positive int.
        k_len: number of keys, a positive int; defaults to ``q_len``.
        like: optional NumPy array or torch tensor; a tensor makes the result a
            torch bool tensor on its device.

    Returns:
        ``(q_len, k_len)`` bool mask, True = may attend.

    Raises:
        TypeError: ``q_len``/``k_len`` not ints, ``like`` not an array/tensor.
        ValueError: ``q_len``/``k_len`` not positive.

    Example:
        >>> causal_mask(2, 3).astype(int)
        array([[1, 1, 0],
               [1, 1, 1]])
    """
    check_positive_int("q_len", q_len)
    if k_len is None:
        k_len = q_len
    check_positive_int("k_len", k_len)
    _check_like(like)
    mask = np.tril(np.ones((int(q_len), int(k_len)), dtype=bool), k=int(k_len) - int(q_len))
    return _to_backend(mask, like)


def sliding_window_mask(
    q_len: int, k_len: int | None = None, *, window: int, sinks: int = 0,
    like: Array | None = None,
) -> Array:
    """Causal sliding-window mask, aligned to the bottom-right corner like :func:`causal_mask`.

    Query ``i`` sits at position ``p = i + (k_len - q_len)`` and may attend key
    ``j`` iff ``p - window < j <= p``: the last ``window`` keys up to and
    including itself. ``window`` counts the keys a query sees, the query's own
    key included, so ``window=1`` is the diagonal and ``window >= k_len`` is
    :func:`causal_mask`. Every row has at most ``window`` True entries, which is
    what lets a rolling cache (:class:`~selfattn.kv_cache.RollingKVCache`) keep
    only ``window`` keys.

    With ``sinks = k > 0`` the first ``k`` keys stay visible to every later
    query (the "attention sinks" of StreamingLLM) and the window keeps the last
    ``window - k`` keys: query ``p`` attends ``j`` iff ``j <= p`` and (``j < k``
    or ``p - j < window - k``). A row still has at most ``window`` True entries.

    Compose it with padding like any mask: ``combine_masks(sliding_window_mask(L,
    window=w), key_padding_to_attention_mask(pad))``.

    Args:
        q_len: number of queries, a positive int.
        k_len: number of keys, a positive int; defaults to ``q_len``.
        window: w, the keys a query sees (itself included), a positive int.
        sinks: k, leading keys every query keeps, an int with ``0 <= k < window``.
        like: optional NumPy array or torch tensor; a tensor makes the result a
            torch bool tensor on its device.

    Returns:
        ``(q_len, k_len)`` bool mask, True = may attend.

    Raises:
        TypeError: a size that is not an int, ``like`` not an array/tensor.
        ValueError: ``q_len``, ``k_len`` or ``window`` not positive, ``sinks``
            negative or not below ``window``.

    Example:
        >>> sliding_window_mask(4, window=2).astype(int)
        array([[1, 0, 0, 0],
               [1, 1, 0, 0],
               [0, 1, 1, 0],
               [0, 0, 1, 1]])
    """
    check_positive_int("q_len", q_len)
    if k_len is None:
        k_len = q_len
    check_positive_int("k_len", k_len)
    _check_window(window, sinks)
    _check_like(like)
    q_pos = np.arange(int(k_len) - int(q_len), int(k_len))  # (q_len,) bottom-right aligned
    k_pos = np.arange(int(k_len))  # (k_len,)
    mask = window_mask_from_positions(q_pos, k_pos, window=window, sinks=sinks)
    return _to_backend(mask, like)


def window_mask_from_positions(
    query_positions: Array, key_positions: Array, *, window: int, sinks: int = 0
) -> Array:
    """:func:`sliding_window_mask` for queries and keys at the given token positions.

    The rule of :func:`sliding_window_mask` written with positions: query at
    position ``p`` may attend key at position ``j`` iff ``j <= p`` and (``j <
    sinks`` or ``p - j < window - sinks``). A cache that has dropped keys (a
    :class:`~selfattn.kv_cache.RollingKVCache`) holds keys whose positions are
    not ``0 .. k_len - 1``; this masks them by where they really are.

    Args:
        query_positions: ``(q_len,)`` integer positions of the queries.
        key_positions: ``(k_len,)`` integer positions of the keys.
        window, sinks: as in :func:`sliding_window_mask`.

    Returns:
        ``(q_len, k_len)`` bool mask, True = may attend, in the backend of
        ``key_positions`` (a torch tensor on its device if it is one).

    Raises:
        TypeError: positions not integer arrays/tensors, ``window``/``sinks`` not ints.
        ValueError: positions not 1-D, ``window`` not positive, ``sinks`` negative
            or not below ``window``.
    """
    _check_window(window, sinks)
    for name, pos in (("query_positions", query_positions), ("key_positions", key_positions)):
        check_array(name, pos)
        integer = (not pos.is_floating_point() and not pos.is_complex()
                   and pos.dtype != torch.bool) if is_tensor(pos) else (
            np.issubdtype(pos.dtype, np.integer))
        if not integer:
            raise TypeError(f"{name}: expected integer positions, got dtype {pos.dtype}")
        check_ndim(name, pos, 1, "(q_len,)" if name == "query_positions" else "(k_len,)")
    if is_tensor(key_positions) and not is_tensor(query_positions):
        query_positions = torch.from_numpy(query_positions).to(key_positions.device)
    elif is_tensor(query_positions) and not is_tensor(key_positions):
        query_positions = query_positions.cpu().numpy()
    p, j = query_positions[:, None], key_positions[None, :]  # (q_len, 1), (1, k_len)
    distance = p - j  # (q_len, k_len): how far back each key is
    recent = distance < window - sinks  # inside the window
    return (distance >= 0) & (recent | (j < sinks))  # (q_len, k_len), True = may attend


def _check_window(window: Any, sinks: Any) -> None:
    """``window`` a positive int, ``sinks`` an int with ``0 <= sinks < window``."""
    check_positive_int("window", window)
    if isinstance(sinks, bool) or not isinstance(sinks, (int, np.integer)):
        raise TypeError(f"sinks: expected an int >= 0, got {type(sinks).__name__}")
    if sinks < 0:
        raise ValueError(f"sinks: expected an int >= 0, got {sinks}")
    if sinks >= window:
        raise ValueError(
            f"sinks: expected fewer sinks than the window (sinks < window = {window}), "
            f"got sinks={sinks}: the window counts the sinks and needs room for the "
            "query's own key"
        )


def padding_mask(
    lengths: Sequence[int] | Array, seq_len: int | None = None, *, like: Array | None = None
) -> Array:
    """Mask of real (non-padding) tokens in a right-padded batch.

    Args:
        lengths: ``(batch,)`` the number of real tokens in each sequence; a list
            of ints or a 1-D integer NumPy array / torch tensor; each ``0 <=
            length <= seq_len``.
        seq_len: padded length, a positive int; defaults to ``max(lengths)``.
        like: optional array/tensor fixing the backend and device of the result.
            If ``lengths`` is a torch tensor and ``like`` is None, the result is a
            torch tensor on ``lengths``'s device.

    Returns:
        ``(batch, seq_len)`` bool mask, ``True`` = real token, ``False`` = padding.
        Use :func:`key_padding_to_attention_mask` to apply it to keys.

    Raises:
        TypeError: lengths are not integers, or ``seq_len``/``like`` wrong type.
        ValueError: ``lengths`` empty or not 1-D, a negative length, a length
            greater than ``seq_len``, or ``seq_len`` not positive.

    Example:
        >>> padding_mask([2, 3]).astype(int)
        array([[1, 1, 0],
               [1, 1, 1]])
    """
    if like is None and is_tensor(lengths):
        like = lengths
    _check_like(like)
    if is_tensor(lengths):
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths: expected integer lengths, got dtype {lengths.dtype}")
        lens = lengths.detach().cpu().numpy()
    else:
        if isinstance(lengths, (str, bytes)):
            raise TypeError(f"lengths: expected a sequence of ints, got {type(lengths).__name__}")
        lens = np.asarray(lengths)
        if lens.dtype == np.bool_ or not np.issubdtype(lens.dtype, np.integer):
            raise TypeError(f"lengths: expected integer lengths, got dtype {lens.dtype}")
    if lens.ndim != 1 or lens.shape[0] == 0:
        raise ValueError(
            f"lengths: expected a non-empty 1-D shape (batch,), got shape {lens.shape}"
        )
    if (lens < 0).any():
        bad = int(np.flatnonzero(lens < 0)[0])
        raise ValueError(
            f"lengths: expected non-negative lengths, got {int(lens[bad])} at index {bad} "
            f"(shape {lens.shape})"
        )
    if seq_len is None:
        seq_len = int(lens.max())
        if seq_len == 0:
            raise ValueError(
                f"seq_len: every length is 0 (lengths shape {lens.shape}); pass seq_len explicitly"
            )
    check_positive_int("seq_len", seq_len)
    if (lens > seq_len).any():
        bad = int(np.flatnonzero(lens > seq_len)[0])
        raise ValueError(
            f"lengths: length {int(lens[bad])} at index {bad} exceeds seq_len={seq_len} "
            f"(lengths shape {lens.shape})"
        )
    mask = np.arange(int(seq_len))[None, :] < lens[:, None]  # (1, seq_len) vs (batch, 1)
    return _to_backend(mask, like)


def key_padding_to_attention_mask(pad: Array, *, with_heads: bool = True) -> Array:
    """Turn a ``(batch, seq_len)`` key padding mask into a broadcastable attention mask.

    Padding is masked along the **keys**: no query attends to a padding token.
    (Queries at padding positions still attend to the real keys; their outputs
    are usually ignored by the loss.)

    Args:
        pad: ``(batch, seq_len)`` bool, True = real token (e.g. from
            :func:`padding_mask`).
        with_heads: if True (default) return ``(batch, 1, 1, seq_len)``, which
            broadcasts against scores of shape ``(batch, heads, q_len, k_len)``;
            if False return ``(batch, 1, seq_len)`` for single-head scores of
            shape ``(batch, q_len, k_len)``.

    Returns:
        the same mask with singleton axes inserted (same backend), a view.

    Raises:
        TypeError: ``pad`` is not a bool array/tensor, or ``with_heads`` not a bool.
        ValueError: ``pad`` is not 2-D.
    """
    _check_bool("pad", pad)
    if not isinstance(with_heads, bool):
        raise TypeError(f"with_heads: expected a bool, got {type(with_heads).__name__}")
    check_ndim("pad", pad, 2, "(batch, seq_len)")
    if with_heads:
        return pad[:, None, None, :]  # (batch, 1, 1, seq_len)
    return pad[:, None, :]  # (batch, 1, seq_len)


def combine_masks(*masks: Array) -> Array:
    """Combine boolean masks with logical AND (attend only where *all* allow).

    ``None`` entries mean "no mask" and are skipped. Masks broadcast against
    each other like NumPy arrays, e.g. a causal ``(q_len, k_len)`` mask with a
    padding ``(batch, 1, 1, k_len)`` mask gives ``(batch, 1, q_len, k_len)``.
    If any mask is a torch tensor the result is a torch tensor (NumPy masks are
    converted to its device).

    Args:
        *masks: bool arrays/tensors (True = may attend) or ``None``.

    Returns:
        the broadcast AND of the masks, or ``None`` if every entry is ``None``.

    Raises:
        TypeError: an entry is not bool (message gives ``masks[i]`` and its dtype).
        ValueError: the shapes do not broadcast (message lists all shapes).
    """
    present = []
    for i, m in enumerate(masks):
        if m is None:
            continue
        _check_bool(f"masks[{i}]", m)
        present.append(m)
    if not present:
        return None
    shapes = [shape_of(m) for m in present]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"masks: shapes {shapes} do not broadcast together") from None
    tensors = [m for m in present if is_tensor(m)]
    if tensors:
        device = tensors[0].device
        present = [
            m.to(device) if is_tensor(m) else torch.from_numpy(m).to(device) for m in present
        ]
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def to_blocked_mask(mask: Array) -> Array:
    """Flip a may-attend mask into ``torch.nn.MultiheadAttention``'s convention.

    Args:
        mask: bool, any shape, True = may attend.

    Returns:
        ``~mask``: same shape and backend, True = blocked (what
        ``nn.MultiheadAttention(attn_mask=..., key_padding_mask=...)`` expects).
        Applying it twice gives the original mask back.

    Raises:
        TypeError: ``mask`` is not a bool array/tensor.
    """
    _check_bool("mask", mask)
    return ~mask


def to_additive_mask(mask: Array, dtype: Any = np.float32) -> Array:
    """Turn a bool may-attend mask into an additive float mask.

    Adding the result to the scores leaves allowed entries unchanged and sends
    blocked ones to ``-inf``, which softmax turns into weight 0.

    Args:
        mask: bool, any shape, True = may attend.
        dtype: a floating dtype. NumPy dtypes (default ``np.float32``) and torch
            dtypes are both accepted and converted to the mask's backend.

    Returns:
        A float mask of the same shape and backend, ``0.0`` where ``mask`` is True,
        ``-inf`` where it is False. ``result == 0`` recovers ``mask``.

    Raises:
        TypeError: ``mask`` is not bool, or ``dtype`` is not a floating dtype.
    """
    _check_bool("mask", mask)
    if is_tensor(mask):
        if isinstance(dtype, torch.dtype):
            tdtype = dtype
        else:
            try:
                tdtype = torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
            except TypeError:
                raise TypeError(f"dtype: expected a floating dtype, got {dtype!r}") from None
        if not tdtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating dtype, got {tdtype}")
        zeros = torch.zeros(mask.shape, dtype=tdtype, device=mask.device)
        return zeros.masked_fill(~mask, float("-inf"))
    if _is_torch_dtype(dtype):
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype if dtype != torch.bfloat16 else None
        if np_dtype is None:
            raise TypeError(f"dtype: {dtype} has no NumPy equivalent for a NumPy mask")
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype: expected a floating dtype, got {dtype!r}") from None
    if not np.issubdtype(np_dtype, np.floating):
        raise TypeError(f"dtype: expected a floating dtype, got {np_dtype}")
    return np.where(mask, np_dtype.type(0.0), np_dtype.type(-np.inf)).astype(np_dtype)


def fully_masked_rows(mask: Array) -> Array:
    """Where a query may attend to no key: ``(..., q_len, 1)`` bool, True for such a row.

    Attention gives such a row zero weights and a zero context (no NaN); the
    attention functions and layers use this to find the rows.

    Args:
        mask: bool ``(..., q_len, k_len)``, True = may attend, or an additive
            float mask, where a row of ``-inf`` blocks every key. NumPy or torch.

    Returns:
        ``(..., q_len, 1)`` bool, in the backend of ``mask``.
    """
    if is_tensor(mask):
        if mask.dtype == torch.bool:
            return ~mask.any(dim=-1, keepdim=True)
        return mask.amax(dim=-1, keepdim=True) == float("-inf")  # one reduction
    if mask.dtype == np.bool_:
        return ~mask.any(axis=-1, keepdims=True)
    return mask.max(axis=-1, keepdims=True) == -np.inf


def _is_torch_dtype(dtype: Any) -> bool:
    """True if ``dtype`` is a ``torch.dtype``."""
    return torch is not None and isinstance(dtype, torch.dtype)
