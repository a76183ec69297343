"""NumPy functions built on the primitives: cross (fused elementwise), isin and interp (a block function
per block, against a small table), lexsort, partition/argpartition (stable sorts along a whole axis),
apply_along_axis, vander, polyval (fused Horner steps) and polyfit (least squares by TSQR)."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from . import guards as _guards
from . import reductions as _reductions
from .array import Array, ArrayLike, host_value
from .blockwise import map_blocks
from .creation import ones, zeros, zeros_like
from .elementwise import as_array, elementwise
from .linalg import lstsq
from .manipulation import broadcast_to, concat, flip, moveaxis, normalize_axis, reshape, squeeze, stack
from .sorting import _whole_axis, argsort, sort
from ..backend import namespace

__all__ = [
    "apply_along_axis", "argpartition", "cross", "interp", "isin", "lexsort", "partition", "polyfit", "polyval",
    "vander",
]


# --- cross product --------------------------------------------------------------------------------------


# NumPy 2.5 removed the 2-element vectors that 2.0 deprecated: follow the NumPy installed
_TWO_DIMENSIONAL_VECTORS = np.lib.NumpyVersion(np.__version__) < "2.5.0"


def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Array:
    """Cross product of vectors of length 3 (or 2, as NumPy before 2.5, deprecated there) along the given axes,
    computed as NumPy writes it, as one fused elementwise expression per component."""
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = as_array(a), as_array(b)
    if x.ndim < 1 or y.ndim < 1:
        raise ValueError("At least one array has zero dimension")
    x = moveaxis(x, normalize_axis(axisa, x.ndim, "axisa"), -1)
    y = moveaxis(y, normalize_axis(axisb, y.ndim, "axisb"), -1)
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if (x.shape[-1] == 2 or y.shape[-1] == 2) and _TWO_DIMENSIONAL_VECTORS:
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional vectors "
                      "instead. (deprecated in NumPy 2.0)", DeprecationWarning, stacklevel=2)
    elif x.shape[-1] == 2 or y.shape[-1] == 2:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but they are "
                         f"{x.shape[-1]} and {y.shape[-1]} dimensional instead.")
    dtype = np.promote_types(x.dtype, y.dtype)
    with _guards.allowscalar():  # components of a single vector are lazy 0-d Arrays, nothing is fetched
        xs = [x[..., i].astype(dtype) for i in range(x.shape[-1])]
        ys = [y[..., i].astype(dtype) for i in range(y.shape[-1])]

    def mul(p: Array, q: Array) -> Array:
        return elementwise("multiply", p, q)

    def sub(p: Array, q: Array) -> Array:
        return elementwise("subtract", p, q)

    z = sub(mul(xs[0], ys[1]), mul(xs[1], ys[0]))
    if len(xs) == len(ys) == 2:
        return z
    if len(xs) == 3 and len(ys) == 3:
        parts = [sub(mul(xs[1], ys[2]), mul(xs[2], ys[1])), sub(mul(xs[2], ys[0]), mul(xs[0], ys[2])), z]
    elif len(xs) == 2:
        parts = [mul(xs[1], ys[2]), elementwise("negative", mul(xs[0], ys[2])), z]
    else:
        parts = [elementwise("negative", mul(xs[2], ys[1])), mul(xs[2], ys[0]), z]
    parts = [broadcast_to(p, np.broadcast_shapes(*(q.shape for q in parts))) for p in parts]
    out = stack(parts, axis=-1)
    return moveaxis(out, -1, normalize_axis(axisc, out.ndim, "axisc"))


# --- lookups against a small table ----------------------------------------------------------------------


def _isin_block(block: Any, *, table: np.ndarray, invert: bool) -> Any:
    xp = namespace(block)
    return xp.isin(block, xp.asarray(table), invert=invert)


def isin(element: ArrayLike, test_elements: ArrayLike, assume_unique: bool = False, invert: bool = False, *,
         kind: str | None = None) -> Array:
    """Whether each element is in ``test_elements`` (a boolean Array of ``element``'s shape), block by block.
    ``test_elements`` is a lookup table: a gnp Array there is computed."""
    x = as_array(element)
    table = np.unique(host_value(test_elements).ravel())
    return map_blocks(_isin_block, x, dtype=bool, name="isin", table=table, invert=bool(invert))


def _interp_block(block: Any, *, xp_: np.ndarray, fp: np.ndarray, left: Any, right: Any, period: Any) -> Any:
    xp = namespace(block)
    return xp.interp(block, xp.asarray(xp_), xp.asarray(fp), left=left, right=right, period=period)


def interp(x: ArrayLike, xp: ArrayLike, fp: ArrayLike, left: Any = None, right: Any = None,
           period: Any = None) -> Array:
    """Piecewise-linear interpolation of the points (``xp``, ``fp``) at ``x``, block by block (``xp`` and
    ``fp`` are a lookup table: gnp Arrays there are computed); NumPy's checks of the table."""
    xs = as_array(x)
    table_x, table_f = host_value(xp), host_value(fp)
    dtype = np.interp(np.zeros(0), table_x[:1], table_f[:1]).dtype if table_x.size else np.dtype(np.float64)
    if table_x.ndim != 1 or table_f.ndim != 1 or table_x.size != table_f.size or not table_x.size:
        np.interp(np.zeros(1), table_x, table_f)  # NumPy's ValueError for a bad table
    return map_blocks(_interp_block, xs, dtype=dtype, name="interp", xp_=table_x, fp=table_f, left=left,
                      right=right, period=period)


# --- sorting by several keys, partitions -----------------------------------------------------------------


def _lexsort_block(*keys: Any, axis: int) -> Any:
    xp = namespace(*keys)
    order = xp.argsort(keys[0], axis=axis, kind="stable")
    for key in keys[1:]:  # each later key sorts stably what the earlier ones ordered: the last is primary
        order = xp.take_along_axis(order, xp.argsort(xp.take_along_axis(key, order, axis), axis=axis,
                                                     kind="stable"), axis)
    return order[None]


def lexsort(keys: Any, axis: int = -1) -> Array:
    """Indices that sort by several keys, the last key primary (as ``numpy.lexsort``); the keys' axis is
    rechunked to one chunk, as ``sort`` does."""
    if isinstance(keys, Array) and keys.ndim <= 1 or not isinstance(keys, Array) and all(np.ndim(k) == 0 for k in keys):
        if not len(keys):
            raise TypeError("need sequence of keys with len > 0 in lexsort")
        return zeros((), dtype=np.intp)  # keys of no axes: one element, at place 0
    rows = [keys[i] for i in range(keys.shape[0])] if isinstance(keys, Array) else [as_array(k) for k in keys]
    shape = rows[0].shape
    if any(k.shape != shape for k in rows):
        raise ValueError("all keys need to be the same shape")
    axis = normalize_axis(axis, len(shape))
    first = _whole_axis(rows[0], axis)
    rows = [first] + [Array(k.expr) if k.chunks == first.chunks else k.rechunk(first.chunks) for k in rows[1:]]
    out = map_blocks(_lexsort_block, *[reshape(k, (1, *shape)) for k in rows],
                     chunks=((1,), *first.chunks), dtype=np.intp, name="lexsort", axis=axis + 1)
    return squeeze(out, axis=0)


def _check_kth(kth: Any, n: int) -> None:
    for k in np.atleast_1d(np.asarray(kth)).ravel():
        if not np.issubdtype(np.asarray(k).dtype, np.integer):
            raise TypeError("Partition index must be integer")
        if not -n <= int(k) < n:
            raise ValueError(f"kth(={int(k)}) out of bounds ({n})")


def partition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None) -> Array:
    """A partition of ``a`` along ``axis`` around ``kth``: this one is fully sorted (every element at its
    sorted place, which satisfies the contract for any ``kth``; NumPy's order among the others differs)."""
    x = as_array(a)
    _check_kth(kth, x.size if axis is None else x.shape[normalize_axis(axis, x.ndim)])
    return sort(x, axis=axis)


def argpartition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None) -> Array:
    """Indices that partition ``a`` (see ``partition``: the stable sorting order)."""
    x = as_array(a)
    _check_kth(kth, x.size if axis is None else x.shape[normalize_axis(axis, x.ndim)])
    return argsort(x, axis=axis)


# --- functions along an axis ------------------------------------------------------------------------------


def _apply_block(block: Any, *, func1d: Callable[..., Any], axis: int, keep: bool, args: tuple,
                 kwargs: dict) -> Any:
    xp = namespace(block)
    out = xp.apply_along_axis(func1d, axis, block, *args, **kwargs)
    return xp.expand_dims(out, axis) if keep else out


def apply_along_axis(func1d: Callable[..., Any], axis: int, arr: ArrayLike, *args: Any, **kwargs: Any) -> Array:
    """``func1d`` applied to every 1-d slice along ``axis``, block by block (the axis in one chunk). The
    shape and dtype of its result are taken from a call on a slice of zeros."""
    x = as_array(arr)
    axis = normalize_axis(axis, x.ndim)
    with np.errstate(all="ignore"):
        probe = np.asarray(func1d(np.zeros(x.shape[axis], dtype=x.dtype), *args, **kwargs))
    if probe.ndim > 1:
        from .interop import run_fallback

        return run_fallback("numpy.apply_along_axis (results of 2 or more dimensions)", np.apply_along_axis,
                            (func1d, axis, x, *args), kwargs)
    whole = _whole_axis(x, axis)
    width = probe.shape[0] if probe.ndim else 1
    chunks = tuple((width,) if d == axis else c for d, c in enumerate(whole.chunks))
    out = map_blocks(_apply_block, whole, chunks=chunks, dtype=probe.dtype, name="apply-along-axis",
                     func1d=func1d, axis=axis, keep=probe.ndim == 0, args=args, kwargs=kwargs)
    return squeeze(out, axis=axis) if probe.ndim == 0 else out


# --- polynomials --------------------------------------------------------------------------------------------


def vander(x: ArrayLike, N: int | None = None, increasing: bool = False) -> Array:  # noqa: N803
    """The Vandermonde matrix of a 1-d ``x``: columns ``x**(N-1), ..., x, 1`` (increasing powers with
    ``increasing``), as NumPy computes them (running products)."""
    v = as_array(x)
    if v.ndim != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = v.shape[0] if N is None else int(N)
    dtype = np.promote_types(v.dtype, int)
    column = reshape(v.astype(dtype), (v.shape[0], 1))
    parts = [ones((v.shape[0], 1), dtype=dtype, backend=v.backend)]
    if n > 1:
        parts.append(broadcast_to(column, (v.shape[0], n - 1)))
    table = concat(parts, axis=1)[:, :n]
    table = table.rechunk((table.chunks[0], (n,)))
    powers = _reductions.cumprod(table, axis=1)
    return powers if increasing else flip(powers, axis=1)


def polyval(p: ArrayLike, x: ArrayLike) -> Array:
    """The polynomial with coefficients ``p`` (highest power first) at ``x``: Horner's steps, fused."""
    coefficients = as_array(p) if isinstance(p, Array) else np.asarray(p)
    xs = as_array(x)
    y = zeros_like(xs)
    for i in range(coefficients.shape[0]):
        c = reshape(coefficients[i:i + 1], ()) if isinstance(coefficients, Array) else coefficients[i]
        y = elementwise("add", elementwise("multiply", y, xs), c)
    return y


def polyfit(x: ArrayLike, y: ArrayLike, deg: int, rcond: float | None = None, full: bool = False,
            w: ArrayLike | None = None, cov: bool | str = False) -> Any:
    """Least-squares polynomial fit (coefficients highest power first), as NumPy computes it: a scaled
    Vandermonde matrix solved by ``gnp.linalg.lstsq`` (TSQR over row blocks). ``full`` gives
    (coefficients, residuals, rank, singular values, rcond); ``cov`` runs through the fallback."""
    if cov:
        from .interop import run_fallback

        return run_fallback("numpy.polyfit(cov=...)", np.polyfit, (x, y, deg, rcond, full, w, cov), {})
    order = int(deg) + 1
    xs, ys = as_array(x), as_array(y)
    xs, ys = elementwise("add", xs, 0.0), elementwise("add", ys, 0.0)
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if xs.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if xs.size == 0:
        raise TypeError("expected non-empty vector for x")
    if ys.ndim < 1 or ys.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if xs.shape[0] != ys.shape[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = len(xs) * np.finfo(xs.dtype).eps
    lhs, rhs = vander(xs, order), ys
    if w is not None:
        weights = elementwise("add", as_array(w), 0.0)
        if weights.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if weights.shape[0] != ys.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = elementwise("multiply", lhs, reshape(weights, (-1, 1)))
        rhs = elementwise("multiply", rhs, reshape(weights, (-1, 1)) if rhs.ndim == 2 else weights)
    scale = elementwise("sqrt", _reductions.sum(elementwise("multiply", lhs, lhs), axis=0))
    lhs = elementwise("true_divide", lhs, scale)
    c, resids, rank, s = lstsq(lhs, rhs, rcond)
    c = c / scale if c.ndim == 1 else elementwise("true_divide", c, reshape(scale, (-1, 1)))
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning, stacklevel=2)
    return (c, resids, rank, s, rcond) if full else c
