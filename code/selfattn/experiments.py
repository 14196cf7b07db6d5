"""The experiment set-up the training chapters share: text, tokens, models, seeds, glue.

Every chapter that trains a model trains it on the same toy task: character-level
text drawn from a tiny grammar ("the cat walks by the bank."), read by a small
:class:`~selfattn.language_model.TinyLM`, once per seed, with the spread over the
seeds shown. This module holds that set-up once:

* :func:`grammar_text` draws the text and :func:`toy_data` splits its character
  ids into training ids and held-out ids (:class:`ToyData`);
* :func:`toy_model` builds the chapters' model, 2 blocks of 4 heads of width 32
  for windows of 16 characters unless told otherwise;
* :func:`train_over_seeds` trains one model per setting and seed (the seed fixes
  both the initial weights and the order of the batches, so the runs of one seed
  are paired across settings) and returns a :class:`Run` for each;
* :func:`summary` gives mean, standard deviation, lowest and highest over seeds;
* :func:`glue_values` names the numbers a chapter glues into its prose (an
  array becomes its lowest and highest value), and :func:`round_down` /
  :func:`round_up` round a bound in its direction: the number after "more than"
  or "at least" down, after "less than" or "at most" up, so the claim stays true
  after rounding. Both are pure functions: a chapter passes their values to
  myst-nb's ``glue``, and a published notebook, whose ``glue`` calls are
  removed, still runs.

Shape legend: ``n`` characters of text; ``settings`` rows, ``seeds`` columns.

Bad input raises ``TypeError`` or ``ValueError`` naming the argument; nothing
returns NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Any

import numpy as np
import torch

from selfattn._checks import check_positive_int
from selfattn.data import CharTokenizer
from selfattn.language_model import LMConfig, TinyLM
from selfattn.training import train_language_model

__all__ = [
    "PLACES",
    "SUBJECTS",
    "SUMMARY_COLUMNS",
    "TRAIN_OPTIONS",
    "VERBS",
    "Run",
    "ToyData",
    "glue_values",
    "grammar_text",
    "round_down",
    "round_up",
    "summary",
    "toy_data",
    "toy_model",
    "train_over_seeds",
]

# --- the toy grammar ---------------------------------------------------------------

#: The grammar's subjects, drawn first in every sentence.
SUBJECTS = ("the cat", "a dog", "the river", "my money", "an old bird")
#: Its verbs, drawn second.
VERBS = ("walks by", "sleeps near", "flows past", "grows in", "sits on")
#: Its places, drawn last.
PLACES = ("the bank", "the river", "the tree", "the house")


def grammar_text(sentences: int = 3000, seed: int = 0) -> str:
    """``sentences`` random sentences of the grammar, joined by single spaces.

    Each sentence is "subject verb place.", each part drawn uniformly from
    :data:`SUBJECTS`, :data:`VERBS` and :data:`PLACES`, in that order, from
    ``numpy.random.default_rng(seed)``: the same seed gives the same text.

    Raises:
        ValueError: ``sentences`` not a positive int (TypeError: not an int).
    """
    check_positive_int("sentences", sentences)
    rng = np.random.default_rng(seed)

    def sentence() -> str:
        parts = (rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES))
        return " ".join(parts) + "."

    return " ".join(sentence() for _ in range(sentences))


@dataclass(frozen=True)
class ToyData:
    """The grammar's text as character ids, split for training and evaluation.

    Attributes:
        text: the text, ``n`` characters.
        tokenizer: a :class:`~selfattn.data.CharTokenizer` over its characters.
        ids: ``(n,)`` int64 ids of the whole text.
        train_ids: the first 90 % of ``ids``.
        held_out: ids after those, at most ``held_out_chars`` of them.
    """

    text: str
    tokenizer: CharTokenizer
    ids: np.ndarray
    train_ids: np.ndarray
    held_out: np.ndarray

    @property
    def vocab_size(self) -> int:
        """V, the number of distinct characters."""
        return self.tokenizer.vocab_size


def toy_data(sentences: int = 3000, *, held_out_chars: int | None = 4096,
             seed: int = 0) -> ToyData:
    """The chapters' data: :func:`grammar_text`, tokenized by character, split 90/10.

    Args:
        sentences: sentences of text.
        held_out_chars: keep this many of the held-out ids (4096 are enough to
            score these models), or None for all of the last 10 %.
        seed: the text's seed.

    Returns:
        A :class:`ToyData`.

    Raises:
        ValueError: a size that is not a positive int.
    """
    if held_out_chars is not None:
        check_positive_int("held_out_chars", held_out_chars)
    text = grammar_text(sentences, seed)
    tokenizer = CharTokenizer(text)
    ids = np.array(tokenizer.encode(text))
    split = int(0.9 * len(ids))
    end = None if held_out_chars is None else split + held_out_chars
    return ToyData(text, tokenizer, ids, ids[:split], ids[split:end])


# --- models and runs ---------------------------------------------------------------

_MODEL_DEFAULTS: dict[str, Any] = {"seq_len": 16, "d_model": 32, "num_heads": 4, "num_layers": 2}

TRAIN_OPTIONS = frozenset(
    {"steps", "batch_size", "lr", "eval_tokens", "eval_every", "weight_decay", "warmup",
     "grad_clip"})
"""The keyword arguments of :func:`~selfattn.training.train_language_model` a setting may hold."""


def toy_model(vocab_size: int, *, seed: int | None = None, **settings: Any) -> TinyLM:
    """The chapters' model: a :class:`~selfattn.language_model.TinyLM` for windows of 16.

    Args:
        vocab_size: V.
        seed: if given, ``torch.manual_seed(seed)`` first, which fixes the
            initial weights.
        **settings: more :class:`~selfattn.language_model.LMConfig` fields, or
            other values for the defaults ``seq_len=16, d_model=32,
            num_heads=4, num_layers=2`` (``positional`` defaults to LMConfig's,
            ``"learned"``).

    Raises:
        TypeError, ValueError: as :class:`~selfattn.language_model.LMConfig`.
    """
    if seed is not None:
        torch.manual_seed(seed)
    return TinyLM(LMConfig(vocab_size=vocab_size, **(_MODEL_DEFAULTS | settings)))


@dataclass
class Run:
    """One trained model of :func:`train_over_seeds`.

    Attributes:
        setting: the setting's name; seed: its seed.
        model: the trained model (eval mode).
        history: what :func:`~selfattn.training.train_language_model` returned.
        records: ``record(step, model)`` at every recorded step, step 0 first
            (before any update), if a ``record`` was given.
        result: ``evaluate(model, seed)`` after training, if an ``evaluate`` was given.
    """

    setting: Hashable
    seed: int
    model: TinyLM
    history: list[dict[str, Any]]
    records: list[Any] = field(default_factory=list)
    result: Any = None


def train_over_seeds(
    settings: Mapping[Hashable, Mapping[str, Any]],
    seeds: Iterable[int],
    train_ids: Any,
    *,
    vocab_size: int | None = None,
    shared: Mapping[str, Any] | None = None,
    build: Callable[..., TinyLM] | None = None,
    record: Callable[[int, TinyLM], Any] | None = None,
    evaluate: Callable[[TinyLM, int], Any] | None = None,
    steps: int = 120,
    batch_size: int = 16,
    lr: float = 1e-2,
    **train_options: Any,
) -> dict[tuple[Hashable, int], Run]:
    """Train one model per setting and seed; the runs, keyed ``(setting, seed)``.

    Settings in order, and for each the seeds in order: build the model with
    ``build(seed=seed, **model_settings)`` (default: :func:`toy_model` with
    ``vocab_size``, which seeds torch with ``seed`` first, so the runs of one
    seed start from the same weights when the settings draw the same random
    numbers), train it with :func:`~selfattn.training.train_language_model`
    with ``seed=seed`` (the same batches for every setting), then call
    ``evaluate(model, seed)``.

    Args:
        settings: name -> keyword arguments. Those in :data:`TRAIN_OPTIONS` go
            to the training and override the defaults below; the others go to
            ``build``.
        seeds: the seeds, the same for every setting.
        train_ids: the training token ids.
        vocab_size: V for the default ``build``.
        shared: keyword arguments of every setting (a setting's own win),
            routed as the settings' are, e.g. ``{"positional": "rope"}``.
        build: ``build(seed=..., **model_settings) -> TinyLM``; it must seed its
            own random draws. Default :func:`toy_model`.
        record: ``record(step, model)``, kept in :attr:`Run.records` at every
            recorded step (it must not draw from torch's random generator).
        evaluate: ``evaluate(model, seed)``, kept in :attr:`Run.result`.
        steps: the training's default number of steps; likewise
            ``batch_size``, ``lr`` and any other ``train_options``
            (:func:`~selfattn.training.train_language_model`).

    Returns:
        ``{(setting, seed): Run}`` in training order.

    Raises:
        ValueError: no ``build`` and no ``vocab_size``; an unknown training
            option; no seeds.
        TypeError: ``settings`` not a mapping of mappings.
    """
    if build is None:
        if vocab_size is None:
            raise ValueError("vocab_size: expected an int when no build is given, got None")

        def build(seed: int, **model_settings: Any) -> TinyLM:
            return toy_model(vocab_size, seed=seed, **model_settings)

    unknown = set(train_options) - TRAIN_OPTIONS
    if unknown:
        raise ValueError(f"train_options: unknown training options {sorted(unknown)}; "
                         f"expected some of {sorted(TRAIN_OPTIONS)}")
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings: expected a mapping name -> dict, got {type(settings).__name__}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    defaults = {"steps": steps, "batch_size": batch_size, "lr": lr, **train_options}
    runs: dict[tuple[Hashable, int], Run] = {}
    for name, options in settings.items():
        if not isinstance(options, Mapping):
            raise TypeError(f"settings[{name!r}]: expected a mapping of keyword arguments, "
                            f"got {type(options).__name__}")
        options = dict(shared or {}) | dict(options)
        training = defaults | {k: v for k, v in options.items() if k in TRAIN_OPTIONS}
        model_settings = {k: v for k, v in options.items() if k not in TRAIN_OPTIONS}
        for seed in seeds:
            model = build(seed=seed, **model_settings)
            records: list[Any] = []
            callback = None if record is None else (
                lambda step, m, records=records: records.append(record(step, m)))
            history = train_language_model(model, train_ids, seed=seed, callback=callback,
                                           **training)
            run = Run(name, seed, model, history, records)
            if evaluate is not None:
                run.result = evaluate(model, seed)
            runs[name, seed] = run
    return runs


# --- numbers over seeds ------------------------------------------------------------

SUMMARY_COLUMNS = ("mean", "± sd", "min", "max")
"""Column labels of :func:`summary`."""


def summary(values: Any) -> np.ndarray:
    """Mean, standard deviation (``ddof=1``), lowest and highest of each row.

    Args:
        values: ``(settings, seeds)`` array, at least 2 seeds, finite.

    Returns:
        ``(settings, 4)`` float64 array; columns :data:`SUMMARY_COLUMNS`.

    Raises:
        ValueError: not 2-D, fewer than 2 seeds (no spread), or not finite.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 2:
        raise ValueError(f"values: expected shape (settings, seeds) with seeds >= 2, "
                         f"got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"values: expected finite numbers, shape {values.shape}")
    return np.column_stack([values.mean(1), values.std(1, ddof=1),
                            values.min(1), values.max(1)])


# --- glue ----------------------------------------------------------------------------

def glue_values(prefix: str = "", /, **values: Any) -> dict[str, Any]:
    """The numbers to glue, by name: each value as ``prefix + name``.

    A scalar (Python or NumPy, or a 0-d array or tensor) becomes a Python number;
    an array or sequence of numbers becomes its lowest and highest value, as
    ``prefix + name + "_lo"`` and ``"_hi"`` (the range over seeds). Pass a bound
    through :func:`round_down` or :func:`round_up` first. A chapter glues the
    result with myst-nb::

        for key, value in glue_values("as_", ppl=ppl, ratio=round_down(r, 1)).items():
            glue(key, value, display=False)

    Raises:
        TypeError: ``prefix`` not a string.
        ValueError: an empty array, or a NaN (named by its key).
    """
    if not isinstance(prefix, str):
        raise TypeError(f"prefix: expected a str, got {type(prefix).__name__}")
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        if isinstance(value, str):
            out[prefix + name] = value
            continue
        array = np.asarray(value)
        if array.ndim == 0:
            flat = {prefix + name: array.item()}
        elif array.size == 0:
            raise ValueError(f"{prefix + name}: expected at least one value, "
                             f"got shape {array.shape}")
        else:
            flat = {f"{prefix}{name}_lo": np.min(array).item(),
                    f"{prefix}{name}_hi": np.max(array).item()}
        for key, number in flat.items():
            if isinstance(number, float) and math.isnan(number):
                raise ValueError(f"{key}: expected a number, got nan")
        out.update(flat)
    return out


def _directed(name: str, x: Any, digits: Any, significant: bool, rounding: str) -> Any:
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)):
        raise TypeError(f"digits: expected an int, got {type(digits).__name__}")
    if significant and digits < 1:
        raise ValueError(f"digits: expected >= 1 significant digits, got {digits}")
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    array = np.asarray(x, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"x: expected finite numbers to round {name}, got {x!r}")
    context = Context(prec=60, rounding=rounding)

    def one(v: float) -> float:
        exact = Decimal(repr(float(v)))  # the shortest decimal that reads back as v
        places = int(digits)
        if significant and v != 0:
            places = int(digits) - 1 - exact.adjusted()  # adjusted(): the exponent of
            # the leading digit
        step = Decimal(1).scaleb(-places)
        return float(exact.quantize(step, rounding=rounding, context=context))

    if array.ndim == 0:
        return one(float(array))
    return np.vectorize(one, otypes=[np.float64])(array)


def round_down(x: Any, digits: int, *, significant: bool = False) -> Any:
    """``x`` rounded towards minus infinity, to glue after "more than", "at least".

    The largest multiple of ``10**-digits`` that is at most ``x`` (with
    ``significant=True``: ``digits`` significant digits), so a claim "at least
    {x}" printed with that many digits stays true: 41.997 becomes 41.99 at two
    decimals and 41 at none, where rounding to nearest would print 42.
    Printed with the same number of digits (``:.{digits}f``, or for
    significant digits ``:.{digits - 1}e``), the float returned shows exactly
    that decimal. A float is read as its shortest decimal (``repr``), so 0.3
    stays 0.3 although its binary value is a little below.

    Args:
        x: a number, or an array / tensor of numbers (rounded elementwise).
        digits: decimal places (may be negative: -1 rounds to tens), or with
            ``significant`` the number of significant digits (>= 1).
        significant: count significant digits instead of decimal places.

    Returns:
        A Python float, or a float64 array of ``x``'s shape.

    Raises:
        TypeError: ``digits`` not an int.
        ValueError: ``x`` not finite; ``digits < 1`` with ``significant``.

    Example:
        >>> round_down(41.997, 0), round_down(12.53, 1), round_down(-0.25, 1)
        (41.0, 12.5, -0.3)
    """
    return _directed("down", x, digits, significant, ROUND_FLOOR)


def round_up(x: Any, digits: int, *, significant: bool = False) -> Any:
    """``x`` rounded towards plus infinity, to glue after "less than", "at most".

    The smallest multiple of ``10**-digits`` that is at least ``x`` (with
    ``significant=True``: ``digits`` significant digits), so a claim "never
    passes {x}" printed with that many digits stays true: 7.71 becomes 7.8 at
    one decimal, where rounding to nearest would print 7.7. See
    :func:`round_down`.

    Example:
        >>> round_up(7.71, 1), round_up(7.07, 0), round_up(4.2e-9, 1, significant=True)
        (7.8, 8.0, 5e-09)
    """
    return _directed("up", x, digits, significant, ROUND_CEILING)
