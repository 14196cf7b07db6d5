"""How the package tests look at the input checks: error messages, and what gets checked.

Every message names the argument, the shape seen and the shape expected; a test
lists the fragments it requires, in order, and each is matched literally
(:func:`msg`, :func:`raises`). Each input is checked once, where it enters the
package; :func:`checked_names` records which tensors' values get checked.
"""

from __future__ import annotations

import re
import sys

import pytest


def msg(*parts: str) -> str:
    """Regex matching the fragments in order (each escaped)."""
    return ".*".join(re.escape(p) for p in parts)


def raises(exc: type[BaseException], *parts: str):
    """``pytest.raises`` whose message must contain every literal part, in order."""
    return pytest.raises(exc, match=msg(*parts))


def checked_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names passed to ``check_finite`` (the values check: NaN, inf) from now on, in order.

    Wraps ``check_finite`` in every loaded ``selfattn`` module that holds it, so a
    check counts wherever it is called from.
    """
    import selfattn._checks

    seen: list[str] = []
    real = selfattn._checks.check_finite

    def spy(name, x):
        seen.append(name)
        real(name, x)

    for module in list(sys.modules.values()):
        if module.__name__.startswith("selfattn") and getattr(module, "check_finite", None) is real:
            monkeypatch.setattr(module, "check_finite", spy)
    return seen
