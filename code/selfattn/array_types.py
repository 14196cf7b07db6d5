"""The one array type of the package's signatures.

Every numeric function of ``selfattn`` takes NumPy arrays or PyTorch tensors and
returns the same kind it was given (NumPy in, NumPy out; torch in, torch out, on
the same device). Signatures say so with one name, :data:`Array`, instead of
``Any``; the API page shows that name and links here.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = ["Array"]

Array: TypeAlias = np.ndarray | torch.Tensor if torch is not None else np.ndarray  # type: ignore[misc]
"""A NumPy array (:class:`numpy.ndarray`) or a PyTorch tensor (:class:`torch.Tensor`).

Shapes are given in each function's docstring with the book's letters, e.g.
``(batch, seq_len, d_model)``.
"""
