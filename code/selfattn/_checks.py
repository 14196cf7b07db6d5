"""Input validation shared by every module.

Every error names the argument, the shape (or dtype) it saw and what was
expected, so a reader who copies the code gets a message they can act on::

    ValueError: key: expected last dimension 8 (head_dim of query), got shape (2, 5, 4)

These helpers accept NumPy arrays and torch tensors alike, except the few for
torch layers (:func:`check_layer_input`). A public function checks its inputs
once, with these, and then computes; inner calls do not check again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

try:  # torch is a dependency, but keep the NumPy half importable on its own
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]


def is_tensor(x: Any) -> bool:
    """True if ``x`` is a ``torch.Tensor``."""
    return torch is not None and isinstance(x, torch.Tensor)


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of an array or tensor as a plain tuple of ints."""
    return tuple(int(s) for s in x.shape)


def check_array(name: str, x: Any) -> None:
    """Raise ``TypeError`` unless ``x`` is a NumPy array or a torch tensor."""
    if not (isinstance(x, np.ndarray) or is_tensor(x)):
        raise TypeError(
            f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}"
        )


def check_floating(name: str, x: Any) -> None:
    """Raise ``TypeError`` unless ``x`` is an array or tensor with a floating-point dtype."""
    check_array(name, x)
    ok = x.is_floating_point() if is_tensor(x) else np.issubdtype(x.dtype, np.floating)
    if not ok:
        raise TypeError(
            f"{name}: expected a floating-point dtype, got {x.dtype} with shape {shape_of(x)}"
        )


def check_ndim(name: str, x: Any, ndim: int | Sequence[int], legend: str) -> None:
    """Raise ``ValueError`` unless ``x.ndim`` is ``ndim`` (or one of them).

    ``legend`` spells the expected shape in the book's letters,
    e.g. ``"(batch, seq_len, d_model)"``.
    """
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in allowed:
        raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(x)}")


def check_min_ndim(name: str, x: Any, ndim: int, legend: str) -> None:
    """Raise ``ValueError`` if ``x`` has fewer than ``ndim`` dimensions."""
    if x.ndim < ndim:
        raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(x)}")


def check_dim(name: str, x: Any, axis: int, size: int, what: str) -> None:
    """Raise ``ValueError`` unless ``x.shape[axis] == size``.

    ``what`` says where the expected size comes from, e.g. ``"head_dim of query"``.
    """
    got = shape_of(x)
    if got[axis] != size:
        label = "last dimension" if axis == -1 else f"dimension {axis}"
        raise ValueError(f"{name}: expected {label} {size} ({what}), got shape {got}")


def check_nonempty(name: str, x: Any) -> None:
    """Raise ``ValueError`` if any dimension of ``x`` is zero."""
    if any(s == 0 for s in shape_of(x)):
        raise ValueError(f"{name}: expected a non-empty array, got shape {shape_of(x)}")


def check_finite(name: str, x: Any) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN (or +/-inf): attention never returns NaN silently.

    One reduction pass: every entry is finite exactly when the minimum and the
    maximum are (both propagate NaN). No temporary array the size of ``x``.
    """
    if is_tensor(x):
        if x.numel() == 0:
            return
        low, high = torch.aminmax(x.detach())
        finite = bool(torch.isfinite(low) & torch.isfinite(high))
    else:
        if x.size == 0:
            return
        finite = bool(np.isfinite(x.min()) and np.isfinite(x.max()))
    if not finite:
        raise ValueError(f"{name}: contains NaN or infinity (shape {shape_of(x)})")


def check_positive_int(name: str, value: Any) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``value`` is an int > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")


def check_window(window: Any, causal: Any) -> None:
    """A sliding window setting: ``None``, or a positive int with ``causal`` True.

    ``TypeError`` for a window that is not an int, ``ValueError`` for one below 1
    or without ``causal`` (a sliding window looks back only).
    """
    if window is None:
        return
    check_positive_int("window", window)
    if causal is not True:
        raise ValueError(
            f"window: a sliding window looks back only; window={window} needs causal=True, "
            f"got causal={causal!r}"
        )


def check_dropout(p: Any) -> float:
    """``p`` as a float; ``TypeError`` unless a real number, ``ValueError`` unless in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"dropout: expected a float in [0, 1), got {type(p).__name__}")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {p}")
    return float(p)


# ---------------------------------------------------------------- attention operands
Q_LEGEND = "(..., q_len, head_dim)"
K_LEGEND = "(..., k_len, head_dim)"
V_LEGEND = "(..., k_len, head_dim_v)"


def check_operand(name: str, x: Any, legend: str) -> None:
    """Float array/tensor with >= 2 dims (``legend``), non-empty and finite."""
    check_floating(name, x)
    check_min_ndim(name, x, 2, legend)
    check_nonempty(name, x)
    check_finite(name, x)


def check_same_backend(name: str, x: Any, ref_name: str, ref: Any) -> None:
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


def broadcast_leading(names: list[str], arrays: list[Any]) -> tuple[int, ...]:
    """Broadcast the leading (batch/head) dims of ``arrays``; ``ValueError`` if impossible."""
    leads = [shape_of(a)[:-2] for a in arrays]
    try:
        return tuple(np.broadcast_shapes(*leads))
    except ValueError:
        shapes = ", ".join(f"{n} {shape_of(a)}" for n, a in zip(names, arrays, strict=True))
        raise ValueError(
            f"{names[-1]}: leading (batch/head) dims {leads[-1]} do not broadcast with "
            f"{leads[:-1]}; got shapes {shapes}, expected {Q_LEGEND}, {K_LEGEND}, {V_LEGEND}"
        ) from None


def check_qk(query: Any, key: Any) -> None:
    """Validate ``query`` (..., q_len, head_dim) and ``key`` (..., k_len, head_dim)."""
    check_operand("query", query, Q_LEGEND)
    check_array("key", key)
    check_same_backend("key", key, "query", query)
    check_operand("key", key, K_LEGEND)
    check_dim("key", key, -1, shape_of(query)[-1],
              f"head_dim of query, whose shape is {shape_of(query)}")
    broadcast_leading(["query", "key"], [query, key])


def check_qkv(query: Any, key: Any, value: Any, value_legend: str = V_LEGEND) -> None:
    """Validate ``query`` and ``key`` (see :func:`check_qk`) and ``value``
    (..., k_len, head_dim_v): same backend and dtype, as many rows as ``key``."""
    check_qk(query, key)
    check_array("value", value)
    check_same_backend("value", value, "query", query)
    check_operand("value", value, value_legend)
    check_dim("value", value, -2, shape_of(key)[-2],
              f"k_len of key, whose shape is {shape_of(key)}")
    broadcast_leading(["query", "key", "value"], [query, key, value])


# ---------------------------------------------------------------- masks
def as_mask(mask: Any, like: Any, name: str = "mask") -> Any:
    """Validate an attention mask's type and values; return it in ``like``'s backend.

    ``mask`` is bool (**True = may attend**) or floating and additive (0 keeps,
    ``-inf`` blocks, a finite value is a bias; NaN and ``+inf`` are rejected, one
    reduction). With a torch ``like`` the result is a tensor on its device, an
    additive mask in its dtype, and a NumPy *bool* mask is accepted and moved
    there; with a NumPy ``like`` it is a NumPy array. The shape is checked by
    :func:`check_mask_shape`.
    """
    check_array(name, mask)
    if is_tensor(mask):
        if not is_tensor(like):
            raise TypeError(
                f"{name}: expected a numpy.ndarray like query (mixing NumPy and torch is not "
                f"supported), got Tensor with shape {shape_of(mask)}"
            )
        is_bool = mask.dtype == torch.bool
        is_float = mask.is_floating_point()
    else:
        is_bool = mask.dtype == np.bool_
        is_float = bool(np.issubdtype(mask.dtype, np.floating))
        if is_tensor(like) and not is_bool:
            raise TypeError(
                f"{name}: a NumPy mask with torch inputs must be bool (True = may attend), got "
                f"dtype {mask.dtype} with shape {shape_of(mask)}; pass a torch tensor for an "
                "additive mask"
            )
    if not (is_bool or is_float):
        raise TypeError(
            f"{name}: expected a bool mask (True = may attend) or a floating additive mask, "
            f"got dtype {mask.dtype} with shape {shape_of(mask)}"
        )
    if is_float and (mask.numel() if is_tensor(mask) else mask.size):
        top = float((mask.detach() if is_tensor(mask) else mask).max())  # NaN propagates
        if math.isnan(top) or top == math.inf:
            raise ValueError(
                f"{name}: an additive mask may hold finite values and -inf only, found NaN or "
                f"+inf (shape {shape_of(mask)})"
            )
    if is_tensor(like):
        if not is_tensor(mask):
            mask = torch.from_numpy(mask)
        return mask.to(device=like.device, dtype=torch.bool if is_bool else like.dtype)
    return mask if is_bool else mask.astype(like.dtype, copy=False)


def check_mask_shape(
    mask: Any, shape: tuple[int, ...], legend: str, seen: tuple[int, ...] | None = None,
    name: str = "mask",
) -> None:
    """``ValueError`` unless ``mask`` broadcasts to exactly ``shape``, spelled ``legend``
    (e.g. ``"(batch, num_heads, q_len, k_len)"``); ``seen``: the shape the caller passed,
    if the mask was reshaped since."""
    try:
        fits = tuple(np.broadcast_shapes(shape_of(mask), shape)) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name}: expected a shape broadcastable to {legend} = {shape}, "
            f"got shape {shape_of(mask) if seen is None else seen}"
        )


# ---------------------------------------------------------------- torch layers
def check_layer_input(name: str, x: Any, width: int, what: str, legend: str, param: Any) -> None:
    """``x`` must be a finite float tensor of shape ``legend`` (2-D or 3-D) whose last
    dimension is ``width`` (``what`` names it, e.g. ``"d_model"``), in the dtype of the
    layer's parameter ``param``."""
    if not is_tensor(x):
        raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(x).__name__}")
    check_floating(name, x)
    if x.ndim not in (2, 3):
        raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(x)}")
    if x.shape[-1] != width:
        raise ValueError(
            f"{name}: expected last dimension {width} ({what}), got shape {shape_of(x)}"
        )
    if x.shape[-2] == 0 or (x.ndim == 3 and x.shape[0] == 0):
        raise ValueError(f"{name}: expected a non-empty tensor {legend}, got shape {shape_of(x)}")
    if x.dtype != param.dtype:
        raise TypeError(
            f"{name}: expected dtype {param.dtype} (the dtype of the module's parameters; "
            f"convert the module with .to({x.dtype}) or the input), got {x.dtype} "
            f"with shape {shape_of(x)}"
        )
    check_finite(name, x)


def check_attention_inputs(
    query: Any, key: Any, value: Any, width: int, param: Any
) -> tuple[Any, Any, Any, bool]:
    """Check the inputs of an attention layer; return them 3-D and whether they were 2-D.

    ``query`` ``(batch, q_len, width)``, ``key`` and ``value`` ``(batch, k_len,
    width)``, or all three unbatched ``(len, width)``: finite float tensors in
    the dtype of the layer's parameter ``param`` (:func:`check_layer_input`),
    one batch, as many values as keys (:func:`as_batched`). A tensor passed
    twice (``key`` is ``query`` in self-attention) is checked once.
    """
    legend = "(batch, seq_len, d_model) or (seq_len, d_model)"
    check_layer_input("query", query, width, "d_model", legend, param)
    if key is not query:
        check_layer_input("key", key, width, "d_model", legend, param)
    if value is not query and value is not key:
        check_layer_input("value", value, width, "d_model", legend, param)
    return as_batched(query, key, value)


def as_batched(
    query: Any, key: Any, value: Any, names: tuple[str, str, str] = ("query", "key", "value")
) -> tuple[Any, Any, Any, bool]:
    """``(query, key, value, unbatched)``: the three 2-D or 3-D tensors made 3-D
    ``(batch, len, width)``; ``ValueError`` unless they have one number of dims, one
    batch and as many values as keys. ``names`` name them in the messages."""
    q_name, k_name, v_name = names
    if not query.ndim == key.ndim == value.ndim:
        raise ValueError(
            f"{k_name}, {v_name}: expected the same number of dims as {q_name} "
            f"{shape_of(query)}, got {k_name} {shape_of(key)} and {v_name} {shape_of(value)}"
        )
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query[None], key[None], value[None]  # (1, len, width)
    batch = query.shape[0]
    if key.shape[0] != batch:
        raise ValueError(
            f"{k_name}: expected batch {batch} (dimension 0 of {q_name}, shape "
            f"{shape_of(query)}), got shape {shape_of(key)}"
        )
    if value.shape[:2] != key.shape[:2]:
        raise ValueError(
            f"{v_name}: expected (batch, k_len) = {shape_of(key)[:2]} from {k_name} of shape "
            f"{shape_of(key)}, got shape {shape_of(value)}"
        )
    return query, key, value, unbatched


def as_head_mask(
    mask: Any, like: Any, shape: tuple[int, int, int, int], name: str = "mask"
) -> Any:
    """Check a multi-head attention mask; return it as a tensor broadcastable to ``shape``.

    ``shape`` is that of the scores, ``(batch, num_heads, q_len, k_len)``. The
    mask is ``(q_len, k_len)``, ``(batch, q_len, k_len)`` (shared by every
    head; returned with a head dimension of 1) or ``(batch, num_heads, q_len,
    k_len)``, size-1 dims broadcasting; bool or additive as for
    :func:`as_mask`, whose checks it runs.
    """
    mask = as_mask(mask, like, name)
    seen = shape_of(mask)
    if mask.ndim not in (2, 3, 4):
        raise ValueError(
            f"{name}: expected shape (q_len, k_len), (batch, q_len, k_len) or "
            f"(batch, num_heads, q_len, k_len) broadcastable to {shape}, got shape {seen}"
        )
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)  # (batch, 1, q_len, k_len): same for every head
    check_mask_shape(mask, shape, "(batch, num_heads, q_len, k_len)", seen, name)
    return mask


# ---------------------------------------------------------------- token ids
def check_token_range(name: str, ids: Any, vocab_size: int, shape: tuple[int, ...]) -> None:
    """``ValueError`` unless every id of ``ids`` is in ``[0, vocab_size)``; ``shape``: the
    shape the caller passed, named in the message."""
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab_size}), got values in [{lo}, {hi}] "
            f"(shape {tuple(shape)})"
        )


def check_token_ids(
    idx: Any, vocab_size: int, *, seq_len: int | None = None, cached_len: int = 0,
    name: str = "idx",
) -> None:
    """A model's input: a non-empty integer tensor ``(batch, L)`` of ids in ``[0,
    vocab_size)``, with ``L <= seq_len - cached_len`` when a context length ``seq_len``
    is given (``cached_len``: positions already held by KV caches)."""
    legend = "(batch, seq_len)"
    if not is_tensor(idx):
        raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(idx).__name__}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer dtype (token ids), got {idx.dtype}")
    if idx.ndim != 2:
        raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(idx)}")
    if idx.shape[0] == 0 or idx.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty {legend}, got shape {shape_of(idx)}")
    if seq_len is not None and idx.shape[1] > seq_len - cached_len:
        room = seq_len - cached_len
        what = f"config.seq_len = {seq_len}" if cached_len == 0 else (
            f"config.seq_len - cached_len = {seq_len} - {cached_len} = {room}"
        )
        raise ValueError(
            f"{name}: expected seq_len <= {what}, got shape "
            f"{shape_of(idx)}; evaluate longer texts in windows (evaluate_perplexity)"
        )
    check_token_range(name, idx, vocab_size, shape_of(idx))


def as_token_rows(name: str, tokens: Any) -> np.ndarray:
    """Token ids (NumPy or torch, ``(n,)`` or ``(num_sequences, n)``, ``n >= 2``) as an
    int64 ``(num_sequences, n)`` NumPy array: a 1-D stream is one row."""
    if not (is_tensor(tokens) or isinstance(tokens, np.ndarray)):
        raise TypeError(
            f"{name}: expected a numpy.ndarray or torch.Tensor of token ids, "
            f"got {type(tokens).__name__}"
        )
    arr = tokens.detach().cpu().numpy() if is_tensor(tokens) else tokens
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer dtype (token ids), got {tokens.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"{name}: expected shape (n,) or (num_sequences, n), got shape {shape_of(arr)}"
        )
    rows = arr.reshape(1, -1) if arr.ndim == 1 else arr  # (num_sequences, n)
    if rows.shape[0] == 0 or rows.shape[1] < 2:
        raise ValueError(
            f"{name}: expected at least 2 tokens per row (one input, one target), "
            f"got shape {shape_of(arr)}"
        )
    return rows.astype(np.int64, copy=False)
