"""A failing comparison in a chapter cell says what it compared: ``0.48 > 0.5 is false``.

An IPython extension, loaded by the kernels that execute the chapters (the kernel config
that ``chapter_execution.py`` writes puts this file into ``sys.modules`` and lists it in
``c.InteractiveShellApp.extensions``). It registers an AST transformer: each ``assert``
without a message whose test is a comparison (or an ``and`` of parts, some of them
comparisons) becomes, for the compiler only, a sequence of asserts over the values the
original would have computed, with a message naming both sides of the comparison that
failed::

    assert share > 0.5                 ->  AssertionError: 0.48 > 0.5 is false
    assert 0 < p < 1 and n == 3        ->  AssertionError: 1.2 < 1 is false (p < 1)

It also names the line of any failure, also under ``%xmode Minimal`` (see
``_name_the_cell_lines_in_the_reply``).

The cell's source is not touched (jupyter-cache keys the cache on it), and a passing
assert does exactly what it did: every operand is evaluated once, in the same order,
with the same short-circuits (``a < b < c`` never evaluates ``c`` when ``a < b`` fails;
``x and y`` never evaluates ``y`` when ``x`` fails), and the truth of each comparison is
taken once. The values are held in names no code can spell (``@assert0``), deleted when
the assert is done. Asserts with a message of their own, and tests that are not
comparisons (``assert np.allclose(a, b)``), are left as they are. (A cell tagged
raises-exception whose comparison fails on purpose would show the values in its error
output too; no chapter has one.) Should the transformer
ever fail on a cell, it leaves that cell as it is (IPython would otherwise print a
warning into the cell's output and drop the transformer).
"""

from __future__ import annotations

import ast
import reprlib
from typing import Any

NAME = "book_assert_values"  # the module's name in the kernel's sys.modules
_MAX_REPR = 120

_OPS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}
_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 8


def show(value: Any) -> str:
    """A short, exact rendering of one side of a comparison.

    Numbers by the shortest digits that read back as the same value of their type
    (``0.48``, not NumPy 2's ``np.float64(0.48)``; a tensor's own repr rounds to 4
    decimals, here it does not); anything else by a shortened repr.
    """
    try:
        if type(value) in (bool, int, float, complex):
            return repr(value)
        if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
            if type(value).__name__ == "Tensor":  # via NumPy: float32's shortest digits
                return f"tensor({str(value.detach().cpu().numpy()[()])})"
            return str(value[()])  # NumPy scalar: the shortest digits of its dtype
        text = _repr.repr(value)
    except Exception:  # a repr that fails must not hide the assert
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())  # an array's repr spans lines
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def explain(left: Any, op: str, right: Any, part: str = "") -> str:
    """The message of a failed comparison: both values, and the part of the test that
    failed when the test had more than one."""
    message = f"{show(left)} {op} {show(right)} is false"
    return f"{message} ({part})" if part else message


class AssertValues(ast.NodeTransformer):
    """Rewrites message-less comparison asserts so that their failure shows the values."""

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Module):
            try:
                return self.generic_visit(node)
            except Exception:  # never break a cell: leave it as it was
                return node
        return super().visit(node)

    def _temp(self) -> str:
        self._count += 1
        return f"@assert{self._count}"  # not an identifier: no cell can use or clash with it

    def visit_Assert(self, node: ast.Assert) -> ast.AST | list[ast.stmt]:
        if node.msg is not None:
            return node
        parts = node.test.values if (isinstance(node.test, ast.BoolOp)
                                     and isinstance(node.test.op, ast.And)) else [node.test]
        if not any(isinstance(p, ast.Compare) and type(p.ops[0]) in _OPS for p in parts):
            return node
        several = len(parts) > 1
        temps: list[str] = []
        body: list[ast.stmt] = []
        for part in parts:
            if not (isinstance(part, ast.Compare) and all(type(o) in _OPS for o in part.ops)):
                body.append(ast.Assert(test=part, msg=None))
                continue
            several = several or len(part.ops) > 1
            operands = [part.left, *part.comparators]
            names = [self._temp() for _ in operands]
            temps += names
            body.append(_assign(names[0], operands[0]))
            for k, op in enumerate(part.ops):
                body.append(_assign(names[k + 1], operands[k + 1]))
                pair = ast.Compare(left=operands[k], ops=[op], comparators=[operands[k + 1]])
                source = ast.unparse(pair) if several else ""
                msg = ast.Call(
                    func=ast.Attribute(
                        value=ast.Call(func=ast.Name("__import__", ast.Load()),
                                       args=[ast.Constant(NAME)], keywords=[]),
                        attr="explain", ctx=ast.Load()),
                    args=[_load(names[k]), ast.Constant(_OPS[type(op)]), _load(names[k + 1]),
                          ast.Constant(source)],
                    keywords=[])
                body.append(ast.Assert(
                    test=ast.Compare(left=_load(names[k]), ops=[op],
                                     comparators=[_load(names[k + 1])]),
                    msg=msg))
        start = ast.Assign(targets=[_store(n) for n in temps], value=ast.Constant(None))
        done = ast.Delete(targets=[ast.Name(n, ast.Del()) for n in temps])
        guarded = ast.If(test=ast.Name("__debug__", ast.Load()),
                         body=[start, ast.Try(body=body, handlers=[], orelse=[],
                                              finalbody=[done])],
                         orelse=[])
        # the new nodes carry the assert's line: a failure is reported on it
        for new in ast.walk(guarded):
            if isinstance(new, ast.stmt | ast.expr) and not hasattr(new, "lineno"):
                ast.copy_location(new, node)
        return guarded


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_store(name)], value=value)


def _load(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _store(name: str) -> ast.Name:
    return ast.Name(name, ast.Store())


def cell_lines(ipython: Any, error: BaseException) -> list[str]:
    """``Cell In[n], line k`` for each frame of ``error``'s traceback that ran in a cell,
    outermost first (a SyntaxError: where it is), as IPython's full traceback names them."""
    cells = getattr(getattr(ipython, "compile", None), "_filename_map", None) or {}
    lines = []
    tb = error.__traceback__
    while tb is not None:
        n = cells.get(tb.tb_frame.f_code.co_filename)
        if n is not None:
            lines.append(f"Cell In[{n}], line {tb.tb_lineno}")
        tb = tb.tb_next
    if isinstance(error, SyntaxError) and cells.get(error.filename) is not None:
        lines.append(f"Cell In[{cells[error.filename]}], line {error.lineno}")
    return lines


def _name_the_cell_lines_in_the_reply(ipython: Any) -> None:
    """The execute reply's traceback ends with the cell lines the error passed through.

    The chapters set ``%xmode Minimal`` (a cell tagged raises-exception shows only its
    error), and then IPython's traceback has no frame at all, so the build could not say
    which line of a failing cell failed. ipykernel sends the traceback twice: as the
    cell's error output (what a page shows) and, from ``shell._last_traceback``, in the
    execute reply, which nbclient turns into the CellExecutionError the build reports.
    Only the second gets the lines. Wraps ipykernel's ``ZMQInteractiveShell._showtraceback``
    on this shell (_ext/README.md lists it); without ipykernel it does nothing.
    """
    original = getattr(ipython, "_showtraceback", None)
    if original is None or getattr(original, "_names_cell_lines", False):
        return

    def _showtraceback(etype: type, evalue: BaseException, stb: list[str]) -> None:
        original(etype, evalue, stb)  # the error output, as it was
        try:
            if getattr(ipython, "_last_traceback", None) is stb:
                lines = cell_lines(ipython, evalue)
                if lines:
                    ipython._last_traceback = [*stb, *lines]
        except Exception:  # never let the report's extra lines hide the error itself
            pass

    _showtraceback._names_cell_lines = True
    ipython._showtraceback = _showtraceback


def load_ipython_extension(ipython: Any) -> None:
    """Register the transformer in this kernel (once), and the cell lines of a failure."""
    if not any(isinstance(t, AssertValues) for t in ipython.ast_transformers):
        ipython.ast_transformers.append(AssertValues())
    _name_the_cell_lines_in_the_reply(ipython)
