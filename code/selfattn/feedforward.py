"""SwiGLU: the gated MLP of most language models since 2023.

A block's classic MLP maps each token up to ``d_ff`` and back down with one
nonlinearity in between: ``GELU(x W_1 + b_1) W_2 + b_2``.
**SwiGLU** (Shazeer, 2020, "GLU Variants Improve Transformer") uses *two* maps
up, and lets one of them gate the other, entry by entry::

    SwiGLU(x) = (SiLU(x W_1) ⊙ x W_3) W_2          SiLU(u) = u · sigmoid(u)

``x W_1`` (the gate) and ``x W_3`` (the values) are both ``d_ff`` wide; ``⊙``
multiplies them entry by entry; ``W_2`` maps back to ``d_model``. Following the
paper, and Llama after it, there are no biases.

**Parameter-matched width.** A GELU MLP of hidden width ``f`` has two weight
matrices, ``2 · d_model · f`` weights; SwiGLU has three, ``3 · d_model · h``.
The same number of weights needs ``h = 2f/3``: with the usual ``f = 4 d_model``,
``h = 8 d_model / 3`` (:func:`swiglu_width`). Shazeer's paper shrinks the hidden
width by this factor of 2/3 for the same reason: to compare the gated layers with
the two-matrix MLP at the same number of parameters and the same computation.

Shape legend: ``...`` leading dims (``batch``, ``seq_len``), ``d_model`` the
token width, ``d_ff`` the hidden width.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from selfattn._checks import check_positive_int

__all__ = ["SwiGLU", "swiglu_width"]


def swiglu_width(d_model: int, mlp_width: int | None = None) -> int:
    """The hidden width of a SwiGLU with as many weights as a two-matrix MLP.

    Args:
        d_model: the token width, a positive int.
        mlp_width: the hidden width ``f`` of the MLP to match; ``None``: ``4 * d_model``.

    Returns:
        The nearest integer to ``2 f / 3`` (three ``d_model x h`` matrices against
        two ``d_model x f``), e.g. ``85`` for ``d_model = 32``.

    Raises:
        TypeError, ValueError: a size that is not a positive int.
    """
    check_positive_int("d_model", d_model)
    f = 4 * d_model if mlp_width is None else mlp_width
    check_positive_int("mlp_width", f)
    return max(1, round(2 * f / 3))


class SwiGLU(nn.Module):
    """The SwiGLU feed-forward layer, ``(SiLU(x W_1) ⊙ x W_3) W_2``, applied to each token.

    Args:
        d_model: token width, a positive int.
        d_ff: hidden width ``h``; ``None``: :func:`swiglu_width` ``(d_model)``, the
            width with as many weights as a GELU MLP of width ``4 * d_model``.
        bias: biases in the three maps (default False, as in the paper and Llama).

    Attributes:
        w_1: ``nn.Linear(d_model, d_ff)``, the gate; ``W_1 = w_1.weight.T``.
        w_3: ``nn.Linear(d_model, d_ff)``, the values.
        w_2: ``nn.Linear(d_ff, d_model)``, back down.

    Raises:
        TypeError, ValueError: a size that is not a positive int.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, bias: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        d_ff = swiglu_width(d_model) if d_ff is None else d_ff
        check_positive_int("d_ff", d_ff)
        self.d_model, self.d_ff = int(d_model), int(d_ff)
        self.w_1 = nn.Linear(self.d_model, self.d_ff, bias=bias)  # gate
        self.w_3 = nn.Linear(self.d_model, self.d_ff, bias=bias)  # values
        self.w_2 = nn.Linear(self.d_ff, self.d_model, bias=bias)  # down

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``(..., d_model)``; returns ``(..., d_model)``, each token on its own."""
        gate = F.silu(self.w_1(x))  # (..., d_ff): SiLU(x W_1) = u * sigmoid(u)
        return self.w_2(gate * self.w_3(x))  # (..., d_ff) ⊙ (..., d_ff) -> (..., d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}, bias={self.w_1.bias is not None}"
