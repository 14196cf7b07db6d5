"""The docstring examples of ``selfattn`` run as tests.

pytest collects them with ``--doctest-modules`` over ``code/selfattn``
(``pyproject.toml``), in ``make test`` and ``make test-fast``. This file checks
that they are still collected: the modules below keep their examples, and the
configuration that runs them is in place (without it they would never run and
nothing would fail).
"""

from __future__ import annotations

import doctest
import importlib

import pytest

WITH_EXAMPLES = [
    "attention",
    "data",
    "kernel_regression",
    "masks",
    "perplexity",
    "plotting",
    "positional",
    "similarity",
    "softmax",
]


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_module_keeps_its_docstring_examples(name: str) -> None:
    # import_module: the attribute selfattn.softmax is the function, not the module
    module = importlib.import_module(f"selfattn.{name}")
    examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
    assert examples > 0, f"selfattn.{name} has no docstring example left"


def test_pytest_runs_the_package_doctests(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getoption("doctestmodules")
    assert "code/selfattn" in pytestconfig.getini("testpaths")
