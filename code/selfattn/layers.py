"""Trainable attention layers: single-head, causal, multi-head, and a KV cache.

Every layer computes attention with the package's readable
:func:`selfattn.attention.scaled_dot_product_attention` (scores, mask,
softmax, weights @ values -- all visible). Pass ``use_fused=True`` to call
``torch.nn.functional.scaled_dot_product_attention`` instead; the tests check
that both give the same outputs. The fused kernel never forms the weight
matrix A, so on that path the returned ``weights`` are ``None``.

Projections and the book's notation. ``torch.nn.Linear(d_in, d_out)`` stores
``weight`` with shape ``(d_out, d_in)`` and computes ``x @ weight.T + bias``.
The book writes ``Q = X W_Q`` with ``W_Q`` of shape ``(d_model, d_k)``, so
``W_Q = w_q.weight.T`` (likewise for K, V and the output map ``W_O``).

Shape legend (the book's letters):

* ``batch``     sequences in a batch
* ``seq_len``   L, tokens per sequence (``q_len`` queries, ``k_len`` keys)
* ``d_in``      input width of a single-head layer; ``d_out`` its d_k = d_v
* ``d_model``   embedding width of multi-head attention
* ``num_heads`` h
* ``head_dim``  d_k = d_v, width of one head; ``d_model // num_heads`` unless
  given explicitly (then ``d_model`` need not be divisible by ``num_heads``)
* ``inner_dim`` ``num_heads * head_dim``, width of the concatenated heads
* ``cached_len`` keys/values already held by a :class:`KVCache`

Masks follow the book: bool, **True = may attend**, or an additive float
mask (0 keep, ``-inf`` block). NumPy bool masks (the default output of
:mod:`selfattn.masks`) are accepted and moved to the input's device.

Bad input raises ``TypeError`` (not a torch tensor, non-float input, dtype
different from the parameters, integer mask) or ``ValueError`` (wrong number
of dims, last dimension not ``d_in``/``d_model``, ``num_heads`` not dividing
``d_model`` when no ``head_dim`` is given, ``head_dim`` not positive, key/value
lengths or batches that differ, a mask that does not broadcast to the scores,
a KV cache holding another batch size / head layout, NaN or inf in the inputs,
dropout outside [0, 1)). Messages name the argument, the shape seen and the
shape expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfattn._checks import check_finite, check_positive_int, is_tensor, shape_of
from selfattn.array_types import Array
from selfattn.attention import scaled_dot_product_attention
from selfattn.masks import (
    causal_mask,
    combine_masks,
    key_padding_to_attention_mask,
    to_additive_mask,
)

__all__ = [
    "CausalSelfAttention",
    "KVCache",
    "MultiHeadAttention",
    "MultiHeadAttentionConfig",
    "SelfAttention",
    "merge_heads",
    "split_heads",
]


# ---------------------------------------------------------------- validation helpers
def _check_dropout(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"dropout: expected a float in [0, 1), got {type(p).__name__}")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {p}")
    return float(p)


def _check_input(name: str, x: Any, width: int, what: str, legend: str, param: Tensor) -> None:
    """``x`` must be a finite float tensor of shape ``legend`` with last dim ``width``."""
    if not is_tensor(x):
        raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point dtype, got {x.dtype}")
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


def _mask_to_tensor(mask: Any, like: Tensor) -> Tensor:
    """Bool or additive-float mask as a tensor on ``like``'s device (float -> ``like.dtype``)."""
    if isinstance(mask, np.ndarray):
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask: a NumPy mask must be bool (True = may attend), got dtype {mask.dtype} "
                f"with shape {shape_of(mask)}; pass a torch tensor for an additive mask"
            )
        mask = torch.from_numpy(mask)
    elif not is_tensor(mask):
        raise TypeError(
            f"mask: expected a torch.Tensor or NumPy bool array, got {type(mask).__name__}"
        )
    if mask.dtype == torch.bool:
        return mask.to(device=like.device)
    if not mask.is_floating_point():
        raise TypeError(
            f"mask: expected a bool mask (True = may attend) or a floating additive mask, "
            f"got dtype {mask.dtype} with shape {shape_of(mask)}"
        )
    if bool(torch.isnan(mask).any() or torch.isposinf(mask).any()):
        raise ValueError(
            f"mask: an additive mask may hold finite values and -inf only, found NaN or +inf "
            f"(shape {shape_of(mask)})"
        )
    return mask.to(device=like.device, dtype=like.dtype)


def _check_mask_shape(
    mask: Tensor, seen: tuple[int, ...], target: tuple[int, ...], legend: str
) -> None:
    """``ValueError`` unless ``mask`` broadcasts to exactly ``target``; ``seen``: shape passed."""
    try:
        fits = mask.ndim <= len(target) and (
            tuple(np.broadcast_shapes(shape_of(mask), target)) == target
        )
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask: expected a shape broadcastable to {legend} = {target}, got shape {seen}"
        )


def _add_causal(mask: Tensor | None, q_len: int, k_len: int, like: Tensor) -> Tensor:
    """AND a bottom-right aligned causal mask ``(q_len, k_len)`` into ``mask``."""
    causal = causal_mask(q_len, k_len, like=like)  # (q_len, k_len), True = may attend
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return combine_masks(mask, causal)
    # additive mask: blocked future keys get -inf on top of the user's values
    return mask + to_additive_mask(causal, mask.dtype)  # broadcast to (..., q_len, k_len)


def _fully_masked_rows(mask: Tensor) -> Tensor:
    """``(..., q_len, 1)`` bool: True where a query row may attend to no key."""
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return torch.isneginf(mask).all(dim=-1, keepdim=True)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: nn.Dropout, use_fused: bool,
    need_weights: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Attention on ``q (..., q_len, d_k)``, ``k (..., k_len, d_k)``, ``v (..., k_len, d_v)``.

    Readable path: :func:`scaled_dot_product_attention` gives ``(context, weights)``;
    in training with ``p > 0`` the weights go through ``dropout`` (zeroed with
    probability p, survivors scaled by 1/(1-p)) and the context is recomputed
    from the dropped weights. Returns the weights that were actually used.

    Fused path: ``F.scaled_dot_product_attention`` with the same mask and
    ``dropout_p``; weights are ``None``. Rows with every key masked are set to
    zeros explicitly, as on the readable path.

    ``need_weights=False`` without dropout: the readable path's own fused branch
    (``scaled_dot_product_attention(..., need_weights=False)``), which never
    forms the weights; weights are ``None``.
    """
    p = dropout.p if dropout.training else 0.0
    if use_fused:
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if mask is not None:
            context = context.masked_fill(_fully_masked_rows(mask), 0.0)  # (..., q_len, d_v)
        return context, None
    if not need_weights and p == 0.0:
        return scaled_dot_product_attention(q, k, v, mask, need_weights=False)
    # context (..., q_len, d_v), weights (..., q_len, k_len)
    context, weights = scaled_dot_product_attention(q, k, v, mask)
    if p > 0.0:
        weights = dropout(weights)  # (..., q_len, k_len), E[dropped] = weights
        context = weights @ v  # (..., q_len, k_len) @ (..., k_len, d_v) -> (..., q_len, d_v)
    return context, weights


# ---------------------------------------------------------------- head split / merge
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Cut the last dimension into ``num_heads`` heads and move heads before tokens.

    Head ``h`` receives columns ``h*head_dim : (h+1)*head_dim`` of ``x``, i.e.
    ``split_heads(x, n)[:, h] == x[..., h*head_dim:(h+1)*head_dim]``.

    Args:
        x: ``(batch, seq_len, d_model)`` tensor.
        num_heads: h, a positive int dividing ``d_model``.

    Returns:
        ``(batch, num_heads, seq_len, head_dim)`` with ``head_dim = d_model // num_heads``
        (a view of ``x`` when possible). :func:`merge_heads` undoes it exactly.

    Raises:
        TypeError: ``x`` not a tensor, ``num_heads`` not an int.
        ValueError: ``x`` not 3-D, or ``num_heads`` does not divide ``d_model``.
    """
    if not is_tensor(x):
        raise TypeError(
            f"x: expected a torch.Tensor (batch, seq_len, d_model), got {type(x).__name__}"
        )
    check_positive_int("num_heads", num_heads)
    if x.ndim != 3:
        raise ValueError(f"x: expected shape (batch, seq_len, d_model), got shape {shape_of(x)}")
    batch, seq_len, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(
            f"num_heads: num_heads={num_heads} does not divide d_model={d_model} "
            f"(last dimension of x, shape {shape_of(x)})"
        )
    head_dim = d_model // num_heads
    x = x.reshape(batch, seq_len, num_heads, head_dim)  # (batch, seq_len, num_heads, head_dim)
    return x.transpose(1, 2)  # (batch, num_heads, seq_len, head_dim)


def merge_heads(x: Tensor) -> Tensor:
    """Concatenate the heads back into one vector per token (inverse of :func:`split_heads`).

    Args:
        x: ``(batch, num_heads, seq_len, head_dim)`` tensor.

    Returns:
        ``(batch, seq_len, num_heads * head_dim)``: token ``t`` of the result is
        ``[x[:, 0, t], x[:, 1, t], ..., x[:, num_heads - 1, t]]`` concatenated.

    Raises:
        TypeError: ``x`` not a tensor. ValueError: ``x`` not 4-D.
    """
    if not is_tensor(x):
        raise TypeError(
            f"x: expected a torch.Tensor (batch, num_heads, seq_len, head_dim), "
            f"got {type(x).__name__}"
        )
    if x.ndim != 4:
        raise ValueError(
            f"x: expected shape (batch, num_heads, seq_len, head_dim), got shape {shape_of(x)}"
        )
    batch, num_heads, seq_len, head_dim = x.shape
    x = x.transpose(1, 2)  # (batch, seq_len, num_heads, head_dim)
    return x.reshape(batch, seq_len, num_heads * head_dim)  # (batch, seq_len, num_heads*head_dim)


# ---------------------------------------------------------------- single head
class SelfAttention(nn.Module):
    """Single-head self-attention with trainable projections (no mask of its own).

    ``Q = X W_Q, K = X W_K, V = X W_V`` (``W = w.weight.T``, shape ``(d_in, d_out)``),
    ``S = Q Kᵀ / sqrt(d_out)``, ``A = softmax(S)``, ``C = A V``.

    Args:
        d_in: width of the input tokens, a positive int.
        d_out: d_k = d_v, width of queries, keys, values and context.
        bias: add a bias to each projection (default False, as in the book).
        use_fused: compute attention with ``F.scaled_dot_product_attention``
            (then ``weights`` is ``None``). May be switched on the instance.

    Attributes:
        w_q, w_k, w_v: ``nn.Linear(d_in, d_out)``.
    """

    def __init__(
        self, d_in: int, d_out: int, bias: bool = False, *, use_fused: bool = False
    ) -> None:
        super().__init__()
        check_positive_int("d_in", d_in)
        check_positive_int("d_out", d_out)
        self.d_in, self.d_out = int(d_in), int(d_out)
        self.use_fused = bool(use_fused)
        self.w_q = nn.Linear(self.d_in, self.d_out, bias=bias)
        self.w_k = nn.Linear(self.d_in, self.d_out, bias=bias)
        self.w_v = nn.Linear(self.d_in, self.d_out, bias=bias)
        self._no_dropout = nn.Dropout(0.0)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, bool]:
        _check_input("x", x, self.d_in, "d_in", "(batch, seq_len, d_in) or (seq_len, d_in)",
                     self.w_q.weight)
        unbatched = x.ndim == 2
        if unbatched:
            x = x.unsqueeze(0)  # (1, seq_len, d_in)
        q = self.w_q(x)  # (batch, seq_len, d_out) = X W_Q
        k = self.w_k(x)  # (batch, seq_len, d_out) = X W_K
        v = self.w_v(x)  # (batch, seq_len, d_out) = X W_V
        return q, k, v, unbatched

    def forward(self, x: Tensor, mask: Array | None = None) -> tuple[Tensor, Tensor | None]:
        """Attend every token to every token.

        Args:
            x: ``(batch, seq_len, d_in)`` or unbatched ``(seq_len, d_in)``.
            mask: optional bool (True = may attend) or additive float mask
                broadcastable to ``(batch, seq_len, seq_len)``, e.g. a
                ``(seq_len, seq_len)`` mask or a ``(batch, 1, seq_len)`` key
                padding mask from ``key_padding_to_attention_mask(pad, with_heads=False)``.

        Returns:
            ``(context, weights)``: ``(batch, seq_len, d_out)`` and
            ``(batch, seq_len, seq_len)`` (batch dim dropped for unbatched ``x``;
            ``weights`` is ``None`` with ``use_fused``).

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: see the module docstring.
        """
        q, k, v, unbatched = self._project(x)
        batch, seq_len = q.shape[0], q.shape[1]
        if mask is not None:
            seen = shape_of(mask)
            mask = _mask_to_tensor(mask, q)
            _check_mask_shape(mask, seen, (batch, seq_len, seq_len), "(batch, seq_len, seq_len)")
        context, weights = _attend(q, k, v, mask, self._no_dropout, self.use_fused)
        if unbatched:
            context = context.squeeze(0)  # (seq_len, d_out)
            weights = None if weights is None else weights.squeeze(0)  # (seq_len, seq_len)
        return context, weights

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, use_fused={self.use_fused}"


class CausalSelfAttention(SelfAttention):
    """Single-head self-attention that only looks back, with dropout on the weights.

    The causal mask (token ``i`` attends to tokens ``j <= i``) is always
    applied; an optional key padding mask is ANDed into it. In training mode
    each attention weight is zeroed with probability ``dropout`` and the
    survivors are scaled by ``1/(1-dropout)`` (``nn.Dropout``), so the expected
    weights equal the undropped ones; rows of the dropped weights no longer sum
    to 1. In eval mode nothing is dropped and the output is deterministic.

    Args:
        d_in, d_out, bias, use_fused: as :class:`SelfAttention`.
        dropout: probability in [0, 1) of dropping an attention weight.
    """

    def __init__(
        self, d_in: int, d_out: int, dropout: float = 0.0, bias: bool = False, *,
        use_fused: bool = False,
    ) -> None:
        super().__init__(d_in, d_out, bias=bias, use_fused=use_fused)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    def forward(self, x: Tensor, padding_mask: Array | None = None) -> tuple[Tensor, Tensor | None]:  # type: ignore[override]
        """Causal attention over ``x``.

        Args:
            x: ``(batch, seq_len, d_in)`` or unbatched ``(seq_len, d_in)``.
            padding_mask: optional bool ``(batch, seq_len)`` (``(seq_len,)`` for
                unbatched ``x``), **True = real token**, e.g. from
                :func:`selfattn.masks.padding_mask`. Padding keys get weight 0.

        Returns:
            ``(context, weights)``: ``(batch, seq_len, d_out)`` and the weights
            actually used ``(batch, seq_len, seq_len)`` (after dropout in
            training; ``None`` with ``use_fused``).

        Raises:
            ValueError: see the module docstring; a ``padding_mask`` of the
                wrong shape names the shape seen and expected.
            TypeError: a wrong type or dtype, e.g. a ``padding_mask`` that is not bool.
        """
        q, k, v, unbatched = self._project(x)
        batch, seq_len = q.shape[0], q.shape[1]
        mask = causal_mask(seq_len, like=q)  # (seq_len, seq_len), True = may attend
        if padding_mask is not None:
            seen = shape_of(padding_mask)
            pad = _mask_to_tensor(padding_mask, q)
            if pad.dtype != torch.bool:
                raise TypeError(
                    f"padding_mask: expected a bool mask (True = real token), got dtype "
                    f"{pad.dtype} with shape {seen}"
                )
            if unbatched and pad.ndim == 1:
                pad = pad.unsqueeze(0)  # (1, seq_len)
            if shape_of(pad) != (batch, seq_len):
                raise ValueError(
                    f"padding_mask: expected shape (batch, seq_len) = {(batch, seq_len)} "
                    f"(from x of shape {shape_of(x)}), got shape {seen}"
                )
            pad = key_padding_to_attention_mask(pad, with_heads=False)  # (batch, 1, seq_len)
            mask = combine_masks(mask, pad)  # (batch, seq_len, seq_len)
        context, weights = _attend(q, k, v, mask, self.dropout, self.use_fused)
        if unbatched:
            context = context.squeeze(0)  # (seq_len, d_out)
            weights = None if weights is None else weights.squeeze(0)  # (seq_len, seq_len)
        return context, weights

    def extra_repr(self) -> str:
        return super().extra_repr() + f", dropout={self.dropout.p}"


# ---------------------------------------------------------------- KV cache
class KVCache:
    """Keys and values of the tokens processed so far, for incremental decoding.

    A decoder that generates one token at a time would recompute ``K`` and
    ``V`` of all earlier tokens at every step; the cache stores them instead.
    :meth:`MultiHeadAttention.forward` appends the new tokens' keys/values and
    attends the new queries to everything cached.

    Attributes:
        keys, values: ``(batch, num_heads, cached_len, head_dim)`` or ``None``
            while empty.

    The tensors keep their autograd history; use the cache under
    ``torch.no_grad()`` for generation.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        """``cached_len``, the number of tokens held."""
        return 0 if self.keys is None else int(self.keys.shape[2])

    def __repr__(self) -> str:
        shape = None if self.keys is None else shape_of(self.keys)
        return f"KVCache(cached_len={len(self)}, keys_shape={shape})"

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.keys = None
        self.values = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the keys/values of new tokens and return the full cache.

        Args:
            k: ``(batch, num_heads, new_len, head_dim)`` keys of the new tokens.
            v: ``(batch, num_heads, new_len, head_dim)`` values, same shape as ``k``.

        Returns:
            ``(keys, values)``, each ``(batch, num_heads, cached_len + new_len, head_dim)``.

        Raises:
            TypeError: not tensors, or dtype differs from the cache's.
            ValueError: not 4-D, ``k`` and ``v`` shapes differ, or ``batch``,
                ``num_heads``, ``head_dim`` differ from what is cached.
        """
        legend = "(batch, num_heads, new_len, head_dim)"
        for name, t in (("k", k), ("v", v)):
            if not is_tensor(t):
                raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(t).__name__}")
            if t.ndim != 4:
                raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(t)}")
        if k.shape != v.shape:
            raise ValueError(f"v: expected the shape of k {shape_of(k)}, got shape {shape_of(v)}")
        if self.keys is not None:
            held = shape_of(self.keys)
            want = (held[0], held[1], k.shape[2], held[3])
            if shape_of(k) != want:
                raise ValueError(
                    f"k: expected shape (batch, num_heads, new_len, head_dim) = {want} to match "
                    f"the cache (batch, num_heads, cached_len, head_dim) = {held}, "
                    f"got shape {shape_of(k)}"
                )
            if k.dtype != self.keys.dtype:
                raise TypeError(f"k: expected dtype {self.keys.dtype} (the cache's), got {k.dtype}")
            # both: (batch, num_heads, cached_len + new_len, head_dim)
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        else:
            self.keys, self.values = k, v  # (batch, num_heads, new_len, head_dim)
        return self.keys, self.values


# ---------------------------------------------------------------- multi-head
@dataclass(frozen=True)
class MultiHeadAttentionConfig:
    """Settings of a :class:`MultiHeadAttention` layer (validated on creation).

    ``head_dim`` left as ``None`` becomes ``d_model // num_heads`` (then
    ``num_heads`` must divide ``d_model``); after creation it is always an int.
    """

    d_model: int  # embedding width of queries, keys, values and the output
    num_heads: int  # h, number of heads
    dropout: float = 0.0  # probability of dropping an attention weight (training only)
    bias: bool = True  # biases in W_Q, W_K, W_V and W_O (torch.nn.MultiheadAttention's default)
    causal: bool = False  # always apply a bottom-right aligned causal mask
    use_fused: bool = False  # use torch.nn.functional.scaled_dot_product_attention
    head_dim: int | None = None  # d_k = d_v per head; None: d_model // num_heads

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        check_positive_int("num_heads", self.num_heads)
        if self.head_dim is None:
            if self.d_model % self.num_heads != 0:
                raise ValueError(
                    f"num_heads: num_heads={self.num_heads} does not divide "
                    f"d_model={self.d_model}; the default head_dim = d_model / num_heads "
                    f"must be an integer (or pass head_dim explicitly)"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.num_heads)
        else:
            check_positive_int("head_dim", self.head_dim)
            object.__setattr__(self, "head_dim", int(self.head_dim))
        _check_dropout(self.dropout)

    @property
    def inner_dim(self) -> int:
        """``num_heads * head_dim``: width of the projected queries, keys, values."""
        assert self.head_dim is not None  # set in __post_init__
        return self.num_heads * self.head_dim


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h scaled dot-product attentions in subspaces, then ``W_O``.

    For each head ``j`` (columns ``j*head_dim:(j+1)*head_dim`` of the projections)::

        Q_j, K_j, V_j = (X_q W_Q)_j, (X_k W_K)_j, (X_v W_V)_j       (.., len, head_dim)
        C_j = softmax(Q_j K_jᵀ / sqrt(head_dim) + mask) V_j
        output = concat(C_1, ..., C_h) W_O                          (batch, q_len, d_model)

    ``W_Q, W_K, W_V`` have shape ``(d_model, inner_dim)`` and ``W_O`` has shape
    ``(inner_dim, d_model)``, with ``inner_dim = num_heads * head_dim``. By
    default ``head_dim = d_model // num_heads``, so ``inner_dim = d_model``: the
    usual convention, not a requirement. Pass ``head_dim`` to choose another
    head width; ``d_model`` then need not be divisible by ``num_heads``.

    With the default ``head_dim``: same parameters and result as
    ``torch.nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True)``
    (see :meth:`from_torch`), but masks use the book's convention (True = may attend).

    Args:
        d_model: embedding width, a positive int.
        num_heads: h, a positive int; must divide ``d_model`` unless ``head_dim`` is given.
        dropout: probability in [0, 1) of dropping an attention weight in training.
        bias: biases in the four projections (default True).
        causal: if True, every call applies a causal mask aligned to the
            bottom-right corner, so new queries also see all cached keys.
        use_fused: use ``F.scaled_dot_product_attention`` (weights are then ``None``).
        head_dim: d_k = d_v, width of each head, a positive int; default
            ``None`` means ``d_model // num_heads``.

    Attributes:
        w_q, w_k, w_v: ``nn.Linear(d_model, inner_dim)``; ``W_Q = w_q.weight.T``.
        w_o: ``nn.Linear(inner_dim, d_model)``; ``W_O = w_o.weight.T``.

    Raises:
        ValueError: ``num_heads`` does not divide ``d_model`` and no ``head_dim``
            is given (message names both), a size or ``head_dim`` <= 0, dropout
            outside [0, 1). TypeError: non-int sizes.
    """

    def __init__(
        self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
        causal: bool = False, *, use_fused: bool = False, head_dim: int | None = None,
    ) -> None:
        super().__init__()
        cfg = MultiHeadAttentionConfig(
            d_model=d_model, num_heads=num_heads, dropout=dropout, bias=bool(bias),
            causal=bool(causal), use_fused=bool(use_fused), head_dim=head_dim,
        )
        assert cfg.head_dim is not None  # resolved by the config
        self.d_model, self.num_heads, self.head_dim = cfg.d_model, cfg.num_heads, cfg.head_dim
        self.inner_dim = cfg.inner_dim  # num_heads * head_dim
        self.causal, self.use_fused = cfg.causal, cfg.use_fused
        self.w_q = nn.Linear(cfg.d_model, cfg.inner_dim, bias=cfg.bias)
        self.w_k = nn.Linear(cfg.d_model, cfg.inner_dim, bias=cfg.bias)
        self.w_v = nn.Linear(cfg.d_model, cfg.inner_dim, bias=cfg.bias)
        self.w_o = nn.Linear(cfg.inner_dim, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    # -- configuration ---------------------------------------------------------
    @property
    def config(self) -> MultiHeadAttentionConfig:
        """The current settings as a :class:`MultiHeadAttentionConfig`."""
        return MultiHeadAttentionConfig(
            d_model=self.d_model, num_heads=self.num_heads, dropout=self.dropout.p,
            bias=self.w_q.bias is not None, causal=self.causal, use_fused=self.use_fused,
            head_dim=self.head_dim,
        )

    @classmethod
    def from_config(cls, config: MultiHeadAttentionConfig) -> MultiHeadAttention:
        """Build a layer from a :class:`MultiHeadAttentionConfig`."""
        if not isinstance(config, MultiHeadAttentionConfig):
            raise TypeError(
                f"config: expected a MultiHeadAttentionConfig, got {type(config).__name__}"
            )
        return cls(config.d_model, config.num_heads, config.dropout, config.bias,
                   config.causal, use_fused=config.use_fused, head_dim=config.head_dim)

    # -- interoperability with torch.nn.MultiheadAttention ------------------------
    @torch.no_grad()
    def copy_from_torch(self, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the parameters of a ``torch.nn.MultiheadAttention`` into this layer.

        torch packs the three input projections into ``in_proj_weight`` of shape
        ``(3*d_model, d_model)``: rows ``[0, d)`` are W_Q, ``[d, 2d)`` W_K and
        ``[2d, 3d)`` W_V, each stored like an ``nn.Linear`` weight (``x @ W.T``),
        exactly as ``w_q.weight`` is here; likewise ``in_proj_bias`` and
        ``out_proj``. Use the torch module with ``batch_first=True`` to compare
        outputs; the parameters do not depend on that flag.

        Args:
            module: ``nn.MultiheadAttention`` with ``embed_dim == d_model``, the
                same ``num_heads``, the same use of biases, no ``kdim``/``vdim``
                and no ``add_bias_kv``. This layer must use the default
                ``head_dim = d_model // num_heads`` (torch has no other).

        Returns:
            ``self`` (parameters overwritten in place, dtype/device kept).

        Raises:
            TypeError: ``module`` is not an ``nn.MultiheadAttention``.
            ValueError: sizes, heads or bias usage differ, or unsupported options.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module: expected torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        if module.embed_dim != self.d_model or module.num_heads != self.num_heads:
            raise ValueError(
                f"module: expected embed_dim={self.d_model}, num_heads={self.num_heads}, got "
                f"embed_dim={module.embed_dim}, num_heads={module.num_heads}"
            )
        if self.inner_dim != self.d_model:
            raise ValueError(
                f"module: torch.nn.MultiheadAttention always uses head_dim = embed_dim / "
                f"num_heads = {module.head_dim}, but this layer has head_dim={self.head_dim} "
                f"(num_heads * head_dim = {self.inner_dim}, d_model = {self.d_model})"
            )
        if not module._qkv_same_embed_dim:
            raise ValueError(
                f"module: kdim={module.kdim}/vdim={module.vdim} differ from embed_dim="
                f"{module.embed_dim}; separate key/value widths are not supported"
            )
        if module.bias_k is not None or module.bias_v is not None:
            raise ValueError("module: add_bias_kv=True is not supported")
        has_bias = module.in_proj_bias is not None
        if has_bias != (self.w_q.bias is not None):
            raise ValueError(
                f"module: bias={has_bias} but this layer has bias={self.w_q.bias is not None}"
            )
        d = self.d_model
        w = module.in_proj_weight  # (3*d_model, d_model)
        for i, lin in enumerate((self.w_q, self.w_k, self.w_v)):
            lin.weight.copy_(w[i * d : (i + 1) * d])  # (d_model, d_model), x @ W.T
            if has_bias:
                lin.bias.copy_(module.in_proj_bias[i * d : (i + 1) * d])  # (d_model,)
        self.w_o.weight.copy_(module.out_proj.weight)  # (d_model, d_model)
        if has_bias:
            self.w_o.bias.copy_(module.out_proj.bias)  # (d_model,)
        return self

    @classmethod
    def from_torch(
        cls, module: nn.MultiheadAttention, *, causal: bool = False, use_fused: bool = False
    ) -> MultiHeadAttention:
        """A new layer holding a copy of ``module``'s parameters (dtype and device too).

        ``dropout`` and ``bias`` are taken from ``module``; ``causal`` must be given
        here because torch passes causality per call (``attn_mask``/``is_causal``).
        See :meth:`copy_from_torch` for the weight layout.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module: expected torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        layer = cls(module.embed_dim, module.num_heads, dropout=module.dropout,
                    bias=module.in_proj_bias is not None, causal=causal, use_fused=use_fused)
        ref = module.in_proj_weight if module._qkv_same_embed_dim else module.q_proj_weight
        layer.to(dtype=ref.dtype, device=ref.device)
        return layer.copy_from_torch(module)

    # -- forward ------------------------------------------------------------------
    def _check_cache(self, kv_cache: Any, batch: int, query: Tensor) -> None:
        if not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache: expected a KVCache, got {type(kv_cache).__name__}")
        if kv_cache.keys is None:
            return
        held = shape_of(kv_cache.keys)
        want = (batch, self.num_heads, held[2], self.head_dim)
        if held != want:
            raise ValueError(
                f"kv_cache: holds keys of shape (batch, num_heads, cached_len, head_dim) = {held}, "
                f"expected {want} for query of shape {shape_of(query)} with "
                f"num_heads={self.num_heads}; call kv_cache.reset() for a new batch"
            )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Array | None = None,
        *,
        need_weights: bool = True,
        average_weights: bool = True,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Multi-head attention of ``query`` over ``key``/``value``.

        Args:
            query: ``(batch, q_len, d_model)`` or unbatched ``(q_len, d_model)``.
            key: ``(batch, k_len, d_model)``; defaults to ``query`` (self-attention).
            value: ``(batch, k_len, d_model)``; defaults to ``key``.
            mask: optional bool (True = may attend) or additive float mask of shape
                ``(q_len, k_len)``, ``(batch, q_len, k_len)`` or
                ``(batch, num_heads, q_len, k_len)``; size-1 dims broadcast
                (a key padding mask is ``(batch, 1, 1, k_len)``, see
                :func:`selfattn.masks.key_padding_to_attention_mask`). Note: a 3-D
                mask is ``(batch, q_len, k_len)`` shared by all heads, unlike
                torch's ``(batch * num_heads, q_len, k_len)``. With a
                ``kv_cache``, ``k_len`` counts the cached keys too. Combined
                (AND) with the causal mask when ``causal=True``.
            need_weights: return the attention weights (else ``None``).
            average_weights: average the weights over heads
                ``(batch, q_len, k_len)``; if False return them per head
                ``(batch, num_heads, q_len, k_len)``.
            kv_cache: optional :class:`KVCache`; the new keys/values are appended
                to it and the queries attend to all cached positions.

        Returns:
            ``(output, weights)``: output ``(batch, q_len, d_model)``; weights as
            above, after dropout in training, ``None`` if ``need_weights`` is
            False or ``use_fused`` is True. Unbatched input drops the batch dim.

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: see the module docstring.
        """
        legend = "(batch, seq_len, d_model) or (seq_len, d_model)"
        key = query if key is None else key
        value = key if value is None else value
        param = self.w_q.weight
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_input(name, t, self.d_model, "d_model", legend, param)
        if not query.ndim == key.ndim == value.ndim:
            raise ValueError(
                f"key, value: expected the same number of dims as query {shape_of(query)}, "
                f"got key {shape_of(key)} and value {shape_of(value)}"
            )
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query[None], key[None], value[None]  # (1, len, d_model)
        batch = query.shape[0]
        if key.shape[0] != batch:
            raise ValueError(
                f"key: expected batch {batch} (dimension 0 of query, shape {shape_of(query)}), "
                f"got shape {shape_of(key)}"
            )
        if value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"value: expected (batch, k_len) = {shape_of(key)[:2]} from key of shape "
                f"{shape_of(key)}, got shape {shape_of(value)}"
            )
        if kv_cache is not None:
            self._check_cache(kv_cache, batch, query)

        # 1. project to inner_dim = num_heads * head_dim, then split into num_heads subspaces
        q = split_heads(self.w_q(query), self.num_heads)  # (batch, num_heads, q_len, head_dim)
        k = split_heads(self.w_k(key), self.num_heads)  # (batch, num_heads, new_len, head_dim)
        v = split_heads(self.w_v(value), self.num_heads)  # (batch, num_heads, new_len, head_dim)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (batch, num_heads, cached_len + new_len, head_dim)
        q_len, k_len = q.shape[2], k.shape[2]

        # 2. the mask, broadcast to (batch, num_heads, q_len, k_len)
        if mask is not None:
            seen = shape_of(mask)
            mask = _mask_to_tensor(mask, q)
            target = (batch, self.num_heads, q_len, k_len)
            if mask.ndim not in (2, 3, 4):
                raise ValueError(
                    f"mask: expected shape (q_len, k_len), (batch, q_len, k_len) or "
                    f"(batch, num_heads, q_len, k_len) broadcastable to {target}, got shape {seen}"
                )
            if mask.ndim == 3:
                mask = mask.unsqueeze(1)  # (batch, 1, q_len, k_len): same for every head
            _check_mask_shape(mask, seen, target, "(batch, num_heads, q_len, k_len)")
        if self.causal:
            mask = _add_causal(mask, q_len, k_len, q)  # bottom-right aligned

        # 3. attention in every head at once
        context, weights = _attend(q, k, v, mask, self.dropout, self.use_fused, need_weights)
        # context: (batch, num_heads, q_len, head_dim); weights: (batch, num_heads, q_len, k_len)

        # 4. concatenate the heads, (batch, q_len, inner_dim), and mix them with W_O
        output = self.w_o(merge_heads(context))  # (batch, q_len, d_model)

        if not need_weights or weights is None:
            weights = None
        elif average_weights:
            weights = weights.mean(dim=1)  # (batch, q_len, k_len)
        if unbatched:
            output = output.squeeze(0)  # (q_len, d_model)
            weights = None if weights is None else weights.squeeze(0)  # drop batch
        return output, weights

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"dropout={self.dropout.p}, causal={self.causal}, use_fused={self.use_fused}"
        )

