"""Reductions (sum, prod, mean, var, std, min, max, all, any, argmin, argmax) and scans (cumsum, cumprod),
with NumPy's arguments (``axis`` an int or a tuple, ``dtype``, ``out``, ``keepdims``, ``initial``, ``where``).
Full reductions give lazy 0-d Arrays."""
from __future__ import annotations

import builtins
import functools
from typing import Any

import numpy as np

from .. import config
from ..ops.reductions import REDUCTIONS
from ..expr import Reduction, Scan
from .array import Array, ArrayLike
from .creation import as_array, from_array, full
from .elementwise import elementwise
from .manipulation import broadcast_to, concat, normalize_axes, normalize_axis, ravel, store
from .recipes import reused


class _NoValue:
    """The default of ``initial`` (and of NumPy's other "not given" arguments): no value."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()

# the identity of each reduction, which where=False elements are replaced by (min/max: ``initial``)
_IDENTITY = {"sum": 0, "prod": 1, "all": True, "any": False}
_UFUNC_NAME = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum", "all": "logical_and",
               "any": "logical_or"}


def store_output(kind: str, result: Array, out: Any) -> Any:
    """``out=`` of a reduction, scan or other function that is no ufunc: ``out`` (a gnp Array, rebound; or a
    NumPy array, written) must have the result's shape; the result is cast to its dtype (NumPy's "unsafe"
    casting of reductions)."""
    if out is None:
        return result
    target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if getattr(target, "shape", None) != result.shape:
        raise ValueError(f"output parameter for reduction operation {_UFUNC_NAME.get(kind, kind)} has the wrong shape: "
                         f"{getattr(target, 'shape', None)}, expected {result.shape}")
    return store(kind, result, out, casting="unsafe")


def _masked(kind: str, a: Array, where: Any, initial: Any) -> Array:
    """``a`` with the elements where ``where`` is False replaced by the reduction's identity (min/max have
    none: by ``initial``)."""
    if where is True:
        return a
    fill = _IDENTITY.get(kind, initial)
    if fill is NO_VALUE:
        raise ValueError(f"reduction operation '{_UFUNC_NAME[kind]}' does not have an identity, so to use a where "
                         "mask one has to specify 'initial'")
    masked = elementwise("where", where, a, np.asarray(fill).astype(a.dtype)[()], dtype=a.dtype, skip_promotion=1)
    if masked.shape != a.shape:
        raise ValueError(f"where: a mask of shape {np.shape(where)} does not broadcast to the array's shape {a.shape}")
    return masked


def _reduction(kind: str, a: ArrayLike, axis: Any, dtype: np.dtype | None, out: Any, keepdims: Any, initial: Any,
               where: Any) -> Array:
    """A reduction with NumPy's ``out``, ``keepdims``, ``initial`` and ``where``: masked elements replaced by
    the identity, ``initial`` combined with the result (and the result itself over empty axes)."""
    x = as_array(a)
    dtype = x.dtype if dtype is None else dtype
    keepdims = bool(keepdims) if keepdims is not NO_VALUE else False
    if where is not True:
        x = _masked(kind, x, where, initial)
    if initial is NO_VALUE:
        return store_output(kind, _reduce(kind, x, axis, keepdims, dtype), out)
    start = np.asarray(initial).astype(dtype)[()]
    axes = normalize_axes(axis, x.ndim)
    if kind in ("min", "max") and builtins.any(x.shape[d] == 0 for d in axes):
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
        return store_output(kind, full(shape, start, dtype=dtype, backend=x.backend), out)
    combine = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}[kind]
    result = elementwise(combine, _reduce(kind, x, axis, keepdims, dtype), start, dtype=dtype)
    return store_output(kind, result, out)


def _reduce(kind: str, x: ArrayLike, axis: Any, keepdims: bool, dtype: np.dtype, params: tuple = (),
            split_every: int | None = None) -> Array:
    a = as_array(x)
    split = split_every or config.get("split-every")
    # an int axis (or None) of chunks met before (softmax's rows, CG's dots in a loop): the axes, dtype, chunks and
    # token texts of the result, made once; only for arguments whose equal values of one type have the same text
    # (not floats: 0.0 and -0.0), params' types in the key (ddof's 1 and True)
    plain = (type(axis) in _ONE_AXIS and type(keepdims) is bool and type(dtype) in _DTYPES and type(split) is int
             and (not params or builtins.all(type(p) in _PLAIN_PARAMS for p in params)))
    key = (kind, a.chunks, axis, keepdims, dtype, params, params and tuple(map(type, params)), split) if plain else None
    known = _REDUCED.get(key) if key is not None else None
    if known is not None:
        axes, dtype, chunks, texts = known
        return Array(Reduction.of(a.expr, kind, axes, keepdims, dtype, split, params, (chunks, texts)))
    axes = normalize_axes(axis, a.ndim)
    if REDUCTIONS[kind].empty and builtins.any(a.shape[d] == 0 for d in axes):
        raise ValueError(REDUCTIONS[kind].empty)
    out = Reduction.of(a.expr, kind, axes, bool(keepdims), np.dtype(dtype), split, params)
    texts = out.source_texts(0) if key is not None else None
    if texts is not None:
        if len(_REDUCED) >= _REDUCED_SIZE:
            _REDUCED.clear()
        _REDUCED[key] = axes, out.dtype, out.chunks, texts
    return Array(out)


_REDUCED: dict[tuple, tuple] = {}
_REDUCED_SIZE = 256
_ONE_AXIS = frozenset({int, type(None)})
_DTYPES = frozenset(type(np.dtype(c)) for c in np.typecodes["All"])
_PLAIN_PARAMS = _DTYPES | {int, bool}


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


def sum(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE,  # noqa: A001
        initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Sum of elements over ``axis`` (all axes by default); integer sums widen as in NumPy. ``initial`` is
    added, elements where ``where`` is False are left out, ``out`` as in ``store_output``."""
    x = as_array(a)
    return _reduction("sum", x, axis, _numpy_dtype("sum", x, dtype), out, keepdims, initial, where)


def prod(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE,
         initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Product of elements over ``axis`` (``initial``, ``where``, ``out`` as in ``sum``)."""
    x = as_array(a)
    return _reduction("prod", x, axis, _numpy_dtype("prod", x, dtype), out, keepdims, initial, where)


def _count(x: Array, axis: Any, keepdims: bool, where: Any) -> Array:
    """How many elements each reduction over ``axis`` takes where ``where`` is true."""
    mask = broadcast_to(where if isinstance(where, Array) else from_array(where, backend=x.backend), x.shape)
    return _reduce("sum", mask, axis, keepdims, np.dtype(np.intp))


def mean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE, *,
         where: Any = True) -> Array:
    """Arithmetic mean over ``axis`` (float64 for integer input, as in NumPy), of the elements where ``where``
    is true; ``out`` as in ``store_output``."""
    x = as_array(a)
    out_dtype = _numpy_dtype("mean", x, dtype)
    keepdims = bool(keepdims) if keepdims is not NO_VALUE else False
    if where is True:
        return store_output("mean", _reduce("mean", x, axis, keepdims, out_dtype, (out_dtype,)), out)
    total = _reduce("sum", _masked("sum", x, where, NO_VALUE), axis, keepdims, out_dtype)
    return store_output("mean", elementwise("divide", total, _count(x, axis, keepdims, where), dtype=out_dtype), out)


def _var(kind_sqrt: bool, a: ArrayLike, axis: Any, dtype: Any, out: Any, ddof: Any, keepdims: Any, where: Any,
         correction: Any) -> Array:
    x = as_array(a)
    if ddof and correction is not None:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    ddof = correction if correction is not None else (ddof or 0)
    keepdims = bool(keepdims) if keepdims is not NO_VALUE else False
    out_dtype = _numpy_dtype("var", x, dtype)
    acc = _numpy_dtype("mean", x, dtype)
    if where is True:
        return store_output("var", _reduce("var", x, axis, keepdims, out_dtype, (acc, ddof, kind_sqrt)), out)
    # as NumPy: the mean of the selected elements, then the mean square of their deviations
    x = x.astype(acc, copy=False)
    centre = mean(x, axis, acc, keepdims=True, where=where)
    deviation = elementwise("subtract", x, centre)
    square = elementwise("real", elementwise("multiply", deviation, elementwise("conj", deviation)))
    total = _reduce("sum", _masked("sum", square, where, NO_VALUE), axis, keepdims, square.dtype)
    count = elementwise("subtract", _count(x, axis, keepdims, where), ddof)
    result = elementwise("divide", total, elementwise("maximum", count, 0), dtype=out_dtype)
    return store_output("var", elementwise("sqrt", result) if kind_sqrt else result, out)


def var(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
        keepdims: Any = NO_VALUE, *, where: Any = True, mean: Any = NO_VALUE, correction: Any = None) -> Array:
    """Variance over ``axis``; ``correction`` (array API) or ``ddof`` (NumPy) is subtracted from N; of the
    elements where ``where`` is true. A precomputed ``mean`` is accepted and not needed (it is recomputed in
    the same graph)."""
    return _var(False, a, axis, dtype, out, ddof, keepdims, where, correction)


def std(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
        keepdims: Any = NO_VALUE, *, where: Any = True, mean: Any = NO_VALUE, correction: Any = None) -> Array:
    """Standard deviation over ``axis`` (square root of ``var``, with its arguments)."""
    return _var(True, a, axis, dtype, out, ddof, keepdims, where, correction)


def min(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE,  # noqa: A001
        initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Smallest element over ``axis`` (NaN if any element is NaN); ``initial``, ``where``, ``out`` as in NumPy."""
    return _reduction("min", a, axis, None, out, keepdims, initial, where)


def max(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE,  # noqa: A001
        initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Largest element over ``axis`` (NaN if any element is NaN); ``initial``, ``where``, ``out`` as in NumPy."""
    return _reduction("max", a, axis, None, out, keepdims, initial, where)


def all(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE, *,  # noqa: A001
        where: Any = True) -> Array:
    """True where every element over ``axis`` (where ``where`` is true) is true."""
    return _reduction("all", a, axis, np.dtype(bool), out, keepdims, NO_VALUE, where)


def any(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE, *,  # noqa: A001
        where: Any = True) -> Array:
    """True where some element over ``axis`` (where ``where`` is true) is true."""
    return _reduction("any", a, axis, np.dtype(bool), out, keepdims, NO_VALUE, where)


def _arg(kind: str, x: ArrayLike, axis: Any, out: Any, keepdims: bool) -> Array:
    a = as_array(x)
    if axis is None:
        flat = _reduce(kind, ravel(a), 0, False, np.dtype(np.intp))
        result = flat.reshape((1,) * a.ndim) if keepdims else flat
    else:
        result = _reduce(kind, a, normalize_axis(axis, a.ndim), keepdims, np.dtype(np.intp))
    return store_output(kind, result, out)


def argmin(a: ArrayLike, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index of the (first) smallest element along ``axis`` (of the flattened array when None)."""
    return _arg("argmin", a, axis, out, keepdims)


def argmax(a: ArrayLike, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index of the (first) largest element along ``axis`` (of the flattened array when None)."""
    return _arg("argmax", a, axis, out, keepdims)


def _scan(kind: str, x: ArrayLike, axis: int | None, dtype: Any) -> Array:
    a = as_array(x)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    probe = _numpy_dtype(kind, a, dtype)
    return Array(Scan(a.expr, kind, axis, probe))


@reused
def cumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative sum along ``axis`` (of the flattened array when None), as ``numpy.cumsum``."""
    return store_output("cumsum", _scan("cumsum", a, axis, dtype), out)


def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative product along ``axis`` (of the flattened array when None), as ``numpy.cumprod``."""
    return store_output("cumprod", _scan("cumprod", a, axis, dtype), out)


def _cumulative(kind: str, x: ArrayLike, axis: int | None, dtype: Any, include_initial: bool) -> Array:
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


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None, out: Any = None,
                   include_initial: bool = False) -> Array:
    """Array API ``cumulative_sum``: like ``cumsum``, optionally starting with a 0."""
    return store_output("cumsum", _cumulative("cumsum", x, axis, dtype, include_initial), out)


def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None, out: Any = None,
                    include_initial: bool = False) -> Array:
    """Array API ``cumulative_prod``: like ``cumprod``, optionally starting with a 1."""
    return store_output("cumprod", _cumulative("cumprod", x, axis, dtype, include_initial), out)
