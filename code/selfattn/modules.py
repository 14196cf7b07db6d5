"""The attention layers under their old module name: see :mod:`selfattn.layers`.

Kept so that ``from selfattn.modules import MultiHeadAttention`` (in readers'
copied code and in the chapters) keeps working; new code imports from
:mod:`selfattn.layers`, or from :mod:`selfattn` directly.
"""

from selfattn.kv_cache import KVCache
from selfattn.layers import (
    CausalSelfAttention,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    SelfAttention,
    merge_heads,
    split_heads,
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
