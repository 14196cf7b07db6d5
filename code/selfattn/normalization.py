"""RMSNorm: rescale each token's vector by its root mean square.

LayerNorm (``torch.nn.LayerNorm``) subtracts each token's mean, divides by its
standard deviation and applies a learned scale γ and shift β. **RMSNorm**
(Zhang and Sennrich, 2019) keeps only the division and the scale: for a token
``x`` with ``d`` entries ::

    RMSNorm(x) = γ ⊙ x / sqrt(mean(x²) + eps)          mean over the d entries

No mean is subtracted and there is no shift β, so it has ``d`` parameters where
LayerNorm has ``2d``. Llama, Gemma, Qwen and OLMo 2 use it in place of
LayerNorm; :class:`~selfattn.block.TransformerBlock` does with
``BlockConfig(norm="rmsnorm")``, and :class:`~selfattn.layers.MultiHeadAttention`
normalises every head's queries and keys with it when ``qk_norm=True``.

:class:`RMSNorm` computes exactly the formula above; the tests check it against
``torch.nn.RMSNorm`` with the same ``eps`` (whose default, ``eps=None``, is the
machine epsilon of the input's dtype, as here).

Shape legend: ``...`` any leading dims (``batch``, ``seq_len``, ``num_heads``),
``dim`` the normalised width (``d_model``, or ``head_dim`` for QK-norm).

Bad input raises ``TypeError`` (not a float tensor, a dtype other than the
weight's) or ``ValueError`` (a last dimension other than ``dim``, ``dim`` or
``eps`` not positive); messages name the argument, the shape seen and the shape
expected.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from selfattn._checks import check_positive_int, is_tensor, shape_of

__all__ = ["RMSNorm", "make_norm"]

_NORMS = ("layernorm", "rmsnorm")


class RMSNorm(nn.Module):
    """Root-mean-square normalisation of the last dimension, with a learned gain.

    ``y = weight ⊙ x / sqrt(mean(x², last dim) + eps)``; ``weight`` (γ) starts at
    ones, so a fresh layer gives every vector a root mean square of 1 (up to
    ``eps``).

    Args:
        dim: width of the last dimension, a positive int.
        eps: added to the mean square; ``None`` (as ``torch.nn.RMSNorm``): the
            machine epsilon of the input's dtype, ``torch.finfo(x.dtype).eps``.

    Attributes:
        weight: ``(dim,)`` learned gain γ.

    Raises:
        TypeError, ValueError: ``dim`` not a positive int, ``eps`` not ``None``
            or a positive float.
    """

    def __init__(self, dim: int, eps: float | None = None) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        if eps is not None and (
            isinstance(eps, bool) or not isinstance(eps, (int, float))
            or not (math.isfinite(eps) and eps > 0)
        ):
            raise ValueError(f"eps: expected None or a finite float > 0, got {eps!r}")
        self.dim = int(dim)
        self.eps = None if eps is None else float(eps)
        self.weight = nn.Parameter(torch.ones(self.dim))

    def forward(self, x: Tensor) -> Tensor:
        """Normalise every vector ``x[..., :]`` by its root mean square, then scale by γ.

        Args:
            x: ``(..., dim)`` float tensor in the dtype of ``weight``.

        Returns:
            ``(..., dim)``, the same shape and dtype.

        Raises:
            TypeError: ``x`` not a float tensor, or not in the weight's dtype.
            ValueError: ``x``'s last dimension is not ``dim``.
        """
        _check_input(x, self.dim, self.weight)
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): mean of x² per vector
        return x * torch.rsqrt(mean_square + eps) * self.weight  # (..., dim)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


def _check_input(x: Any, dim: int, weight: Tensor) -> None:
    """``x`` must be a float tensor ``(..., dim)`` in ``weight``'s dtype (shape checks only:
    no pass over the values, so a block calling its norms pays nothing per call)."""
    if not is_tensor(x):
        raise TypeError(f"x: expected a torch.Tensor (..., dim={dim}), got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x: expected a floating-point dtype, got {x.dtype} with shape "
                        f"{shape_of(x)}")
    if x.ndim == 0 or x.shape[-1] != dim:
        raise ValueError(f"x: expected last dimension {dim} (dim), got shape {shape_of(x)}")
    if x.dtype != weight.dtype:
        raise TypeError(
            f"x: expected dtype {weight.dtype} (the dtype of the weight; convert the module "
            f"with .to({x.dtype}) or the input), got {x.dtype} with shape {shape_of(x)}"
        )


def make_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    """The normalisation layer a block uses: ``"layernorm"`` or ``"rmsnorm"``.

    Args:
        kind: ``"layernorm"`` (``torch.nn.LayerNorm(dim, eps=eps)``, γ and β) or
            ``"rmsnorm"`` (:class:`RMSNorm`, γ only).
        dim: the normalised width.
        eps: the epsilon of either.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm: expected one of {_NORMS}, got {kind!r}")
