"""The transformer block: attention and an MLP around a residual stream.

A block reads the **residual stream** ``x`` (one ``d_model`` vector per token)
and adds to it what each sublayer computes; nothing is overwritten. With
``norm_first=True`` (**pre-LN**, GPT-2 and most models since)::

    x = x + Dropout(SelfAttention(LN1(x)))                  tokens read each other
    x = x + Dropout(CrossAttention(LN_cross(x), memory))    only with cross_attention=True
    x = x + Dropout(MLP(LN2(x)))                            each token on its own

and with ``norm_first=False`` (**post-LN**, the original transformer) the
LayerNorm comes after each addition: ``x = LN1(x + Dropout(SelfAttention(x)))``
and so on. The MLP is ``Linear(d_model, d_ff) -> GELU or ReLU -> Linear(d_ff,
d_model)``. With ``attention_only=True`` the block has no MLP sublayer (and no
LN2): the attention-only blocks in which circuits such as induction heads are
studied.

**Modern options** (all off by default): ``norm="rmsnorm"`` puts an
:class:`~selfattn.normalization.RMSNorm` wherever a LayerNorm was;
``activation="swiglu"`` replaces the MLP by a
:class:`~selfattn.feedforward.SwiGLU` (``d_ff`` then defaults to
:func:`~selfattn.feedforward.swiglu_width`, the width with as many weights as
the ``4 * d_model`` MLP); ``qk_norm`` and ``softcap`` go to every attention
sublayer of the block (:class:`~selfattn.layers.MultiHeadAttention`).

With ``cross_attention=True`` the block is a decoder block of an
encoder-decoder model: its second sublayer takes **queries from** ``x`` and
**keys and values from** ``memory``, the encoder's output. ``causal=True``
masks the future in the self-attention only; the memory is a different
sequence, so the cross-attention is never causal, and a memory padding mask
keeps queries away from the source's padding tokens.

With ``latent_dim`` set the self-attention is multi-head latent attention
(:class:`~selfattn.latent.MultiHeadLatentAttention`): its KV cache holds one
latent of ``latent_dim`` numbers and, with ``positional="rope"``, one RoPE key
of ``latent_rope`` numbers per token, shared by every head.

:meth:`TransformerBlock.from_torch` copies the parameters of a
``torch.nn.TransformerEncoderLayer`` or ``torch.nn.TransformerDecoderLayer``
(``batch_first=True``); the tests check that both then give the same outputs.

Shape legend: ``batch`` sequences, ``L`` (seq_len) tokens of ``x``,
``k_len`` tokens of ``memory``, ``d_model`` width.

Bad input raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (bad
settings, wrong shapes, ``memory`` missing for a cross-attention block or
given to a block without one); messages name the argument, the shape seen and
the shape expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from selfattn import torch_interop
from selfattn._checks import (
    as_batched,
    as_head_mask,
    check_dropout,
    check_layer_input,
    check_positive_int,
    check_softcap,
    check_window,
    shape_of,
)
from selfattn.feedforward import SwiGLU, swiglu_width
from selfattn.kv_cache import KVCache, check_kv_cache
from selfattn.latent import LatentKVCache, MultiHeadLatentAttention, check_latent_cache
from selfattn.layers import MultiHeadAttention
from selfattn.normalization import make_norm

__all__ = ["BlockConfig", "TransformerBlock"]

_ACTIVATIONS = ("gelu", "relu", "swiglu")
_NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class BlockConfig:
    """Settings of a :class:`TransformerBlock` (validated on creation)."""

    d_model: int  # width of the residual stream: every token is a d_model vector
    num_heads: int  # h, attention heads; head_dim = d_model // num_heads
    d_ff: int | None = None  # hidden width of the MLP; None means 4 * d_model
    dropout: float = 0.0  # drop probability on attention weights and on each sublayer's output
    norm_first: bool = True  # True: pre-LN, x + f(LN(x)); False: post-LN, LN(x + f(x))
    activation: str = "gelu"  # the MLP's nonlinearity: "gelu" (exact, erf), "relu" or
    # "swiglu" (the gated MLP (SiLU(x W_1) * x W_3) W_2 instead of the two-matrix one)
    causal: bool = False  # self-attention looks back only (a decoder); memory is never masked so
    cross_attention: bool = False  # add a sublayer attending from x to an encoder's memory
    layer_norm_eps: float = 1e-5  # the epsilon of every LayerNorm/RMSNorm (PyTorch's default)
    num_kv_heads: int | None = None  # key/value heads of the self-attention; None: num_heads
    positional: str | None = None  # position inside self-attention: None, "rope" or "alibi"
    window: int | None = None  # sliding window of the self-attention (needs causal); None: off
    attention_only: bool = False  # True: no MLP sublayer (and no LN2), attention alone
    norm: str = "layernorm"  # the normalisation layers: "layernorm" (γ, β) or "rmsnorm" (γ)
    qk_norm: bool = False  # every attention: RMSNorm each head's queries and keys (QK-norm)
    softcap: float | None = None  # every attention: scores -> c tanh(scores / c), c = softcap
    latent_dim: int | None = None  # d_c: multi-head latent attention (MLA) caching a d_c-wide
    # latent per token instead of keys and values; None: ordinary multi-head attention
    latent_q_dim: int | None = None  # d_c', MLA's query latent; None: queries straight from x
    latent_rope_dim: int | None = None  # d_R, MLA's decoupled RoPE key width (positional="rope");
    # None: head_dim // 2

    def __post_init__(self) -> None:
        check_positive_int("d_model", self.d_model)
        check_positive_int("num_heads", self.num_heads)
        if self.d_ff is not None:
            check_positive_int("d_ff", self.d_ff)
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"num_heads: num_heads={self.num_heads} does not divide d_model={self.d_model}"
            )
        check_dropout(self.dropout)
        if self.activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation: expected one of {_ACTIVATIONS}, got {self.activation!r}"
            )
        for name in ("norm_first", "causal", "cross_attention", "attention_only", "qk_norm"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
        if not (isinstance(self.layer_norm_eps, float) and self.layer_norm_eps > 0):
            raise ValueError(f"layer_norm_eps: expected a float > 0, got {self.layer_norm_eps!r}")
        if self.num_kv_heads is not None:
            check_positive_int("num_kv_heads", self.num_kv_heads)
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads: num_kv_heads={self.num_kv_heads} does not divide "
                    f"num_heads={self.num_heads}"
                )
        if self.positional not in (None, "rope", "alibi"):
            raise ValueError(
                f"positional: expected None, 'rope' or 'alibi', got {self.positional!r}"
            )
        check_window(self.window, self.causal)
        if self.norm not in _NORMS:
            raise ValueError(f"norm: expected one of {_NORMS}, got {self.norm!r}")
        object.__setattr__(self, "softcap", check_softcap(self.softcap))
        self._check_latent()

    def _check_latent(self) -> None:
        """The multi-head latent attention settings agree with the others."""
        if self.latent_dim is None:
            for name in ("latent_q_dim", "latent_rope_dim"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: set latent_dim too (it is a setting of multi-head latent "
                        f"attention), got {name}={getattr(self, name)!r} with latent_dim=None"
                    )
            return
        check_positive_int("latent_dim", self.latent_dim)
        if self.latent_q_dim is not None:
            check_positive_int("latent_q_dim", self.latent_q_dim)
        if self.num_kv_heads not in (None, self.num_heads):
            raise ValueError(
                f"num_kv_heads: multi-head latent attention rebuilds a key and a value for every "
                f"head from the latent; leave num_kv_heads=None, got {self.num_kv_heads} with "
                f"latent_dim={self.latent_dim}"
            )
        for name, value in (("qk_norm", self.qk_norm), ("softcap", self.softcap)):
            if value not in (False, None):
                raise ValueError(
                    f"{name}: multi-head latent attention here has no QK-norm or soft-cap; "
                    f"got {name}={value!r} with latent_dim={self.latent_dim}"
                )
        if self.window is not None:
            raise ValueError(
                f"window: multi-head latent attention has no sliding window here (its cache "
                f"keeps every token's latent); got window={self.window} with "
                f"latent_dim={self.latent_dim}"
            )
        if self.positional not in (None, "rope"):
            raise ValueError(
                f"positional: multi-head latent attention takes positions through its decoupled "
                f"RoPE key (positional='rope') or none (None), got {self.positional!r}"
            )
        if self.positional is None and self.latent_rope_dim is not None:
            raise ValueError(
                f"latent_rope_dim: the decoupled RoPE key needs positional='rope', got "
                f"latent_rope_dim={self.latent_rope_dim} with positional=None"
            )
        if self.positional == "rope":
            rope = self.latent_rope
            if isinstance(rope, bool) or not isinstance(rope, int) or rope <= 0 or rope % 2:
                given = "" if self.latent_rope_dim is not None else (
                    f" (the default head_dim // 2, head_dim = {self.d_model // self.num_heads})")
                raise ValueError(
                    f"latent_rope_dim: RoPE rotates column pairs and needs a positive even "
                    f"width, got {rope!r}{given}; pass an even latent_rope_dim"
                )

    @property
    def plain_attention(self) -> bool:
        """True when the self-attention is ordinary multi-head attention (no GQA, RoPE,
        ALiBi, QK-norm, soft-capping or latent attention)."""
        return (self.positional is None and self.num_kv_heads in (None, self.num_heads)
                and not self.qk_norm and self.softcap is None and self.latent_dim is None)

    @property
    def latent_rope(self) -> int:
        """The width d_R of the latent attention's RoPE key, 0 without RoPE, else
        ``latent_rope_dim`` (default ``head_dim // 2``)."""
        if self.positional != "rope":
            return 0
        if self.latent_rope_dim is not None:
            return self.latent_rope_dim
        return self.d_model // self.num_heads // 2

    @property
    def ff_dim(self) -> int:
        """The MLP hidden width actually used, ``d_ff`` or by default ``4 * d_model``
        (for SwiGLU :func:`~selfattn.feedforward.swiglu_width`, as many weights)."""
        if self.d_ff is not None:
            return self.d_ff
        return swiglu_width(self.d_model) if self.activation == "swiglu" else 4 * self.d_model


class TransformerBlock(nn.Module):
    """One transformer block on the residual stream (see the module docstring).

    Args:
        config: a :class:`BlockConfig`, or a model configuration with a
            ``block_config()`` method returning one (such as
            :class:`selfattn.language_model.LMConfig`, whose blocks are pre-LN,
            GELU, causal or not).

    Attributes:
        ln1, attn: LayerNorm (or RMSNorm, ``norm="rmsnorm"``) and
            :class:`~selfattn.layers.MultiHeadAttention` of the self-attention
            sublayer (with the config's ``num_kv_heads``, ``positional``,
            ``window``, ``qk_norm`` and ``softcap``), or with ``latent_dim`` a
            :class:`~selfattn.latent.MultiHeadLatentAttention` (its ``rope_dim``
            is ``latent_rope`` and it has no ``num_kv_heads``, ``window``,
            ``qk_norm`` or ``softcap``).
        ln_cross, cross_attn: the cross-attention sublayer (only with
            ``cross_attention=True``).
        ln2, mlp: LayerNorm (or RMSNorm) and ``nn.Sequential(Linear, GELU/ReLU,
            Linear)``, or a :class:`~selfattn.feedforward.SwiGLU` with
            ``activation="swiglu"`` (both absent with ``attention_only=True``).
        drop: dropout on each sublayer's output.

    Raises:
        TypeError: ``config`` is neither a :class:`BlockConfig` nor has ``block_config()``.
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        if not isinstance(config, BlockConfig):
            to_block = getattr(config, "block_config", None)
            if to_block is None:
                raise TypeError(
                    f"config: expected a BlockConfig (or an LMConfig), got {type(config).__name__}"
                )
            config = to_block()
        self.config = config
        d, eps = config.d_model, config.layer_norm_eps
        # creation order fixes which random numbers each weight gets: keep it
        self.ln1 = make_norm(config.norm, d, eps)
        stable = {"qk_norm": config.qk_norm, "softcap": config.softcap}  # default: both off
        self.attn: MultiHeadAttention | MultiHeadLatentAttention
        if config.latent_dim is None:
            self.attn = MultiHeadAttention(
                d, config.num_heads, dropout=config.dropout, causal=config.causal,
                num_kv_heads=config.num_kv_heads, positional=config.positional,
                window=config.window, **stable,
            )
        else:  # multi-head latent attention: its cache holds latent_dim + latent_rope numbers
            self.attn = MultiHeadLatentAttention(
                d, config.num_heads, config.latent_dim, rope_dim=config.latent_rope,
                q_latent_dim=config.latent_q_dim, dropout=config.dropout, causal=config.causal,
            )
        if config.cross_attention:
            self.ln_cross = make_norm(config.norm, d, eps)
            self.cross_attn = MultiHeadAttention(d, config.num_heads, dropout=config.dropout,
                                                 **stable)
        if not config.attention_only:  # an attention-only block has neither ln2 nor mlp
            self.ln2 = make_norm(config.norm, d, eps)
            if config.activation == "swiglu":
                self.mlp: nn.Module = SwiGLU(d, config.ff_dim)
            else:
                act = nn.GELU() if config.activation == "gelu" else nn.ReLU()
                self.mlp = nn.Sequential(nn.Linear(d, config.ff_dim), act,
                                         nn.Linear(config.ff_dim, d))
        self.drop = nn.Dropout(config.dropout)

    # -- the three sublayers, each returning what is added to the stream --------
    def _self_attention(
        self, x: Tensor, mask: Any, kv_cache: KVCache | LatentKVCache | None
    ) -> Tensor:
        out, _ = self.attn.attend(x, x, x, mask, need_weights=False, kv_cache=kv_cache)
        return self.drop(out)  # (batch, L, d_model)

    def _cross_attention(self, x: Tensor, memory: Tensor, memory_mask: Any) -> Tensor:
        # queries from x (batch, L, d_model); keys and values from memory (batch, k_len, d_model)
        out, _ = self.cross_attn.attend(x, memory, memory, memory_mask, need_weights=False)
        return self.drop(out)  # (batch, L, d_model)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.drop(self.mlp(x))  # (batch, L, d_model)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Any = None,
        memory_mask: Any = None,
        kv_cache: KVCache | LatentKVCache | None = None,
    ) -> Tensor:
        """Run the block on the residual stream ``x``.

        Args:
            x: ``(batch, L, d_model)`` float tensor.
            memory: ``(batch, k_len, d_model)``, the sequence the cross-attention
                reads (required with ``cross_attention=True``, forbidden without).
            mask: optional self-attention mask as in
                :meth:`selfattn.layers.MultiHeadAttention.forward` (True = may
                attend), e.g. ``key_padding_to_attention_mask(pad)``
                ``(batch, 1, 1, L)``; ANDed with the causal mask.
            memory_mask: optional cross-attention mask broadcastable to
                ``(batch, num_heads, L, k_len)``, usually the source padding
                ``key_padding_to_attention_mask(source_pad)`` ``(batch, 1, 1, k_len)``.
            kv_cache: optional :class:`~selfattn.kv_cache.KVCache` for the
                self-attention (incremental decoding); a
                :class:`~selfattn.latent.LatentKVCache` with ``latent_dim``.

        Returns:
            ``(batch, L, d_model)``, the updated residual stream.

        Raises:
            TypeError: ``x``/``memory`` not float tensors of the parameters' dtype.
            ValueError: wrong shapes, or ``memory`` missing / unexpected.
        """
        x, memory, mask, memory_mask, unbatched = _checked_inputs(
            self, x, memory, mask, memory_mask, kv_cache
        )
        x = self.update(x, memory, mask=mask, memory_mask=memory_mask, kv_cache=kv_cache)
        return x.squeeze(0) if unbatched else x  # (batch, L, d_model)

    def update(
        self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None,
        memory_mask: Tensor | None = None, kv_cache: KVCache | LatentKVCache | None = None,
    ) -> Tensor:
        """:meth:`forward` on checked, batched inputs: the block itself, no checks.

        ``x`` ``(batch, L, d_model)``, ``memory`` ``(batch, k_len, d_model)`` and
        the masks as tensors ready for
        :meth:`~selfattn.layers.MultiHeadAttention.attend`; a model that checked
        its own input (:class:`~selfattn.language_model.TinyLM`) calls this for
        every block.
        """
        if self.config.norm_first:  # pre-LN: x + f(LN(x)); the stream itself is never normalised
            x = x + self._self_attention(self.ln1(x), mask, kv_cache)
            if self.config.cross_attention:
                x = x + self._cross_attention(self.ln_cross(x), memory, memory_mask)
            if self.config.attention_only:  # no MLP: the stream after the attention
                return x  # (batch, L, d_model)
            return x + self._feed_forward(self.ln2(x))  # (batch, L, d_model)
        # post-LN: LN(x + f(x)); every sublayer's output passes through a LayerNorm
        x = self.ln1(x + self._self_attention(x, mask, kv_cache))
        if self.config.cross_attention:
            x = self.ln_cross(x + self._cross_attention(x, memory, memory_mask))
        if self.config.attention_only:
            return x  # (batch, L, d_model)
        return self.ln2(x + self._feed_forward(x))  # (batch, L, d_model)

    # -- interoperability with PyTorch's layers: selfattn.torch_interop ------------
    def copy_from_torch(
        self, layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
    ) -> TransformerBlock:
        """Copy the parameters of a PyTorch encoder or decoder layer into this block; returns
        it (:func:`~selfattn.torch_interop.copy_block_from_torch` names the mapping)."""
        if self.config.attention_only:
            raise ValueError("layer: this block is attention-only (attention_only=True) and has "
                             "no MLP to copy the layer's linear1/linear2 into")
        return torch_interop.copy_block_from_torch(self, layer)

    @classmethod
    def from_torch(
        cls, layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer, *, causal: bool = False
    ) -> TransformerBlock:
        """A new block with the settings and a copy of the parameters of ``layer``.

        ``causal`` must be given here: PyTorch passes causality per call
        (``src_mask``/``tgt_mask``, ``is_causal``). Dropout is taken from
        ``layer.dropout.p``; dtype and device follow ``layer``.
        """
        settings = torch_interop.block_settings_from_torch(layer)
        block = cls(BlockConfig(**settings, causal=bool(causal)))
        block.to(dtype=layer.linear1.weight.dtype, device=layer.linear1.weight.device)
        return block.copy_from_torch(layer)

    def extra_repr(self) -> str:
        c = self.config
        extra = "" if c.norm == "layernorm" else f", norm={c.norm!r}"  # only when not default
        return (f"norm_first={c.norm_first}, activation={c.activation!r}, causal={c.causal}, "
                f"cross_attention={c.cross_attention}{extra}")


def _checked_inputs(
    block: TransformerBlock, x: Any, memory: Any, mask: Any, memory_mask: Any, kv_cache: Any
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None, bool]:
    """Check the arguments of :meth:`TransformerBlock.forward` once (each message says what
    is wrong); return ``(x, memory, mask, memory_mask, unbatched)`` ready for
    :meth:`TransformerBlock.update`: ``x`` and ``memory`` 3-D, the masks tensors."""
    cfg, legend = block.config, "(batch, seq_len, d_model)"
    check_layer_input("x", x, cfg.d_model, "d_model", legend, block.ln1.weight)
    if cfg.cross_attention:
        if memory is None:
            raise ValueError(
                "memory: this block has cross_attention=True and needs the encoder's output "
                f"(batch, k_len, d_model={cfg.d_model}), got None"
            )
        check_layer_input("memory", memory, cfg.d_model, "d_model", legend, block.ln1.weight)
    elif memory is not None or memory_mask is not None:
        raise ValueError(
            "memory: this block has no cross-attention sublayer (cross_attention=False); "
            "build it with BlockConfig(cross_attention=True) to attend to a memory"
        )
    source = x if memory is None else memory
    x, source, _, unbatched = as_batched(x, source, source, ("x", "memory", "memory"))
    batch, seq_len = x.shape[0], x.shape[1]
    k_len = seq_len
    if kv_cache is not None:
        check_block_cache(block, kv_cache, shape_of(x))
        k_len += len(kv_cache)
    if mask is not None:
        mask = as_head_mask(mask, x, (batch, cfg.num_heads, seq_len, k_len))
    if memory_mask is not None:
        memory_mask = as_head_mask(memory_mask, x, (batch, cfg.num_heads, seq_len,
                                                     source.shape[1]), "memory_mask")
    return x, (source if cfg.cross_attention else None), mask, memory_mask, unbatched


def check_block_cache(block: TransformerBlock, kv_cache: Any, query_shape: tuple[int, ...]) -> None:
    """``kv_cache`` fits the self-attention of ``block`` for input ``(batch, L, d_model)``:
    a :class:`~selfattn.kv_cache.KVCache` of its key/value heads, or for multi-head latent
    attention a :class:`~selfattn.latent.LatentKVCache` of its latent and RoPE widths."""
    attn = block.attn
    if isinstance(attn, MultiHeadLatentAttention):
        check_latent_cache(kv_cache, attn.latent_dim, attn.rope_dim, query_shape)
    else:
        check_kv_cache(kv_cache, attn.num_kv_heads, attn.head_dim, query_shape)
