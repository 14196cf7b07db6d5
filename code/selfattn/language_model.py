"""A tiny decoder-only transformer language model and its evaluation.

:class:`TinyLM` is the smallest GPT-style model that still has every part::

    idx (batch, L) int
      -> token embedding + position encoding             (batch, L, d_model)
      -> num_layers x pre-LN block:
             x = x + Dropout(MultiHeadAttention(LayerNorm(x)))   (causal by default)
             x = x + Dropout(MLP(LayerNorm(x)))                  d_model -> d_ff -> d_model
                                                  (no MLP with attention_only=True)
      -> final LayerNorm -> linear head                  (batch, L, vocab_size) logits

``LMConfig(norm="rmsnorm")`` puts RMSNorm in every norm's place (the final one
too), ``activation="swiglu"`` gives every block the gated SwiGLU MLP, and
``qk_norm``/``softcap`` reach every attention layer; all default to the model
above.

``logits[:, t]`` scores the token at position ``t + 1``; with the causal mask
it depends only on ``idx[:, : t + 1]``. Built with ``causal=False`` the model
sees the whole window, including the very token it is asked to predict, and
learns to copy it: its training perplexity heads to 1, which says nothing
about its ability to predict (it has nothing to copy from when generating).

:func:`evaluate_perplexity` scores a token array in non-overlapping chunks or
with a sliding window; :func:`selfattn.training.train_language_model` trains
the model. It and :func:`~selfattn.training.learning_rate_schedule` lived here
before and are still importable from here: ``selfattn/__init__.py`` binds them
to this module, since ``selfattn.training`` imports this one.

Shape legend: ``batch`` sequences, ``L`` (seq_len) positions, ``d_model``
width, ``V`` (vocab_size) tokens. Token ids are integer tensors.

Bad input raises ``TypeError`` (not a tensor, non-integer ids, wrong config
type) or ``ValueError`` (wrong number of dims, ids outside ``[0, vocab_size)``,
a sequence longer than ``config.seq_len``, bad settings); messages name the
argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from selfattn._checks import (
    as_token_rows,
    check_dropout,
    check_positive_int,
    check_token_ids,
    check_token_range,
)
from selfattn.block import BlockConfig, TransformerBlock, check_block_cache
from selfattn.feedforward import swiglu_width
from selfattn.kv_cache import KVCache, RollingKVCache
from selfattn.latent import LatentKVCache
from selfattn.normalization import make_norm
from selfattn.perplexity import token_nll
from selfattn.positional import (
    LearnedPositionalEmbedding,
    NoPositionalEncoding,
    SinusoidalPositionalEncoding,
)

__all__ = ["LMConfig", "TinyLM", "evaluate_perplexity"]

_POSITIONAL = ("learned", "sinusoidal", "rope", "alibi", "none")


@dataclass(frozen=True)
class LMConfig:
    """Settings of a :class:`TinyLM` (validated on creation)."""

    vocab_size: int  # V, number of token ids (embedding rows and output logits)
    seq_len: int  # longest context in tokens (number of positions the model knows)
    d_model: int = 32  # width of every token vector
    num_heads: int = 2  # h, attention heads per block; head_dim = d_model // num_heads
    num_layers: int = 2  # number of transformer blocks
    d_ff: int | None = None  # hidden width of each block's MLP; None means 4 * d_model
    dropout: float = 0.0  # drop probability for attention weights and residual branches
    causal: bool = True  # False lets every position see the future: the model can "cheat"
    positional: str = "learned"  # "learned" (trainable table) or "sinusoidal" (fixed) added
    # to the embeddings; "rope" or "alibi" inside attention; "none": no positions at all
    num_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: num_heads
    window: int | None = None  # sliding-window attention in every block (needs causal): each
    # token sees its last `window` tokens, itself included; None: all earlier tokens
    attention_only: bool = False  # True: blocks without an MLP (attention-only, for circuits)
    norm: str = "layernorm"  # every norm of the model (blocks and final): "layernorm"/"rmsnorm"
    activation: str = "gelu"  # each block's MLP: "gelu", "relu" or "swiglu" (the gated MLP)
    qk_norm: bool = False  # every attention normalises its heads' queries and keys (QK-norm)
    softcap: float | None = None  # every attention's scores -> c tanh(scores / c), c = softcap
    latent_dim: int | None = None  # d_c: multi-head latent attention caching a d_c-wide latent
    # per token and layer (see BlockConfig); None: ordinary multi-head attention
    latent_q_dim: int | None = None  # d_c', its query latent; None: queries straight from x
    latent_rope_dim: int | None = None  # d_R, its decoupled RoPE key (positional="rope");
    # None: head_dim // 2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "num_heads", "num_layers"):
            check_positive_int(name, getattr(self, name))
        check_dropout(self.dropout)  # block_config() passes float(dropout): check the type here
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional: expected one of {_POSITIONAL}, got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"d_model: sinusoidal positions need an even d_model, got {self.d_model}"
            )
        self.block_config()  # BlockConfig checks d_ff, num_heads | d_model, num_kv_heads,
        # window, norm, activation, qk_norm and softcap (with the same messages)

    @property
    def ff_dim(self) -> int:
        """The MLP hidden width actually used, ``d_ff`` or by default ``4 * d_model``
        (for SwiGLU :func:`~selfattn.feedforward.swiglu_width`, as many weights)."""
        if self.d_ff is not None:
            return self.d_ff
        return swiglu_width(self.d_model) if self.activation == "swiglu" else 4 * self.d_model

    def block_config(self) -> BlockConfig:
        """The settings of each block: pre-norm, causal as ``causal``, no cross-attention;
        the norm, activation, QK-norm and cap of this config (default: LayerNorm, GELU, off),
        and no MLP with ``attention_only``."""
        inside = self.positional if self.positional in ("rope", "alibi") else None
        return BlockConfig(d_model=self.d_model, num_heads=self.num_heads, d_ff=self.ff_dim,
                           dropout=float(self.dropout), norm_first=True,
                           activation=self.activation, causal=self.causal,
                           num_kv_heads=self.num_kv_heads, positional=inside, window=self.window,
                           attention_only=self.attention_only,
                           norm=self.norm, qk_norm=self.qk_norm, softcap=self.softcap,
                           latent_dim=self.latent_dim, latent_q_dim=self.latent_q_dim,
                           latent_rope_dim=self.latent_rope_dim)


class TinyLM(nn.Module):
    """A small decoder-only transformer language model.

    Args:
        config: an :class:`LMConfig`.

    Attributes:
        tok_emb: ``nn.Embedding(vocab_size, d_model)``.
        pos: learned or sinusoidal positions for ``seq_len`` positions.
        blocks: ``num_layers`` :class:`selfattn.block.TransformerBlock`, built
            from :meth:`LMConfig.block_config` (pre-LN, GELU by default; attention
            only, without an MLP, with ``attention_only=True``).
        ln_f: final ``LayerNorm`` (RMSNorm with ``norm="rmsnorm"``); head:
            ``nn.Linear(d_model, vocab_size)``.

    Raises:
        TypeError: ``config`` is not an :class:`LMConfig`.
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"config: expected an LMConfig, got {type(config).__name__}")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        if config.positional == "learned":
            self.pos: nn.Module = LearnedPositionalEmbedding(config.seq_len, config.d_model)
        elif config.positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(config.d_model, config.seq_len)
        else:  # rope / alibi act inside attention; "none" has no positions
            self.pos = NoPositionalEncoding()
        self.emb_drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.num_layers))
        self.ln_f = make_norm(config.norm, config.d_model)  # LayerNorm, or RMSNorm
        self.head = nn.Linear(config.d_model, config.vocab_size)

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _logits(
        self, idx: Tensor, caches: list[KVCache] | list[LatentKVCache] | None = None,
        offset: int = 0,
    ) -> Tensor:
        """Unchecked forward pass; ``idx`` ``(batch, L)`` at positions ``offset .. offset+L-1``."""
        x = self.pos(self.tok_emb(idx), offset=offset)  # (batch, L, d_model)
        x = self.emb_drop(x)
        for i, block in enumerate(self.blocks):  # checked once, above: no checks per block
            x = block.update(x, kv_cache=None if caches is None else caches[i])  # (batch, L, d)
        return self.head(self.ln_f(x))  # (batch, L, vocab_size)

    def new_caches(self) -> list[KVCache] | list[LatentKVCache]:
        """One empty cache per block, for :meth:`forward`: a :class:`~selfattn.kv_cache.KVCache`.

        With ``config.window`` each is a :class:`~selfattn.kv_cache.RollingKVCache`
        of that window: it holds ``window`` tokens at most, and the logits equal
        the full windowed pass (every block looks back ``window`` tokens only).
        With ``latent_dim`` each is a :class:`~selfattn.latent.LatentKVCache`.
        """
        if self.config.latent_dim is not None:
            return [LatentKVCache() for _ in self.blocks]
        if self.config.window is not None:
            return [RollingKVCache(self.config.window) for _ in self.blocks]
        return [KVCache() for _ in self.blocks]

    def forward(
        self, idx: Tensor, kv_caches: list[KVCache] | list[LatentKVCache] | None = None
    ) -> Tensor:
        """Next-token logits for every position.

        Args:
            idx: ``(batch, L)`` integer token ids in ``[0, vocab_size)``.
            kv_caches: optional list of one :class:`~selfattn.kv_cache.KVCache`
                (with ``latent_dim``: :class:`~selfattn.latent.LatentKVCache`)
                per block (:meth:`new_caches`). The tokens of ``idx`` are then
                the positions *after* the ``tokens_seen`` tokens already in the
                caches; their keys/values are appended, and the result equals the
                last ``L`` rows of a forward pass over the whole sequence
                (causal models only).

        Returns:
            ``(batch, L, vocab_size)`` float logits; ``logits[:, t]`` scores the
            token that follows ``idx[:, t]``.

        Raises:
            TypeError: ``idx`` is not an integer tensor; ``kv_caches`` is not a
                list of KVCache.
            ValueError: ``idx`` not 2-D or empty, ``tokens_seen + L >
                config.seq_len``, an id out of range (the message gives the shape
                and the range seen), the wrong number of caches, or caches on a
                non-causal model.
        """
        if kv_caches is None:
            check_token_ids(idx, self.config.vocab_size, seq_len=self.config.seq_len)
            return self._logits(idx)
        if not isinstance(kv_caches, (list, tuple)) or not all(
            isinstance(c, (KVCache, LatentKVCache)) for c in kv_caches
        ):
            raise TypeError(
                f"kv_caches: expected a list of KVCache (one per block), "
                f"got {type(kv_caches).__name__}"
            )
        if len(kv_caches) != len(self.blocks):
            raise ValueError(
                f"kv_caches: expected {len(self.blocks)} caches (config.num_layers), "
                f"got {len(kv_caches)}"
            )
        if not self.config.causal:
            raise ValueError(
                "kv_caches: a KV cache is only valid for a causal model (config.causal=True)"
            )
        offset = kv_caches[0].tokens_seen  # the position of idx[:, 0]
        check_token_ids(idx, self.config.vocab_size, seq_len=self.config.seq_len,
                        cached_len=offset)
        query_shape = (idx.shape[0], idx.shape[1], self.config.d_model)
        for block, cache in zip(self.blocks, kv_caches, strict=True):
            check_block_cache(block, cache, query_shape)
        return self._logits(idx, list(kv_caches), offset=offset)

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
        greedy: bool = False,
    ) -> Tensor:
        """Extend ``idx`` by ``max_new_tokens`` tokens, one at a time.

        Each new token is drawn from ``softmax(logits / temperature)`` of the last
        position (or is its argmax with ``greedy=True``). The context is the last
        ``config.seq_len`` tokens. With ``use_cache`` every block keeps a
        :class:`~selfattn.kv_cache.KVCache`, so each step runs the model on one
        new token instead of the whole context; once the context window is full
        and must slide, positions shift and the cache is rebuilt from the window
        (no saving for those steps). Greedy generation gives the same tokens with
        and without the cache. Runs in eval mode (no dropout) and restores the
        previous mode.

        Args:
            idx: ``(batch, t)`` integer prompt ids, ``t >= 1`` (longer prompts are
                cropped to their last ``config.seq_len`` tokens as context).
            max_new_tokens: number of tokens to add, >= 0.
            temperature: > 0; below 1 sharpens, above 1 flattens (ignored if greedy).
            generator: optional ``torch.Generator`` for reproducible sampling.
            use_cache: use the per-layer KV caches (only valid for a causal model).
            greedy: pick the most likely token instead of sampling.

        Returns:
            ``(batch, t + max_new_tokens)`` int64 tensor: the prompt then the new tokens.

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: bad ``idx`` (as :meth:`forward`, without the
                length limit), negative ``max_new_tokens``, ``temperature <= 0``,
                or ``use_cache=True`` on a non-causal model (whose earlier outputs
                change when a token is appended, so cached keys would be stale).
        """
        check_token_ids(idx, self.config.vocab_size)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise TypeError(
                f"max_new_tokens: expected an int >= 0, got {type(max_new_tokens).__name__}"
            )
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens: expected an int >= 0, got {max_new_tokens}")
        if not greedy and not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature: expected a float > 0, got {temperature!r}")
        if use_cache and not self.config.causal:
            raise ValueError(
                "use_cache: a KV cache is only valid for a causal model (config.causal=True); "
                "pass use_cache=False"
            )
        was_training = self.training
        self.eval()
        try:
            out = idx.long()
            window = self.config.seq_len
            caches = self.new_caches() if use_cache else None
            if max_new_tokens == 0:
                return out
            logits = self._logits(out[:, -window:], caches)[:, -1]  # (batch, V)
            for step in range(max_new_tokens):
                if greedy:
                    nxt = logits.argmax(dim=-1, keepdim=True)  # (batch, 1)
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)  # (batch, V)
                    nxt = torch.multinomial(probs, 1, generator=generator)  # (batch, 1)
                out = torch.cat([out, nxt], dim=1)  # (batch, t + step + 1)
                if step == max_new_tokens - 1:
                    break
                if caches is None:
                    logits = self._logits(out[:, -window:])[:, -1]  # (batch, V)
                elif caches[0].tokens_seen < window:  # room left: feed only the new token
                    logits = self._logits(nxt, caches, offset=caches[0].tokens_seen)[:, -1]
                else:  # the window slides: every position shifts, rebuild the cache
                    caches = self.new_caches()
                    logits = self._logits(out[:, -window:], caches)[:, -1]  # (batch, V)
            return out
        finally:
            self.train(was_training)


# ---------------------------------------------------------------- evaluation


def _windows(n: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """Evaluation windows over a row of ``n`` tokens.

    Returns ``(start, end, first_scored)``: inputs are tokens ``[start, end)``,
    targets ``[start + 1, end + 1)``; only targets at positions
    ``>= first_scored`` are scored, so every target ``1 .. n-1`` is scored once.
    """
    out, scored_upto, start = [], 0, 0  # targets 1 .. scored_upto already scored
    while scored_upto < n - 1:
        end = min(start + context, n - 1)
        out.append((start, end, scored_upto + 1))
        scored_upto = end
        start += stride
    return out


@torch.no_grad()
def evaluate_perplexity(
    model: TinyLM, tokens: Any, *, stride: int | None = None, batch_size: int = 64
) -> float:
    """Corpus perplexity ``exp(total NLL / scored tokens)`` of ``model`` on ``tokens``.

    Every token except the first of each row is predicted exactly once. A row
    longer than the model's context is cut into windows of ``L =
    config.seq_len`` inputs:

    * ``stride=None`` (= ``L``): **non-overlapping chunks**. Cheap, but the first
      targets of each chunk get little context.
    * ``stride < L``: a **sliding window** moving by ``stride`` tokens; each
      window scores only its last ``stride`` targets (the others were scored
      before), so every target after the first window sees at least
      ``L - stride`` tokens of context. Costs about ``L / stride`` times more.

    Runs in eval mode and restores the previous mode.

    Args:
        model: a :class:`TinyLM`.
        tokens: integer ids, ``(n,)`` or ``(num_sequences, n)`` (rows scored
            separately, windows never cross rows), NumPy or torch; ``n >= 2``.
        stride: window step, ``1 <= stride <= L``, or ``None`` for chunks.
        batch_size: windows per forward pass.

    Returns:
        The perplexity as a Python float.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: bad ``tokens`` (type, dtype, shape, ids out of
            range) or ``stride`` outside ``[1, L]``.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    rows = as_token_rows("tokens", tokens)
    context = model.config.seq_len
    if stride is None:
        stride = context
    check_positive_int("stride", stride)
    check_positive_int("batch_size", batch_size)
    if stride > context:
        raise ValueError(
            f"stride: expected 1 <= stride <= config.seq_len = {context}, got {stride} "
            "(a larger stride would skip tokens)"
        )
    check_token_range("tokens", rows, model.config.vocab_size, rows.shape)
    # group windows by length so that no padding is needed (padding would leak
    # into a non-causal model's outputs)
    groups: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for row in rows:
        for start, end, first in _windows(row.shape[0], context, stride):
            inputs = row[start:end]  # (w,)
            targets = row[start + 1 : end + 1].copy()  # (w,)
            targets[: first - (start + 1)] = -100  # already scored by an earlier window
            groups.setdefault(end - start, ([], []))
            groups[end - start][0].append(inputs)
            groups[end - start][1].append(targets)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for inputs_list, targets_list in groups.values():
            for i in range(0, len(inputs_list), batch_size):
                x = torch.from_numpy(np.stack(inputs_list[i : i + batch_size]))  # (b, w)
                y = torch.from_numpy(np.stack(targets_list[i : i + batch_size]))  # (b, w)
                nll, scored = token_nll(model(x).double(), y)  # (b, w) each
                total += float(nll.sum())
                count += int(scored.sum())
    finally:
        model.train(was_training)
    return math.exp(total / count)

