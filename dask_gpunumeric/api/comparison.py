"""Comparing arrays as wholes: ``isclose``, ``allclose`` and ``array_equal``."""
from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array, ArrayLike
from .creation import as_array, full
from .elementwise import elementwise, promoting
from .reductions import all as _all

__all__ = ["allclose", "array_equal", "isclose"]


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


def allclose(a: ArrayLike, b: ArrayLike, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Array:
    """Whether every element of ``a`` is close to ``b`` (see ``isclose``), as a lazy 0-d boolean Array."""
    return _all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> Array:
    """Whether the arrays have the same shape and elements (NaNs equal to NaNs with ``equal_nan``), as
    ``numpy.array_equal``, as a lazy 0-d boolean Array (False at once for different shapes)."""
    x, y = as_array(a1), as_array(a2)
    if x.shape != y.shape:
        return full((), False, dtype=bool, backend="cupy" if "cupy" in (x.backend, y.backend) else "numpy")
    same = x == y
    if equal_nan and (x.dtype.kind in "fc" or y.dtype.kind in "fc"):
        same = same | (elementwise("isnan", x) & elementwise("isnan", y))
    return _all(same)
