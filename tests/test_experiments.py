"""selfattn.experiments: the training chapters' set-up, and bounds glued in their direction.

The second half reads every chapter's source: a glued number right after a bound
word ("more than", "at most", ...) must be glued through round_down / round_up,
in the bound's direction and with the digits the prose prints. The check cannot
see a negation, which flips the direction ("no head puts more than x" is "every
head puts at most x"): write such a bound positively.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from selfattn.data import CharTokenizer
from selfattn.experiments import (
    SUMMARY_COLUMNS,
    glue_values,
    grammar_text,
    round_down,
    round_up,
    summary,
    toy_data,
    toy_model,
    train_over_seeds,
)
from selfattn.language_model import LMConfig, TinyLM
from selfattn.training import train_language_model

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"


# --- the set-up ----------------------------------------------------------------------

def chapters_grammar(sentences: int) -> str:
    """The grammar cell every training chapter typed before this module (reference)."""
    text_rng = np.random.default_rng(0)
    subjects = ["the cat", "a dog", "the river", "my money", "an old bird"]
    verbs = ["walks by", "sleeps near", "flows past", "grows in", "sits on"]
    places = ["the bank", "the river", "the tree", "the house"]

    def sentence():
        parts = (text_rng.choice(subjects), text_rng.choice(verbs), text_rng.choice(places))
        return " ".join(parts) + "."

    return " ".join(sentence() for _ in range(sentences))


def test_grammar_text_is_the_chapters_text() -> None:
    for n in (1200, 3000):
        assert grammar_text(n) == chapters_grammar(n)
    # pinned: a change in the order of the draws changes every number of six chapters
    digest = hashlib.sha256(grammar_text(3000).encode()).hexdigest()[:16]
    assert digest == "eb84ad17314c0dfd", digest
    assert grammar_text(5, seed=1) != grammar_text(5)
    with pytest.raises(ValueError, match="sentences"):
        grammar_text(0)


def test_toy_data_splits_90_10_and_caps_the_held_out_text() -> None:
    data = toy_data()
    ids = np.array(CharTokenizer(data.text).encode(data.text))
    split = int(0.9 * len(ids))
    assert np.array_equal(data.ids, ids) and data.ids.dtype == np.int64
    assert np.array_equal(data.train_ids, ids[:split])
    assert np.array_equal(data.held_out, ids[split:split + 4096])
    assert data.vocab_size == len(set(data.text)) == 24
    everything = toy_data(1200, held_out_chars=None)
    n = len(everything.ids)
    assert len(everything.held_out) == n - int(0.9 * n) > 4096 // 2
    with pytest.raises(ValueError, match="held_out_chars"):
        toy_data(held_out_chars=0)


def test_toy_model_defaults_overrides_and_seed() -> None:
    model = toy_model(24, seed=3)
    c = model.config
    assert (c.vocab_size, c.seq_len, c.d_model, c.num_heads, c.num_layers, c.positional) == (
        24, 16, 32, 4, 2, "learned")
    torch.manual_seed(3)
    same = TinyLM(LMConfig(vocab_size=24, seq_len=16, d_model=32, num_heads=4, num_layers=2))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters(),
                                                 strict=True))
    other = toy_model(24, seed=4)
    assert not torch.equal(other.tok_emb.weight, model.tok_emb.weight)
    rope = toy_model(24, num_heads=2, positional="rope", seq_len=8)
    assert (rope.config.num_heads, rope.config.positional, rope.config.seq_len) == (2, "rope", 8)
    with pytest.raises(ValueError, match="positional"):
        toy_model(24, positional="nope")


def test_train_over_seeds_is_the_chapters_loop() -> None:
    data = toy_data(200, held_out_chars=256)
    settings = {"plain": {}, "fast, rope": {"lr": 0.05, "positional": "rope"}}
    runs = train_over_seeds(
        settings, (0, 1), data.train_ids, vocab_size=data.vocab_size, steps=4,
        shared={"eval_every": 2, "positional": "learned"},
        record=lambda step, m: (step, m.tok_emb.weight.norm().item()),
        evaluate=lambda m, seed: (seed, m.config.positional))
    assert list(runs) == [("plain", 0), ("plain", 1), ("fast, rope", 0), ("fast, rope", 1)]
    for (name, seed), run in runs.items():  # each: what the chapters typed by hand
        torch.manual_seed(seed)
        options = settings[name]
        model = TinyLM(LMConfig(vocab_size=data.vocab_size, seq_len=16, d_model=32,
                                num_heads=4, num_layers=2,
                                positional=options.get("positional", "learned")))
        history = train_language_model(model, data.train_ids, steps=4, batch_size=16,
                                       lr=options.get("lr", 1e-2), seed=seed, eval_every=2)
        assert run.history == history
        assert all(torch.equal(a, b) for a, b in zip(run.model.parameters(),
                                                     model.parameters(), strict=True))
        assert [r[0] for r in run.records] == [0, 2, 4]  # step 0: before any update
        assert run.result == (seed, options.get("positional", "learned"))
        assert (run.setting, run.seed) == (name, seed)
    # one seed, two settings: paired, the same initial weights and batches
    first = runs["plain", 0].records[0][1]
    assert runs["fast, rope", 0].records[0][1] == first != runs["plain", 1].records[0][1]


def test_train_over_seeds_bad_input() -> None:
    ids = toy_data(50, held_out_chars=64).train_ids
    with pytest.raises(ValueError, match="vocab_size"):
        train_over_seeds({"a": {}}, (0,), ids)
    with pytest.raises(ValueError, match="unknown training options.*'stpes'"):
        train_over_seeds({"a": {}}, (0,), ids, vocab_size=24, stpes=3)
    with pytest.raises(ValueError, match="seeds"):
        train_over_seeds({"a": {}}, (), ids, vocab_size=24)
    with pytest.raises(TypeError, match=r"settings\['a'\]"):
        train_over_seeds({"a": 0.1}, (0,), ids, vocab_size=24)


def test_summary_columns_and_errors() -> None:
    values = np.array([[1.0, 2.0, 6.0], [3.0, 3.0, 3.0]])
    np.testing.assert_allclose(summary(values), [[3.0, math.sqrt(7.0), 1.0, 6.0],
                                                 [3.0, 0.0, 3.0, 3.0]])
    assert SUMMARY_COLUMNS == ("mean", "± sd", "min", "max")
    with pytest.raises(ValueError, match=r"seeds >= 2, got shape \(2, 1\)"):
        summary(values[:, :1])
    with pytest.raises(ValueError, match="finite"):
        summary(np.array([[1.0, np.nan]]))


def test_glue_values_names_scalars_and_ranges_as_python_numbers() -> None:
    out = glue_values("kv_", steps=np.int64(120), ppl=np.float64(1.5),
                      cost=np.array([0.3, 0.1, 0.2]), seeds=range(3), who="MHA",
                      top=torch.tensor([2.0, 5.0]))
    assert out == {"kv_steps": 120, "kv_ppl": 1.5, "kv_cost_lo": 0.1, "kv_cost_hi": 0.3,
                   "kv_seeds_lo": 0, "kv_seeds_hi": 2, "kv_who": "MHA",
                   "kv_top_lo": 2.0, "kv_top_hi": 5.0}
    assert type(out["kv_steps"]) is int and type(out["kv_ppl"]) is float  # repr: 120, 1.5
    assert glue_values(n=3) == {"n": 3}
    with pytest.raises(ValueError, match="kv_x_lo: expected a number, got nan"):
        glue_values("kv_", x=[np.nan, 1.0])
    with pytest.raises(ValueError, match="kv_x: expected at least one value"):
        glue_values("kv_", x=[])


@pytest.mark.parametrize("digits", [0, 1, 2, 3])
def test_directed_rounding_prints_a_true_bound(digits: int) -> None:
    rng = np.random.default_rng(digits)
    x = rng.uniform(-50, 50, 2000)
    down, up = round_down(x, digits), round_up(x, digits)
    step = 10.0**-digits
    for v, d, u in zip(x, down, up, strict=True):
        shown_d, shown_u = float(f"{d:.{digits}f}"), float(f"{u:.{digits}f}")
        assert shown_d == d and shown_u == u  # printed as it was rounded
        assert shown_d <= v < shown_d + step + 1e-12
        assert shown_u - step - 1e-12 < v <= shown_u
    # the review's four: each wrong to nearest, true in its direction
    assert f"{round_up(7.71, 1):.1f}" == "7.8"  # "never passes 7.7" was false
    assert f"{round_up(7.07, 0):.0f}" == "8"  # "less than 7 %"
    assert f"{round_down(41.997, 0):.0f}" == "41"  # "at least 42 %"
    assert f"{round_down(12.5, 0):.0f}" == "12"  # "more than 13 times"
    assert round_down(12.53, 1) == 12.5 and round_down(0.3, 1) == 0.3  # exact stays exact


def test_directed_rounding_significant_digits_and_errors() -> None:
    assert f"{round_up(4.21e-9, 1, significant=True):.0e}" == "5e-09"
    assert f"{round_down(4.29e-9, 2, significant=True):.1e}" == "4.2e-09"
    assert round_up(-4.21e-9, 1, significant=True) == -4e-09
    assert round_down(0.0, 1, significant=True) == 0.0 and round_up(123.4, -1) == 130.0
    assert isinstance(round_up(np.float32(1.25), 1), float)
    assert round_down(torch.tensor([1.26, 2.0]), 1).tolist() == [1.2, 2.0]
    with pytest.raises(ValueError, match="finite"):
        round_up(float("nan"), 1)
    with pytest.raises(TypeError, match="digits"):
        round_down(1.0, 1.5)
    with pytest.raises(ValueError, match="significant"):
        round_down(1.0, 0, significant=True)


# --- bounds in the chapters' prose ---------------------------------------------------

DOWN_WORDS = ("more than", "at least", "above", "over", "exceeds", "exceed", "greater than",
              "larger than", "no less than", "not less than")
UP_WORDS = ("less than", "fewer than", "at most", "never passes", "never pass", "below",
            "under", "no more than", "not more than", "within", "up to", "smaller than")
_BOUND = "|".join(sorted(map(re.escape, DOWN_WORDS + UP_WORDS), key=len, reverse=True))
ROLE = re.compile(r"\{glue(?::text|:any|:)?\}`(?P<key>[^`:]+)(?::(?P<fmt>[^`]*))?`")
BOUND_BEFORE = re.compile(rf"(?i)(?<![\w-])(?P<word>{_BOUND})\s*(?:an? (?:(?:fraction|factor) )?)?"
                          r"(?:\$[^$]*\$\s*)?$")  # "at most a fraction {x}", "above $x =$ {x}"
RANGE_AFTER = re.compile(r"\s*(?:to|–)\s*\{glue")
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
HELPERS = {"round_down": "down", "round_up": "up"}


def precision(fmt: str) -> tuple[int, bool] | None:
    """(digits, significant) a format spec prints, or None (no rounding: exact)."""
    m = re.fullmatch(r"[^.]*\.(\d+)([fFeEgG%])", fmt or "")
    if not m:
        return None
    n, kind = int(m.group(1)), m.group(2).lower()
    if kind == "f":
        return n, False
    if kind == "%":
        return n + 2, False
    return (n + 1 if kind == "e" else max(n, 1)), True


def directed_keys(source: str) -> dict[str, tuple[str, int | None, bool]]:
    """key -> (direction, digits, significant) for every key the code cells glue
    through round_down / round_up, by ``glue("key", round_x(...))`` or as a keyword of
    ``glue_values("prefix", name=round_x(...))`` (name, name_lo and name_hi)."""
    found: dict[str, tuple[str, int | None, bool]] = {}

    def helper(node: ast.AST) -> tuple[str, int | None, bool] | None:
        if not isinstance(node, ast.Call):
            return None
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        if name not in HELPERS:
            return None
        digits = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "digits"), None)
        significant = any(k.arg == "significant" and isinstance(k.value, ast.Constant)
                          and k.value.value is True for k in node.keywords)
        n = digits.value if isinstance(digits, ast.Constant) else None
        return HELPERS[name], n, significant

    for cell in CODE_CELL.finditer(source):
        code = "\n".join(ln for ln in cell.group("code").split("\n") if not ln.startswith(":"))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = getattr(node.func, "id", getattr(node.func, "attr", ""))
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) and isinstance(
                first.value, str) else None
            if func == "glue" and literal is not None and len(node.args) > 1:
                how = helper(node.args[1])
                if how:
                    found[literal] = how
            elif func == "glue_values":
                prefix = literal if literal is not None else ("" if first is None else None)
                if prefix is None:
                    continue
                pairs = [(k.arg, k.value) for k in node.keywords if k.arg]
                for k in node.keywords:  # **{"name": value}
                    if k.arg is None and isinstance(k.value, ast.Dict):
                        pairs += [(key.value, v) for key, v in zip(k.value.keys, k.value.values,
                                                                   strict=True)
                                  if isinstance(key, ast.Constant)]
                for name, value in pairs:
                    how = helper(value)
                    if how:
                        for key in (name, f"{name}_lo", f"{name}_hi"):
                            found[prefix + key] = how
    return found


def undirected_bounds(source: str) -> list[str]:
    """Every glued number after a bound word that is not glued in the bound's direction
    with the digits its role prints: one message each, with the line."""
    keys = directed_keys(source)
    prose = CODE_CELL.sub(lambda m: "\n" * m.group(0).count("\n"), source)
    problems = []
    for role in ROLE.finditer(prose):
        digits = precision(role.group("fmt") or "")
        if digits is None:  # printed in full: an int, or every digit of a float
            continue
        before = re.sub(r"\s+", " ", prose[max(0, role.start() - 80):role.start()])
        bound = BOUND_BEFORE.search(before)
        if not bound or RANGE_AFTER.match(prose, role.end()) or "\\approx" in bound.group(0):
            continue  # no bound; a range's low end, "up to {lo} to {hi}"; "above $x \\approx$"
        word = bound.group("word").lower()
        want = "down" if word in DOWN_WORDS else "up"
        line = prose.count("\n", 0, role.start()) + 1
        key, where = role.group("key"), f"line {line}: {word!r} {role.group(0)}"
        if key not in keys:
            problems.append(f"{where}: glue it through round_{want}")
            continue
        direction, n, significant = keys[key]
        if direction != want:
            problems.append(f"{where}: glued through round_{direction}, the bound needs "
                            f"round_{want}")
        elif (n, significant) != digits:
            problems.append(f"{where}: rounded to {n} {'significant ' * significant}digits, "
                            f"printed with {digits[0]}")
    return problems


def test_the_bound_check_finds_what_it_should() -> None:
    code = ('```{code-cell} ipython3\n'
            'glue("a", round_up(x, 1), display=False)\n'
            'glue("b", x, display=False)\n'
            'for key, value in glue_values("p_", c=round_down(y, 0), d=y).items():\n'
            '    glue(key, value, display=False)\n'
            'glue("e", round_up(z, 1, significant=True), display=False)\n'
            '```\n')
    ok = ("It never passes {glue:text}`a:.1f`, in every seed more than\n"
          "{glue:text}`p_c_lo:.0f` times, at most a fraction {glue:text}`e:.0e`, between\n"
          "{glue:text}`b:.2f` and {glue:text}`p_d_hi:.2f`; over {glue:text}`b` seeds; up to\n"
          "{glue:text}`b:.2f` to {glue:text}`a:.1f` nats, far above $c \\approx$\n"
          "{glue:text}`b:.0f`.\n")
    assert undirected_bounds(code + ok) == []
    bad = ("Less than {glue:text}`b:.1f`, at least {glue:text}`a:.1f`, below\n"
           "{glue:text}`p_c_hi:.0f`, above $x =$ {glue:text}`p_d_lo:.1f`, under\n"
           "{glue:text}`a:.2f`, within {glue:text}`a:.0%`.\n")
    problems = undirected_bounds(code + bad)
    assert len(problems) == 6, problems
    assert "'less than' {glue:text}`b:.1f`: glue it through round_up" in problems[0]
    assert "round_up, the bound needs round_down" in problems[1]
    assert "round_down, the bound needs round_up" in problems[2]
    assert "'above' {glue:text}`p_d_lo:.1f`: glue it through round_down" in problems[3]
    assert "rounded to 1 digits, printed with 2" in problems[4]
    assert "printed with 2" in problems[5]  # .0% prints a percentage: 2 more digits


def test_every_chapter_glues_its_bounds_in_their_direction() -> None:
    problems, directed = [], 0
    for path in sorted(CHAPTERS.glob("*.md")):
        source = path.read_text(encoding="utf-8")
        problems += [f"{path.name} {p}" for p in undirected_bounds(source)]
        directed += len(directed_keys(source))
    assert not problems, "\n".join(problems)
    assert directed >= 40  # the check reads the chapters' glue, not nothing
