"""A tiny decoder-only transformer language model, its training loop and evaluation.

:class:`TinyLM` is the smallest GPT-style model that still has every part::

    idx (batch, L) int
      -> token embedding + position encoding             (batch, L, d_model)
      -> num_layers x pre-LN block:
             x = x + Dropout(MultiHeadAttention(LayerNorm(x)))   (causal by default)
             x = x + Dropout(MLP(LayerNorm(x)))                  d_model -> d_ff -> d_model
      -> final LayerNorm -> linear head                  (batch, L, vocab_size) logits

``logits[:, t]`` scores the token at position ``t + 1``; with the causal mask
it depends only on ``idx[:, : t + 1]``. Built with ``causal=False`` the model
sees the whole window, including the very token it is asked to predict, and
learns to copy it: its training perplexity heads to 1, which says nothing
about its ability to predict (it has nothing to copy from when generating).

:func:`train_language_model` trains on random windows from :func:`selfattn.data.batches`
with AdamW, and :func:`evaluate_perplexity` scores a token array in
non-overlapping chunks or with a sliding window.

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

from selfattn._checks import check_positive_int, is_tensor, shape_of
from selfattn.block import BlockConfig, TransformerBlock
from selfattn.data import batches
from selfattn.layers import KVCache
from selfattn.perplexity import negative_log_likelihood, token_nll
from selfattn.positional import (
    LearnedPositionalEmbedding,
    NoPositionalEncoding,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "LMConfig",
    "TinyLM",
    "evaluate_perplexity",
    "learning_rate_schedule",
    "train_language_model",
]

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

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "num_heads", "num_layers"):
            check_positive_int(name, getattr(self, name))
        if self.d_ff is not None:
            check_positive_int("d_ff", self.d_ff)
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"num_heads: num_heads={self.num_heads} does not divide d_model={self.d_model}"
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            kind = type(self.dropout).__name__
            raise TypeError(f"dropout: expected a float in [0, 1), got {kind}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional: expected one of {_POSITIONAL}, got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"d_model: sinusoidal positions need an even d_model, got {self.d_model}"
            )
        self.block_config()  # validates num_kv_heads against num_heads

    @property
    def ff_dim(self) -> int:
        """The MLP hidden width actually used (``d_ff`` or ``4 * d_model``)."""
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    def block_config(self) -> BlockConfig:
        """The settings of each block: pre-LN, GELU, causal as ``causal``, no cross-attention."""
        inside = self.positional if self.positional in ("rope", "alibi") else None
        return BlockConfig(d_model=self.d_model, num_heads=self.num_heads, d_ff=self.ff_dim,
                           dropout=float(self.dropout), norm_first=True, activation="gelu",
                           causal=self.causal, num_kv_heads=self.num_kv_heads,
                           positional=inside)


class TinyLM(nn.Module):
    """A small decoder-only transformer language model.

    Args:
        config: an :class:`LMConfig`.

    Attributes:
        tok_emb: ``nn.Embedding(vocab_size, d_model)``.
        pos: learned or sinusoidal positions for ``seq_len`` positions.
        blocks: ``num_layers`` :class:`selfattn.block.TransformerBlock`, built
            from :meth:`LMConfig.block_config` (pre-LN, GELU).
        ln_f: final ``LayerNorm``; head: ``nn.Linear(d_model, vocab_size)``.

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
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size)

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _check_idx(self, idx: Any, name: str = "idx", max_len: int | None = None) -> None:
        legend = "(batch, seq_len)"
        if not is_tensor(idx):
            raise TypeError(f"{name}: expected a torch.Tensor {legend}, got {type(idx).__name__}")
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer dtype (token ids), got {idx.dtype}")
        if idx.ndim != 2:
            raise ValueError(f"{name}: expected shape {legend}, got shape {shape_of(idx)}")
        if idx.shape[0] == 0 or idx.shape[1] == 0:
            raise ValueError(f"{name}: expected a non-empty {legend}, got shape {shape_of(idx)}")
        if max_len is not None and idx.shape[1] > max_len:
            room = self.config.seq_len - max_len
            what = f"config.seq_len = {max_len}" if room == 0 else (
                f"config.seq_len - cached_len = {self.config.seq_len} - {room} = {max_len}"
            )
            raise ValueError(
                f"{name}: expected seq_len <= {what}, got shape "
                f"{shape_of(idx)}; evaluate longer texts in windows (evaluate_perplexity)"
            )
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(
                f"{name}: expected token ids in [0, {self.config.vocab_size}), got values in "
                f"[{lo}, {hi}] (shape {shape_of(idx)})"
            )

    def _logits(self, idx: Tensor, caches: list[KVCache] | None = None, offset: int = 0) -> Tensor:
        """Unchecked forward pass; ``idx`` ``(batch, L)`` at positions ``offset .. offset+L-1``."""
        x = self.pos(self.tok_emb(idx), offset=offset)  # (batch, L, d_model)
        x = self.emb_drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=None if caches is None else caches[i])  # (batch, L, d_model)
        return self.head(self.ln_f(x))  # (batch, L, vocab_size)

    def new_caches(self) -> list[KVCache]:
        """One empty :class:`~selfattn.layers.KVCache` per block, for :meth:`forward`."""
        return [KVCache() for _ in self.blocks]

    def forward(self, idx: Tensor, kv_caches: list[KVCache] | None = None) -> Tensor:
        """Next-token logits for every position.

        Args:
            idx: ``(batch, L)`` integer token ids in ``[0, vocab_size)``.
            kv_caches: optional list of one :class:`~selfattn.layers.KVCache`
                per block (:meth:`new_caches`). The tokens of ``idx`` are then
                the positions *after* the ``cached_len`` tokens already in the
                caches; their keys/values are appended, and the result equals the
                last ``L`` rows of a forward pass over the whole sequence
                (causal models only).

        Returns:
            ``(batch, L, vocab_size)`` float logits; ``logits[:, t]`` scores the
            token that follows ``idx[:, t]``.

        Raises:
            TypeError: ``idx`` is not an integer tensor; ``kv_caches`` is not a
                list of KVCache.
            ValueError: ``idx`` not 2-D or empty, ``cached_len + L >
                config.seq_len``, an id out of range (the message gives the shape
                and the range seen), the wrong number of caches, or caches on a
                non-causal model.
        """
        if kv_caches is None:
            self._check_idx(idx, max_len=self.config.seq_len)
            return self._logits(idx)
        if not isinstance(kv_caches, (list, tuple)) or not all(
            isinstance(c, KVCache) for c in kv_caches
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
        offset = len(kv_caches[0])
        self._check_idx(idx, max_len=self.config.seq_len - offset)
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
        :class:`~selfattn.layers.KVCache`, so each step runs the model on one
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
        self._check_idx(idx)
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
                elif len(caches[0]) < window:  # room left: feed only the new token
                    logits = self._logits(nxt, caches, offset=len(caches[0]))[:, -1]
                else:  # the window slides: every position shifts, rebuild the cache
                    caches = self.new_caches()
                    logits = self._logits(out[:, -window:], caches)[:, -1]  # (batch, V)
            return out
        finally:
            self.train(was_training)


# ---------------------------------------------------------------- evaluation


def _as_rows(name: str, tokens: Any) -> np.ndarray:
    """Token ids as an int64 ``(num_sequences, n)`` NumPy array (a 1-D stream is one row)."""
    if not (is_tensor(tokens) or isinstance(tokens, np.ndarray)):
        raise TypeError(
            f"{name}: expected a numpy.ndarray or torch.Tensor of token ids, "
            f"got {type(tokens).__name__}"
        )
    arr = tokens.detach().cpu().numpy() if is_tensor(tokens) else tokens
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer dtype (token ids), got {tokens.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"{name}: expected shape (n,) or (num_sequences, n), got shape {shape_of(arr)}"
        )
    rows = arr.reshape(1, -1) if arr.ndim == 1 else arr  # (num_sequences, n)
    if rows.shape[0] == 0 or rows.shape[1] < 2:
        raise ValueError(
            f"{name}: expected at least 2 tokens per row (one input, one target), "
            f"got shape {shape_of(arr)}"
        )
    return rows.astype(np.int64, copy=False)


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
    rows = _as_rows("tokens", tokens)
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
    if rows.min() < 0 or rows.max() >= model.config.vocab_size:
        raise ValueError(
            f"tokens: expected token ids in [0, {model.config.vocab_size}), got values in "
            f"[{int(rows.min())}, {int(rows.max())}] (shape {rows.shape})"
        )
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


# ---------------------------------------------------------------- training


def _lr_factor(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up to 1 over ``warmup`` steps, then cosine decay to 0.1 at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def learning_rate_schedule(steps: int, warmup: int | None = None) -> np.ndarray:
    """The factor :func:`train_language_model` multiplies ``lr`` by at each step.

    Linear warm-up from ``1 / warmup`` to 1 over the first ``warmup`` steps
    (default ``steps // 20``), then a cosine from 1 down to 0.1 at the last step.

    Args:
        steps: number of optimiser steps, >= 1.
        warmup: warm-up steps, ``0 <= warmup``.

    Returns:
        ``(steps,)`` float64 NumPy array of factors in ``(0, 1]``.

    Raises:
        ValueError: ``steps`` not a positive int, ``warmup`` not an int >= 0
            (TypeError if ``steps`` is not an int).
    """
    check_positive_int("steps", steps)
    warmup = steps // 20 if warmup is None else warmup
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup: expected an int >= 0, got {warmup!r}")
    return np.array([_lr_factor(step, steps, warmup) for step in range(steps)])


def train_language_model(
    model: TinyLM,
    train_tokens: Any,
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    eval_tokens: Any = None,
    eval_every: int | None = None,
    weight_decay: float = 0.0,
    warmup: int | None = None,
    grad_clip: float | None = 1.0,
) -> list[dict[str, Any]]:
    """Train ``model`` for next-token prediction with AdamW; return the history.

    Each step draws ``batch_size`` random windows of ``config.seq_len + 1``
    tokens (:func:`selfattn.data.batches`, seeded with ``seed``), computes the
    mean cross-entropy of all ``L`` next-token predictions, and takes one AdamW
    step. The learning rate warms up linearly for ``warmup`` steps (default
    ``steps // 20``) and then follows a cosine down to ``lr / 10``; gradients
    are clipped to norm ``grad_clip`` (None: no clipping).

    Deterministic: ``torch.manual_seed(seed)`` is called first (dropout draws
    from the global generator) and batches come from a seeded NumPy generator,
    so the same model initialisation, data and seed give identical losses on
    the same machine and thread count.

    Args:
        model: a :class:`TinyLM` (trained in place, left in eval mode).
        train_tokens: integer ids ``(n,)`` or ``(num_sequences, n)`` with
            ``n >= config.seq_len + 1``.
        steps: number of optimiser steps, >= 1.
        batch_size: windows per step.
        lr: peak learning rate, > 0.
        seed: seed for batches and dropout.
        eval_tokens: optional held-out ids for :func:`evaluate_perplexity`.
        eval_every: record the history every this many steps (default
            ``max(1, steps // 10)``); the last step is always recorded.
        weight_decay: AdamW weight decay.
        warmup: warm-up steps (default ``steps // 20``).
        grad_clip: maximum gradient norm, or None.

    Returns:
        A list of dicts ``{"step", "train_loss", "eval_ppl"}``. The first entry
        is step 0: the loss of the first batch before any update (about
        ``ln V`` for a fresh model). Later entries hold the mean training loss
        (nats per token) over the steps since the previous entry. ``eval_ppl``
        is the held-out perplexity after that step, or None without
        ``eval_tokens``.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: a non-:class:`TinyLM` model, bad token arrays
            (see :func:`selfattn.data.batches`), or non-positive sizes / rates.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    check_positive_int("steps", steps)
    if eval_every is None:
        eval_every = max(1, steps // 10)
    check_positive_int("eval_every", eval_every)
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr: expected a float > 0, got {lr!r}")
    warmup = steps // 20 if warmup is None else warmup
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup: expected an int >= 0, got {warmup!r}")
    vocab = model.config.vocab_size
    for name, tok in (("train_tokens", train_tokens), ("eval_tokens", eval_tokens)):
        if tok is None:
            continue
        rows = _as_rows(name, tok)
        if rows.min() < 0 or rows.max() >= vocab:
            raise ValueError(
                f"{name}: expected token ids in [0, {vocab}), got values in "
                f"[{int(rows.min())}, {int(rows.max())}] (shape {shape_of(tok)})"
            )
        if name == "train_tokens" and rows.shape[1] < model.config.seq_len + 1:
            raise ValueError(
                f"train_tokens: expected at least config.seq_len + 1 = "
                f"{model.config.seq_len + 1} tokens per row, got shape {shape_of(tok)}"
            )
    torch.manual_seed(seed)
    data = batches(train_tokens, model.config.seq_len, batch_size, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def evaluate() -> float | None:
        return None if eval_tokens is None else evaluate_perplexity(model, eval_tokens)

    history: list[dict[str, Any]] = []
    losses: list[float] = []
    for step in range(steps):
        inputs, targets = next(data)  # (batch, L) each
        x, y = torch.as_tensor(inputs), torch.as_tensor(targets)
        model.train()
        loss = negative_log_likelihood(model(x), y)  # mean NLL over batch * L tokens
        if step == 0:
            history.append({"step": 0, "train_loss": loss.item(), "eval_ppl": evaluate()})
        for group in optimizer.param_groups:
            group["lr"] = lr * _lr_factor(step, steps, warmup)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        losses.append(loss.item())
        done = step + 1
        if done % eval_every == 0 or done == steps:
            history.append(
                {"step": done, "train_loss": float(np.mean(losses)), "eval_ppl": evaluate()}
            )
            losses = []
    model.eval()
    return history
