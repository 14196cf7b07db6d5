"""selfattn: self-attention, verified."""

# --- book helpers: worked-example inputs, tables and figures (submodules) ---
from selfattn import examples, language_model, plotting

# --- similarity, softmax, attention, masks (core numerics) ---
from selfattn.attention import (
    attention_scores,
    scaled_dot_product_attention,
    simple_self_attention,
)
from selfattn.block import BlockConfig, TransformerBlock
from selfattn.data import CharTokenizer, MarkovSource, batches, fit_bigram
from selfattn.feedforward import SwiGLU, swiglu_width
from selfattn.grouped import GroupedQueryAttention
from selfattn.kernel_regression import (
    gaussian_kernel_scores,
    gaussian_key_bias,
    nadaraya_watson,
)
from selfattn.kv_cache import KVCache, RollingKVCache, kv_cache_bytes
from selfattn.language_model import LMConfig, TinyLM, evaluate_perplexity
from selfattn.latent import (
    LatentAttentionConfig,
    LatentKVCache,
    MultiHeadLatentAttention,
    latent_cache_bytes,
)
from selfattn.layers import (
    CausalSelfAttention,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    SelfAttention,
    merge_heads,
    split_heads,
)
from selfattn.masks import (
    causal_mask,
    combine_masks,
    key_padding_to_attention_mask,
    padding_mask,
    sliding_window_mask,
    to_additive_mask,
    to_blocked_mask,
    window_mask_from_positions,
)
from selfattn.normalization import RMSNorm, make_norm
from selfattn.perplexity import (
    bits_per_token,
    negative_log_likelihood,
    perplexity,
    token_nll,
)
from selfattn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    rotary_angles,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)
from selfattn.similarity import (
    additive_scores,
    cosine_similarity,
    dot_similarity,
    scaled_dot_similarity,
)
from selfattn.softmax import log_softmax, softmax
from selfattn.tiled import attention_full, online_softmax, peak_memory, tiled_attention
from selfattn.training import learning_rate_schedule, train_language_model

# The training loop lived in language_model before it had a module of its own: old imports
# (`from selfattn.language_model import train_language_model`, in chapters and readers' code)
# still find it there. Bound here because selfattn.training imports selfattn.language_model.
language_model.train_language_model = train_language_model
language_model.learning_rate_schedule = learning_rate_schedule

__all__ = [
    # attention
    "attention_scores",
    "scaled_dot_product_attention",
    "simple_self_attention",
    # block (the transformer block)
    "BlockConfig",
    "TransformerBlock",
    # data (synthetic Markov language, tokenizer, batches)
    "CharTokenizer",
    "MarkovSource",
    "batches",
    "fit_bigram",
    # examples (submodule: the worked-example inputs)
    "examples",
    # feedforward (the gated MLP of modern blocks)
    "SwiGLU",
    "swiglu_width",
    # grouped (MultiHeadAttention under its grouped-query name)
    "GroupedQueryAttention",
    # kernel_regression (Nadaraya–Watson: attention as kernel regression)
    "gaussian_kernel_scores",
    "gaussian_key_bias",
    "nadaraya_watson",
    # kv_cache (keys and values kept for generation)
    "KVCache",
    "RollingKVCache",
    "kv_cache_bytes",
    # language_model (tiny decoder-only transformer)
    "LMConfig",
    "TinyLM",
    "evaluate_perplexity",
    # latent (multi-head latent attention: keys and values rebuilt from a cached latent)
    "LatentAttentionConfig",
    "LatentKVCache",
    "MultiHeadLatentAttention",
    "latent_cache_bytes",
    # layers (torch attention layers; the old name selfattn.modules re-exports them)
    "CausalSelfAttention",
    "MultiHeadAttention",
    "MultiHeadAttentionConfig",
    "SelfAttention",
    "merge_heads",
    "split_heads",
    # masks
    "causal_mask",
    "combine_masks",
    "key_padding_to_attention_mask",
    "padding_mask",
    "sliding_window_mask",
    "to_additive_mask",
    "to_blocked_mask",
    "window_mask_from_positions",
    # normalization (RMSNorm; LayerNorm or RMSNorm by name)
    "RMSNorm",
    "make_norm",
    # perplexity
    "bits_per_token",
    "negative_log_likelihood",
    "perplexity",
    "token_nll",
    # plotting (submodule: tables and figures)
    "plotting",
    # positional
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "rotary_angles",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    # similarity
    "additive_scores",
    "cosine_similarity",
    "dot_similarity",
    "scaled_dot_similarity",
    # softmax
    "log_softmax",
    "softmax",
    # tiled (online softmax, memory O(L))
    "attention_full",
    "online_softmax",
    "peak_memory",
    "tiled_attention",
    # training (the training loop of TinyLM)
    "learning_rate_schedule",
    "train_language_model",
]
