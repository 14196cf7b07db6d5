"""Positional encodings: telling attention *where* each token is.

Self-attention without positions is **permutation equivariant**: shuffle the
rows of X and the rows of the output are shuffled the same way, nothing else
changes. Word order is invisible. Adding a position-dependent vector to every
token embedding breaks that symmetry.

Two standard choices live here:

* :func:`sinusoidal_encoding` / :class:`SinusoidalPositionalEncoding` -- the
  fixed sine/cosine table of *Attention Is All You Need*:

  .. math::

     PE_{pos,\\,2i} = \\sin\\!\\left(\\frac{pos}{base^{2i/d_{model}}}\\right),
     \\qquad
     PE_{pos,\\,2i+1} = \\cos\\!\\left(\\frac{pos}{base^{2i/d_{model}}}\\right).

  Each (sin, cos) column pair turns at its own angular frequency
  ``omega_i = base^(-2i/d_model)``, so moving ``k`` positions rotates every pair
  by the angle ``k * omega_i``: ``PE[pos + k] = PE[pos] @ R_k`` with a fixed
  block-diagonal rotation ``R_k`` (:func:`sinusoidal_shift_matrix`) that does
  not depend on ``pos``. Relative offsets are therefore linear functions of
  the encoding.
* :class:`LearnedPositionalEmbedding` -- one trainable vector per position
  (GPT-2 style), a ``torch.nn.Embedding`` indexed by position.

Both modules add the encoding to ``x`` and accept ``offset`` so that cached
(token-by-token) decoding can give a new token its true position.

Shape legend: ``batch`` sequences in a batch, ``seq_len`` (L) tokens per
sequence, ``d_model`` embedding width, ``max_len`` largest supported position
count.

Bad input: ``TypeError`` for a wrong type or dtype, ``ValueError`` for wrong
shapes or values (odd ``d_model`` for sinusoids, ``offset + seq_len >
max_len``, last dimension of ``x`` not ``d_model``); messages name the argument,
the shape or number seen and what was expected.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from selfattn._checks import check_floating, check_ndim, check_positive_int, shape_of

__all__ = [
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
]


def _check_d_model_even(d_model: int) -> None:
    check_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(
            f"d_model: sinusoidal encoding pairs sin/cos columns, so d_model must be even, "
            f"got d_model={d_model}"
        )


def _check_base(base: float) -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)):
        raise TypeError(f"base: expected a float > 1, got {type(base).__name__}")
    if not np.isfinite(base) or base <= 1.0:
        raise ValueError(f"base: expected a finite float > 1, got {base}")


def _frequencies(d_model: int, base: float) -> np.ndarray:
    """Angular frequencies ``omega_i = base^(-2i/d_model)``, shape ``(d_model // 2,)``."""
    two_i = np.arange(0, d_model, 2, dtype=np.float64)  # (d_model // 2,): 0, 2, 4, ...
    return np.power(float(base), -two_i / d_model)


def sinusoidal_encoding(seq_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The fixed sinusoidal position table of Vaswani et al. (2017).

    ``PE[pos, 2i] = sin(pos / base^(2i/d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / base^(2i/d_model))`` for positions
    ``pos = 0 .. seq_len-1``. Position 0 is ``[0, 1, 0, 1, ...]``.

    Args:
        seq_len: number of positions L, a positive int.
        d_model: encoding width, a positive **even** int.
        base: wavelength base (> 1); the longest wavelength is ``2*pi*base``.

    Returns:
        ``(seq_len, d_model)`` float64 NumPy array; every entry in [-1, 1].

    Raises:
        TypeError: ``seq_len``/``d_model`` not ints, ``base`` not a number.
        ValueError: ``seq_len``/``d_model`` not positive, ``d_model`` odd,
            ``base <= 1``.

    Example:
        >>> sinusoidal_encoding(1, 4)
        array([[0., 1., 0., 1.]])
    """
    check_positive_int("seq_len", seq_len)
    _check_d_model_even(d_model)
    _check_base(base)
    pos = np.arange(int(seq_len), dtype=np.float64)[:, None]  # (seq_len, 1)
    angles = pos * _frequencies(int(d_model), base)[None, :]  # (seq_len, d_model // 2)
    pe = np.empty((int(seq_len), int(d_model)), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def sinusoidal_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The rotation ``R_k`` with ``PE[pos + k] = PE[pos] @ R_k`` for every ``pos``.

    For the column pair ``(2i, 2i+1)`` with frequency ``w = base^(-2i/d_model)``
    the angle-addition formulas give, with rows as in the book (``x @ R``)::

        [sin((p+k)w), cos((p+k)w)] = [sin(pw), cos(pw)] @ [[ cos(kw), -sin(kw)],
                                                           [ sin(kw),  cos(kw)]]

    ``R_k`` is block diagonal with one such 2x2 rotation per pair; it is
    orthogonal and depends only on the offset ``k``, not on ``pos``.

    Args:
        k: position offset, any int (negative shifts backwards).
        d_model: encoding width, a positive even int.
        base: the same base as in :func:`sinusoidal_encoding`.

    Returns:
        ``(d_model, d_model)`` float64 NumPy array.

    Raises:
        TypeError: ``k`` not an int. ValueError: as :func:`sinusoidal_encoding`.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k: expected an int offset, got {type(k).__name__}")
    _check_d_model_even(d_model)
    _check_base(base)
    theta = int(k) * _frequencies(int(d_model), base)  # (d_model // 2,)
    c, s = np.cos(theta), np.sin(theta)
    rot = np.zeros((int(d_model), int(d_model)), dtype=np.float64)
    even = np.arange(0, int(d_model), 2)
    odd = even + 1
    rot[even, even] = c
    rot[even, odd] = -s
    rot[odd, even] = s
    rot[odd, odd] = c
    return rot


def _check_positions(x: Any, d_model: int, max_len: int, offset: int) -> int:
    """Validate ``x`` (..., seq_len, d_model) and ``offset``; return seq_len."""
    check_floating("x", x)
    check_ndim("x", x, (2, 3), "(batch, seq_len, d_model) or (seq_len, d_model)")
    if shape_of(x)[-1] != d_model:
        raise ValueError(
            f"x: expected last dimension {d_model} (d_model of the encoding), "
            f"got shape {shape_of(x)}"
        )
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset: expected a non-negative int, got {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"offset: expected a non-negative int, got {offset}")
    seq_len = shape_of(x)[-2]
    if offset + seq_len > max_len:
        raise ValueError(
            f"x: positions {offset}..{offset + seq_len - 1} (offset={offset}, seq_len={seq_len}, "
            f"shape {shape_of(x)}) exceed max_len={max_len}; build the module with "
            f"max_len >= {offset + seq_len}"
        )
    return seq_len


class SinusoidalPositionalEncoding(nn.Module):
    """Add the fixed sinusoidal table to token embeddings (no parameters).

    The table ``(max_len, d_model)`` is computed once by
    :func:`sinusoidal_encoding` (in float64) and stored as a non-persistent
    buffer; ``forward`` casts the rows it needs to ``x``'s dtype and device.

    Args:
        d_model: embedding width, a positive even int.
        max_len: number of positions available, a positive int (default 512).
        base: wavelength base passed to :func:`sinusoidal_encoding`.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: as :func:`sinusoidal_encoding`.
    """

    encoding: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        check_positive_int("max_len", max_len)
        table = sinusoidal_encoding(max_len, d_model, base)  # (max_len, d_model)
        self.d_model = int(d_model)
        self.max_len = int(max_len)
        self.base = float(base)
        self.register_buffer("encoding", torch.from_numpy(table), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + PE[offset : offset + seq_len]``.

        Args:
            x: ``(batch, seq_len, d_model)`` or ``(seq_len, d_model)`` float tensor.
            offset: position of the first token (default 0); in cached decoding
                pass the number of tokens already processed.

        Returns:
            tensor of ``x``'s shape and dtype.

        Raises:
            ValueError: last dimension of ``x`` is not ``d_model``, ``x`` not 2-D
                or 3-D, ``offset + seq_len > max_len`` (message gives both), or
                ``offset`` negative.
            TypeError: ``x`` not a float tensor, ``offset`` not an int.
        """
        seq_len = _check_positions(x, self.d_model, self.max_len, offset)
        pe = self.encoding[offset : offset + seq_len].to(dtype=x.dtype, device=x.device)
        return x + pe  # (seq_len, d_model) broadcasts over batch

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base:g}"


class LearnedPositionalEmbedding(nn.Module):
    """Add one trainable vector per position (``nn.Embedding(max_len, d_model)``).

    The vectors start as ``N(0, 1)`` samples (``nn.Embedding``'s default) and
    are learned with the rest of the model. Positions beyond ``max_len`` have
    no vector, so they raise instead of being silently clipped.

    Args:
        max_len: number of positions, a positive int.
        d_model: embedding width, a positive int.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: ``max_len``/``d_model`` not positive ints.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        check_positive_int("max_len", max_len)
        check_positive_int("d_model", d_model)
        self.max_len = int(max_len)
        self.d_model = int(d_model)
        self.embedding = nn.Embedding(self.max_len, self.d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + P[offset : offset + seq_len]`` with ``P`` the learned table.

        Args:
            x: ``(batch, seq_len, d_model)`` or ``(seq_len, d_model)`` float tensor.
            offset: position of the first token (default 0).

        Returns:
            tensor of ``x``'s shape (dtype follows torch's promotion of ``x`` and
            the embedding weights; normally both are the same).

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: as :meth:`SinusoidalPositionalEncoding.forward`.
        """
        seq_len = _check_positions(x, self.d_model, self.max_len, offset)
        positions = torch.arange(offset, offset + seq_len, device=x.device)  # (seq_len,)
        return x + self.embedding(positions)  # (seq_len, d_model) broadcasts over batch

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


# ------------------------------------------------------ relative positions inside attention
# RoPE and ALiBi do not add anything to the token embeddings. They act on the
# attention scores, so that the score of query position i and key position j
# depends on the offset j - i and not on i and j themselves.

__all__ += ["alibi_bias", "alibi_slopes", "apply_rotary", "rotary_angles"]


def rotary_angles(positions: Any, head_dim: int, base: float = 10000.0) -> np.ndarray:
    """Rotation angles of RoPE: ``theta[p, i] = p * base^(-2i/head_dim)``.

    Args:
        positions: ``(L,)`` integer positions (list, NumPy or torch), or an int
            ``L`` meaning ``0 .. L-1``.
        head_dim: d_k, a positive even int (one angle per column pair).
        base: wavelength base > 1, as in :func:`sinusoidal_encoding`.

    Returns:
        ``(L, head_dim // 2)`` float64 NumPy array.

    Raises:
        ValueError: bad ``positions``, odd ``head_dim``, ``base <= 1`` (TypeError for
            a wrong type).
    """
    check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim: RoPE rotates column pairs, so head_dim must be even, "
                         f"got head_dim={head_dim}")
    _check_base(base)
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        check_positive_int("positions", positions)
        pos = np.arange(int(positions), dtype=np.float64)
    else:
        pos = np.asarray(positions.detach().cpu() if isinstance(positions, torch.Tensor)
                         else positions)
        if pos.ndim != 1 or not np.issubdtype(pos.dtype, np.integer):
            raise ValueError(
                f"positions: expected an int L or a 1-D integer array (L,), got shape "
                f"{shape_of(pos)} and dtype {pos.dtype}"
            )
        pos = pos.astype(np.float64)
    return pos[:, None] * _frequencies(int(head_dim), base)[None, :]  # (L, head_dim // 2)


def apply_rotary(x: Any, positions: Any = None, base: float = 10000.0) -> Any:
    """Rotate each column pair ``(2i, 2i+1)`` of ``x`` by the angle ``p * base^(-2i/d_k)``.

    This is RoPE (Su et al.). Applied to queries at position ``m`` and keys at
    position ``n``, the score of the pair becomes ``q R_m · k R_n = q · k
    R_{n-m}`` because rotations compose: it depends on the offset ``n - m``
    only. The rotation of a pair ``[a, b]`` by ``t`` is ``[a cos t - b sin t,
    a sin t + b cos t]`` (the same pairs and frequencies as
    :func:`sinusoidal_encoding`). Norms are unchanged.

    Args:
        x: ``(..., L, head_dim)`` float NumPy array or torch tensor, head_dim even.
        positions: ``(L,)`` integer positions of the rows; default ``0 .. L-1``.
        base: wavelength base > 1.

    Returns:
        Same type, shape and dtype as ``x``.

    Raises:
        TypeError: ``x`` not a float array/tensor.
        ValueError: odd ``head_dim``, ``positions`` not of length L.
    """
    check_floating("x", x)
    if len(shape_of(x)) < 2:
        raise ValueError(f"x: expected shape (..., L, head_dim), got shape {shape_of(x)}")
    seq_len, head_dim = shape_of(x)[-2:]
    if positions is None:
        positions = seq_len
    angles = rotary_angles(positions, head_dim, base)  # (L, head_dim // 2)
    if angles.shape[0] != seq_len:
        raise ValueError(
            f"positions: expected {seq_len} positions (dimension -2 of x, shape "
            f"{shape_of(x)}), got {angles.shape[0]}"
        )
    a, b = x[..., 0::2], x[..., 1::2]  # (..., L, head_dim // 2): the two columns of each pair
    if isinstance(x, torch.Tensor):
        cos = torch.from_numpy(np.cos(angles)).to(dtype=x.dtype, device=x.device)
        sin = torch.from_numpy(np.sin(angles)).to(dtype=x.dtype, device=x.device)
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., L, d/2, 2)
        return out.flatten(-2)  # (..., L, head_dim), pairs interleaved again
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    out = np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1)  # (..., L, d/2, 2)
    return out.reshape(shape_of(x))  # (..., L, head_dim)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The per-head slopes ``m`` of ALiBi (Press et al.).

    For ``h`` a power of two the slopes are the geometric sequence
    ``2^(-8/h), 2^(-16/h), ..., 2^(-8)``. Otherwise the paper takes the slopes
    of the closest smaller power of two and adds every other slope of the next
    one.

    Args:
        num_heads: h, a positive int.

    Returns:
        ``(num_heads,)`` float64 NumPy array, every slope in ``(0, 1)``.
    """
    check_positive_int("num_heads", num_heads)

    def powers(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    n = int(num_heads)
    closest = 2 ** int(np.floor(np.log2(n)))
    slopes = powers(closest)
    if closest < n:
        slopes += powers(2 * closest)[0::2][: n - closest]
    return np.array(slopes, dtype=np.float64)


def alibi_bias(num_heads: int, q_len: int, k_len: int | None = None, *, like: Any = None) -> Any:
    """ALiBi's additive score bias ``-m_h * |i - j|`` for every head, query and key.

    The scores become ``S + bias``: a key ``|i - j|`` positions away loses
    ``m_h * |i - j|``, so every head prefers nearby tokens, each with its own
    slope. Queries are aligned to the **last** ``q_len`` key positions (query
    ``t`` sits at position ``k_len - q_len + t``), as in cached decoding. In a
    causal model the future part is masked anyway.

    Args:
        num_heads: h.
        q_len: number of queries, a positive int.
        k_len: number of keys, ``>= q_len``; default ``q_len``.
        like: optional torch tensor fixing device and float dtype of the result.

    Returns:
        ``(num_heads, q_len, k_len)`` float64 NumPy array (a torch tensor with ``like``).

    Raises:
        ValueError: non-positive sizes or ``k_len < q_len``.
    """
    check_positive_int("q_len", q_len)
    k_len = q_len if k_len is None else k_len
    check_positive_int("k_len", k_len)
    if k_len < q_len:
        raise ValueError(f"k_len: expected k_len >= q_len = {q_len}, got {k_len}")
    q_pos = np.arange(k_len - q_len, k_len)[:, None]  # (q_len, 1)
    k_pos = np.arange(k_len)[None, :]  # (1, k_len)
    distance = np.abs(q_pos - k_pos).astype(np.float64)  # (q_len, k_len)
    bias = -alibi_slopes(num_heads)[:, None, None] * distance  # (h, q_len, k_len)
    if isinstance(like, torch.Tensor):
        dtype = like.dtype if like.is_floating_point() else torch.float64
        return torch.from_numpy(bias).to(dtype=dtype, device=like.device)
    return bias


class NoPositionalEncoding(nn.Module):
    """Add nothing: for models that place tokens inside attention (RoPE, ALiBi) or not at all.

    Has the interface of :class:`LearnedPositionalEmbedding` (``forward(x,
    offset)``), with no ``max_len`` limit.
    """

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x`` unchanged (``(batch, seq_len, d_model)``)."""
        check_floating("x", x)
        return x


__all__ += ["NoPositionalEncoding"]
