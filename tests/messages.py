"""Error-message matching shared by the package tests.

Every message names the argument, the shape seen and the shape expected; a test
lists the fragments it requires, in order, and each is matched literally.
"""

from __future__ import annotations

import re

import pytest


def msg(*parts: str) -> str:
    """Regex matching the fragments in order (each escaped)."""
    return ".*".join(re.escape(p) for p in parts)


def raises(exc: type[BaseException], *parts: str):
    """``pytest.raises`` whose message must contain every literal part, in order."""
    return pytest.raises(exc, match=msg(*parts))
