"""Reductions (sum, prod, mean, var, std, min, max, all, any, argmin, argmax) and scans (cumsum, cumprod),
with ``axis`` (int or tuple), ``keepdims`` and ``dtype`` as in NumPy. Full reductions give lazy 0-d Arrays."""
from __future__ import annotations

import builtins
import functools
from typing import Any

import numpy as np

from .. import config
from .array import Array, ArrayLike
from .elementwise import as_array
from ..expr import Reduction, Scan
from .manipulation import normalize_axes, normalize_axis, ravel


def _no_out(out: Any) -> None:
    if out is not None:
        raise TypeError("out= is not supported: Arrays are immutable, assign the result instead (y = gnp.sum(x))")




def _reduce(kind: str, x: ArrayLike, axis: Any, keepdims: bool, dtype: np.dtype, params: tuple = (),
            split_every: int | None = None) -> Array:
    a = as_array(x)
    axes = normalize_axes(axis, a.ndim)
    if kind in ("min", "max", "argmin", "argmax") and builtins.any(a.shape[d] == 0 for d in axes):
        if kind in ("argmin", "argmax"):
            raise ValueError(f"attempt to get {kind} of an empty sequence")
        name = {"min": "minimum", "max": "maximum"}[kind]
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    split = split_every or config.get("split-every")
    return Array(Reduction(a.expr, kind, axes, bool(keepdims), np.dtype(dtype), split, params))


def _probe(x: Array) -> np.ndarray:
    return np.empty((1,), dtype=x.dtype)


def _numpy_dtype(func: str, x: Array, dtype: Any) -> np.dtype:
    """The dtype of NumPy's ``func`` of an array of ``x``'s dtype, given ``dtype=``."""
    try:
        return _numpy_dtype_of(func, x.dtype, dtype)
    except TypeError:  # an unhashable dtype argument: NumPy says what is wrong with it
        return getattr(np, func)(_probe(x), dtype=dtype).dtype


@functools.lru_cache(maxsize=1024)
def _numpy_dtype_of(func: str, of: np.dtype, dtype: Any) -> np.dtype:
    return getattr(np, func)(np.empty((1,), dtype=of), dtype=dtype).dtype


def sum(x: ArrayLike, /, axis: Any = None, dtype: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:  # noqa: A001
    """Sum of elements over ``axis`` (all axes by default); integer sums widen as in NumPy."""
    _no_out(out)
    a = as_array(x)
    return _reduce("sum", a, axis, keepdims, _numpy_dtype("sum", a, dtype))


def prod(x: ArrayLike, /, axis: Any = None, dtype: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Product of elements over ``axis``."""
    _no_out(out)
    a = as_array(x)
    return _reduce("prod", a, axis, keepdims, _numpy_dtype("prod", a, dtype))


def mean(x: ArrayLike, /, axis: Any = None, dtype: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Arithmetic mean over ``axis`` (float64 for integer input, as in NumPy)."""
    _no_out(out)
    a = as_array(x)
    out_dtype = _numpy_dtype("mean", a, dtype)
    return _reduce("mean", a, axis, keepdims, out_dtype, (out_dtype,))


def _var(kind_sqrt: bool, x: ArrayLike, axis: Any, dtype: Any, ddof: Any, correction: Any, keepdims: bool) -> Array:
    a = as_array(x)
    if ddof is not None and correction is not None:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    ddof = correction if correction is not None else (ddof or 0)
    out_dtype = _numpy_dtype("var", a, dtype)
    acc = _numpy_dtype("mean", a, dtype)
    return _reduce("var", a, axis, keepdims, out_dtype, (acc, ddof, kind_sqrt))


def var(x: ArrayLike, /, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = None, *,
        keepdims: bool = False, correction: Any = None) -> Array:
    """Variance over ``axis``; ``correction`` (array API) or ``ddof`` (NumPy) is subtracted from N."""
    _no_out(out)
    return _var(False, x, axis, dtype, ddof, correction, keepdims)


def std(x: ArrayLike, /, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = None, *,
        keepdims: bool = False, correction: Any = None) -> Array:
    """Standard deviation over ``axis`` (square root of ``var``)."""
    _no_out(out)
    return _var(True, x, axis, dtype, ddof, correction, keepdims)


def min(x: ArrayLike, /, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:  # noqa: A001
    """Smallest element over ``axis`` (NaN if any element is NaN)."""
    _no_out(out)
    a = as_array(x)
    return _reduce("min", a, axis, keepdims, a.dtype)


def max(x: ArrayLike, /, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:  # noqa: A001
    """Largest element over ``axis`` (NaN if any element is NaN)."""
    _no_out(out)
    a = as_array(x)
    return _reduce("max", a, axis, keepdims, a.dtype)


def all(x: ArrayLike, /, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:  # noqa: A001
    """True where every element over ``axis`` is true."""
    _no_out(out)
    return _reduce("all", x, axis, keepdims, np.dtype(bool))


def any(x: ArrayLike, /, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Array:  # noqa: A001
    """True where some element over ``axis`` is true."""
    _no_out(out)
    return _reduce("any", x, axis, keepdims, np.dtype(bool))


def _arg(kind: str, x: ArrayLike, axis: Any, keepdims: bool) -> Array:
    a = as_array(x)
    if axis is None:
        flat = _reduce(kind, ravel(a), 0, False, np.dtype(np.intp))
        return flat.reshape((1,) * a.ndim) if keepdims else flat
    return _reduce(kind, a, normalize_axis(axis, a.ndim), keepdims, np.dtype(np.intp))


def argmin(x: ArrayLike, /, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index of the (first) smallest element along ``axis`` (of the flattened array when None)."""
    _no_out(out)
    return _arg("argmin", x, axis, keepdims)


def argmax(x: ArrayLike, /, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index of the (first) largest element along ``axis`` (of the flattened array when None)."""
    _no_out(out)
    return _arg("argmax", x, axis, keepdims)


def _scan(kind: str, x: ArrayLike, axis: int | None, dtype: Any) -> Array:
    a = as_array(x)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    probe = _numpy_dtype(kind, a, dtype)
    return Array(Scan(a.expr, kind, axis, probe))


def cumsum(x: ArrayLike, /, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative sum along ``axis`` (of the flattened array when None), as ``numpy.cumsum``."""
    _no_out(out)
    return _scan("cumsum", x, axis, dtype)


def cumprod(x: ArrayLike, /, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative product along ``axis`` (of the flattened array when None), as ``numpy.cumprod``."""
    _no_out(out)
    return _scan("cumprod", x, axis, dtype)


def _cumulative(kind: str, x: ArrayLike, axis: int | None, dtype: Any, include_initial: bool) -> Array:
    from .creation import full
    from .manipulation import concat

    a = as_array(x)
    if axis is None:
        if a.ndim > 1:
            raise ValueError(f"cumulative_{kind[3:]}: axis must be given for arrays of more than one dimension")
        axis = 0
    out = _scan(kind, a, axis, dtype)
    if not include_initial:
        return out
    axis = normalize_axis(axis, a.ndim)
    shape = tuple(1 if d == axis else s for d, s in enumerate(a.shape))
    initial = full(shape, 0 if kind == "cumsum" else 1, dtype=out.dtype, backend=a.backend)
    return concat([initial, out], axis=axis)


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Array:
    """Array API ``cumulative_sum``: like ``cumsum``, optionally starting with a 0."""
    return _cumulative("cumsum", x, axis, dtype, include_initial)


def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Array:
    """Array API ``cumulative_prod``: like ``cumprod``, optionally starting with a 1."""
    return _cumulative("cumprod", x, axis, dtype, include_initial)
