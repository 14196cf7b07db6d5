"""Training :class:`~selfattn.language_model.TinyLM` for next-token prediction.

:func:`train_language_model` draws random windows from
:func:`selfattn.data.batches`, minimises the mean cross-entropy of every
next-token prediction with AdamW, and records the training loss and held-out
perplexity (:func:`~selfattn.language_model.evaluate_perplexity`) as it goes.
The learning rate warms up linearly, then follows a cosine down to a tenth:
:func:`learning_rate_schedule` gives the factor at every step, to plot it.

Shape legend: ``batch`` windows per step, ``L`` (``config.seq_len``)
positions, ``V`` (``config.vocab_size``) tokens.

Bad input raises ``TypeError`` (wrong types) or ``ValueError`` (token ids
outside ``[0, V)``, rows shorter than ``L + 1``, non-positive sizes or
rates); messages name the argument, the shape seen and the shape expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from selfattn._checks import as_token_rows, check_positive_int, check_token_range, shape_of
from selfattn.data import batches
from selfattn.language_model import TinyLM, evaluate_perplexity
from selfattn.perplexity import negative_log_likelihood

__all__ = ["learning_rate_schedule", "train_language_model"]


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
    callback: Callable[[int, TinyLM], None] | None = None,
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
        model: a :class:`~selfattn.language_model.TinyLM` (trained in place, left in eval mode).
        train_tokens: integer ids ``(n,)`` or ``(num_sequences, n)`` with
            ``n >= config.seq_len + 1``.
        steps: number of optimiser steps, >= 1.
        batch_size: windows per step.
        lr: peak learning rate, > 0.
        seed: seed for batches and dropout.
        eval_tokens: optional held-out ids for :func:`~selfattn.language_model.evaluate_perplexity`.
        eval_every: record the history every this many steps (default
            ``max(1, steps // 10)``); the last step is always recorded.
        weight_decay: AdamW weight decay.
        warmup: warm-up steps (default ``steps // 20``).
        grad_clip: maximum gradient norm, or None.
        callback: optional ``callback(step, model)``, called at every recorded step
            (step 0 before any update, then with each history entry), e.g. to
            measure the model while it trains. It may switch the model to eval
            mode (training switches it back) but should not draw from torch's
            random generator, which dropout draws from.

    Returns:
        A list of dicts ``{"step", "train_loss", "eval_ppl"}``. The first entry
        is step 0: the loss of the first batch before any update (about
        ``ln V`` for a fresh model). Later entries hold the mean training loss
        (nats per token) over the steps since the previous entry. ``eval_ppl``
        is the held-out perplexity after that step, or None without
        ``eval_tokens``.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: a non-:class:`~selfattn.language_model.TinyLM` model, bad token arrays
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
        rows = as_token_rows(name, tok)
        check_token_range(name, rows, vocab, shape_of(tok))
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
            if callback is not None:
                callback(0, model)  # the next step switches back to training mode
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
            if callback is not None:
                callback(done, model)
    model.eval()
    return history
