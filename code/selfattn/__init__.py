"""selfattn: self-attention, verified."""

# --- book helpers: worked-example inputs, tables and figures (submodules) ---
from selfattn import examples, plotting

# --- similarity, softmax, attention, masks (core numerics) ---
from selfattn.attention import (
    attention_scores,
    scaled_dot_product_attention,
    simple_self_attention,
)
from selfattn.masks import (
    causal_mask,
    combine_masks,
    key_padding_to_attention_mask,
    padding_mask,
    to_additive_mask,
    to_blocked_mask,
)
from selfattn.similarity import cosine_similarity, dot_similarity, scaled_dot_similarity
from selfattn.softmax import log_softmax, softmax

__all__ = [
    # attention
    "attention_scores",
    "scaled_dot_product_attention",
    "simple_self_attention",
    # examples (submodule: the worked-example inputs)
    "examples",
    # masks
    "causal_mask",
    "combine_masks",
    "key_padding_to_attention_mask",
    "padding_mask",
    "to_additive_mask",
    "to_blocked_mask",
    # plotting (submodule: tables and figures)
    "plotting",
    # similarity
    "cosine_similarity",
    "dot_similarity",
    "scaled_dot_similarity",
    # softmax
    "log_softmax",
    "softmax",
]
