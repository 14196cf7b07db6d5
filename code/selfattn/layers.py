"""Trainable attention layers: single-head, causal and multi-head attention.

:class:`MultiHeadAttention` is the one attention layer of the transformer
block and of :class:`~selfattn.language_model.TinyLM`. Its options cover the
variants the book compares: fewer key/value heads than query heads
(grouped-query and multi-query attention, ``num_kv_heads``), positions inside
attention (``positional="rope"`` or ``"alibi"``), a causal mask, and a
:class:`~selfattn.kv_cache.KVCache` for generation. :class:`SelfAttention` and
:class:`CausalSelfAttention` are the single-head layers of the early chapters.

Every layer computes attention with the package's readable
:func:`selfattn.attention.scaled_dot_product_attention` (scores, mask,
softmax, weights @ values -- all visible). Pass ``use_fused=True`` to call
``torch.nn.functional.scaled_dot_product_attention`` instead; the tests check
that both give the same outputs. The fused kernel never forms the weight
matrix A, so on that path the returned ``weights`` are ``None``.

**Grouped-query attention.** With ``num_kv_heads < num_heads`` each key/value
head serves a group of ``num_heads // num_kv_heads`` *consecutive* query heads
(query head ``j`` uses key/value head ``j // (num_heads // num_kv_heads)``, as
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``
pairs them); ``num_kv_heads=1`` is multi-query attention. A KV cache then holds
``num_heads / num_kv_heads`` times fewer numbers
(:func:`~selfattn.kv_cache.kv_cache_bytes`). **Positions inside attention.**
``positional="rope"`` rotates queries and keys by their positions
(:func:`~selfattn.positional.apply_rotary`), ``positional="alibi"`` adds
:func:`~selfattn.positional.alibi_bias` to the scores: either way the score of
query ``i`` and key ``j`` depends on ``j - i`` only. **Sliding window.**
``window=w`` (with ``causal=True``) lets each query see only its own key and
the ``w - 1`` before it (:func:`~selfattn.masks.sliding_window_mask`); a
:class:`~selfattn.kv_cache.RollingKVCache` of ``w`` then holds everything the
layer can still use, and its keys are masked by their positions.

A layer checks its inputs once, in ``forward``, and then computes without
checking again; :meth:`MultiHeadAttention.attend` is that computation, for
callers that have checked the inputs themselves (the transformer block).

Projections and the book's notation. ``torch.nn.Linear(d_in, d_out)`` stores
``weight`` with shape ``(d_out, d_in)`` and computes ``x @ weight.T + bias``.
The book writes ``Q = X W_Q`` with ``W_Q`` of shape ``(d_model, d_k)``, so
``W_Q = w_q.weight.T`` (likewise for K, V and the output map ``W_O``).

Shape legend (the book's letters):

* ``batch``     sequences in a batch
* ``seq_len``   L, tokens per sequence (``q_len`` queries, ``k_len`` keys)
* ``d_in``      input width of a single-head layer; ``d_out`` its d_k = d_v
* ``d_model``   embedding width of multi-head attention
* ``num_heads`` h, query heads; ``num_kv_heads`` key/value heads (default h)
* ``head_dim``  d_k = d_v, width of one head; ``d_model // num_heads`` unless
  given explicitly (then ``d_model`` need not be divisible by ``num_heads``)
* ``inner_dim`` ``num_heads * head_dim``, width of the concatenated heads
* ``cached_len`` keys/values already held by a :class:`~selfattn.kv_cache.KVCache`

Masks follow the book: bool, **True = may attend**, or an additive float
mask (0 keep, ``-inf`` block). NumPy bool masks (the default output of
:mod:`selfattn.masks`) are accepted and moved to the input's device.

Bad input raises ``TypeError`` (not a torch tensor, non-float input, dtype
different from the parameters, integer mask) or ``ValueError`` (wrong number
of dims, last dimension not ``d_in``/``d_model``, ``num_heads`` not dividing
``d_model`` when no ``head_dim`` is given, ``num_kv_heads`` not dividing
``num_heads``, ``head_dim`` not positive, key/value lengths or batches that
differ, a mask that does not broadcast to the scores, a KV cache holding
another batch size / head layout, NaN or inf in the inputs, dropout outside
[0, 1), RoPE/ALiBi with a separate key sequence). Messages name the argument,
the shape seen and the shape expected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfattn import torch_interop
from selfattn._checks import (
    as_head_mask,
    as_mask,
    check_attention_inputs,
    check_dropout,
    check_layer_input,
    check_mask_shape,
    check_positive_int,
    check_window,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array
from selfattn.attention import scaled_dot_product_attention_unchecked
from selfattn.kv_cache import KVCache, RollingKVCache, check_kv_cache
from selfattn.masks import (
    causal_mask,
    combine_masks,
    fully_masked_rows,
    key_padding_to_attention_mask,
    sliding_window_mask,
    to_additive_mask,
)
from selfattn.positional import alibi_bias, apply_rotary

__all__ = [
    "CausalSelfAttention",
    "MultiHeadAttention",
    "MultiHeadAttentionConfig",
    "SelfAttention",
    "merge_heads",
    "split_heads",
]

_POSITIONAL = (None, "rope", "alibi")


# ---------------------------------------------------------------- the computation
def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: nn.Dropout, use_fused: bool,
    need_weights: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Attention on ``q (..., q_len, d_k)``, ``k (..., k_len, d_k)``, ``v (..., k_len, d_v)``.

    Readable path: :func:`~selfattn.attention.scaled_dot_product_attention` gives
    ``(context, weights)``; in training with ``p > 0`` the weights go through
    ``dropout`` (zeroed with probability p, survivors scaled by 1/(1-p)) and the
    context is recomputed from the dropped weights. Returns the weights that
    were actually used.

    Fused path: ``F.scaled_dot_product_attention`` with the same mask and
    ``dropout_p``; weights are ``None``. Rows with every key masked are set to
    zeros explicitly, as on the readable path.

    ``need_weights=False`` without dropout: the readable path's own fused branch
    (``scaled_dot_product_attention(..., need_weights=False)``), which never
    forms the weights; weights are ``None``.

    The inputs were checked by the calling layer: no check runs here again.
    """
    p = dropout.p if dropout.training else 0.0
    if use_fused:
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if mask is not None:
            context = context.masked_fill(fully_masked_rows(mask), 0.0)  # (..., q_len, d_v)
        return context, None
    if not need_weights and p == 0.0:
        return scaled_dot_product_attention_unchecked(q, k, v, mask, need_weights=False)
    # context (..., q_len, d_v), weights (..., q_len, k_len)
    context, weights = scaled_dot_product_attention_unchecked(q, k, v, mask)
    if p > 0.0:
        weights = dropout(weights)  # (..., q_len, k_len), E[dropped] = weights
        context = weights @ v  # (..., q_len, k_len) @ (..., k_len, d_v) -> (..., q_len, d_v)
    return context, weights


def _add_causal(mask: Tensor | None, q_len: int, k_len: int, like: Tensor) -> Tensor:
    """AND a bottom-right aligned causal mask ``(q_len, k_len)`` into ``mask``."""
    causal = causal_mask(q_len, k_len, like=like)  # (q_len, k_len), True = may attend
    return _add_allowed(mask, causal)


def _add_allowed(mask: Tensor | None, allowed: Tensor) -> Tensor:
    """AND the bool ``allowed`` ``(q_len, k_len)`` (True = may attend) into ``mask``."""
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return combine_masks(mask, allowed)
    # additive mask: blocked keys get -inf on top of the user's values
    return mask + to_additive_mask(allowed, mask.dtype)  # broadcast to (..., q_len, k_len)


def _add_bias(mask: Tensor | None, bias: Tensor) -> Tensor:
    """Add the float ``bias`` ``(num_heads, q_len, k_len)`` to the scores through ``mask``."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, float("-inf"))  # (..., num_heads, q_len, k_len)
    return mask + bias  # (..., num_heads, q_len, k_len)


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
        check_layer_input("x", x, self.d_in, "d_in", "(batch, seq_len, d_in) or (seq_len, d_in)",
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
            mask = as_mask(mask, q)  # a tensor on q's device; additive: in q's dtype
            check_mask_shape(mask, (batch, seq_len, seq_len), "(batch, seq_len, seq_len)")
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
        self.dropout = nn.Dropout(check_dropout(dropout))

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
            pad = as_mask(padding_mask, q, name="padding_mask")
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


# ---------------------------------------------------------------- multi-head
@dataclass(frozen=True)
class MultiHeadAttentionConfig:
    """Settings of a :class:`MultiHeadAttention` layer (validated on creation).

    ``head_dim`` left as ``None`` becomes ``d_model // num_heads`` (then
    ``num_heads`` must divide ``d_model``), ``num_kv_heads`` left as ``None``
    becomes ``num_heads``; after creation both are ints.

    Raises:
        ValueError: ``num_heads`` not dividing ``d_model`` without ``head_dim``
            (the message names both), ``num_kv_heads`` not dividing
            ``num_heads``, a size <= 0, dropout outside [0, 1), an unknown
            ``positional``, RoPE with an odd ``head_dim``, a ``window`` without
            ``causal``.
        TypeError: a size that is not an int, a dropout that is not a number.
    """

    d_model: int  # embedding width of queries, keys, values and the output
    num_heads: int  # h, number of (query) heads
    dropout: float = 0.0  # probability of dropping an attention weight (training only)
    bias: bool = True  # biases in W_Q, W_K, W_V and W_O (torch.nn.MultiheadAttention's default)
    causal: bool = False  # always apply a bottom-right aligned causal mask
    use_fused: bool = False  # use torch.nn.functional.scaled_dot_product_attention
    head_dim: int | None = None  # d_k = d_v per head; None: d_model // num_heads
    num_kv_heads: int | None = None  # key/value heads, dividing num_heads; None: num_heads
    positional: str | None = None  # positions inside attention: None, "rope" or "alibi"
    rope_base: float = 10000.0  # RoPE's wavelength base (positional="rope")
    window: int | None = None  # sliding window (needs causal): a query sees its last `window`
    # keys, its own included; None: every earlier key

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
        check_dropout(self.dropout)
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        check_positive_int("num_kv_heads", self.num_kv_heads)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads: num_kv_heads={self.num_kv_heads} does not divide "
                f"num_heads={self.num_heads} (each key/value head serves a whole group)"
            )
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional: expected one of {_POSITIONAL}, got {self.positional!r}")
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(
                f"positional: RoPE rotates column pairs and needs an even head_dim, got "
                f"head_dim={self.head_dim}"
            )
        check_window(self.window, self.causal)

    @property
    def inner_dim(self) -> int:
        """``num_heads * head_dim``: width of the projected queries and of the context."""
        assert self.head_dim is not None  # set in __post_init__
        return self.num_heads * self.head_dim


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h scaled dot-product attentions in subspaces, then ``W_O``.

    For each head ``j`` (columns ``j*head_dim:(j+1)*head_dim`` of the projections)::

        Q_j, K_j, V_j = (X_q W_Q)_j, (X_k W_K)_m, (X_v W_V)_m       (.., len, head_dim)
        C_j = softmax(Q_j K_jᵀ / sqrt(head_dim) + mask) V_j
        output = concat(C_1, ..., C_h) W_O                          (batch, q_len, d_model)

    with key/value head ``m = j // (num_heads // num_kv_heads)``, ``m = j`` by
    default (grouped-query attention, RoPE and ALiBi: see the module docstring).
    ``W_Q`` has shape ``(d_model, inner_dim)``, ``W_O`` ``(inner_dim, d_model)``
    and ``W_K``, ``W_V`` ``(d_model, num_kv_heads * head_dim)``, with ``inner_dim
    = num_heads * head_dim``; ``head_dim`` defaults to ``d_model // num_heads``
    (so ``inner_dim = d_model``), a convention, not a requirement.

    With the default ``head_dim``, ``num_kv_heads`` and ``positional``: the
    parameters and result of ``torch.nn.MultiheadAttention(d_model, num_heads,
    bias=bias, batch_first=True)`` (:meth:`from_torch`), with masks in the
    book's convention (True = may attend).

    Args:
        d_model: embedding width, a positive int.
        num_heads: h, a positive int; must divide ``d_model`` unless ``head_dim`` is given.
        dropout: probability in [0, 1) of dropping an attention weight in training.
        bias: biases in the four projections (default True).
        causal: mask the future on every call (bottom-right aligned: sees the cache).
        use_fused: use ``F.scaled_dot_product_attention`` (weights are then ``None``).
        head_dim: d_k = d_v, width of each head; ``None``: ``d_model // num_heads``.
        num_kv_heads: key/value heads, dividing ``num_heads``; ``None``: ``num_heads``.
        positional: None, ``"rope"`` (needs an even ``head_dim``) or ``"alibi"``.
        rope_base: RoPE's wavelength base.
        window: sliding window w (needs ``causal=True``): query ``i`` sees keys
            ``i - w + 1 .. i`` only; ``None``: every earlier key.

    Attributes:
        w_q, w_k, w_v, w_o: the projections, ``nn.Linear``; ``W_Q = w_q.weight.T``.

    Raises:
        ValueError, TypeError: a setting out of range or of the wrong type; see
            :class:`MultiHeadAttentionConfig` (the message names it and why).
    """

    def __init__(
        self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
        causal: bool = False, *, use_fused: bool = False, head_dim: int | None = None,
        num_kv_heads: int | None = None, positional: str | None = None,
        rope_base: float = 10000.0, window: int | None = None,
    ) -> None:
        super().__init__()
        cfg = MultiHeadAttentionConfig(
            d_model=d_model, num_heads=num_heads, dropout=dropout, bias=bool(bias),
            causal=bool(causal), use_fused=bool(use_fused), head_dim=head_dim,
            num_kv_heads=num_kv_heads, positional=positional, rope_base=rope_base,
            window=window,
        )
        assert cfg.head_dim is not None and cfg.num_kv_heads is not None  # resolved
        self.d_model, self.num_heads, self.head_dim = cfg.d_model, cfg.num_heads, cfg.head_dim
        self.num_kv_heads, self.inner_dim = cfg.num_kv_heads, cfg.inner_dim
        self.group = cfg.num_heads // cfg.num_kv_heads  # query heads per key/value head
        self.causal, self.use_fused = cfg.causal, cfg.use_fused
        self.positional, self.rope_base = cfg.positional, cfg.rope_base
        self.window = cfg.window
        kv_dim = cfg.num_kv_heads * cfg.head_dim  # width of the keys and values
        # creation order fixes which random numbers each weight gets: keep it
        self.w_q = nn.Linear(cfg.d_model, cfg.inner_dim, bias=cfg.bias)
        self.w_k = nn.Linear(cfg.d_model, kv_dim, bias=cfg.bias)
        self.w_v = nn.Linear(cfg.d_model, kv_dim, bias=cfg.bias)
        self.w_o = nn.Linear(cfg.inner_dim, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    # -- configuration ---------------------------------------------------------
    @property
    def config(self) -> MultiHeadAttentionConfig:
        """The current settings as a :class:`MultiHeadAttentionConfig`."""
        return MultiHeadAttentionConfig(
            d_model=self.d_model, num_heads=self.num_heads, dropout=self.dropout.p,
            bias=self.w_q.bias is not None, causal=self.causal, use_fused=self.use_fused,
            head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            positional=self.positional, rope_base=self.rope_base, window=self.window,
        )

    @classmethod
    def from_config(cls, config: MultiHeadAttentionConfig) -> MultiHeadAttention:
        """Build a layer from a :class:`MultiHeadAttentionConfig`."""
        if not isinstance(config, MultiHeadAttentionConfig):
            raise TypeError(
                f"config: expected a MultiHeadAttentionConfig, got {type(config).__name__}"
            )
        return cls(**asdict(config))

    # -- interoperability with torch.nn.MultiheadAttention ------------------------
    def copy_from_torch(self, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy a ``torch.nn.MultiheadAttention``'s parameters into this layer; returns it
        (:func:`~selfattn.torch_interop.copy_attention_from_torch`)."""
        return torch_interop.copy_attention_from_torch(self, module)

    @classmethod
    def from_torch(
        cls, module: nn.MultiheadAttention, *, causal: bool = False, use_fused: bool = False
    ) -> MultiHeadAttention:
        """A new layer with ``module``'s settings and a copy of its parameters
        (:func:`~selfattn.torch_interop.attention_from_torch`)."""
        return torch_interop.attention_from_torch(cls, module, causal=causal, use_fused=use_fused)

    # -- forward: check the inputs once, then attend ---------------------------------
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
            key: ``(batch, k_len, d_model)``; defaults to ``query`` (self-attention,
                required with ``positional``).
            value: ``(batch, k_len, d_model)``; defaults to ``key``.
            mask: optional bool (True = may attend) or additive float mask,
                ``(q_len, k_len)``, ``(batch, q_len, k_len)`` (shared by all heads,
                unlike torch's ``(batch * num_heads, q_len, k_len)``) or ``(batch,
                num_heads, q_len, k_len)``; size-1 dims broadcast (key padding:
                :func:`~selfattn.masks.key_padding_to_attention_mask`). ``k_len``
                counts cached keys too. ANDed with the causal mask if ``causal``.
            need_weights: return the weights (else ``None``, and without dropout the
                fused kernel computes the context).
            average_weights: average the weights over heads
                ``(batch, q_len, k_len)``; if False return them per head
                ``(batch, num_heads, q_len, k_len)``.
            kv_cache: optional :class:`~selfattn.kv_cache.KVCache` (``num_kv_heads``
                heads); the new keys and values are appended, the queries attend
                to every cached position, new tokens sit at ``tokens_seen ..``. A
                :class:`~selfattn.kv_cache.RollingKVCache` holds only recent keys;
                its keys are masked by position (and the window, if any).

        Returns:
            ``(output (batch, q_len, d_model), weights)``, the weights after dropout
            in training, ``None`` if ``need_weights`` is False or with ``use_fused``.
            Unbatched input drops the batch dim.

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: see the module docstring.
        """
        query, key, value, mask, unbatched = _checked_inputs(self, query, key, value, mask,
                                                             kv_cache)
        output, weights = self.attend(query, key, value, mask, need_weights=need_weights,
                                      average_weights=average_weights, kv_cache=kv_cache)
        if unbatched:
            output = output.squeeze(0)  # (q_len, d_model)
            weights = None if weights is None else weights.squeeze(0)  # drop batch
        return output, weights

    def attend(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
        need_weights: bool = True, average_weights: bool = True, kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`forward` on checked, batched inputs: the attention itself, no checks.

        ``query`` ``(batch, q_len, d_model)``, ``key``/``value`` ``(batch, k_len,
        d_model)``, ``mask`` None or a tensor broadcastable to ``(batch, num_heads,
        q_len, k_len)`` on the device of ``query`` (additive: in its dtype), a
        ``kv_cache`` of this layer's layout; the other arguments and the result as
        for :meth:`forward`.
        """
        cached = 0 if kv_cache is None else kv_cache.tokens_seen  # position of the first new
        # 1. project, split into heads: h query heads, num_kv_heads key/value heads
        q = split_heads(self.w_q(query), self.num_heads)  # (batch, h, q_len, head_dim)
        k = split_heads(self.w_k(key), self.num_kv_heads)  # (batch, kv_heads, new_len, head_dim)
        v = split_heads(self.w_v(value), self.num_kv_heads)  # (batch, kv_heads, new_len, hd)
        if self.positional == "rope":  # rotate by absolute position; scores see offsets only
            q = apply_rotary(q, torch.arange(cached, cached + q.shape[2]), self.rope_base)
            k = apply_rotary(k, torch.arange(cached, cached + k.shape[2]), self.rope_base)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (batch, kv_heads, cached_len + new_len, head_dim)
        if self.group > 1:  # each key/value head serves `group` consecutive query heads
            k = k.repeat_interleave(self.group, dim=1)  # (batch, h, k_len, head_dim)
            v = v.repeat_interleave(self.group, dim=1)  # (batch, h, k_len, head_dim)

        # 2. the mask: the caller's, then the causal mask, then ALiBi's bias on the scores
        q_len, k_len = q.shape[2], k.shape[2]
        if self.causal:
            mask = _add_causal(mask, q_len, k_len, q)  # bottom-right aligned: sees the cache
        if isinstance(kv_cache, RollingKVCache):  # held keys are not 0..k_len-1: by position
            mask = _add_allowed(mask, kv_cache.attention_mask(q_len, window=self.window, like=q))
        elif self.window is not None:  # the last `window` keys, bottom-right aligned
            mask = _add_allowed(mask, sliding_window_mask(q_len, k_len, window=self.window,
                                                          like=q))
        if self.positional == "alibi":  # -m_j |i - j| for head j
            if isinstance(kv_cache, RollingKVCache) and kv_cache.sinks:
                raise ValueError(
                    f"kv_cache: ALiBi's bias needs keys at consecutive positions; a "
                    f"RollingKVCache with sinks={kv_cache.sinks} leaves a gap after its "
                    "sinks (use sinks=0, or RoPE)"
                )
            mask = _add_bias(mask, alibi_bias(self.num_heads, q_len, k_len, like=q))

        # 3. attention in every head at once
        context, weights = _attend(q, k, v, mask, self.dropout, self.use_fused, need_weights)
        # context: (batch, num_heads, q_len, head_dim); weights: (batch, num_heads, q_len, k_len)

        # 4. concatenate the heads, (batch, q_len, inner_dim), and mix them with W_O
        output = self.w_o(merge_heads(context))  # (batch, q_len, d_model)
        if not need_weights or weights is None:
            return output, None
        return output, weights.mean(dim=1) if average_weights else weights  # (batch, [h,] q, k)

    def extra_repr(self) -> str:
        names = ("d_model", "num_heads", "num_kv_heads", "head_dim", "causal", "positional")
        settings = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        window = "" if self.window is None else f", window={self.window}"
        return f"{settings}{window}, dropout={self.dropout.p}, use_fused={self.use_fused}"


def _checked_inputs(
    layer: MultiHeadAttention, query: Any, key: Any, value: Any, mask: Any, kv_cache: Any
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, bool]:
    """Check the arguments of :meth:`MultiHeadAttention.forward` (each message says what is
    wrong) and return ``(query, key, value, mask, unbatched)`` ready for
    :meth:`MultiHeadAttention.attend`: the inputs 3-D (``key`` and ``value`` default to
    ``query``), ``mask`` None or a tensor broadcastable to ``(batch, num_heads, q_len,
    k_len)``, and whether the inputs came without a batch dimension."""
    if layer.positional is not None and key is not None:
        raise ValueError(
            f"key: positional={layer.positional!r} places tokens of one sequence; "
            "pass key=None (self-attention)"
        )
    key = query if key is None else key
    value = key if value is None else value
    query, key, value, unbatched = check_attention_inputs(
        query, key, value, layer.d_model, layer.w_q.weight
    )  # each (batch, len, d_model)
    batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
    if kv_cache is not None:
        check_kv_cache(kv_cache, layer.num_kv_heads, layer.head_dim, shape_of(query))
        k_len += len(kv_cache)
    if mask is not None:
        mask = as_head_mask(mask, query, (batch, layer.num_heads, q_len, k_len))
    return query, key, value, mask, unbatched

