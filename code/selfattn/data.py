"""Data for the perplexity chapter: a language whose best perplexity is known.

:class:`MarkovSource` is a first-order Markov chain over ``V`` token ids. Each
token depends only on the one before it, through a transition matrix ``P``
(``P[i, j] = p(next = j | current = i)``, rows sum to 1). For such a source
the best any model can do is known in closed form:

* ``pi``, the stationary distribution, solves ``pi P = pi`` (sampling starts
  from ``pi``, so every position has the same distribution);
* the **entropy rate** ``H = sum_i pi_i H(P_i)`` (nats), with
  ``H(P_i) = -sum_j P_ij log P_ij``, is the smallest possible expected NLL of
  predicting a token *given its predecessor* -- knowing more of the prefix
  does not help, because of the Markov property;
* ``exp(H)`` is therefore the **perplexity floor** of next-token prediction.

The helpers :func:`fit_bigram` (count-based estimate of ``P``),
:class:`CharTokenizer` (text <-> ids) and :func:`batches` (random
``(inputs, targets)`` windows shifted by one) complete the toolkit.

Shape legend: ``V`` vocab size; ``num_sequences`` rows, ``seq_len`` tokens per
row; ``batch`` windows per batch, ``L`` = ``seq_len`` positions per window.
Token arrays are int64.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from selfattn._checks import check_array, check_positive_int, check_token_range, is_tensor, shape_of

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = ["CharTokenizer", "MarkovSource", "batches", "fit_bigram"]


def _entropy_rows(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of ``p`` (..., V), with 0 log 0 = 0: shape (...)."""
    logs = np.log(np.where(p > 0, p, 1.0))  # log 1 = 0 where p = 0
    return -(p * logs).sum(axis=-1)


def _check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")


def _as_int_array(name: str, tokens: Any) -> np.ndarray:
    """Token ids (NumPy or torch, integer dtype) as an int64 NumPy array."""
    check_array(name, tokens)
    arr = tokens.detach().cpu().numpy() if is_tensor(tokens) else tokens
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer dtype (token ids), got {tokens.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_transition(transition: Any) -> np.ndarray:
    """``transition`` checked (see :class:`MarkovSource`), renormalised, float64 ``(V, V)``."""
    check_array("transition", transition)
    p = transition.detach().cpu().numpy() if is_tensor(transition) else transition
    if not np.issubdtype(p.dtype, np.floating):
        raise TypeError(f"transition: expected a floating-point dtype, got {p.dtype}")
    p = np.array(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] == 0:
        raise ValueError(f"transition: expected shape (V, V) with V >= 1, got shape {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any():
        raise ValueError(
            f"transition: expected finite non-negative probabilities (shape {p.shape})"
        )
    sums = p.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > 1e-8)
    if bad.size:
        raise ValueError(
            f"transition: expected every row to sum to 1 (shape {p.shape}), "
            f"row {int(bad[0])} sums to {float(sums[bad[0]])!r}"
        )
    p = p / sums[:, None]  # (V, V) / (V, 1): renormalise each row exactly
    reach = p > 0  # reach[i, j]: j reachable from i in >= 1 step
    for _ in range(max(1, math.ceil(math.log2(max(p.shape[0], 2)))) + 1):
        reach = reach | ((reach.astype(np.int64) @ reach.astype(np.int64)) > 0)
    stuck = np.flatnonzero(~reach.all(axis=1))
    if stuck.size:
        raise ValueError(
            f"transition: the chain is reducible (shape {p.shape}); token {int(stuck[0])} "
            "cannot reach every other token, so the stationary distribution is not unique"
        )
    return p


def _stationary(p: np.ndarray) -> np.ndarray:
    """Solve ``pi (P - I) = 0`` with ``sum(pi) = 1`` (unique for an irreducible chain)."""
    v = p.shape[0]
    a = p.T - np.eye(v)  # (V, V): rows are the equations (P^T - I) pi = 0
    a[-1, :] = 1.0  # replace one (redundant) equation by sum(pi) = 1
    b = np.zeros(v)
    b[-1] = 1.0
    pi = np.linalg.solve(a, b)
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


class MarkovSource:
    """A first-order Markov chain over ``V`` tokens with a known entropy rate.

    Args:
        transition: ``(V, V)`` row-stochastic matrix, ``transition[i, j] =
            p(next = j | current = i)``: non-negative, rows summing to 1 (within
            1e-8; they are renormalised exactly). The chain must be
            *irreducible* (every token reachable from every token) so that the
            stationary distribution is unique.

    Raises:
        TypeError: ``transition`` is not a float array/tensor.
        ValueError: not square 2-D, empty, negative or non-finite entries, a row
            not summing to 1, or a reducible chain (message names the first token
            that cannot reach all others).

    Example:
        >>> src = MarkovSource(np.array([[0.9, 0.1], [0.5, 0.5]]))
        >>> round(src.entropy_rate(), 4)  # (5/6) H(0.9, 0.1) + (1/6) ln 2
        0.3864
    """

    def __init__(self, transition: Any) -> None:
        self._p = _check_transition(transition)  # (V, V), rows sum to 1 exactly
        self._p.setflags(write=False)
        self._pi = _stationary(self._p)  # (V,)

    @classmethod
    def random(
        cls,
        vocab_size: int,
        branching: int = 3,
        seed: int = 0,
        concentration: float | None = None,
    ) -> MarkovSource:
        """A random sparse chain: each token has ``branching`` possible successors.

        Token ``i`` always may be followed by ``(i + 1) % V`` (this cycle makes
        the chain irreducible) and by ``branching - 1`` other distinct tokens
        drawn at random.

        Args:
            vocab_size: ``V``, number of tokens (>= 2).
            branching: number of successors per token, ``1 <= branching <= V``.
            seed: seed of ``numpy.random.default_rng``.
            concentration: ``None`` (default) gives each successor probability
                ``1 / branching``, so the entropy rate is exactly
                ``log(branching)`` and the perplexity floor *is* the branching
                factor. A float ``alpha > 0`` instead draws each row's successor
                probabilities from ``Dirichlet(alpha, ..., alpha)`` (uneven rows;
                the floor is then below ``branching``).

        Returns:
            A :class:`MarkovSource` of ``vocab_size`` tokens.

        Raises:
            TypeError: a wrong type or dtype.
            ValueError: a non-int or out-of-range argument.
        """
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("branching", branching)
        _check_seed(seed)
        if vocab_size < 2:
            raise ValueError(f"vocab_size: expected an int >= 2, got {vocab_size}")
        if branching > vocab_size:
            raise ValueError(
                f"branching: expected an int in [1, vocab_size={vocab_size}], got {branching}"
            )
        if concentration is not None and not (
            isinstance(concentration, (int, float)) and concentration > 0
        ):
            raise ValueError(f"concentration: expected None or a float > 0, got {concentration!r}")
        rng = np.random.default_rng(seed)
        p = np.zeros((vocab_size, vocab_size))
        for i in range(vocab_size):
            nxt = (i + 1) % vocab_size
            others = np.array([j for j in range(vocab_size) if j != nxt])
            succ = np.concatenate([[nxt], rng.choice(others, size=branching - 1, replace=False)])
            if concentration is None:
                w = np.full(branching, 1.0 / branching)
            else:
                w = rng.dirichlet(np.full(branching, float(concentration)))
            p[i, succ] = w
        return cls(p)

    # ------------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        """``V``, the number of tokens."""
        return int(self._p.shape[0])

    @property
    def transition(self) -> np.ndarray:
        """The ``(V, V)`` transition matrix (read-only float64 array)."""
        return self._p

    def stationary_distribution(self) -> np.ndarray:
        """``pi``, shape ``(V,)``: the distribution with ``pi @ P == pi``, summing to 1."""
        return self._pi.copy()

    def entropy_rate(self) -> float:
        """Entropy rate in nats per token: ``sum_i pi_i H(P_i)``.

        The smallest expected NLL of a model that predicts each token from its
        prefix (which, for this source, may as well be just the previous token).
        """
        return float(self._pi @ _entropy_rows(self._p))

    def stationary_entropy(self) -> float:
        """``H(pi)`` in nats: the best expected NLL of the *first* token, which has no prefix."""
        return float(_entropy_rows(self._pi))

    def perplexity_floor(self) -> float:
        """``exp(entropy_rate())``: the lowest perplexity achievable on predicted tokens
        that have at least one token of context (every target of :func:`batches`)."""
        return math.exp(self.entropy_rate())

    def expected_perplexity(self, num_predicted: int, predict_first: bool = False) -> float:
        """The exact best expected per-token perplexity of a sequence.

        With ``(inputs, targets)`` windows from :func:`batches` every target has
        at least its predecessor as context, so the answer is
        ``exp(entropy_rate())`` for any length (``predict_first=False``, the
        setting of this package's training and evaluation). If instead the first
        token of each sequence is also predicted, from no context (e.g. after a
        beginning-of-sequence token), it costs ``H(pi)`` and the floor becomes
        ``exp((H(pi) + (n - 1) H) / n)`` for ``n = num_predicted`` tokens.
        ("Expected" is the exp of the expected NLL: the per-token perplexity of
        an infinitely long evaluation set.)

        Args:
            num_predicted: ``n`` >= 1, predicted tokens per sequence.
            predict_first: whether the first of them is predicted without context.
        """
        check_positive_int("num_predicted", num_predicted)
        if not predict_first:
            return self.perplexity_floor()
        h = self.entropy_rate()
        return math.exp((self.stationary_entropy() + (num_predicted - 1) * h) / num_predicted)

    # ------------------------------------------------------------------ sampling
    def sample(self, num_sequences: int, seq_len: int, seed: int = 0) -> np.ndarray:
        """Draw independent sequences; the first token of each comes from ``pi``.

        Args:
            num_sequences: number of rows (>= 1).
            seq_len: tokens per row (>= 1).
            seed: seed of ``numpy.random.default_rng`` (same seed, same tokens).

        Returns:
            int64 array of shape ``(num_sequences, seq_len)``.
        """
        check_positive_int("num_sequences", num_sequences)
        check_positive_int("seq_len", seq_len)
        _check_seed(seed)
        rng = np.random.default_rng(seed)
        u = rng.random((num_sequences, seq_len))  # (num_sequences, seq_len) uniforms in [0, 1)
        out = np.empty((num_sequences, seq_len), dtype=np.int64)
        # inverse-CDF sampling: the next token is the first j with cdf[j] > u.
        # Normalising by the last cumulative sum makes cdf[-1] exactly 1, so a
        # zero-probability token is never drawn.
        cdf0 = np.cumsum(self._pi)
        cdf0 /= cdf0[-1]
        cdf = np.cumsum(self._p, axis=1)  # (V, V)
        cdf /= cdf[:, -1:]
        out[:, 0] = (cdf0[None, :] <= u[:, :1]).sum(axis=1)  # (1, V) vs (n, 1) -> (n,)
        for t in range(1, seq_len):
            rows = cdf[out[:, t - 1]]  # (num_sequences, V)
            out[:, t] = (rows <= u[:, t : t + 1]).sum(axis=1)
        return out

    def log_probs(self, inputs: Any) -> np.ndarray:
        """The source's own next-token log-probabilities: an oracle "model".

        Args:
            inputs: ``(batch, L)`` int token ids (NumPy or torch) in ``[0, V)``.

        Returns:
            float64 ``(batch, L, V)``: ``log P[inputs[b, t], :]``, with ``-inf``
            for impossible successors. Feed it to
            :func:`selfattn.perplexity.perplexity` as ``logits``.

        Raises:
            TypeError: ``inputs`` not an integer array/tensor.
            ValueError: ``inputs`` not 2-D or ids out of range.
        """
        x = _as_int_array("inputs", inputs)
        if x.ndim != 2:
            raise ValueError(f"inputs: expected shape (batch, L), got shape {x.shape}")
        if x.size:
            check_token_range("inputs", x, self.vocab_size, x.shape)
        with np.errstate(divide="ignore"):
            logp = np.log(self._p)  # (V, V), -inf where P = 0
        return logp[x]  # (batch, L, V)

    def __repr__(self) -> str:
        return (
            f"MarkovSource(vocab_size={self.vocab_size}, entropy_rate={self.entropy_rate():.4f}, "
            f"perplexity_floor={self.perplexity_floor():.4f})"
        )


def fit_bigram(tokens: Any, vocab_size: int, smoothing: float = 0.0) -> np.ndarray:
    """Estimate a transition matrix by counting bigrams (the maximum-likelihood fit).

    ``P_hat[i, j] = (count(i -> j) + smoothing) / (count(i -> .) + V * smoothing)``.
    A token never seen as a predecessor (with ``smoothing == 0``) gets a uniform
    row rather than ``0 / 0``.

    Args:
        tokens: int ids in ``[0, vocab_size)``, shape ``(n,)`` (one stream) or
            ``(num_sequences, seq_len)`` (bigrams counted within each row, never
            across rows). NumPy or torch.
        vocab_size: ``V``.
        smoothing: add-``smoothing`` (Laplace for 1.0) pseudo-count, >= 0.

    Returns:
        float64 ``(V, V)`` row-stochastic matrix.

    Raises:
        TypeError: non-integer ``tokens``.
        ValueError: ``tokens`` not 1-D/2-D, ids out of range, negative ``smoothing``.
    """
    check_positive_int("vocab_size", vocab_size)
    x = _as_int_array("tokens", tokens)
    if x.ndim not in (1, 2):
        raise ValueError(
            f"tokens: expected shape (n,) or (num_sequences, seq_len), got shape {x.shape}"
        )
    if x.size and (x.min() < 0 or x.max() >= vocab_size):
        raise ValueError(
            f"tokens: expected token ids in [0, {vocab_size}), "
            f"got values in [{int(x.min())}, {int(x.max())}] (shape {x.shape})"
        )
    if not (isinstance(smoothing, (int, float)) and smoothing >= 0):
        raise ValueError(f"smoothing: expected a float >= 0, got {smoothing!r}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x  # (num_sequences, seq_len)
    counts = np.zeros((vocab_size, vocab_size))
    np.add.at(counts, (rows[:, :-1].ravel(), rows[:, 1:].ravel()), 1.0)
    counts += smoothing
    totals = counts.sum(axis=1, keepdims=True)  # (V, 1)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), 1.0 / vocab_size)


class CharTokenizer:
    """Character-level tokenizer: each distinct character is one token id.

    Args:
        text: a string whose distinct characters form the alphabet (e.g. the
            training text itself), or a sequence of single characters given in the
            id order you want. A string is de-duplicated and **sorted**, so the
            ids do not depend on where characters first appear.

    Raises:
        TypeError: ``text`` is neither a string nor a sequence of strings.
        ValueError: empty alphabet, an element that is not a single character,
            or a repeated character in an explicit sequence.

    Example:
        >>> tok = CharTokenizer("hello")
        >>> tok.alphabet, tok.encode("hole")
        ('ehlo', [1, 3, 2, 0])
    """

    def __init__(self, text: str | Sequence[str]) -> None:
        if isinstance(text, str):
            chars = sorted(set(text))
        elif isinstance(text, Sequence):
            chars = list(text)
            for c in chars:
                if not isinstance(c, str) or len(c) != 1:
                    raise ValueError(f"text: expected single characters, got {c!r}")
            if len(set(chars)) != len(chars):
                dup = next(c for c in chars if chars.count(c) > 1)
                raise ValueError(f"text: character {dup!r} appears more than once")
        else:
            raise TypeError(
                f"text: expected a str or a sequence of characters, got {type(text).__name__}"
            )
        if not chars:
            raise ValueError("text: expected at least one character, got an empty alphabet")
        self._chars = "".join(chars)
        self._ids = {c: i for i, c in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        """Number of distinct characters ``V``."""
        return len(self._chars)

    @property
    def alphabet(self) -> str:
        """The characters in id order; ``alphabet[i]`` is token ``i``."""
        return self._chars

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (length ``len(text)``).

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: a character outside the alphabet (named, with its position).
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        out = []
        for pos, c in enumerate(text):
            if c not in self._ids:
                raise ValueError(
                    f"text: character {c!r} at position {pos} is not in the alphabet "
                    f"{self._chars!r}"
                )
            out.append(self._ids[c])
        return out

    def decode(self, ids: Any) -> str:
        """The string of token ids ``ids`` (a sequence of ints, or a 1-D array/tensor).

        Raises:
            ValueError: an id outside ``[0, vocab_size)`` (named, with its position).
        """
        if is_tensor(ids) or isinstance(ids, np.ndarray):
            if ids.ndim != 1:
                raise ValueError(f"ids: expected shape (n,), got shape {shape_of(ids)}")
            ids = ids.tolist()
        out = []
        for pos, i in enumerate(ids):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"ids: expected ints, got {type(i).__name__} at position {pos}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(
                    f"ids: token id {int(i)} at position {pos} is outside [0, {self.vocab_size})"
                )
            out.append(self._chars[i])
        return "".join(out)

    def __repr__(self) -> str:
        return f"CharTokenizer(alphabet={self._chars!r})"


def batches(
    tokens: Any,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
    num_batches: int | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Random training windows, targets shifted one step ahead of inputs.

    Each window is ``seq_len + 1`` consecutive tokens ``w`` taken at a random
    offset (of a random row); it yields ``inputs = w[:-1]`` and
    ``targets = w[1:]``, so ``targets[:, t]`` is the token that follows
    ``inputs[:, t]``. Every target therefore has at least one token of context.

    Args:
        tokens: int ids, shape ``(n,)`` (one long stream) or
            ``(num_sequences, n)`` (windows never cross rows); needs
            ``n >= seq_len + 1``. NumPy or torch.
        seq_len: ``L``, positions per window.
        batch_size: windows per batch.
        seed: seed of ``numpy.random.default_rng`` (same seed, same batches).
        num_batches: stop after this many batches; ``None`` = endless.

    Yields:
        ``(inputs, targets)``, both int64 ``(batch_size, L)``, torch tensors if
        ``tokens`` is a tensor, NumPy arrays otherwise.

    Raises:
        TypeError: non-integer ``tokens`` or non-int sizes.
        ValueError: ``tokens`` not 1-D/2-D or shorter than ``seq_len + 1``.
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("batch_size", batch_size)
    _check_seed(seed)
    if num_batches is not None:
        check_positive_int("num_batches", num_batches)
    as_torch = is_tensor(tokens)
    x = _as_int_array("tokens", tokens)
    if x.ndim not in (1, 2):
        raise ValueError(
            f"tokens: expected shape (n,) or (num_sequences, n), got shape {x.shape}"
        )
    rows = x.reshape(1, -1) if x.ndim == 1 else x  # (num_sequences, n)
    n = rows.shape[1]
    if n < seq_len + 1:
        raise ValueError(
            f"tokens: expected at least seq_len + 1 = {seq_len + 1} tokens per row, "
            f"got shape {x.shape}"
        )
    return _batch_iter(rows, seq_len, batch_size, seed, num_batches, as_torch)


def _batch_iter(
    rows: np.ndarray,
    seq_len: int,
    batch_size: int,
    seed: int,
    num_batches: int | None,
    as_torch: bool,
) -> Iterator[tuple[Any, Any]]:
    rng = np.random.default_rng(seed)
    num_rows, n = rows.shape
    offsets = np.arange(seq_len + 1)  # (L + 1,)
    done = 0
    while num_batches is None or done < num_batches:
        r = rng.integers(0, num_rows, size=batch_size)  # (batch,)
        s = rng.integers(0, n - seq_len, size=batch_size)  # (batch,) window starts
        w = rows[r[:, None], s[:, None] + offsets[None, :]]  # (batch, L + 1)
        inputs, targets = w[:, :-1], w[:, 1:]  # (batch, L) each
        if as_torch:
            yield torch.from_numpy(inputs.copy()), torch.from_numpy(targets.copy())
        else:
            yield inputs.copy(), targets.copy()
        done += 1
