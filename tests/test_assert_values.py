"""_ext/assert_values.py: a failing comparison assert in a chapter says what it compared,
and a passing one does exactly what it did (the kernels run every chapter through it)."""

from __future__ import annotations

import ast
import sys
import textwrap

import numpy as np
import pytest
import torch

from sitetools import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import assert_values  # noqa: E402

sys.modules.setdefault(assert_values.NAME, assert_values)  # where the kernel config puts it


def _run(source: str, transform: bool) -> dict:
    """Execute ``source`` as a cell (transformed as the kernel does, or not): its namespace,
    with ``error`` the message of an AssertionError and ``line`` the line it came from."""
    tree = ast.parse(textwrap.dedent(source))
    if transform:
        tree = ast.fix_missing_locations(assert_values.AssertValues().visit(tree))
    ns: dict = {}
    try:
        exec(compile(tree, "<cell>", "exec"), ns)
    except AssertionError as exc:
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        ns["error"], ns["line"] = str(exc), tb.tb_lineno
    ns.pop("__builtins__", None)
    return ns


def _message(source: str) -> str:
    ns = _run(source, transform=True)
    assert "error" in ns, "the assert did not fail"
    return ns["error"]


def test_a_failing_comparison_names_both_values_on_the_asserts_line() -> None:
    ns = _run("""
        share = 0.48

        assert share > 0.5
    """, transform=True)
    assert ns["error"] == "0.48 > 0.5 is false"
    assert ns["line"] == 4  # the traceback points at the assert, not at a made-up line
    assert not [k for k in ns if k.startswith("@")], ns  # nothing left behind


@pytest.mark.parametrize(("source", "message"), [
    ("a, b = 1, 2\nassert a == b", "1 == 2 is false"),
    ("assert 3 != 3", "3 != 3 is false"),
    ("assert 2 <= 1", "2 <= 1 is false"),
    ("assert 1 >= 2", "1 >= 2 is false"),
    ("assert 5 in [1, 2]", "5 in [1, 2] is false"),
    ("assert 1 not in (1,)", "1 not in (1,) is false"),
    ("assert None is not None", "None is not None is false"),
    # a chain names the link that failed, and the later links are not evaluated
    ("p = 1.2\nassert 0 < p < 1", "1.2 < 1 is false (p < 1)"),
    # an `and` of parts: the part that failed
    ("n, p = 3, 0.2\nassert n == 3 and p > 0.5", "0.2 > 0.5 is false (p > 0.5)"),
    # NumPy and torch scalars by their shortest digits, not np.float64(...) or tensor(0.4800)
    ("import numpy as np\nassert np.float64(0.48) > 0.5", "0.48 > 0.5 is false"),
    ("import numpy as np\nassert np.float32(0.1) > 1", "0.1 > 1 is false"),
    ("import torch\nassert torch.tensor(0.123456) > 1", "tensor(0.123456) > 1 is false"),
    ("import numpy as np\nassert np.zeros(3).sum() == 1", "0.0 == 1 is false"),
    # long values are shortened
    ("assert list(range(100)) == []", "[0, 1, 2, 3, 4, 5, 6, 7, ...] == [] is false"),
])
def test_each_comparison_says_what_it_compared(source: str, message: str) -> None:
    assert _message(source) == message


def test_asserts_inside_functions_and_class_bodies_too() -> None:
    assert _message("def f(x):\n    assert x == 3\n    return x\nf(3)\nf(4)") == "4 == 3 is false"
    ns = _run("class A:\n    z = 2\n    assert z == 2\n", transform=True)
    assert "error" not in ns and set(vars(ns["A"])) == set(vars(_run(
        "class A:\n    z = 2\n    assert z == 2\n", transform=False)["A"]))


@pytest.mark.parametrize(("source", "message"), [
    ("assert 1 > 2, 'my words'", "my words"),  # a message of the author's own is kept
    ("assert []", ""),  # not a comparison: as it was
    ("import numpy as np\nassert np.allclose(1, 2)", ""),
])
def test_other_asserts_are_left_as_they_are(source: str, message: str) -> None:
    assert _message(source) == message
    tree = ast.parse(source)
    assert ast.dump(assert_values.AssertValues().visit(ast.parse(source))) == ast.dump(tree)


# Cells whose asserts pass (or fail) with side effects: the transformed cell must evaluate
# the same operands, in the same order, as often, and take each truth value as often.
_SAME = [
    "assert f(2) < f(3) < f(4)",
    "assert f(2) < f(1) < f(3)",  # fails at the first link: f(3) never runs
    "assert f(1) == 1 and f(2) > 5 and f(3) == 3",  # fails at the second part
    "assert f(1) == 1 and f([]) or f(0) == 0",  # `or`: not rewritten, still the same
    "assert f(3) in f([1, 2, 3])",
    "t = Truth()\nassert f(t) == f(1)\nassert f(t) < f(0)",
    "x = f(5)\nassert f(x) > f(4)\ny = x + 1",
    "def g(v):\n    assert f(v) >= f(0)\n    return v\ng(1)\ng(-1)",
]
_PRELUDE = """
calls = []
def f(v):
    calls.append(repr(v))
    return v
class Truth:
    def __repr__(self):
        return "Truth()"
    def __eq__(self, other):
        calls.append("eq")
        return self
    def __lt__(self, other):
        calls.append("lt")
        return self
    def __bool__(self):
        calls.append("bool")
        return False
"""


@pytest.mark.parametrize("source", _SAME)
def test_the_rewritten_cell_evaluates_what_the_original_did(source: str) -> None:
    before = _run(_PRELUDE + source, transform=False)
    after = _run(_PRELUDE + source, transform=True)
    assert after["calls"] == before["calls"]
    assert ("error" in after) == ("error" in before)
    assert after.get("line") == before.get("line")
    keep = set(before) - {"error", "line", "f", "Truth", "g"}
    assert set(after) - {"error", "line", "f", "Truth", "g"} == keep  # no new names
    assert {k: after[k] for k in keep if k != "t"} == {k: before[k] for k in keep if k != "t"}


def test_array_comparisons_fail_as_they_did() -> None:
    """`assert a == b` on arrays raises NumPy's ambiguity error with or without the rewrite."""
    source = "import numpy as np\nassert np.zeros(2) == np.zeros(2)"
    for transform in (False, True):
        with pytest.raises(ValueError, match="ambiguous"):
            _run(source, transform)


def test_show_keeps_every_digit_that_decides_a_comparison() -> None:
    assert assert_values.show(0.1 + 0.2) == "0.30000000000000004"
    assert assert_values.show(np.float64(0.49999999999)) == "0.49999999999"
    assert assert_values.show(torch.tensor(0.5, requires_grad=True)) == "tensor(0.5)"
    assert assert_values.show(np.array(2.5)) == "2.5"
    long = assert_values.show(np.arange(5000.0).reshape(50, 100))
    assert len(long) <= 120 and "\n" not in long


def test_a_transformer_that_breaks_leaves_the_cell_as_it_was(monkeypatch) -> None:
    """IPython would print a warning into the cell's output and drop the transformer."""
    def broken(self, node):
        raise RuntimeError("bug")
    monkeypatch.setattr(assert_values.AssertValues, "visit_Assert", broken)
    tree = ast.parse("assert 1 < 2")
    assert ast.dump(assert_values.AssertValues().visit(tree)) == ast.dump(ast.parse("assert 1 < 2"))


def test_ipython_loads_it_as_an_extension() -> None:
    """The way the kernels load it (chapter_execution's kernel config): by its name."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    try:
        shell.extension_manager.load_extension(assert_values.NAME)
        shell.extension_manager.load_extension(assert_values.NAME)  # once only
        assert sum(isinstance(t, assert_values.AssertValues) for t in shell.ast_transformers) == 1
        result = shell.run_cell("share = 0.48\nassert share > 0.5", silent=True)
        assert str(result.error_in_exec) == "0.48 > 0.5 is false"
        assert not [k for k in shell.user_ns if k.startswith("@")]
        assert shell.run_cell("x = 2\nassert x == 2\nx + 1").result == 3  # shown as before
    finally:
        shell.cleanup()


def test_the_reported_line_is_the_innermost_frame_of_the_failing_cell() -> None:
    """chapter_execution marks the line where the cell failed: inside a function the cell
    defined when it failed there, never a line of another cell's function."""
    from chapter_execution import _failing_line

    def tb(*frames: tuple[int, int]) -> str:
        return "\n".join(f"\x1b[0;32mCell In[{n}], line {k}\x1b[0m\n  ..." for n, k in frames)

    assert _failing_line(tb((7, 30))) == 30
    assert _failing_line(tb((7, 30), (7, 3))) == 3  # in a function defined in this cell
    assert _failing_line(tb((7, 30), (2, 12))) == 30  # in a function of cell 2
    assert _failing_line(tb((7, 30), (7, 3), (2, 12))) == 3
    assert _failing_line("no cell frames") is None


def test_the_reply_names_the_cell_lines_and_the_error_output_stays_as_it_was() -> None:
    """ipykernel's shell sends `stb` as the cell's error output and keeps it for the
    execute reply; the wrapper adds the failure's cell lines to the reply's copy only."""
    from types import SimpleNamespace

    class KernelShell:  # the part of ipykernel's ZMQInteractiveShell the wrapper meets
        def __init__(self) -> None:
            self.compile = SimpleNamespace(_filename_map={"/tmp/ipykernel_1/7.py": 7})
            self.ast_transformers: list = []
            self.sent: list = []
            self._last_traceback = None

        def _showtraceback(self, etype, evalue, stb):
            self.sent.append(list(stb))
            self._last_traceback = stb

    shell = KernelShell()
    assert_values.load_ipython_extension(shell)
    assert_values.load_ipython_extension(shell)  # once only
    cell = "def check(v):\n    assert v > 0.5\n\n\ncheck(0.48)\n"
    try:
        exec(compile(cell, "/tmp/ipykernel_1/7.py", "exec"), {})
    except AssertionError as exc:
        error = exc
    stb = ["AssertionError"]  # what %xmode Minimal shows
    shell._showtraceback(AssertionError, error, stb)
    assert shell.sent == [["AssertionError"]]  # the error output: as it was
    assert shell._last_traceback == ["AssertionError", "Cell In[7], line 5",
                                     "Cell In[7], line 2"]
    from chapter_execution import _failing_line

    assert _failing_line("\n".join(shell._last_traceback)) == 2
