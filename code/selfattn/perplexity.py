"""Cross-entropy, perplexity and bits per token for next-token prediction.

A language model turns each prefix into a distribution over the vocabulary.
Scoring it on text means asking how much probability it gave to the token that
really came next. For ``N`` scored tokens with targets ``y_n``::

    NLL        = -(1/N) * sum_n log p(y_n | prefix_n)      (nats per token)
    perplexity = exp(NLL)                                   (geometric mean of 1/p)
    bits       = NLL / ln 2                                 (bits per token)

A model that spreads its probability uniformly over ``V`` tokens has
``NLL = ln V`` and perplexity exactly ``V``: perplexity is the *effective
branching factor*, the number of equally likely choices the model is, on
average, hesitating between.

Shape legend (the book's letters)::

    batch    number of sequences
    seq_len  L, number of positions scored per sequence
    vocab    V, vocabulary size

    logits:  (batch, seq_len, vocab)  scores for the token at each position,
                                      already aligned with ``targets`` (the
                                      caller shifts inputs/targets by one)
    targets: (batch, seq_len)         integer token ids in [0, vocab), or
                                      ``ignore_index`` for padding

Design choices:

* **Log-softmax, never log(softmax).** Probabilities are computed in log space
  (:func:`selfattn.softmax.log_softmax`), so a confidently wrong prediction
  (a logit gap of 1e4) gives a large but *finite* NLL of 1e4 nats. Taking
  ``log`` of a softmax that has underflowed to 0 would give ``inf``.
  Perplexity itself is ``exp(NLL)`` and overflows to ``inf`` (never NaN) once
  the mean NLL passes ~709 nats (float64) or ~88 nats (float32); report the
  NLL in that regime.
* **Backends.** NumPy inputs are computed in float64 and give a Python
  ``float``. Torch inputs stay in torch (the dtype of ``logits``) and give a
  0-dim tensor that carries gradients, so the same function can be a loss.
* **Ignored positions** (``targets == ignore_index``, default -100 like
  ``torch.nn.functional.cross_entropy``) contribute nothing: neither their
  logits nor their count enter the mean.
* **Two reductions.** ``reduction="token"`` (default) is the corpus perplexity:
  ``exp`` of the mean NLL over *all* scored tokens of the batch. This is what
  ``exp(F.cross_entropy(...))`` and ``torchmetrics.text.Perplexity`` compute.
  ``reduction="sequence"`` averages each *sequence's* own value instead; for
  perplexity that is ``mean_b exp(NLL_b)``, a different number whenever
  sequences differ in length or difficulty. When every sequence has the same
  number of scored tokens it is never smaller (Jensen's inequality); with
  unequal lengths it can be smaller or larger, since a short sequence counts
  as much as a long one. Mixing the two up is a classic evaluation pitfall.
  Sequences whose every position is ignored are left out of the sequence mean.

Bad input raises ``TypeError`` (not an array/tensor, float ``targets``, mixed
NumPy/torch) or ``ValueError`` (wrong number of dimensions, shapes that do not
line up, NaN or ``+inf`` in ``logits``, a target outside ``[0, vocab)``, every
position ignored, unknown ``reduction``). Messages name the argument and the
shapes seen and expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfattn._checks import check_array, check_floating, check_nonempty, is_tensor, shape_of
from selfattn.array_types import Array
from selfattn.softmax import log_softmax

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = [
    "bits_per_token",
    "negative_log_likelihood",
    "perplexity",
    "token_nll",
]

_REDUCTIONS = ("token", "sequence")


def _validate(logits: Any, targets: Any, ignore_index: int) -> None:
    """Check backend, dtypes, shapes and target range (see the module docstring)."""
    check_floating("logits", logits)
    check_array("targets", targets)
    if is_tensor(logits) != is_tensor(targets):
        raise TypeError(
            "targets: expected the same backend as logits "
            f"(logits is {type(logits).__name__}, targets is {type(targets).__name__})"
        )
    if is_tensor(targets):
        integer = not (targets.is_floating_point() or targets.is_complex()) and (
            targets.dtype != torch.bool
        )
    else:
        integer = np.issubdtype(targets.dtype, np.integer)
    if not integer:
        raise TypeError(f"targets: expected an integer dtype (token ids), got {targets.dtype}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise TypeError(f"ignore_index: expected an int, got {type(ignore_index).__name__}")
    if logits.ndim != 3:
        raise ValueError(
            f"logits: expected shape (batch, seq_len, vocab), got shape {shape_of(logits)}"
        )
    check_nonempty("logits", logits)
    expected = shape_of(logits)[:2]
    if shape_of(targets) != expected:
        raise ValueError(
            f"targets: expected shape (batch, seq_len) = {expected} to match logits of shape "
            f"{shape_of(logits)}, got shape {shape_of(targets)}"
        )
    if is_tensor(logits):
        bad = bool(torch.isnan(logits).any() or torch.isposinf(logits).any())
    else:
        bad = bool(np.isnan(logits).any() or np.isposinf(logits).any())
    if bad:
        raise ValueError(
            f"logits: contains NaN or +inf (shape {shape_of(logits)}); "
            "only -inf (a token ruled out) is allowed"
        )
    vocab = shape_of(logits)[2]
    scored = targets != ignore_index
    outside = scored & ((targets < 0) | (targets >= vocab))
    if bool(outside.any()):
        where = tuple(int(i) for i in (outside.nonzero() if is_tensor(outside)
                                       else np.argwhere(outside))[0])
        value = int(targets[where])
        raise ValueError(
            f"targets: expected token ids in [0, {vocab}) (vocab of logits with shape "
            f"{shape_of(logits)}) or ignore_index={ignore_index}, got {value} at index {where}"
        )
    if not bool(scored.any()):
        raise ValueError(
            f"targets: every position equals ignore_index={ignore_index} (shape "
            f"{shape_of(targets)}); there is nothing to score"
        )


def token_nll(logits: Array, targets: Array, ignore_index: int = -100) -> tuple[Array, Array]:
    """Per-position negative log-likelihood ``-log p(target)`` in nats.

    Args:
        logits: ``(batch, seq_len, vocab)`` float scores (NumPy or torch); ``-inf``
            allowed (a token the model rules out), NaN / ``+inf`` rejected.
        targets: ``(batch, seq_len)`` integer token ids in ``[0, vocab)`` or
            ``ignore_index``; same backend as ``logits``.
        ignore_index: target value marking a position that is not scored.

    Returns:
        ``(nll, scored)``, both ``(batch, seq_len)``: ``nll[b, t] =
        -log_softmax(logits[b, t])[targets[b, t]]`` (0 where ignored; ``inf`` if
        the model gave the target probability exactly 0) and the boolean mask of
        scored positions. NumPy inputs give float64 arrays; torch inputs give
        tensors in the dtype of ``logits``.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: see the module docstring.
    """
    _validate(logits, targets, ignore_index)
    if is_tensor(logits):
        scored = targets != ignore_index
        safe = torch.where(scored, targets, torch.zeros_like(targets)).long()
        log_probs = log_softmax(logits, axis=-1)  # (batch, seq_len, vocab)
        picked = torch.gather(log_probs, -1, safe.unsqueeze(-1))  # (batch, seq_len, 1)
        nll = -picked.squeeze(-1)  # (batch, seq_len)
        return torch.where(scored, nll, torch.zeros_like(nll)), scored
    scored = targets != ignore_index
    safe = np.where(scored, targets, 0).astype(np.int64)
    log_probs = log_softmax(np.asarray(logits, dtype=np.float64), axis=-1)  # (batch, L, vocab)
    picked = np.take_along_axis(log_probs, safe[..., None], axis=-1)  # (batch, seq_len, 1)
    nll = -picked[..., 0]  # (batch, seq_len)
    return np.where(scored, nll, 0.0), scored


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction: expected one of {_REDUCTIONS}, got {reduction!r}")


def _per_sequence_mean(nll: Any, scored: Any) -> Any:
    """Mean NLL of each sequence that has at least one scored position: ``(n_seq,)``."""
    counts = scored.sum(-1)  # (batch,)
    keep = counts > 0
    return nll.sum(-1)[keep] / counts[keep]  # (n_seq,)


def _finish(x: Any) -> Any:
    """A Python float for NumPy results; torch results stay 0-dim tensors."""
    return x if is_tensor(x) else float(x)


def negative_log_likelihood(
    logits: Array, targets: Array, ignore_index: int = -100, reduction: str = "token"
) -> Array:
    """Mean negative log-likelihood (cross-entropy) in nats per token.

    Args:
        logits: ``(batch, seq_len, vocab)`` float scores, aligned with ``targets``.
        targets: ``(batch, seq_len)`` integer ids or ``ignore_index``.
        ignore_index: target value of positions that are not scored (default -100).
        reduction: ``"token"`` = mean over all scored tokens (equals
            ``F.cross_entropy`` with the same ``ignore_index``); ``"sequence"`` =
            mean over sequences of each sequence's mean NLL.

    Returns:
        A Python ``float`` for NumPy inputs, a 0-dim tensor for torch inputs.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: see the module docstring.
    """
    _check_reduction(reduction)
    nll, scored = token_nll(logits, targets, ignore_index)
    if reduction == "token":
        return _finish(nll.sum() / scored.sum())
    return _finish(_per_sequence_mean(nll, scored).mean())


def perplexity(
    logits: Array, targets: Array, ignore_index: int = -100, reduction: str = "token"
) -> Array:
    """Perplexity ``exp(mean NLL)`` of next-token predictions.

    Args:
        logits: ``(batch, seq_len, vocab)`` float scores, already aligned with
            ``targets`` (position t of ``logits`` scores ``targets[:, t]``).
        targets: ``(batch, seq_len)`` integer ids in ``[0, vocab)`` or ``ignore_index``.
        ignore_index: target value of positions that are not scored (default -100).
        reduction: ``"token"`` (default): ``exp`` of the mean NLL over every scored
            token of the batch -- the corpus perplexity, as in
            ``torchmetrics.text.Perplexity``. ``"sequence"``: the mean over
            sequences of each sequence's own perplexity ``exp(NLL_b)``; not the
            same number (see the module docstring).

    Returns:
        A Python ``float`` for NumPy inputs; a 0-dim tensor (dtype of ``logits``,
        differentiable) for torch inputs. ``>= 1``; ``inf`` only if the mean NLL
        overflows ``exp`` or a target had probability exactly 0.

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: see the module docstring.

    Example:
        >>> import numpy as np
        >>> round(perplexity(np.zeros((1, 3, 5)), np.array([[0, 4, 2]])), 9)  # uniform
        5.0
    """
    _check_reduction(reduction)
    nll, scored = token_nll(logits, targets, ignore_index)
    exp = torch.exp if is_tensor(nll) else np.exp
    if reduction == "token":
        return _finish(exp(nll.sum() / scored.sum()))
    return _finish(exp(_per_sequence_mean(nll, scored)).mean())


def bits_per_token(
    logits: Array, targets: Array, ignore_index: int = -100, reduction: str = "token"
) -> Array:
    """Mean NLL in bits: ``negative_log_likelihood(...) / ln 2``.

    ``2 ** bits_per_token == perplexity`` for ``reduction="token"``. Arguments,
    return type and errors as for :func:`negative_log_likelihood`.
    """
    return negative_log_likelihood(logits, targets, ignore_index, reduction) / math.log(2.0)
