"""PyTorch's own layers and the book's: copy the parameters across.

* ``torch.nn.MultiheadAttention`` -> :class:`~nn.Module`
  (:func:`copy_attention_from_torch`, :func:`attention_from_torch`);
* ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` ->
  :class:`~nn.Module` (:func:`copy_block_from_torch`,
  :func:`block_settings_from_torch`).

The tests check that each pair then gives the same outputs. The layers expose
these as methods too: ``MultiHeadAttention.from_torch(module)``,
``layer.copy_from_torch(module)``, ``TransformerBlock.from_torch(layer)``.
This module imports neither layer (they import it): the book's layers are
annotated ``nn.Module`` here and named in each docstring.

**The weight layout.** ``torch.nn.MultiheadAttention`` packs the three input
projections into ``in_proj_weight`` of shape ``(3 * d_model, d_model)``: rows
``[0, d)`` are W_Q, ``[d, 2d)`` W_K and ``[2d, 3d)`` W_V, each stored like an
``nn.Linear`` weight (``x @ W.T``), exactly as ``w_q.weight`` is in the book's
layer; likewise ``in_proj_bias`` and ``out_proj``. A transformer layer's
parameters map by name: ``self_attn -> attn``, ``multihead_attn ->
cross_attn``, ``linear1 -> mlp[0]``, ``linear2 -> mlp[2]``; for an encoder
layer ``norm1 -> ln1`` and ``norm2 -> ln2``; for a decoder layer ``norm1 ->
ln1``, ``norm2 -> ln_cross`` and ``norm3 -> ln2``.

Bad input raises ``TypeError`` (not the expected torch module) or
``ValueError`` (a size or setting that differs; the message names it).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "attention_from_torch",
    "block_settings_from_torch",
    "copy_attention_from_torch",
    "copy_block_from_torch",
]

def _check_attention_module(module: Any) -> None:
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(
            f"module: expected torch.nn.MultiheadAttention, got {type(module).__name__}"
        )


def _check_transformer_layer(layer: Any) -> None:
    if not isinstance(layer, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        raise TypeError(
            "layer: expected torch.nn.TransformerEncoderLayer or TransformerDecoderLayer, "
            f"got {type(layer).__name__}"
        )


# ---------------------------------------------------------------- multi-head attention
@torch.no_grad()
def copy_attention_from_torch(
    layer: nn.Module, module: nn.MultiheadAttention
) -> nn.Module:
    """Copy the parameters of a ``torch.nn.MultiheadAttention`` into ``layer``.

    Use the torch module with ``batch_first=True`` to compare outputs; the
    parameters do not depend on that flag.

    Args:
        layer: a :class:`~nn.Module` with the default
            ``head_dim = d_model // num_heads`` (torch has no other), as many
            key/value heads as heads, no ``positional`` option, no QK-norm and no
            soft-capping.
        module: ``nn.MultiheadAttention`` with ``embed_dim == d_model``, the
            same ``num_heads``, the same use of biases, no ``kdim``/``vdim``
            and no ``add_bias_kv``.

    Returns:
        ``layer`` (parameters overwritten in place, dtype/device kept).

    Raises:
        TypeError: ``module`` is not an ``nn.MultiheadAttention``.
        ValueError: sizes, heads or bias usage differ, or unsupported options.
    """
    _check_attention_module(module)
    if module.embed_dim != layer.d_model or module.num_heads != layer.num_heads:
        raise ValueError(
            f"module: expected embed_dim={layer.d_model}, num_heads={layer.num_heads}, got "
            f"embed_dim={module.embed_dim}, num_heads={module.num_heads}"
        )
    if layer.inner_dim != layer.d_model:
        raise ValueError(
            f"module: torch.nn.MultiheadAttention always uses head_dim = embed_dim / "
            f"num_heads = {module.head_dim}, but this layer has head_dim={layer.head_dim} "
            f"(num_heads * head_dim = {layer.inner_dim}, d_model = {layer.d_model})"
        )
    if layer.num_kv_heads != layer.num_heads or layer.positional is not None:
        raise ValueError(
            f"module: torch.nn.MultiheadAttention has as many key/value heads as heads and no "
            f"positions inside attention, but this layer has num_kv_heads={layer.num_kv_heads} "
            f"and positional={layer.positional!r}"
        )
    if getattr(layer, "qk_norm", False) or getattr(layer, "softcap", None) is not None:
        raise ValueError(
            f"module: torch.nn.MultiheadAttention has no QK-norm and no soft-capping, but this "
            f"layer has qk_norm={layer.qk_norm} and softcap={layer.softcap}"
        )
    if not module._qkv_same_embed_dim:
        raise ValueError(
            f"module: kdim={module.kdim}/vdim={module.vdim} differ from embed_dim="
            f"{module.embed_dim}; separate key/value widths are not supported"
        )
    if module.bias_k is not None or module.bias_v is not None:
        raise ValueError("module: add_bias_kv=True is not supported")
    has_bias = module.in_proj_bias is not None
    if has_bias != (layer.w_q.bias is not None):
        raise ValueError(
            f"module: bias={has_bias} but this layer has bias={layer.w_q.bias is not None}"
        )
    d = layer.d_model
    w = module.in_proj_weight  # (3*d_model, d_model)
    for i, lin in enumerate((layer.w_q, layer.w_k, layer.w_v)):
        lin.weight.copy_(w[i * d : (i + 1) * d])  # (d_model, d_model), x @ W.T
        if has_bias:
            lin.bias.copy_(module.in_proj_bias[i * d : (i + 1) * d])  # (d_model,)
    layer.w_o.weight.copy_(module.out_proj.weight)  # (d_model, d_model)
    if has_bias:
        layer.w_o.bias.copy_(module.out_proj.bias)  # (d_model,)
    return layer


def attention_from_torch(
    cls: type[nn.Module], module: nn.MultiheadAttention, *,
    causal: bool = False, use_fused: bool = False,
) -> nn.Module:
    """A new ``cls`` layer holding a copy of ``module``'s parameters (dtype and device too).

    ``dropout`` and ``bias`` are taken from ``module``; ``causal`` must be given
    here because torch passes causality per call (``attn_mask``/``is_causal``).

    Args:
        cls: :class:`~nn.Module` or a subclass.
        module: see :func:`copy_attention_from_torch`.
        causal, use_fused: settings of the new layer.
    """
    _check_attention_module(module)
    layer = cls(d_model=module.embed_dim, num_heads=module.num_heads, dropout=module.dropout,
                bias=module.in_proj_bias is not None, causal=causal, use_fused=use_fused)
    ref = module.in_proj_weight if module._qkv_same_embed_dim else module.q_proj_weight
    layer.to(dtype=ref.dtype, device=ref.device)
    return copy_attention_from_torch(layer, module)


# ---------------------------------------------------------------- transformer blocks
def _activation_name(act: Any) -> str | None:
    """``"relu"``/``"gelu"`` for PyTorch's activation function or module, else None."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    return None


def block_settings_from_torch(
    layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
) -> dict[str, Any]:
    """The :class:`~selfattn.block.BlockConfig` fields that describe ``layer``.

    Returns:
        ``d_model``, ``num_heads``, ``d_ff``, ``dropout``, ``norm_first``,
        ``activation``, ``cross_attention`` (True for a decoder layer) and
        ``layer_norm_eps``; ``causal`` is not among them (PyTorch passes it per
        call).

    Raises:
        TypeError: ``layer`` is neither layer type.
        ValueError: an activation other than ReLU or exact GELU.
    """
    _check_transformer_layer(layer)
    activation = _activation_name(layer.activation)
    if activation is None:
        raise ValueError(
            f"layer: activation {layer.activation!r} is not supported (expected relu or gelu)"
        )
    return {
        "d_model": layer.linear1.in_features,
        "num_heads": layer.self_attn.num_heads,
        "d_ff": layer.linear1.out_features,
        "dropout": float(layer.dropout.p),
        "norm_first": bool(layer.norm_first),
        "activation": activation,
        "cross_attention": isinstance(layer, nn.TransformerDecoderLayer),
        "layer_norm_eps": float(layer.norm1.eps),
    }


def copy_block_from_torch(
    block: nn.Module,
    layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
) -> nn.Module:
    """Copy the parameters of a PyTorch encoder or decoder layer into ``block``.

    Args:
        block: a :class:`~nn.Module` with plain multi-head
            self-attention (no ``num_kv_heads``, ``positional``, ``qk_norm`` or
            ``softcap``), LayerNorms and a GELU or ReLU MLP.
        layer: ``nn.TransformerEncoderLayer`` (for a block without
            cross-attention) or ``nn.TransformerDecoderLayer`` (with it), of
            the same width, heads, MLP width, ``norm_first`` and activation.

    Returns:
        ``block``, parameters overwritten in place.

    Raises:
        TypeError: ``layer`` is neither layer type.
        ValueError: any setting differs (the message names it).
    """
    _check_transformer_layer(layer)
    decoder = isinstance(layer, nn.TransformerDecoderLayer)
    cfg = block.config
    if not cfg.plain_attention:
        raise ValueError(
            "layer: PyTorch's layers have plain multi-head attention; this block has "
            f"num_kv_heads={cfg.num_kv_heads}, positional={cfg.positional!r}, "
            f"qk_norm={cfg.qk_norm}, softcap={cfg.softcap}"
        )
    seen = {
        "cross_attention": decoder,
        "d_model": layer.linear1.in_features,
        "num_heads": layer.self_attn.num_heads,
        "d_ff": layer.linear1.out_features,
        "norm_first": layer.norm_first,
        "activation": _activation_name(layer.activation) or repr(layer.activation),
        "norm": "layernorm",  # PyTorch's layers have LayerNorms only
    }
    want = {"cross_attention": cfg.cross_attention, "d_model": cfg.d_model,
            "num_heads": cfg.num_heads, "d_ff": cfg.ff_dim, "norm_first": cfg.norm_first,
            "activation": cfg.activation, "norm": cfg.norm}
    for name, value in seen.items():
        if value != want[name]:
            raise ValueError(
                f"layer: its {name} is {value!r} but this block has {name}={want[name]!r}"
            )
    copy_attention_from_torch(block.attn, layer.self_attn)
    norms = [(layer.norm1, block.ln1), (layer.norm2, block.ln2)]
    if decoder:
        copy_attention_from_torch(block.cross_attn, layer.multihead_attn)
        norms = [(layer.norm1, block.ln1), (layer.norm2, block.ln_cross),
                 (layer.norm3, block.ln2)]
    block.mlp[0].load_state_dict(layer.linear1.state_dict())
    block.mlp[2].load_state_dict(layer.linear2.state_dict())
    for theirs, ours in norms:
        ours.load_state_dict(theirs.state_dict())
    return block
