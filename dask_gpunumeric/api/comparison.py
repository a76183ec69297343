"""Comparing arrays as wholes: ``isclose``, ``allclose`` and ``array_equal``."""
from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array, ArrayLike
from .creation import as_array
from .elementwise import elementwise, promoting
from .reductions import all as _all

__all__ = ["allclose", "array_equal", "array_equiv", "isclose"]


def isclose(a: ArrayLike, b: ArrayLike, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Array:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (equal infinities are close; NaNs only with
    ``equal_nan``), as ``numpy.isclose``: ``b`` is taken in floating point. A boolean Array."""
    x = a if isinstance(a, (int, float, complex)) else as_array(a)
    y = b if isinstance(b, (int, float, complex)) else as_array(b)
    with promoting("isclose", x, y):
        if isinstance(y, Array):
            y = y.astype(np.result_type(y.dtype, 1.0), copy=False)
        elif isinstance(y, int):
            y = float(y)
        close = elementwise("less_equal", abs(elementwise("subtract", x, y)), atol + rtol * abs(y))
        result = (close & elementwise("isfinite", y)) | elementwise("equal", x, y)
        if equal_nan:
            result = result | (elementwise("isnan", x) & elementwise("isnan", y))
    return result


def allclose(a: ArrayLike, b: ArrayLike, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element of ``a`` is close to ``b`` (see ``isclose``): a Python bool, as NumPy's (so it
    computes, like ``x.item()``)."""
    return bool(_all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)).item())


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> bool:
    """Whether the arrays have the same shape and elements (NaNs equal to NaNs with ``equal_nan``): a Python
    bool, as ``numpy.array_equal`` (computed; False at once for different shapes)."""
    x, y = as_array(a1), as_array(a2)
    if x.shape != y.shape:
        return False
    same = x == y
    if equal_nan and (x.dtype.kind in "fc" or y.dtype.kind in "fc"):
        same = same | (elementwise("isnan", x) & elementwise("isnan", y))
    return bool(_all(same).item())


def array_equiv(a1: ArrayLike, a2: ArrayLike) -> bool:
    """Whether the arrays are broadcastable to one shape and equal there: a Python bool, as NumPy's."""
    x, y = as_array(a1), as_array(a2)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return False
    return bool(_all(x == y).item())
