"""NumPy's stacking, splitting and shape helpers, and a few constructions, as thin layers on reshape,
concatenation, slicing and elementwise operations (all lazy): atleast_1d/2d/3d, vstack, hstack, dstack,
column_stack, split, array_split, hsplit/vsplit/dsplit, append, fliplr, flipud, rot90, shape, ndim, size,
kron, diagonal, trace, tri, identity, logspace."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import reductions as _reductions
from .array import Array, ArrayLike
from .creation import arange, eye, linspace
from .elementwise import as_array, elementwise
from .linalg import diagonal as _last_axes_diagonal
from .manipulation import concat, flip, moveaxis, normalize_axis, ravel, reshape, transpose

__all__ = [
    "append", "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "column_stack", "diagonal", "dsplit",
    "dstack", "fliplr", "flipud", "hsplit", "hstack", "identity", "kron", "logspace", "ndim", "rot90", "shape",
    "size", "split", "trace", "tri", "vsplit", "vstack",
]


def _atleast(arys: tuple, ndim: int, new_shape: Any) -> Any:
    out = [a if a.ndim >= ndim else reshape(a, new_shape(a.shape)) for a in map(as_array, arys)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*arys: ArrayLike) -> Any:
    """Each input with at least one axis (0-d becomes shape (1,)); one Array for one input, else a tuple."""
    return _atleast(arys, 1, lambda s: (1,))


def atleast_2d(*arys: ArrayLike) -> Any:
    """Each input with at least two axes: (n,) becomes (1, n), 0-d (1, 1)."""
    return _atleast(arys, 2, lambda s: (1, *s) if s else (1, 1))


def atleast_3d(*arys: ArrayLike) -> Any:
    """Each input with at least three axes: (n,) becomes (1, n, 1), (m, n) (m, n, 1), 0-d (1, 1, 1)."""
    return _atleast(arys, 3, lambda s: (1, *s, 1) if len(s) == 1 else (*s, 1) if s else (1, 1, 1))


def _as_list(result: Any) -> list[Array]:
    return list(result) if isinstance(result, tuple) else [result]


def _stacked(tup: Sequence[ArrayLike], axis: int, dtype: Any) -> Array:
    out = concat(tup, axis=axis)
    return out if dtype is None else out.astype(dtype)


def _sequence(tup: Any, name: str) -> Sequence[ArrayLike]:
    if isinstance(tup, Array) or not isinstance(tup, Sequence):
        raise TypeError(f"arrays to {name} must be passed as a sequence (a list or tuple of arrays)")
    return tup


def vstack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Array:
    """Stack arrays row-wise: 1-d arrays become rows (``concat`` of ``atleast_2d`` along axis 0)."""
    return _stacked(_as_list(atleast_2d(*_sequence(tup, "vstack"))), 0, dtype)


def hstack(tup: Sequence[ArrayLike], *, dtype: Any = None, casting: str = "same_kind") -> Array:
    """Stack arrays column-wise: along axis 0 for 1-d arrays, axis 1 otherwise."""
    arrs = _as_list(atleast_1d(*_sequence(tup, "hstack")))
    return _stacked(arrs, 0 if arrs and arrs[0].ndim == 1 else 1, dtype)


def dstack(tup: Sequence[ArrayLike]) -> Array:
    """Stack arrays along a third axis (``concat`` of ``atleast_3d`` along axis 2)."""
    return concat(_as_list(atleast_3d(*_sequence(tup, "dstack"))), axis=2)


def column_stack(tup: Sequence[ArrayLike]) -> Array:
    """1-d arrays as columns of a 2-d array; 2-d arrays as they are, side by side."""
    arrs = [as_array(a) for a in _sequence(tup, "column_stack")]
    return concat([a if a.ndim >= 2 else reshape(a, (-1, 1)) for a in arrs], axis=1)


def array_split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """Sub-arrays of ``ary`` along ``axis``: ``indices_or_sections`` equal-as-possible parts (the first ones
    one longer), or the parts between the given indices (lazy slices)."""
    x = as_array(ary)
    axis = normalize_axis(axis, x.ndim)
    total = x.shape[axis]
    try:
        points = [0, *indices_or_sections, total]
    except TypeError:
        sections = operator.index(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.") from None
        each, extras = divmod(total, sections)
        sizes = [0] + extras * [each + 1] + (sections - extras) * [each]
        points = list(np.cumsum(sizes))
    lead = (slice(None),) * axis
    return [x[(*lead, slice(int(a), int(b)))] for a, b in zip(points, points[1:])]


def split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list[Array]:
    """``array_split`` that insists on equal parts when given a number of sections (ValueError otherwise)."""
    x = as_array(ary)
    if not isinstance(indices_or_sections, Sequence) and not isinstance(indices_or_sections, np.ndarray):
        sections = operator.index(indices_or_sections)
        if sections and x.shape[normalize_axis(axis, x.ndim)] % sections:
            raise ValueError("array split does not result in an equal division")
    return array_split(x, indices_or_sections, axis)


def hsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Array]:
    """``split`` along axis 1 (axis 0 for 1-d arrays)."""
    x = as_array(ary)
    if x.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Array]:
    """``split`` along axis 0 of an array of at least 2 dimensions."""
    x = as_array(ary)
    if x.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(x, indices_or_sections, 0)


def dsplit(ary: ArrayLike, indices_or_sections: Any) -> list[Array]:
    """``split`` along axis 2 of an array of at least 3 dimensions."""
    x = as_array(ary)
    if x.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(x, indices_or_sections, 2)


def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Array:
    """``values`` appended to ``arr`` (both flattened when ``axis`` is None)."""
    if axis is None:
        return concat([ravel(as_array(arr)), ravel(as_array(values))], axis=0)
    return concat([arr, values], axis=axis)


def fliplr(m: ArrayLike) -> Array:
    """Columns reversed (axis 1)."""
    x = as_array(m)
    if x.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(x, axis=1)


def flipud(m: ArrayLike) -> Array:
    """Rows reversed (axis 0)."""
    x = as_array(m)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(x, axis=0)


def rot90(m: ArrayLike, k: int = 1, axes: Sequence[int] = (0, 1)) -> Array:
    """Rotated by 90 degrees ``k`` times in the plane of ``axes``, from the first axis towards the second."""
    x = as_array(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == x.ndim:
        raise ValueError("Axes must be different.")
    if not all(-x.ndim <= a < x.ndim for a in axes):
        raise ValueError(f"Axes={axes} out of range for array of ndim={x.ndim}.")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, axis=axes[0]), axis=axes[1])
    order = list(range(x.ndim))
    order[axes[0]], order[axes[1]] = order[axes[1]], order[axes[0]]
    return transpose(flip(x, axis=axes[1]), order) if k == 1 else flip(transpose(x, order), axis=axes[1])


def shape(a: ArrayLike) -> tuple[int, ...]:
    """The shape (from the metadata: nothing computed)."""
    return as_array(a).shape


def ndim(a: ArrayLike) -> int:
    """The number of axes."""
    return as_array(a).ndim


def size(a: ArrayLike, axis: int | None = None) -> int:
    """The number of elements (along ``axis`` when given)."""
    x = as_array(a)
    return x.size if axis is None else x.shape[normalize_axis(axis, x.ndim)]


def kron(a: ArrayLike, b: ArrayLike) -> Array:
    """Kronecker product: blocks ``a[i, j] * b`` (one fused elementwise product of interleaved axes)."""
    x, y = as_array(a), as_array(b)
    if x.ndim == 0 or y.ndim == 0:
        return elementwise("multiply", x, y)
    nd = max(x.ndim, y.ndim)
    xs, ys = (1,) * (nd - x.ndim) + x.shape, (1,) * (nd - y.ndim) + y.shape
    xi = reshape(x, tuple(v for s in xs for v in (s, 1)))
    yi = reshape(y, tuple(v for s in ys for v in (1, s)))
    return reshape(elementwise("multiply", xi, yi), tuple(p * q for p, q in zip(xs, ys)))


def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """The diagonal of the plane (``axis1``, ``axis2``), as the last axis of the result (NumPy's order)."""
    x = as_array(a)
    if x.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    axis1, axis2 = normalize_axis(axis1, x.ndim, "axis1"), normalize_axis(axis2, x.ndim, "axis2")
    if axis1 == axis2:
        raise ValueError("axis1 and axis2 cannot be the same")
    return _last_axes_diagonal(moveaxis(x, (axis1, axis2), (-2, -1)), offset=offset)


def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: Any = None) -> Array:
    """Sum along the diagonal (see ``diagonal``), with ``sum``'s dtype rules."""
    if out is not None:
        raise TypeError("trace: out= is not supported: Arrays are immutable, assign the result")
    return _reductions.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = float, *, like: Any = None,  # noqa: N803
        chunks: Any = "auto", backend: str | None = None) -> Array:
    """Ones at and below the ``k``-th diagonal of an N x M array, zeros elsewhere (computed per block)."""
    M = N if M is None else M  # noqa: N806
    rows = reshape(arange(N, chunks=chunks, backend=backend), (N, 1))
    cols = reshape(arange(-k, M - k, chunks=chunks, backend=backend), (1, M))
    return elementwise("greater_equal", rows, cols).astype(dtype)


def identity(n: int, dtype: Any = None, *, like: Any = None, chunks: Any = "auto",
             backend: str | None = None) -> Array:
    """The n x n identity matrix (float64 unless ``dtype``)."""
    return eye(n, dtype=np.float64 if dtype is None else dtype, chunks=chunks, backend=backend)


def logspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, base: Any = 10.0, dtype: Any = None,
             axis: int = 0, *, chunks: Any = "auto", backend: str | None = None) -> Array:
    """``base ** linspace(start, stop, num)`` (scalar ``start``, ``stop`` and ``base``), fused."""
    if any(np.ndim(v) for v in (start, stop, base)) or axis not in (0, -1):
        raise NotImplementedError("logspace: array-valued start, stop or base are not supported; use "
                                  "base ** gnp.linspace(...) with broadcasting")
    y = linspace(start, stop, num, endpoint=endpoint, chunks=chunks, backend=backend)
    out = elementwise("power", np.asarray(base)[()], y)
    return out if dtype is None else out.astype(dtype)
