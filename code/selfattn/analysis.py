"""Looking inside a trained :class:`~selfattn.language_model.TinyLM`.

* :func:`attention_maps` returns the attention weights of every head of every
  block for a batch of token ids (the model's own forward pass, step by step).
* :func:`head_patterns` scores each head on three patterns trained models are
  known to show: attending to the **previous** token, to the **first** token
  (an "attention sink") and to **itself**.
* :func:`with_context` copies a trained model into one with a longer context,
  to test how its position scheme extrapolates beyond the training length.
* :func:`previous_token_scores` and :func:`prefix_matching_scores` score each
  head on the two halves of an **induction circuit** (Elhage et al. 2021,
  Olsson et al. 2022): a previous-token head, and an induction head that,
  from a token, attends to the token that *followed* earlier copies of it.
* :func:`ablate_heads` switches heads off (their output set to zero) inside a
  ``with`` block, to measure what a model loses without them.
* :func:`windowed_nll` reads a text longer than a window the ways StreamingLLM
  (Xiao et al. 2024) compares: a rolling KV cache, a rolling cache that keeps
  the first tokens ("attention sinks"), or recomputation over the window.

Shape legend: ``num_layers`` blocks, ``batch`` sequences, ``num_heads`` (h),
``L`` tokens, ``head_dim`` d_v, ``inner_dim`` = h * head_dim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor

from selfattn._checks import (
    as_token_rows,
    check_positive_int,
    check_token_ids,
    check_token_range,
    is_tensor,
)
from selfattn.kv_cache import RollingKVCache
from selfattn.language_model import LMConfig, TinyLM
from selfattn.perplexity import token_nll

__all__ = [
    "ablate_heads",
    "attention_maps",
    "head_patterns",
    "prefix_matching_scores",
    "previous_token_scores",
    "windowed_nll",
    "with_context",
]


@torch.no_grad()
def attention_maps(model: TinyLM, idx: Tensor) -> np.ndarray:
    """Attention weights of every head of every block of ``model`` on ``idx``.

    Runs the forward pass of :class:`~selfattn.language_model.TinyLM` in eval
    mode, asking each block's self-attention for its per-head weights; the
    final logits are not needed.

    Args:
        model: a :class:`~selfattn.language_model.TinyLM`.
        idx: ``(batch, L)`` integer token ids, ``L <= config.seq_len``.

    Returns:
        ``(num_layers, batch, num_heads, L, L)`` float64 NumPy array; every row
        (query) sums to 1 and, for a causal model, is zero right of the diagonal.

    Raises:
        ValueError: as :meth:`~selfattn.language_model.TinyLM.forward` (TypeError for a wrong type).
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    check_token_ids(idx, model.config.vocab_size, seq_len=model.config.seq_len)
    was_training = model.training
    model.eval()
    try:
        x = model.pos(model.tok_emb(idx))  # (batch, L, d_model)
        maps = []
        for block in model.blocks:  # idx was checked above: the unchecked paths from here
            h = block.ln1(x)  # (batch, L, d_model), what the self-attention reads
            _, w = block.attn.attend(h, h, h, need_weights=True, average_weights=False)
            maps.append(w.double().numpy())  # (batch, num_heads, L, L)
            x = block.update(x)  # (batch, L, d_model)
    finally:
        model.train(was_training)
    return np.stack(maps)  # (num_layers, batch, num_heads, L, L)


def _check_maps(maps: Any, min_len: int) -> np.ndarray:
    """``maps`` as float64 ``(num_layers, batch, num_heads, L, L)`` with ``L >= min_len``."""
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim != 5 or maps.shape[-1] != maps.shape[-2] or maps.shape[-1] < min_len:
        raise ValueError(
            f"maps: expected shape (num_layers, batch, num_heads, L, L) with L >= {min_len}, "
            f"got shape {maps.shape}"
        )
    return maps


def previous_token_scores(maps: Any, first_query: int = 1) -> np.ndarray:
    """Mean weight each head puts on the token just before the query.

    ``score[l, h] = mean over b and t >= first_query of maps[l, b, h, t, t - 1]``:
    1 for a head that always looks one token back, ``mean(1 / (t + 1))`` for a
    head that spreads its weight evenly over the visible keys.

    Args:
        maps: ``(num_layers, batch, num_heads, L, L)`` from :func:`attention_maps`.
        first_query: the first query position scored, ``1 <= first_query < L``
            (position 0 has no previous token).

    Returns:
        ``(num_layers, num_heads)`` float64 array in [0, 1].

    Raises:
        ValueError: ``maps`` not 5-D with square ``(L, L)`` weights, or
            ``first_query`` outside ``[1, L)``.
    """
    maps = _check_maps(maps, 2)
    L = maps.shape[-1]
    if isinstance(first_query, bool) or not isinstance(first_query, (int, np.integer)) \
            or not 1 <= first_query < L:
        raise ValueError(f"first_query: expected an int in [1, L = {L}), got {first_query!r}")
    t = np.arange(first_query, L)  # query positions scored
    return maps[..., t, t - 1].mean(axis=(1, 3))  # (num_layers, num_heads)


def prefix_matching_scores(maps: Any, idx: Any, first_query: int = 0) -> np.ndarray:
    """Mean weight each head puts on the tokens that followed earlier copies of the query's token.

    For a query at position ``t`` holding token ``a``, the **prefix-matching**
    keys are the positions ``s + 1`` with ``s < t`` and ``idx[s] == a``: the
    tokens that came right after an earlier ``a``. An induction head attends
    there (and then copies what it finds: after ``a`` comes, again, what came
    after ``a`` before). ``score[l, h]`` is the weight on those keys (summed
    when ``a`` occurred more than once), averaged over the batch and over the
    queries ``t >= first_query`` whose token occurred earlier. On a random
    sequence of ``n`` tokens repeated once, ``first_query = n`` scores exactly
    the second repeat (Olsson et al. 2022's test).

    Args:
        maps: ``(num_layers, batch, num_heads, L, L)`` from :func:`attention_maps`.
        idx: ``(batch, L)`` integer token ids the maps were computed on (NumPy or torch).
        first_query: the first query position scored, ``0 <= first_query < L``.

    Returns:
        ``(num_layers, num_heads)`` float64 array in [0, 1].

    Raises:
        ValueError: ``maps`` or ``idx`` of the wrong shape (the message gives both),
            ``first_query`` out of range, or no scored query whose token occurred
            before it.
    """
    maps = _check_maps(maps, 2)
    tokens = idx.detach().cpu().numpy() if is_tensor(idx) else np.asarray(idx)
    batch, L = maps.shape[1], maps.shape[-1]
    if tokens.shape != (batch, L) or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"idx: expected integer token ids of shape (batch, L) = {(batch, L)} "
            f"(as maps {maps.shape}), got {tokens.dtype} of shape {tokens.shape}"
        )
    if isinstance(first_query, bool) or not isinstance(first_query, (int, np.integer)) \
            or not 0 <= first_query < L:
        raise ValueError(f"first_query: expected an int in [0, L = {L}), got {first_query!r}")
    # same[b, t, s]: position s < t holds the token of query t
    same = (tokens[:, :, None] == tokens[:, None, :]) & np.tri(L, L, -1, dtype=bool)
    target = np.zeros_like(same)  # (batch, L, L): target[b, t, s + 1] = same[b, t, s]
    target[:, :, 1:] = same[:, :, :-1]
    scored = target.any(axis=-1)  # (batch, L): the query's token occurred before
    scored[:, :first_query] = False
    if not scored.any():
        raise ValueError(
            f"idx: no query at positions >= first_query = {first_query} holds a token "
            "that occurred earlier in its sequence: nothing to score"
        )
    # weight on the prefix-matching keys: (num_layers, batch, num_heads, L)
    on_target = (maps * target[None, :, None]).sum(axis=-1)
    per_query = on_target.transpose(0, 2, 1, 3)[:, :, scored]  # (layers, heads, n_scored)
    return per_query.mean(axis=-1)  # (num_layers, num_heads)


def _check_heads(model: TinyLM, heads: Any) -> dict[int, list[int]]:
    """``heads`` as ``{layer: [head, ...]}``, each pair in range, or a clear ValueError."""
    num_layers, num_heads = model.config.num_layers, model.config.num_heads
    by_layer: dict[int, list[int]] = {}
    pairs = list(heads) if isinstance(heads, Iterable) else None
    if pairs is None:
        raise TypeError(f"heads: expected (layer, head) pairs, got {type(heads).__name__}")
    for pair in pairs:
        ok = (isinstance(pair, tuple) and len(pair) == 2
              and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                      for v in pair))
        if not ok or not (0 <= pair[0] < num_layers and 0 <= pair[1] < num_heads):
            raise ValueError(
                f"heads: expected (layer, head) pairs with 0 <= layer < num_layers = "
                f"{num_layers} and 0 <= head < num_heads = {num_heads}, got {pair!r}"
            )
        by_layer.setdefault(int(pair[0]), []).append(int(pair[1]))
    return by_layer


@contextmanager
def ablate_heads(model: TinyLM, heads: Iterable[tuple[int, int]]) -> Iterator[TinyLM]:
    """Switch heads of ``model`` off inside a ``with`` block (zero ablation).

    Multi-head attention ends with ``concat(C_1, ..., C_h) W_O``. Ablating head
    ``j`` of block ``l`` sets its context vectors ``C_j`` (columns ``j * head_dim
    : (j + 1) * head_dim`` of the concatenation) to zero before ``W_O``, so the
    block's attention output loses exactly the term ``C_j W_O^{(j)}`` (rows
    ``j * head_dim : (j + 1) * head_dim`` of ``W_O``) and nothing else; the
    other heads, and every later block, run as before on what is left. The
    parameters are not touched: on leaving the block the model is as it was.

    Implemented with a forward pre-hook on each ablated block's ``attn.w_o``
    (``(batch, L, inner_dim)`` in, the ablated columns zeroed); the hooks are
    removed on exit, also after an error.

    Args:
        model: a :class:`~selfattn.language_model.TinyLM`.
        heads: ``(layer, head)`` pairs, ``0 <= layer < num_layers``,
            ``0 <= head < num_heads``; an empty iterable ablates nothing.

    Yields:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not a TinyLM, ``heads`` not iterable.
        ValueError: a pair out of range (the message names the limits).
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    by_layer = _check_heads(model, heads)
    handles = []
    try:
        for layer, ablated in by_layer.items():
            attn = model.blocks[layer].attn
            keep = torch.ones(attn.num_heads, attn.head_dim)  # (num_heads, head_dim)
            keep[ablated] = 0.0
            keep = keep.reshape(-1)  # (inner_dim,): 0 on the ablated heads' columns

            def zero_heads(module: torch.nn.Module, args: tuple[Tensor, ...],
                           keep: Tensor = keep) -> tuple[Tensor, ...]:
                # args[0]: concat(C_1, ..., C_h), (batch, L, inner_dim)
                return (args[0] * keep.to(args[0].dtype), *args[1:])

            handles.append(attn.w_o.register_forward_pre_hook(zero_heads))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def head_patterns(maps: np.ndarray) -> dict[str, np.ndarray]:
    """Mean weight each head puts on the previous token, the first token and itself.

    Averages are over the batch and over query positions ``t >= 2`` (at
    ``t = 0`` all three patterns coincide and at ``t = 1`` "previous" and
    "first" do).

    Args:
        maps: ``(num_layers, batch, num_heads, L, L)`` from :func:`attention_maps`, ``L >= 3``.

    Returns:
        ``{"previous", "first", "self"}``, each ``(num_layers, num_heads)`` in [0, 1].
    """
    maps = _check_maps(maps, 3)
    L = maps.shape[-1]
    t = np.arange(2, L)  # query positions scored
    return {
        "previous": previous_token_scores(maps, first_query=2),  # (num_layers, num_heads)
        "first": maps[..., t, 0].mean(axis=(1, 3)),
        "self": maps[..., t, t].mean(axis=(1, 3)),
    }


def with_context(model: TinyLM, seq_len: int) -> TinyLM:
    """A copy of ``model`` that accepts sequences up to ``seq_len`` tokens.

    Every parameter is copied. With learned positions the table grows: rows
    ``0 .. config.seq_len - 1`` are the trained ones, the new rows keep the
    random initial values of a fresh table (drawn from PyTorch's global
    generator), since no training ever reached them. Sinusoidal positions are
    a formula and simply extend; RoPE, ALiBi and "none" have no table.

    Args:
        model: a :class:`~selfattn.language_model.TinyLM`.
        seq_len: the new context length, ``>= config.seq_len``.

    Returns:
        A new :class:`~selfattn.language_model.TinyLM` in eval mode, with the
        dtype and device of ``model``.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    old = model.config
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < old.seq_len:
        raise ValueError(f"seq_len: expected an int >= config.seq_len = {old.seq_len}, "
                         f"got {seq_len!r}")
    config: LMConfig = dataclasses.replace(old, seq_len=seq_len)
    weight = model.tok_emb.weight
    longer = TinyLM(config).to(dtype=weight.dtype, device=weight.device)  # as the model's
    state = model.state_dict()
    key = "pos.embedding.weight"
    if key in state:  # learned table: trained rows first, untrained rows after
        table = longer.state_dict()[key].clone()  # (seq_len, d_model)
        table[: old.seq_len] = state[key]
        state = {**state, key: table}
    longer.load_state_dict(state)
    return longer.eval()


@torch.no_grad()
def windowed_nll(
    model: TinyLM, tokens: Any, window: int, *, sinks: int = 0, recompute: bool = False,
    batch_size: int = 256,
) -> np.ndarray:
    """Loss of every next-token prediction when ``model`` reads ``tokens`` through a window.

    A query sees at most ``window`` tokens: the first ``sinks`` tokens of the
    text and the last ``window - sinks`` up to itself (all of them while the
    text is shorter than the window). The two modes differ in how the keys and
    values of those tokens were computed:

    * ``recompute=False``: one :class:`~selfattn.kv_cache.RollingKVCache`
      ``(window, sinks)`` per block. Every token is processed once, when it
      arrives, and its keys and values are kept while the cache holds it. From
      the second block up they were computed from the window that token saw,
      not the query's. ``sinks=0`` is a plain rolling window; ``sinks=k`` keeps
      the first ``k`` tokens for good (StreamingLLM's attention sinks). Fed in
      chunks of ``window`` tokens; the result does not depend on the chunks.
    * ``recompute=True``: every prediction runs the model afresh on its window
      (the ``sinks`` first tokens, then the recent ones, at positions
      ``0 .. window - 1``): ``window`` times the work of the cache.

    With ``window >= n`` both equal the model's plain forward pass.

    Args:
        model: a causal :class:`~selfattn.language_model.TinyLM` (run in eval
            mode; its mode is restored).
        tokens: integer ids ``(n,)`` or ``(num_sequences, n)``, ``n >= 2``
            (NumPy or torch). A model with a learned position table reads at most
            ``config.seq_len`` tokens through the cache (its positions end there);
            other position schemes read any length.
        window: w, tokens a query sees, ``1 <= window <= config.seq_len``.
        sinks: k, leading tokens every query keeps, ``0 <= k < window``.
        recompute: recompute every window instead of keeping a cache.
        batch_size: windows per forward pass when recomputing.

    Returns:
        ``(num_sequences, n - 1)`` float64: entry ``[b, t]`` is ``-log p(tokens[b,
        t + 1])`` predicted at position ``t``. ``exp`` of the mean is the perplexity.

    Raises:
        TypeError: ``model`` not a TinyLM, ``tokens`` not integer ids.
        ValueError: a non-causal model, ids out of range, fewer than 2 tokens,
            ``window`` outside ``[1, config.seq_len]``, ``sinks`` outside
            ``[0, window)``, or a learned position table asked to read beyond
            ``config.seq_len`` through the cache.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    config = model.config
    if not config.causal:
        raise ValueError("model: reading through a window needs a causal model "
                         "(config.causal=True)")
    rows = as_token_rows("tokens", tokens)  # (num_sequences, n) int64
    check_token_range("tokens", rows, config.vocab_size, rows.shape)
    num_rows, n = rows.shape
    if n < 2:
        raise ValueError(f"tokens: expected at least 2 tokens per row, got shape {rows.shape}")
    check_positive_int("window", window)
    check_positive_int("batch_size", batch_size)
    if window > config.seq_len:
        raise ValueError(f"window: expected 1 <= window <= config.seq_len = {config.seq_len}, "
                         f"got {window}")
    RollingKVCache(window, sinks)  # its checks: sinks an int, 0 <= sinks < window
    ids = torch.from_numpy(rows)  # (num_sequences, n)
    was_training = model.training
    model.eval()
    try:
        if recompute:
            logits = _recomputed_logits(model, ids, window, sinks, batch_size)
        else:
            logits = _rolling_logits(model, ids, window, sinks)
    finally:
        model.train(was_training)
    nll, _ = token_nll(logits.double(), ids[:, 1:])  # (num_sequences, n - 1)
    return nll.numpy()


def _rolling_logits(model: TinyLM, ids: Tensor, window: int, sinks: int) -> Tensor:
    """Logits ``(num_sequences, n - 1, V)`` with a rolling cache in every block."""
    n = ids.shape[1]
    reader = model
    if n - 1 > model.config.seq_len:  # positions past the model's context
        if model.config.positional == "learned":
            raise ValueError(
                f"tokens: the model's learned position table ends at config.seq_len = "
                f"{model.config.seq_len}; a rolling cache would need positions up to "
                f"{n - 2} (read at most {model.config.seq_len + 1} tokens, or use a "
                "model without a table: positional='none', 'rope', 'alibi', 'sinusoidal')"
            )
        reader = with_context(model, n - 1)  # the same parameters, a longer context
    caches = [RollingKVCache(window, sinks) for _ in reader.blocks]
    chunks = [reader(ids[:, i : min(i + window, n - 1)], kv_caches=caches)
              for i in range(0, n - 1, window)]  # each (num_sequences, chunk, V)
    return torch.cat(chunks, dim=1)  # (num_sequences, n - 1, V)


def _recomputed_logits(
    model: TinyLM, ids: Tensor, window: int, sinks: int, batch_size: int
) -> Tensor:
    """Logits ``(num_sequences, n - 1, V)``, each from a fresh pass over its window."""
    num_rows, n = ids.shape
    first = min(window, n - 1)  # queries 0 .. first - 1 see the whole prefix
    parts = [model(ids[:, :first])]  # (num_sequences, first, V)
    queries = torch.arange(first, n - 1)  # the rest see a full window each
    if len(queries):
        recent = torch.arange(-(window - sinks) + 1, 1)  # (window - sinks,) offsets
        # (num_queries, window): the sinks, then the last window - sinks tokens
        index = torch.cat([torch.arange(sinks).expand(len(queries), sinks),
                           queries[:, None] + recent[None, :]], dim=1)
        windows = ids[:, index].reshape(-1, window)  # (num_sequences * num_queries, window)
        last = torch.cat([model(windows[i : i + batch_size])[:, -1]
                          for i in range(0, len(windows), batch_size)])  # (.., V)
        parts.append(last.reshape(num_rows, len(queries), -1))  # (num_sequences, q, V)
    return torch.cat(parts, dim=1)  # (num_sequences, n - 1, V)
