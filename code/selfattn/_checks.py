"""Input validation shared by every module.

Every error names the argument, the shape (or dtype) it saw and what was
expected, so a reader who copies the code gets a message they can act on::

    ValueError: key: expected last dimension 8 (head_dim of query), got shape (2, 5, 4)

These helpers accept NumPy arrays and torch tensors alike.
"""

from __future__ import annotations

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
    """Raise ``TypeError`` unless ``x`` has a floating-point dtype."""
    check_array(name, x)
    ok = x.is_floating_point() if is_tensor(x) else np.issubdtype(x.dtype, np.floating)
    if not ok:
        raise TypeError(f"{name}: expected a floating-point dtype, got {x.dtype}")


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
