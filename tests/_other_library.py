"""A stand-in for another library that uses gnp Arrays without knowing about the guards: each function does
one guarded thing. test_guards.py checks that ``gnp.allow*`` switched on by the caller reaches in here."""
from __future__ import annotations

from typing import Any


def first_element(x: Any) -> Any:
    """Scalar indexing: the first element of a 1-d array."""
    return x[0]


def add(a: Any, b: Any) -> Any:
    """A binary operation that may promote dtypes."""
    return a + b


def as_float(x: Any) -> float:
    """An implicit conversion of a 0-d array to a Python float."""
    return float(x)
