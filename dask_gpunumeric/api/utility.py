"""NumPy's array utilities on gnp Arrays: take/take_along_axis, tile/repeat, meshgrid, tril/triu, diff, diag,
isclose/allclose/array_equal, pad, gradient, convolve, trapezoid.

Each is a thin layer on the primitives. Layout work (take, tile, repeat by array, pad, diag of a matrix) is
``Gather`` plans and indexing; per-block work that needs no neighbours (tril/triu with block offsets, repeat by
an integer, take_along_axis, the windows of convolve) is ``map_blocks``; differences (diff, gradient,
trapezoid) are shifted slices combined elementwise. Nothing is computed when these functions are called,
except index data that decides the result's shape (integer ``indices``, array ``repeats``, coordinate arrays
of ``gradient``), which is computed first, as indexing does.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import guards as _guards
from ..expr import plan as _plan
from .array import Array, ArrayLike
from ..kernels.backend import namespace, to_numpy
from .blockwise import map_blocks
from .creation import eye, from_array, full, operator_index
from .elementwise import align_chunks, as_array, broadcast_shape, elementwise
from ..expr.nodes import Broadcast, Gather
from .indexing import getitem
from .linalg import diagonal
from .manipulation import (
    _gather_axes, broadcast_to, concat, expand_dims, normalize_axes, normalize_axis, ravel, rechunk, reshape,
)
from .reductions import _no_out
from .reductions import all as _all
from .reductions import sum as _sum

__all__ = [
    "allclose", "array_equal", "array_equiv", "convolve", "diag", "diff", "gradient", "isclose", "meshgrid", "pad", "repeat",
    "take", "take_along_axis", "tile", "trapezoid", "tril", "triu",
]


# --- helpers ------------------------------------------------------------------------------------------


def _host(value: Any) -> np.ndarray:
    """Index-like data as a NumPy array (a gnp Array is computed: its values decide the result's shape)."""
    return to_numpy(value.compute()) if isinstance(value, Array) else np.asarray(value)


def _host_integers(value: Any) -> np.ndarray:
    """Integer (or boolean) data as a NumPy array, with NumPy's TypeError for other dtypes."""
    out = _host(value)
    if out.size == 0 and out.dtype.kind == "f":  # an empty list
        return out.astype(np.intp)
    if out.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {out.dtype!r} to dtype('int64') according to the rule 'safe'")
    return out


def _along(axis: int, ndim: int, index: Any) -> tuple[Any, ...]:
    """An index tuple applying ``index`` on ``axis`` and taking everything on the other axes."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def _promoting(op: str, *operands: Any) -> Any:
    """Check the promotion guard once on the caller's array operands (their common dtype must not widen any
    of them), and give a context that allows the internal promotions of the steps inside (``isclose``
    computes in floating point whatever the input, as NumPy does)."""
    dtypes = [o.dtype for o in operands if isinstance(o, Array)]
    if dtypes:
        _guards.check_promotion(op, dtypes, np.result_type(*dtypes))
    return _guards.allowpromotion()


# --- selection ----------------------------------------------------------------------------------------


def take(x: ArrayLike, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise") -> Array:
    """Elements of ``x`` at integer ``indices`` along ``axis`` (of the flattened array when None), as
    ``numpy.take``: the result has ``indices``' shape in place of the axis. ``mode`` "raise" (IndexError for an
    index out of range), "wrap" or "clip". A gnp Array of indices is computed first (its values decide the
    plan); a single integer index selecting one element is scalar indexing (``gnp.allowscalar``)."""
    _no_out(out)
    a = as_array(x)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    idx = _host_integers(indices)
    if idx.dtype == bool:
        idx = idx.astype(np.intp)  # take reads booleans as 0 and 1, not as a mask
    n = a.shape[axis]
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if mode != "raise":
        if n == 0 and idx.size:
            raise IndexError("cannot do a non-empty take from an empty axes.")
        idx = idx % max(n, 1) if mode == "wrap" else np.clip(idx, 0, max(n - 1, 0))
    return getitem(a, _along(axis, a.ndim, idx[()] if idx.ndim == 0 else idx))


def _take_along_axis_block(block: Any, indices: Any, *, axis: int) -> Any:
    return namespace(block, indices).take_along_axis(block, indices, axis=axis)


def take_along_axis(x: ArrayLike, indices: ArrayLike, axis: int | None = -1) -> Array:
    """Elements of ``x`` picked along ``axis`` by an integer array of the same number of dimensions
    (broadcast against ``x`` on the other axes), as ``numpy.take_along_axis``; ``axis=None`` works on the
    flattened ``x`` with 1-d ``indices``.

    Per block: ``x`` is made one block along ``axis`` and each block of ``indices`` picks from the matching
    block of ``x``, so ``indices`` may be a lazy Array. Host indices are checked (IndexError out of range);
    the values of lazy ones are not (that would compute them)."""
    a = as_array(x)
    lazy = isinstance(indices, Array)
    idx = indices if lazy else _host(indices)
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if axis is None:
        if idx.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        a, axis = ravel(a), 0
    if idx.ndim != a.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    axis = normalize_axis(axis, a.ndim)
    n = a.shape[axis]
    if not lazy:
        bad = idx[(idx < -n) | (idx >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n}")
        idx = from_array(idx, backend=a.backend)
    try:
        shape = broadcast_shape("take_along_axis", [a.shape[:axis] + (1,) + a.shape[axis + 1 :], idx.shape])
    except ValueError:
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {a.shape} {idx.shape}"
        ) from None
    whole = rechunk(a, {axis: -1})
    # align the other axes' chunks; the sentinel length -1 leaves ``axis`` itself alone
    aligned = align_chunks([whole.expr, idx.expr], shape[:axis] + (-1,) + shape[axis + 1 :])
    whole_e, idx_e = aligned[whole.expr._name], aligned[idx.expr._name]
    chunks = tuple(
        idx_e.chunks[d] if d == axis or whole_e.shape[d] == 1 else whole_e.chunks[d] for d in range(a.ndim)
    )
    return map_blocks(_take_along_axis_block, Array(whole_e), Array(idx_e), dtype=a.dtype, chunks=chunks,
                      name="take-along-axis", axis=axis)


# --- repetition ---------------------------------------------------------------------------------------


def tile(A: ArrayLike, reps: int | Sequence[int]) -> Array:  # noqa: N803 (NumPy's name)
    """The array repeated ``reps`` times along each axis, as ``numpy.tile`` (``reps`` longer than
    ``A.ndim`` adds leading axes). One ``Gather``: each axis is the concatenation of ``reps`` copies."""
    a = as_array(A)
    reps = tuple(operator_index(r) for r in ((reps,) if np.ndim(reps) == 0 else reps))
    if any(r < 0 for r in reps):
        raise ValueError("negative dimensions are not allowed")
    if len(reps) > a.ndim:
        a = expand_dims(a, tuple(range(len(reps) - a.ndim)))
    reps = (1,) * (a.ndim - len(reps)) + reps
    return _gather_axes(a, {
        d: ([(0, 0, 1, a.shape[d])] * r, a.chunks[d] * r or (0,)) for d, r in enumerate(reps) if r != 1
    })


def _repeat_block(block: Any, *, repeats: int, axis: int) -> Any:
    return namespace(block).repeat(block, repeats, axis=axis)


def repeat(x: ArrayLike, repeats: Any, axis: int | None = None) -> Array:
    """Each element repeated ``repeats`` times along ``axis`` (of the flattened array when None), as
    ``numpy.repeat``. An integer count repeats within each block (no data movement); an array of counts (one
    per element, computed first if lazy) is an integer-array selection."""
    a = as_array(x)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    counts = _host_integers(repeats)
    if counts.size == 1 and counts.ndim <= 1:
        r = int(counts.reshape(()))
        if r < 0:
            raise ValueError("negative dimensions are not allowed")
        chunks = tuple(tuple(c * r for c in cs) if d == axis else cs for d, cs in enumerate(a.chunks))
        return map_blocks(_repeat_block, a, chunks=chunks, name="repeat", repeats=r, axis=axis)
    if counts.ndim != 1 or counts.shape[0] != a.shape[axis]:
        raise ValueError(
            f"operands could not be broadcast together with shape ({a.shape[axis]},) {counts.shape}"
        )
    if (counts < 0).any():
        raise ValueError("repeats may not contain negative values.")
    return getitem(a, _along(axis, a.ndim, np.repeat(np.arange(a.shape[axis]), counts)))


# --- grids and triangles ------------------------------------------------------------------------------


def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> tuple[Array, ...]:
    """Coordinate arrays from 1-d coordinate vectors, as ``numpy.meshgrid`` (a tuple; ``indexing`` "xy"
    swaps the first two output axes, "ij" keeps them; ``sparse`` leaves length-1 axes unbroadcast). Inputs
    are flattened. The outputs are broadcast views chunked alike (each axis like its vector), so they combine
    without rechunking. ``copy`` has no effect: Arrays are immutable."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    vectors = [ravel(as_array(v)) for v in xi]
    ndim = len(vectors)
    axis_of = list(range(ndim))
    if indexing == "xy" and ndim > 1:
        axis_of[0], axis_of[1] = 1, 0
    chunks: list[tuple[int, ...]] = [()] * ndim
    for v, d in zip(vectors, axis_of):
        chunks[d] = v.chunks[0]
    out = []
    for v, d in zip(vectors, axis_of):
        along = expand_dims(v, tuple(e for e in range(ndim) if e != d))
        out.append(along if sparse or ndim == 1 else Array(Broadcast(along.expr, tuple(chunks))))
    return tuple(out)


def _triangle_block(block: Any, *, k: int, lower: bool, block_offset: tuple[int, ...],
                    global_shape: tuple[int, ...]) -> Any:
    xp = namespace(block)
    rows = xp.arange(block_offset[-2], block_offset[-2] + block.shape[-2])[:, None]
    cols = xp.arange(block_offset[-1], block_offset[-1] + block.shape[-1])[None, :]
    keep = (cols - rows <= k) if lower else (cols - rows >= k)
    return xp.where(keep, block, xp.zeros((), dtype=block.dtype))


def _triangle(name: str, x: ArrayLike, k: int, lower: bool) -> Array:
    a = as_array(x)
    if a.ndim == 0:
        raise TypeError(f"{name}: the input must have at least one dimension, got a 0-d array")
    if a.ndim == 1:  # NumPy takes a vector as the rows of a square matrix
        a = broadcast_to(a, (a.shape[0], a.shape[0]))
    return map_blocks(_triangle_block, a, name=name, offsets=True, k=operator_index(k), lower=lower)


def tril(x: ArrayLike, k: int = 0) -> Array:
    """The lower triangle of the last two axes (elements with ``col - row <= k``), zeros above, as
    ``numpy.tril``. Per block from its offsets: no data movement."""
    return _triangle("tril", x, k, True)


def triu(x: ArrayLike, k: int = 0) -> Array:
    """The upper triangle of the last two axes (elements with ``col - row >= k``), zeros below, as
    ``numpy.triu``. Per block from its offsets: no data movement."""
    return _triangle("triu", x, k, False)


def diag(v: ArrayLike, k: int = 0) -> Array:
    """A 2-d Array with the 1-d ``v`` on diagonal ``k`` (zeros elsewhere), or the 1-d diagonal ``k`` of a
    2-d ``v``, as ``numpy.diag``.

    From a vector: ``where(eye(N, k=k), v, 0)`` with ``v`` broadcast along rows or columns (one fused kernel
    per block). From a matrix: ``diagonal`` (pointwise indexing)."""
    a = as_array(v)
    k = operator_index(k)
    if a.ndim == 1:
        n = a.shape[0] + abs(k)
        line = a if k == 0 else concat([a, full((abs(k),), 0, dtype=a.dtype, backend=a.backend)])
        mask = eye(n, n, k=k, dtype=bool, chunks=(line.chunks[0], line.chunks[0]), backend=a.backend)
        # diagonal k >= 0 holds v[i] in row i; diagonal k < 0 holds v[j] in column j
        values = expand_dims(line, 1 if k >= 0 else 0)
        return elementwise("where", mask, values, 0, dtype=a.dtype)
    if a.ndim == 2:
        return diagonal(a, offset=k)
    raise ValueError("Input must be 1- or 2-d.")


# --- differences --------------------------------------------------------------------------------------


def diff(x: ArrayLike, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Array:
    """The ``n``-th discrete difference along ``axis`` (``out[i] = x[i+1] - x[i]``, ``!=`` for booleans),
    after joining ``prepend``/``append`` (scalars are broadcast to one slice), as ``numpy.diff``. Shifted
    slices subtracted elementwise."""
    a = as_array(x)
    n = operator_index(n)
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis(axis, a.ndim)
    ends = []
    for value in (prepend, append):
        if value is not None:
            end = as_array(value)
            ends.append(broadcast_to(end, a.shape[:axis] + (1,) + a.shape[axis + 1 :]) if end.ndim == 0 else end)
        else:
            ends.append(None)
    if ends[0] is not None or ends[1] is not None:
        a = concat([e for e in (ends[0], a, ends[1]) if e is not None], axis=axis)
    op = "not_equal" if a.dtype == bool else "subtract"
    for _ in range(n):
        a = elementwise(op, getitem(a, _along(axis, a.ndim, slice(1, None))),
                        getitem(a, _along(axis, a.ndim, slice(None, -1))))
    return a


def _spacings(varargs: tuple[Any, ...], f: Array, axes: tuple[int, ...]) -> list[Any]:
    """NumPy's spacing arguments of ``gradient``, one per axis: a scalar, or the differences of a coordinate
    vector (a scalar again when they are all equal)."""
    if not varargs:
        return [1.0] * len(axes)
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return [varargs[0]] * len(axes)
    if len(varargs) != len(axes):
        raise TypeError("invalid number of arguments")
    out = []
    for d, spacing in zip(axes, varargs):
        if np.ndim(spacing) == 0:
            out.append(spacing)
            continue
        coords = _host(spacing)
        if coords.ndim != 1:
            raise ValueError("distances must be either scalars or 1d")
        if len(coords) != f.shape[d]:
            raise ValueError("when 1d, distances must match the length of the corresponding dimension")
        if coords.dtype.kind in "iu":
            coords = coords.astype(np.float64)
        steps = np.diff(coords)
        out.append(steps[0] if (steps == steps[0]).all() else steps)
    return out


def _gradient_along(f: Array, axis: int, dx: Any, edge_order: int) -> Array:
    """NumPy's gradient along one axis: central differences inside, one-sided ones at both ends."""
    if f.shape[axis] < edge_order + 1:
        raise ValueError(
            "Shape of array too small to calculate a numerical gradient, at least (edge_order + 1) elements "
            "are required."
        )

    def part(start: int | None, stop: int | None) -> Array:
        return getitem(f, _along(axis, f.ndim, slice(start, stop)))

    def coefficient(values: np.ndarray) -> Array:  # a vector laid along ``axis``
        shape = tuple(-1 if d == axis else 1 for d in range(f.ndim))
        return from_array(values.reshape(shape), backend=f.backend)

    n = f.shape[axis]
    uniform = np.ndim(dx) == 0
    if uniform:
        inside = (part(2, None) - part(None, -2)) / (2.0 * dx)
    else:
        dx1, dx2 = dx[:-1], dx[1:]
        a = -dx2 / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        inside = coefficient(a) * part(None, -2) + coefficient(b) * part(1, -1) + coefficient(c) * part(2, None)
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / (dx if uniform else dx[0])
        last = (part(n - 1, n) - part(n - 2, n - 1)) / (dx if uniform else dx[-1])
    else:
        if uniform:
            a, b, c = -1.5 / dx, 2.0 / dx, -0.5 / dx
        else:
            dx1, dx2 = dx[0], dx[1]
            a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = -dx1 / (dx2 * (dx1 + dx2))
        first = a * part(0, 1) + b * part(1, 2) + c * part(2, 3)
        if uniform:
            a, b, c = 0.5 / dx, -2.0 / dx, 1.5 / dx
        else:
            dx1, dx2 = dx[-2], dx[-1]
            a = dx2 / (dx1 * (dx1 + dx2))
            b = -(dx2 + dx1) / (dx1 * dx2)
            c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = a * part(n - 3, n - 2) + b * part(n - 2, n - 1) + c * part(n - 1, n)
    return concat([first, inside, last], axis=axis)


def gradient(f: ArrayLike, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Array | tuple[Array, ...]:
    """The gradient of ``f`` along ``axis`` (all axes by default), as ``numpy.gradient``: second-order central
    differences inside, first- or second-order (``edge_order``) one-sided differences at the ends. Spacing:
    none (1), one scalar for all axes, or one scalar or coordinate vector per axis. One Array for one axis, a
    tuple otherwise; floating input keeps its dtype, other input gives float64. Built from shifted slices."""
    a = as_array(f)
    axes = normalize_axes(axis, a.ndim)
    spacings = _spacings(varargs, a, axes)
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
    if a.dtype.kind in "iu":
        a = a.astype(np.float64)
    with _guards.allowpromotion():  # NumPy computes in the spacings' dtype and stores in ``otype``
        out = tuple(_gradient_along(a, d, dx, edge_order).astype(otype, copy=False) for d, dx in zip(axes, spacings))
    return out[0] if len(out) == 1 else out


def trapezoid(y: ArrayLike, x: ArrayLike | None = None, dx: Any = 1.0, axis: int = -1) -> Array:
    """The integral of ``y`` along ``axis`` by the trapezoidal rule, with sample points ``x`` (1-d, or
    broadcasting against ``y``) or uniform spacing ``dx``, as ``numpy.trapezoid`` (a lazy 0-d Array for 1-d
    ``y``): ``sum(d * (y[1:] + y[:-1]) / 2)``."""
    a = as_array(y)
    axis = normalize_axis(axis, a.ndim)
    xs = None if x is None else as_array(x)
    with _promoting("trapezoid", a, xs):
        if xs is None:
            d: Any = dx
        elif xs.ndim == 1:
            d = diff(xs)
            d = reshape(d, tuple(d.shape[0] if e == axis else 1 for e in range(a.ndim)))
        else:
            d = diff(xs, axis=axis)
        upper = getitem(a, _along(axis, a.ndim, slice(1, None)))
        lower = getitem(a, _along(axis, a.ndim, slice(None, -1)))
        return _sum(d * (upper + lower) / 2.0, axis=axis)


# --- comparison ---------------------------------------------------------------------------------------


def isclose(a: ArrayLike, b: ArrayLike, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Array:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (equal infinities are close; NaNs only with
    ``equal_nan``), as ``numpy.isclose``: ``b`` is taken in floating point. A boolean Array."""
    x = a if isinstance(a, (int, float, complex)) else as_array(a)
    y = b if isinstance(b, (int, float, complex)) else as_array(b)
    with _promoting("isclose", x, y):
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


# --- padding ------------------------------------------------------------------------------------------

# the keyword arguments NumPy allows with each mode
_PAD_KWARGS = {
    "constant": {"constant_values"}, "edge": set(), "wrap": set(), "reflect": {"reflect_type"},
    "symmetric": {"reflect_type"}, "empty": set(), "linear_ramp": {"end_values"}, "maximum": {"stat_length"},
    "mean": {"stat_length"}, "median": {"stat_length"}, "minimum": {"stat_length"},
}
_PAD_BY_INDEX = ("edge", "reflect", "symmetric", "wrap")


def _pairs(value: Any, ndim: int) -> tuple[tuple[Any, Any], ...]:
    """NumPy's (before, after) pair per axis from a scalar, one pair, or one pair per axis."""
    arr = np.asarray(value)
    if arr.ndim < 3 and arr.size == 1:
        return ((arr.flat[0], arr.flat[0]),) * ndim
    if arr.ndim < 3 and arr.size == 2 and arr.shape != (2, 1):
        return ((arr.flat[0], arr.flat[1]),) * ndim
    return tuple(tuple(p) for p in np.broadcast_to(arr, (ndim, 2)))


def _pad_widths(pad_width: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    widths = np.asarray(pad_width)
    if widths.dtype.kind != "i":
        raise TypeError("`pad_width` must be of integral type.")
    pairs = tuple((int(b), int(e)) for b, e in _pairs(widths, ndim))
    if any(b < 0 or e < 0 for b, e in pairs):
        raise ValueError("index can't contain negative values")
    return pairs


def _pad_constant(a: Array, widths: tuple[tuple[int, int], ...], values: tuple[tuple[Any, Any], ...]) -> Array:
    """Constant blocks joined before and after along each axis in turn (later axes cover the corners)."""
    for d, ((before, after), pair) in enumerate(zip(widths, values)):
        if not before and not after:
            continue
        parts = []
        for width, value in ((before, pair[0]), (after, pair[1])):
            shape = a.shape[:d] + (width,) + a.shape[d + 1 :]
            chunks = a.chunks[:d] + ((width,),) + a.chunks[d + 1 :]
            # the value cast as NumPy's assignment casts it (1.5 -> 1 for integers, errors for NaN)
            parts.append(full(shape, np.array(value, dtype=a.dtype)[()], dtype=a.dtype, chunks=chunks,
                              backend=a.backend) if width else None)
        a = concat([p for p in (parts[0], a, parts[1]) if p is not None], axis=d)
    return a


def _pad_by_index(a: Array, widths: tuple[tuple[int, int], ...], mode: str) -> Array:
    """One ``Gather``: along each padded axis the original chunks, with new chunks before and after taking
    the elements that NumPy's mode repeats (found by padding the positions ``arange(n)``)."""
    plan = []
    for d, (before, after) in enumerate(widths):
        chunks, n = a.chunks[d], a.shape[d]
        if not before and not after:
            plan.append(_plan.identity_plan(chunks))
            continue
        if n == 0:
            raise ValueError(f"can't extend empty axis {d} using modes other than 'constant' or 'empty'")
        positions = np.pad(np.arange(n), (before, after), mode=mode)
        size = max(chunks)
        axis_plan = _plan.identity_plan(chunks)
        if before:
            axis_plan = _plan.take_plan(chunks, positions[:before], _plan.split_even(before, size)) + axis_plan
        if after:
            axis_plan = axis_plan + _plan.take_plan(chunks, positions[before + n :], _plan.split_even(after, size))
        plan.append(axis_plan)
    return Array(Gather(tuple(plan), (), a.dtype, a.expr))


def pad(x: ArrayLike, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Array:
    """The array padded by ``pad_width`` (one int, one (before, after) pair, or a pair per axis), as
    ``numpy.pad``.

    Native modes: "constant" (``constant_values``) and "empty" join constant blocks; "edge", "reflect",
    "symmetric" and "wrap" are one ``Gather`` of the original blocks plus the repeated elements. NumPy's other
    modes (linear_ramp, maximum, mean, median, minimum, a function) run through ``dask.array.pad`` (with a
    ``FallbackWarning``); ``reflect_type="odd"`` is not supported (NotImplementedError)."""
    a = as_array(x)
    if not callable(mode):
        if mode not in _PAD_KWARGS:
            raise ValueError(f"mode '{mode}' is not supported")
        unsupported = set(kwargs) - _PAD_KWARGS[mode]
        if unsupported:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    if kwargs.get("reflect_type", "even") != "even":
        if kwargs["reflect_type"] != "odd":
            raise ValueError("unsupported value for reflect_type, must be one of (`even`, `odd`)")
        raise NotImplementedError("pad: reflect_type='odd' is not supported; use the default 'even'")
    widths = _pad_widths(pad_width, a.ndim)
    if mode in ("constant", "empty"):
        return _pad_constant(a, widths, _pairs(kwargs.get("constant_values", 0), a.ndim))
    if mode in _PAD_BY_INDEX:
        return _pad_by_index(a, widths, mode)
    import dask.array as da

    from .interop import run_fallback

    return run_fallback("numpy.pad", da.pad, (a, widths, mode), kwargs)


# --- convolution --------------------------------------------------------------------------------------


def _convolve_block(window: Any, kernel: Any) -> Any:
    return namespace(window, kernel).convolve(window, kernel, mode="valid")


def convolve(a: ArrayLike, v: ArrayLike, mode: str = "full") -> Array:
    """The discrete linear convolution of two 1-d arrays, as ``numpy.convolve``: ``mode`` "full" (length
    ``n + m - 1``), "same" (``max(n, m)``, centred) or "valid" (``max(n, m) - min(n, m) + 1``).

    The shorter array is made one block; the longer one, padded with zeros, is cut into overlapping windows
    (each output block's inputs plus a halo of ``min(n, m) - 1`` elements, one ``Gather``), and each window is
    convolved on its own ("valid"). The longer array is never gathered into one block."""
    x, w = as_array(a), as_array(v)
    if x.ndim == 0:
        x = reshape(x, (1,))
    if w.ndim == 0:
        w = reshape(w, (1,))
    if x.ndim != 1 or w.ndim != 1:
        raise ValueError(f"convolve: a and v must be 1-d, got shapes {x.shape} and {w.shape}")
    if x.size == 0:
        raise ValueError("a cannot be empty")
    if w.size == 0:
        raise ValueError("v cannot be empty")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    dtype = np.convolve(np.ones(1, x.dtype), np.ones(1, w.dtype)).dtype
    _guards.check_promotion("convolve", [x.dtype, w.dtype], dtype)
    long, short = (x, w) if x.size >= w.size else (w, x)
    n, m = long.size, short.size
    start, length = {"full": (0, n + m - 1), "same": ((m - 1) // 2, n), "valid": (m - 1, n - m + 1)}[mode]
    padded = pad(long, m - 1)  # output element i of "full" reads padded[i : i + m]
    out_chunks = _plan.split_even(length, max(long.chunks[0]))
    offsets = _plan.offsets(out_chunks)
    windows = [(0, start + o, 1, c + m - 1) for o, c in zip(offsets, out_chunks)]
    plan = (_plan.segments_plan([padded.chunks[0]], windows, tuple(c + m - 1 for c in out_chunks)),)
    haloed = Array(Gather(plan, (), padded.dtype, padded.expr))
    return map_blocks(_convolve_block, haloed, rechunk(short, -1), dtype=dtype, chunks=(out_chunks,),
                      name="convolve")
