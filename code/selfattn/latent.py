"""Multi-head latent attention (MLA): keys and values rebuilt from a small cached latent.

DeepSeek-V2 (DeepSeek-AI, 2024, section 2.1) shrinks the KV cache without
sharing heads. Each token's input row ``h_t`` (width ``d_model``) is compressed
into one **latent** ``c_t`` of width ``d_c``; every head's key and value are
*rebuilt* from it by up-projections. Positions enter through a separate,
**decoupled RoPE key** ``k^R_t`` of width ``d_R`` that all heads share. In the
book's row convention (projections on the right)::

    c_t   = h_t W_DKV                          (d_c)        the latent: cached
    k^R_t = RoPE_t(h_t W_KR)                   (d_R)        the RoPE key: cached, shared by heads
    k^C_t = c_t W_UK,   v_t = c_t W_UV         (h d_k)      every head's key and value
    q^C_t = h_t W_Q,    q^R_t = RoPE_t(h_t W_QR)   (h d_k), (h d_R)
    q_{t,i} = [q^C_{t,i}; q^R_{t,i}],  k_{t,i} = [k^C_{t,i}; k^R_t]      head i
    o_{t,i} = sum_j softmax_j(q_{t,i} . k_{j,i} / sqrt(d_k + d_R)) v_{j,i}
    u_t   = [o_{t,1}; ...; o_{t,h}] W_O        (d_model)

With ``q_latent_dim`` the queries go through their own latent first,
``c^Q_t = h_t W_DQ`` (width ``d_c'``), and ``q^C_t = c^Q_t W_UQ``,
``q^R_t = RoPE_t(c^Q_t W_QR)``; that saves activations in training, not cache.
The paper's code (not its section 2.1) also puts an RMSNorm on each latent; this
module follows the equations above and has none.

**The cache** (:class:`LatentKVCache`) keeps ``c_t`` and ``k^R_t``: ``d_c +
d_R`` numbers per token per layer (:func:`latent_cache_bytes`), against ``2 h
d_k`` for multi-head attention.

**Two forms, one result.** The *explicit* form (``absorb=False``) rebuilds
``K`` and ``V`` of every cached token from the latent and attends as usual. The
*absorbed* form (``absorb=True``) never builds them. For head ``i`` the content
part of a score is ``q^C_{t,i} . (c_j W_UK,i) = (q^C_{t,i} W_UK,iᵀ) . c_j``, so
``W_UK`` moves to the query side and the query meets the latent directly; and
``sum_j a_j (c_j W_UV,i) W_O,i = (sum_j a_j c_j) (W_UV,i W_O,i)``, so ``W_UV``
folds into ``W_O``. Both forms compute the same numbers (the tests check it in
float64); :meth:`MultiHeadLatentAttention.absorbed_weights` returns the folded
matrices. The absorbed form applies ``W_UK`` and ``W_UV`` to the ``q_len``
queries and contexts rather than folding the matrices on every call; the
arithmetic is the same.

**Why the RoPE key is separate.** RoPE rotates a key by its position ``j``:
``RoPE_j(c_j W_UK) = c_j W_UK R_j``. The matrix that would move to the query
side is then ``W_UK R_j``, a different one for every key position, so no single
matrix can be absorbed. The rotation is therefore kept out of the latent's path
and applied to the small shared key ``k^R`` instead, which the cache stores
already rotated.

Up-projections carry no bias: a bias on ``W_UK`` adds the same number ``q . b``
to every score of a query (the softmax ignores it), and a bias on ``W_UV`` adds
the same vector to every context (``W_O``'s bias can hold it).

Shape legend (the book's letters):

* ``batch``        sequences in a batch
* ``q_len``        queries; ``k_len`` keys (cached plus new); ``new_len`` new tokens
* ``d_model``      width of the tokens read and written
* ``num_heads``    h
* ``head_dim``     d_k, width of ``q^C``, ``k^C`` and ``v`` per head
* ``latent_dim``   d_c, width of the cached latent ``c``
* ``q_latent_dim`` d_c', width of the query latent ``c^Q``
* ``rope_dim``     d_R (the paper's d_h^R), width of ``k^R`` and of each head's ``q^R``
* ``cached_len``   tokens held by a :class:`LatentKVCache`

Bad input raises ``TypeError`` (not a tensor, non-float input, a dtype other than
the parameters') or ``ValueError`` (a size that is not positive, an odd
``rope_dim``, wrong shapes, a cache of another layout, a separate key sequence
with RoPE, a value sequence other than the key sequence). Messages name the
argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from selfattn._checks import (
    as_head_mask,
    check_attention_inputs,
    check_dropout,
    check_positive_int,
    is_tensor,
    shape_of,
)
from selfattn.array_types import Array
from selfattn.attention import scaled_dot_product_attention_unchecked
from selfattn.layers import merge_heads, split_heads
from selfattn.masks import causal_mask, combine_masks, fully_masked_rows, to_additive_mask
from selfattn.positional import apply_rotary

__all__ = [
    "LatentAttentionConfig",
    "LatentKVCache",
    "MultiHeadLatentAttention",
    "check_latent_cache",
    "latent_cache_bytes",
]


def _check_rope_dim(rope_dim: Any) -> None:
    """``rope_dim`` must be an int >= 0 and even (RoPE rotates column pairs)."""
    if isinstance(rope_dim, bool) or not isinstance(rope_dim, int):
        raise TypeError(f"rope_dim: expected an even int >= 0, got {type(rope_dim).__name__}")
    if rope_dim < 0:
        raise ValueError(f"rope_dim: expected an even int >= 0, got {rope_dim}")
    if rope_dim % 2:
        raise ValueError(
            f"rope_dim: RoPE rotates column pairs, so rope_dim must be even, got {rope_dim}"
        )


# ---------------------------------------------------------------- the cache
class LatentKVCache:
    """What multi-head latent attention keeps per token: the latent and the RoPE key.

    Attributes:
        latent: ``(batch, cached_len, latent_dim)``, the rows ``c_t``, or ``None`` while empty.
        rope_keys: ``(batch, cached_len, rope_dim)``, the rotated keys ``k^R_t``
            (``rope_dim`` may be 0), or ``None`` while empty.

    Per token the cache holds ``latent_dim + rope_dim`` numbers, whatever the
    number of heads. The tensors keep their autograd history; use the cache under
    ``torch.no_grad()`` for generation.
    """

    def __init__(self) -> None:
        self.latent: Tensor | None = None
        self.rope_keys: Tensor | None = None

    def __len__(self) -> int:
        """``cached_len``, the number of tokens held."""
        return 0 if self.latent is None else int(self.latent.shape[1])

    def __repr__(self) -> str:
        shape = None if self.latent is None else shape_of(self.latent)
        return f"LatentKVCache(cached_len={len(self)}, latent_shape={shape})"

    @property
    def tokens_seen(self) -> int:
        """Tokens appended since the last :meth:`reset`: the position of the next token."""
        return len(self)

    @property
    def nbytes(self) -> int:
        """Bytes of memory behind the held latents and RoPE keys (0 while empty).

        Counted from the tensors' storage, so a view that keeps a larger tensor
        alive counts the whole of it.
        """
        if self.latent is None or self.rope_keys is None:
            return 0
        return (self.latent.untyped_storage().nbytes()
                + self.rope_keys.untyped_storage().nbytes())

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.latent = None
        self.rope_keys = None

    def append(self, latent: Tensor, rope_keys: Tensor) -> tuple[Tensor, Tensor]:
        """Add the latents and RoPE keys of new tokens; return everything held.

        Args:
            latent: ``(batch, new_len, latent_dim)``.
            rope_keys: ``(batch, new_len, rope_dim)``, already rotated to their positions.

        Returns:
            ``(latent, rope_keys)``: ``(batch, cached_len + new_len, latent_dim)``
            and ``(batch, cached_len + new_len, rope_dim)``.

        Raises:
            TypeError: not tensors, or a dtype other than the cache's.
            ValueError: not 3-D, ``batch``/``new_len`` of the two differ, or
                ``batch``, ``latent_dim``, ``rope_dim`` differ from what is cached.
        """
        legends = {"latent": "(batch, new_len, latent_dim)",
                   "rope_keys": "(batch, new_len, rope_dim)"}
        for name, t in (("latent", latent), ("rope_keys", rope_keys)):
            if not is_tensor(t):
                raise TypeError(
                    f"{name}: expected a torch.Tensor {legends[name]}, got {type(t).__name__}"
                )
            if t.ndim != 3:
                raise ValueError(
                    f"{name}: expected shape {legends[name]}, got shape {shape_of(t)}"
                )
        if rope_keys.shape[:2] != latent.shape[:2]:
            raise ValueError(
                f"rope_keys: expected (batch, new_len) = {shape_of(latent)[:2]} from latent "
                f"of shape {shape_of(latent)}, got shape {shape_of(rope_keys)}"
            )
        if self.latent is None or self.rope_keys is None:
            self.latent, self.rope_keys = latent, rope_keys  # (batch, new_len, ...)
            return self.latent, self.rope_keys
        for name, t, held in (("latent", latent, self.latent),
                              ("rope_keys", rope_keys, self.rope_keys)):
            want = (held.shape[0], t.shape[1], held.shape[2])
            if shape_of(t) != want:
                raise ValueError(
                    f"{name}: expected shape {legends[name]} = {want} to match the cache's "
                    f"{shape_of(held)}, got shape {shape_of(t)}"
                )
            if t.dtype != held.dtype:
                raise TypeError(f"{name}: expected dtype {held.dtype} (the cache's), got {t.dtype}")
        self.latent = torch.cat([self.latent, latent], dim=1)  # (batch, cached+new, latent_dim)
        self.rope_keys = torch.cat([self.rope_keys, rope_keys], dim=1)  # (batch, cached+new, d_R)
        return self.latent, self.rope_keys


def check_latent_cache(
    kv_cache: Any, latent_dim: int, rope_dim: int, query_shape: tuple[int, ...]
) -> None:
    """``TypeError`` unless ``kv_cache`` is a :class:`LatentKVCache`; ``ValueError`` unless it
    holds ``(batch, cached_len, latent_dim)`` latents and ``(batch, cached_len, rope_dim)``
    RoPE keys, the layout of a layer with these widths attending queries of shape
    ``query_shape`` ``(batch, q_len, d_model)``."""
    if not isinstance(kv_cache, LatentKVCache):
        raise TypeError(
            f"kv_cache: expected a LatentKVCache (multi-head latent attention caches the "
            f"latent, not keys and values), got {type(kv_cache).__name__}"
        )
    if kv_cache.latent is None or kv_cache.rope_keys is None:
        return
    held = (shape_of(kv_cache.latent), shape_of(kv_cache.rope_keys))
    cached = held[0][1]
    want = ((query_shape[0], cached, latent_dim), (query_shape[0], cached, rope_dim))
    if held != want:
        raise ValueError(
            f"kv_cache: holds latent and rope_keys of shapes {held[0]} and {held[1]}, expected "
            f"{want[0]} and {want[1]} (batch, cached_len, latent_dim / rope_dim) for query of "
            f"shape {query_shape} with latent_dim={latent_dim}, rope_dim={rope_dim}; call "
            "kv_cache.reset() for a new batch"
        )


def latent_cache_bytes(
    *, batch: int, seq_len: int, num_layers: int, latent_dim: int, rope_dim: int,
    bytes_per_value: int = 2,
) -> int:
    """Bytes a latent cache needs: ``batch * seq_len * num_layers * (latent_dim + rope_dim) * b``.

    One latent of ``d_c`` numbers and one RoPE key of ``d_R`` numbers per token
    and layer, shared by every head; ``b`` is the size of one number (2 for
    float16/bfloat16, 4 for float32). Compare
    :func:`~selfattn.kv_cache.kv_cache_bytes`, ``2 * ... * num_kv_heads * head_dim * b``.

    Raises:
        ValueError: ``rope_dim`` not an even int >= 0, any other argument not a
            positive int (TypeError if not an int).
    """
    sizes = {"batch": batch, "seq_len": seq_len, "num_layers": num_layers,
             "latent_dim": latent_dim, "bytes_per_value": bytes_per_value}
    for name, value in sizes.items():
        check_positive_int(name, value)
    _check_rope_dim(rope_dim)
    return batch * seq_len * num_layers * (latent_dim + rope_dim) * bytes_per_value


# ---------------------------------------------------------------- the layer
@dataclass(frozen=True)
class LatentAttentionConfig:
    """Settings of a :class:`MultiHeadLatentAttention` layer (validated on creation).

    ``head_dim`` left as ``None`` becomes ``d_model // num_heads`` (then
    ``num_heads`` must divide ``d_model``); after creation it is an int.

    Raises:
        ValueError: a size that is not positive (``latent_dim``, ``q_latent_dim``,
            ``head_dim``, ...), an odd or negative ``rope_dim``, ``num_heads`` not
            dividing ``d_model`` without ``head_dim``, dropout outside [0, 1).
        TypeError: a size that is not an int.
    """

    d_model: int  # width of the tokens read and written
    num_heads: int  # h, heads; each rebuilds its own key and value from the latent
    latent_dim: int  # d_c, width of the latent c = h W_DKV that the cache keeps per token
    head_dim: int | None = None  # d_k, width of q^C, k^C and v per head; None: d_model // h
    rope_dim: int = 0  # d_R, width of the shared RoPE key and of each head's RoPE query; 0: none
    q_latent_dim: int | None = None  # d_c', width of the query latent c^Q; None: no query latent
    dropout: float = 0.0  # probability of dropping an attention weight (training only)
    bias: bool = True  # biases in the projections from the input and in W_O (never W_UK, W_UV)
    causal: bool = False  # always apply a bottom-right aligned causal mask
    rope_base: float = 10000.0  # RoPE's wavelength base (rope_dim > 0)
    absorb: bool = False  # attend against the latent (W_UK, W_UV absorbed) instead of K, V

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        check_positive_int("num_heads", self.num_heads)
        check_positive_int("latent_dim", self.latent_dim)
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(
                    f"num_heads: num_heads={self.num_heads} does not divide "
                    f"d_model={self.d_model}; the default head_dim = d_model / num_heads "
                    "must be an integer (or pass head_dim explicitly)"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.num_heads)
        check_positive_int("head_dim", self.head_dim)
        _check_rope_dim(self.rope_dim)
        if self.q_latent_dim is not None:
            check_positive_int("q_latent_dim", self.q_latent_dim)
        check_dropout(self.dropout)
        for name in ("bias", "causal", "absorb"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")

    @property
    def inner_dim(self) -> int:
        """``num_heads * head_dim``: width of ``q^C``, ``k^C``, ``v`` and of the context."""
        assert self.head_dim is not None  # set in __post_init__
        return self.num_heads * self.head_dim

    @property
    def cached_per_token(self) -> int:
        """The count of numbers the cache holds per token and layer, ``latent_dim + rope_dim``."""
        return self.latent_dim + self.rope_dim


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2): see the module docstring for the equations.

    Args:
        d_model: width of the tokens, a positive int.
        num_heads: h, a positive int; must divide ``d_model`` unless ``head_dim`` is given.
        latent_dim: d_c, width of the cached latent, a positive int.
        head_dim: d_k, width of ``q^C``, ``k^C`` and ``v`` per head; ``None``: ``d_model // h``.
        rope_dim: d_R, width of the decoupled RoPE key and queries, an even int >= 0
            (0: no positions inside attention).
        q_latent_dim: d_c', width of the query latent; ``None``: queries straight from the input.
        dropout: probability in [0, 1) of dropping an attention weight in training.
        bias: biases in ``W_DQ``, ``W_Q`` (or ``W_UQ``), ``W_QR``, ``W_DKV``, ``W_KR``, ``W_O``.
        causal: mask the future on every call (bottom-right aligned: sees the cache).
        rope_base: RoPE's wavelength base.
        absorb: compute attention against the latent (absorbed form); may be switched
            on the instance, the parameters are the same.

    The projections are ``nn.Linear`` modules; the book's matrix is ``weight.T``.

    Attributes:
        w_dq: ``W_DQ`` ``(d_model, d_c')``, only with ``q_latent_dim``.
        w_q: ``W_Q`` ``(d_model, h d_k)``, or ``W_UQ`` ``(d_c', h d_k)`` with a query latent.
        w_qr: ``W_QR`` ``(d_model or d_c', h d_R)``, only with ``rope_dim > 0``.
        w_dkv: ``W_DKV`` ``(d_model, d_c)``.
        w_kr: ``W_KR`` ``(d_model, d_R)``, only with ``rope_dim > 0``.
        w_uk, w_uv: ``W_UK``, ``W_UV`` ``(d_c, h d_k)``, no bias.
        w_o: ``W_O`` ``(h d_k, d_model)``.

    Raises:
        ValueError, TypeError: a setting out of range or of the wrong type; see
            :class:`LatentAttentionConfig`.
    """

    def __init__(
        self, d_model: int, num_heads: int, latent_dim: int, *, head_dim: int | None = None,
        rope_dim: int = 0, q_latent_dim: int | None = None, dropout: float = 0.0,
        bias: bool = True, causal: bool = False, rope_base: float = 10000.0,
        absorb: bool = False,
    ) -> None:
        super().__init__()
        cfg = LatentAttentionConfig(
            d_model=d_model, num_heads=num_heads, latent_dim=latent_dim, head_dim=head_dim,
            rope_dim=rope_dim, q_latent_dim=q_latent_dim, dropout=dropout, bias=bool(bias),
            causal=bool(causal), rope_base=rope_base, absorb=absorb,
        )
        assert cfg.head_dim is not None  # resolved
        self.d_model, self.num_heads, self.head_dim = cfg.d_model, cfg.num_heads, cfg.head_dim
        self.latent_dim, self.rope_dim, self.q_latent_dim = (
            cfg.latent_dim, cfg.rope_dim, cfg.q_latent_dim)
        self.inner_dim = cfg.inner_dim
        self.causal, self.rope_base, self.absorb = cfg.causal, cfg.rope_base, cfg.absorb
        q_in = cfg.d_model if cfg.q_latent_dim is None else cfg.q_latent_dim
        # creation order fixes which random numbers each weight gets: keep it
        if cfg.q_latent_dim is not None:
            self.w_dq = nn.Linear(cfg.d_model, cfg.q_latent_dim, bias=cfg.bias)
        self.w_q = nn.Linear(q_in, cfg.inner_dim, bias=cfg.bias)
        if cfg.rope_dim:
            self.w_qr = nn.Linear(q_in, cfg.num_heads * cfg.rope_dim, bias=cfg.bias)
        self.w_dkv = nn.Linear(cfg.d_model, cfg.latent_dim, bias=cfg.bias)
        if cfg.rope_dim:
            self.w_kr = nn.Linear(cfg.d_model, cfg.rope_dim, bias=cfg.bias)
        self.w_uk = nn.Linear(cfg.latent_dim, cfg.inner_dim, bias=False)
        self.w_uv = nn.Linear(cfg.latent_dim, cfg.inner_dim, bias=False)
        self.w_o = nn.Linear(cfg.inner_dim, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    # -- configuration ---------------------------------------------------------
    @property
    def config(self) -> LatentAttentionConfig:
        """The current settings as a :class:`LatentAttentionConfig`."""
        return LatentAttentionConfig(
            d_model=self.d_model, num_heads=self.num_heads, latent_dim=self.latent_dim,
            head_dim=self.head_dim, rope_dim=self.rope_dim, q_latent_dim=self.q_latent_dim,
            dropout=self.dropout.p, bias=self.w_o.bias is not None, causal=self.causal,
            rope_base=self.rope_base, absorb=self.absorb,
        )

    @classmethod
    def from_config(cls, config: LatentAttentionConfig) -> MultiHeadLatentAttention:
        """Build a layer from a :class:`LatentAttentionConfig`."""
        if not isinstance(config, LatentAttentionConfig):
            raise TypeError(
                f"config: expected a LatentAttentionConfig, got {type(config).__name__}"
            )
        return cls(**asdict(config))

    @property
    def scale(self) -> float:
        """``1 / sqrt(d_k + d_R)``: a score is a dot product of ``d_k + d_R`` numbers."""
        return 1.0 / math.sqrt(self.head_dim + self.rope_dim)

    def new_cache(self) -> LatentKVCache:
        """An empty :class:`LatentKVCache` for this layer."""
        return LatentKVCache()

    # -- the pieces ------------------------------------------------------------
    def latent_and_rope_key(self, key: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """What the cache keeps for the tokens of ``key`` ``(batch, new_len, d_model)``.

        Returns:
            ``c = key W_DKV`` ``(batch, new_len, d_c)`` and ``k^R = RoPE(key W_KR)``
            ``(batch, new_len, d_R)``, rotated to positions ``start .. start + new_len - 1``
            (a ``(batch, new_len, 0)`` tensor when ``rope_dim`` is 0).
        """
        latent = self.w_dkv(key)  # (batch, new_len, d_c)
        if not self.rope_dim:
            return latent, latent.new_zeros(*latent.shape[:2], 0)  # (batch, new_len, 0)
        positions = torch.arange(start, start + key.shape[1])
        rope_key = apply_rotary(self.w_kr(key), positions, self.rope_base)  # (b, new_len, d_R)
        return latent, rope_key

    def queries(self, query: Tensor, start: int = 0) -> tuple[Tensor, Tensor | None]:
        """Every head's content and RoPE queries for ``query`` ``(batch, q_len, d_model)``.

        Returns:
            ``q^C`` ``(batch, h, q_len, d_k)`` and ``q^R`` ``(batch, h, q_len, d_R)``
            rotated to positions ``start ..`` (``None`` when ``rope_dim`` is 0).
        """
        source = query if self.q_latent_dim is None else self.w_dq(query)  # (b, q_len, d_c')
        q_content = split_heads(self.w_q(source), self.num_heads)  # (batch, h, q_len, d_k)
        if not self.rope_dim:
            return q_content, None
        q_rope = split_heads(self.w_qr(source), self.num_heads)  # (batch, h, q_len, d_R)
        positions = torch.arange(start, start + query.shape[1])
        return q_content, apply_rotary(q_rope, positions, self.rope_base)

    def absorbed_weights(self) -> tuple[Tensor, Tensor | None, Tensor]:
        """The matrices of the absorbed form, folded once.

        Returns:
            ``(w_qk, b_qk, w_vo)``:

            * ``w_qk`` ``(h, d_in, d_c)``, head ``i``: ``W_Q,i W_UK,iᵀ`` (``d_in`` is
              ``d_model``, or ``d_c'`` with a query latent), so the content score
              of head ``i`` is ``(x W_Q,i W_UK,iᵀ + b_qk,i) . c_j``;
            * ``b_qk`` ``(h, d_c)``: ``b_Q,i W_UK,iᵀ``, or ``None`` without biases;
            * ``w_vo`` ``(h, d_c, d_model)``, head ``i``: ``W_UV,i W_O,i``, so the
              output is ``sum_i (sum_j a_ij c_j) W_VO,i + b_O``.
        """
        h, d_k, d_c = self.num_heads, self.head_dim, self.latent_dim
        w_q = self.w_q.weight.T.reshape(-1, h, d_k).transpose(0, 1)  # (h, d_in, d_k): W_Q,i
        w_uk = self.w_uk.weight.reshape(h, d_k, d_c)  # (h, d_k, d_c): W_UK,iᵀ
        w_qk = w_q @ w_uk  # (h, d_in, d_c)
        b_qk = None
        if self.w_q.bias is not None:
            b_qk = (self.w_q.bias.reshape(h, 1, d_k) @ w_uk).squeeze(1)  # (h, d_c)
        w_uv = self.w_uv.weight.reshape(h, d_k, d_c).transpose(1, 2)  # (h, d_c, d_k): W_UV,i
        w_o = self.w_o.weight.T.reshape(h, d_k, self.d_model)  # (h, d_k, d_model): W_O,i
        return w_qk, b_qk, w_uv @ w_o  # ..., (h, d_c, d_model)

    # -- forward: check the inputs once, then attend ----------------------------
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Array | None = None,
        *,
        need_weights: bool = True,
        average_weights: bool = True,
        kv_cache: LatentKVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Multi-head latent attention of ``query`` over the tokens of ``key``.

        Args:
            query: ``(batch, q_len, d_model)`` or unbatched ``(q_len, d_model)``.
            key: ``(batch, k_len, d_model)``, the tokens compressed into latents;
                defaults to ``query`` (self-attention, required with ``rope_dim > 0``).
            value: ``None`` or ``key`` itself: keys and values come from one latent.
            mask: optional bool (True = may attend) or additive float mask,
                ``(q_len, k_len)``, ``(batch, q_len, k_len)`` or ``(batch, num_heads,
                q_len, k_len)``; ``k_len`` counts cached tokens too. ANDed with the
                causal mask if ``causal``.
            need_weights: return the weights (else ``None``).
            average_weights: average the weights over heads ``(batch, q_len, k_len)``;
                if False return them per head ``(batch, num_heads, q_len, k_len)``.
            kv_cache: optional :class:`LatentKVCache`; the new tokens' latents and
                RoPE keys are appended, new tokens sit at positions ``cached_len ..``.

        Returns:
            ``(output (batch, q_len, d_model), weights)``; unbatched input drops the batch dim.

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: see the module docstring.
        """
        query, key, mask, unbatched = _checked_inputs(self, query, key, value, mask, kv_cache)
        output, weights = self.attend(query, key, key, mask, need_weights=need_weights,
                                      average_weights=average_weights, kv_cache=kv_cache)
        if unbatched:
            output = output.squeeze(0)  # (q_len, d_model)
            weights = None if weights is None else weights.squeeze(0)  # drop batch
        return output, weights

    def attend(
        self, query: Tensor, key: Tensor, value: Tensor | None = None,
        mask: Tensor | None = None, *, need_weights: bool = True, average_weights: bool = True,
        kv_cache: LatentKVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`forward` on checked, batched inputs: the attention itself, no checks.

        ``query`` ``(batch, q_len, d_model)``, ``key`` ``(batch, new_len, d_model)``;
        ``value`` is not read (the values come from ``key``'s latent; the argument
        is there so that the transformer block calls this layer as it calls
        :meth:`~selfattn.layers.MultiHeadAttention.attend`). ``mask`` None or a
        tensor broadcastable to ``(batch, num_heads, q_len, k_len)`` on the device
        of ``query`` (additive: in its dtype). Computes the absorbed form if
        ``self.absorb``, else the explicit one.
        """
        cached = 0 if kv_cache is None else len(kv_cache)
        # 1. what the cache keeps: one latent and one RoPE key per token, shared by all heads
        latent, rope_key = self.latent_and_rope_key(key, cached)  # (b, new, d_c), (b, new, d_R)
        if kv_cache is not None:
            latent, rope_key = kv_cache.append(latent, rope_key)  # (batch, k_len, d_c / d_R)
        q_content, q_rope = self.queries(query, cached)  # (b, h, q_len, d_k), (b, h, q_len, d_R)

        # 2. the mask: the caller's, then the causal one (bottom-right aligned: sees the cache)
        q_len, k_len = query.shape[1], latent.shape[1]
        if self.causal:
            mask = _add_causal(mask, q_len, k_len, query)

        # 3. attention: explicit (rebuild K and V) or absorbed (against the latent)
        if self.absorb:
            context, weights = self._attend_absorbed(q_content, q_rope, latent, rope_key, mask,
                                                     need_weights)
        else:
            context, weights = self._attend_explicit(q_content, q_rope, latent, rope_key, mask,
                                                     need_weights)
        # context: (batch, h, q_len, d_k); weights: (batch, h, q_len, k_len) or None

        # 4. concatenate the heads, (batch, q_len, h d_k), and mix them with W_O
        output = self.w_o(merge_heads(context))  # (batch, q_len, d_model)
        if not need_weights or weights is None:
            return output, None
        return output, weights.mean(dim=1) if average_weights else weights  # (batch, [h,] q, k)

    def _attend_explicit(
        self, q_content: Tensor, q_rope: Tensor | None, latent: Tensor, rope_key: Tensor,
        mask: Tensor | None, need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Rebuild every head's keys and values from the latent, then attend as usual."""
        h = self.num_heads
        k = split_heads(self.w_uk(latent), h)  # (batch, h, k_len, d_k): k^C = c W_UK
        v = split_heads(self.w_uv(latent), h)  # (batch, h, k_len, d_k): v = c W_UV
        q = q_content
        if q_rope is not None:  # q = [q^C; q^R], k = [k^C; k^R], the RoPE key shared by heads
            q = torch.cat([q_content, q_rope], dim=-1)  # (batch, h, q_len, d_k + d_R)
            shared = rope_key[:, None].expand(-1, h, -1, -1)  # (batch, h, k_len, d_R)
            k = torch.cat([k, shared], dim=-1)  # (batch, h, k_len, d_k + d_R)
        p = self.dropout.p if self.dropout.training else 0.0
        if not need_weights and p == 0.0:  # the fused kernel; scale 1/sqrt(d_k + d_R)
            return scaled_dot_product_attention_unchecked(q, k, v, mask, need_weights=False)
        context, weights = scaled_dot_product_attention_unchecked(q, k, v, mask)
        if p > 0.0:
            weights = self.dropout(weights)  # (batch, h, q_len, k_len), E[dropped] = weights
            context = weights @ v  # (batch, h, q_len, d_k)
        return context, weights

    def _attend_absorbed(
        self, q_content: Tensor, q_rope: Tensor | None, latent: Tensor, rope_key: Tensor,
        mask: Tensor | None, need_weights: bool,
    ) -> tuple[Tensor, Tensor]:
        """Attend against the latent: ``W_UK`` on the query side, ``W_UV`` after the weights.

        Every head reads the same latents and RoPE keys, so the heads stack into one
        matrix of ``h * q_len`` query rows (as in multi-query attention): one matrix
        product per sequence, and the cached tensors are never copied per head.
        """
        batch, h, q_len, _ = q_content.shape
        d_k, d_c = self.head_dim, self.latent_dim
        w_uk = self.w_uk.weight.reshape(h, d_k, d_c)  # (h, d_k, d_c): head i is W_UK,iᵀ
        q_latent = q_content @ w_uk  # (batch, h, q_len, d_c): q^C_i W_UK,iᵀ
        rows = q_latent.reshape(batch, h * q_len, d_c)  # (batch, h q_len, d_c): heads stacked
        # S = (q^C W_UKᵀ) cᵀ + q^R k^Rᵀ, every head against the same latents and RoPE keys
        scores = rows @ latent.transpose(1, 2)  # (batch, h q_len, k_len)
        if q_rope is not None:
            rope_rows = q_rope.reshape(batch, h * q_len, -1)  # (batch, h q_len, d_R)
            scores = scores + rope_rows @ rope_key.transpose(1, 2)  # (batch, h q_len, k_len)
        scores = scores.reshape(batch, h, q_len, -1) * self.scale  # (batch, h, q_len, k_len)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))  # (batch, h, q_len, k_len)
            else:
                scores = scores + mask  # (batch, h, q_len, k_len)
        weights = torch.softmax(scores, dim=-1)  # (batch, h, q_len, k_len)
        if mask is not None:  # a query that may attend to nothing: zeros, not NaN
            weights = weights.masked_fill(fully_masked_rows(mask), 0.0)
        weights = self.dropout(weights)  # identity in eval mode or with p = 0
        stacked = weights.reshape(batch, h * q_len, -1)  # (batch, h q_len, k_len)
        context_latent = stacked @ latent  # (batch, h q_len, d_c): sum_j a_j c_j per head
        context_latent = context_latent.reshape(batch, h, q_len, d_c)  # (batch, h, q_len, d_c)
        w_uv = self.w_uv.weight.reshape(h, d_k, d_c).transpose(1, 2)  # (h, d_c, d_k): W_UV,i
        context = context_latent @ w_uv  # (batch, h, q_len, d_k)
        if not bool(torch.isfinite(context).all()):
            raise ValueError(
                f"query, key: the attention scores overflowed (scores shape "
                f"{shape_of(scores)}, dtype {scores.dtype}); scale the inputs down"
            )
        return context, weights

    def extra_repr(self) -> str:
        names = ("d_model", "num_heads", "head_dim", "latent_dim", "rope_dim", "q_latent_dim",
                 "causal", "absorb")
        settings = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{settings}, dropout={self.dropout.p}"


def _add_causal(mask: Tensor | None, q_len: int, k_len: int, like: Tensor) -> Tensor:
    """AND a bottom-right aligned causal mask ``(q_len, k_len)`` into ``mask``."""
    causal = causal_mask(q_len, k_len, like=like)  # (q_len, k_len), True = may attend
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return combine_masks(mask, causal)
    return mask + to_additive_mask(causal, mask.dtype)  # broadcast to (..., q_len, k_len)


def _checked_inputs(
    layer: MultiHeadLatentAttention, query: Any, key: Any, value: Any, mask: Any, kv_cache: Any
) -> tuple[Tensor, Tensor, Tensor | None, bool]:
    """Check the arguments of :meth:`MultiHeadLatentAttention.forward`; return ``(query, key,
    mask, unbatched)`` ready for :meth:`MultiHeadLatentAttention.attend`."""
    if layer.rope_dim and key is not None:
        raise ValueError(
            f"key: rope_dim={layer.rope_dim} places tokens of one sequence; pass key=None "
            "(self-attention)"
        )
    if value is not None and value is not key:
        raise ValueError(
            "value: multi-head latent attention rebuilds keys and values from one latent of "
            f"the key tokens; pass value=None (got a tensor of shape {shape_of(value)})"
            if is_tensor(value) else
            f"value: expected None (values come from the keys' latent), got {type(value).__name__}"
        )
    key = query if key is None else key
    query, key, _, unbatched = check_attention_inputs(
        query, key, key, layer.d_model, layer.w_dkv.weight
    )  # each (batch, len, d_model)
    batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
    if kv_cache is not None:
        check_latent_cache(kv_cache, layer.latent_dim, layer.rope_dim, shape_of(query))
        k_len += len(kv_cache)
    if mask is not None:
        mask = as_head_mask(mask, query, (batch, layer.num_heads, q_len, k_len))
    return query, key, mask, unbatched
