"""Sorting, searching and set functions (array API 2024.12, plus the NumPy names): sort, argsort,
searchsorted, nonzero, argwhere, flatnonzero, count_nonzero and the unique family.

Everything is built on the primitives: a function that needs a whole axis in one block rechunks that axis
to one chunk and runs a ``map_blocks`` function there; counts per value are per-block rows summed by a
tree ``Reduction``. Results are lazy, except where their *shape* depends on the data (``nonzero`` and its
relatives, the ``unique`` family): there the part that decides the shape is computed first, as each
docstring says.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import reductions as _reductions
from .array import Array, ArrayLike
from ..backend import namespace
from .blockwise import map_blocks
from .creation import arange, as_array, as_operand, from_array
from .elementwise import elementwise
from .elementwise import where as _elementwise_where
from .manipulation import (
    expand_dims, normalize_axis, ravel, rechunk_expr, reshape, stack,
)
from ..runtime.fetch import fetch
from .recipes import reused

__all__ = [
    "argsort", "argwhere", "count_nonzero", "flatnonzero", "nonzero", "searchsorted", "sort", "unique",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "where",
]


# --- shared helpers (also used by _statistics) ------------------------------------------------------


def _arrays(*values: Any) -> list[Array]:
    """The operands as Arrays on one backend: CuPy if any Array operand is on CuPy, else the backend of the
    Array operands (non-Array operands go there too), else the default backend."""
    backends = {v.backend for v in values if isinstance(v, Array)}
    backend = "cupy" if "cupy" in backends else next(iter(backends), None)
    arrays = [Array(as_operand(v, backend, force_array=True)) for v in values]
    return [a if backend is None or a.backend == backend else a.to_backend(backend) for a in arrays]


def _require_1d(ndim: int) -> None:
    """NumPy's ValueError for an argument that must be 1-d."""
    if ndim > 1:
        raise ValueError("object too deep for desired array")
    if ndim < 1:
        raise ValueError("object of too small depth for desired array")


def _whole_axis(a: Array, axis: int) -> Array:
    """``a`` with ``axis`` in one chunk (the other axes keep theirs): each block then holds whole slices
    along ``axis``, i.e. ``a.shape[axis]`` times the block size of the other axes."""
    chunks = tuple((a.shape[d],) if d == axis else c for d, c in enumerate(a.chunks))
    return Array(rechunk_expr(a.expr, chunks))


def _block_rows(func: Callable[..., Any], inputs: list[Array], width: int, dtype: Any, name: str,
                **kwargs: Any) -> Array:
    """One row of ``width`` values per block of the 1-d ``inputs`` (equally chunked): an Array of shape
    ``(number of blocks, width)`` whose row ``i`` is ``func(*blocks i, **kwargs)``, for a reduction over
    axis 0 to combine."""
    columns = [expand_dims(a, 1) for a in inputs]
    chunks = ((1,) * inputs[0].numblocks[0], (width,))
    return map_blocks(func, *columns, chunks=chunks, dtype=dtype, name=name, **kwargs)


def _counts(indices: Array, length: int, weights: Array | None = None) -> Array:
    """How often each value of ``range(length)`` occurs in the 1-d integer Array ``indices`` (whose values
    lie in that range), or the sum of the matching ``weights``: a bincount per block, the rows summed as a
    tree reduction. Counts are intp; weighted sums float64 (complex128 for complex weights)."""
    if weights is None:
        dtype, inputs = np.dtype(np.intp), [indices]
    else:
        dtype = np.dtype(np.complex128 if weights.dtype.kind == "c" else np.float64)
        inputs = [indices, Array(rechunk_expr(weights.expr, indices.chunks))]
    rows = _block_rows(_bincount_row, inputs, length, dtype, "bincount", length=length)
    return _reductions.sum(rows, axis=0, dtype=dtype)


def _bincount_row(indices: Any, weights: Any = None, *, length: int) -> Any:
    xp = namespace(indices)
    i = indices.reshape(-1).astype(np.intp, copy=False)
    if weights is None:
        counts = xp.bincount(i, minlength=length)
    else:
        w = weights.reshape(-1)
        counts = xp.bincount(i, weights=w.real.astype(np.float64), minlength=length)
        if w.dtype.kind == "c":
            counts = counts + 1j * xp.bincount(i, weights=w.imag.astype(np.float64), minlength=length)
    return counts.reshape(1, length)


# --- sorting ------------------------------------------------------------------------------------------

def _sort_kwargs(xp: Any, stable: bool) -> dict[str, str]:
    """NumPy's argument for a stable sort; CuPy's sorts are always stable (and take no ``kind``)."""
    return {"kind": "stable"} if stable and xp is np else {}


def _sort_block(block: Any, *, axis: int, descending: bool, stable: bool, indices: bool) -> Any:
    # descending and stable: sort the reversed block ascending and reverse the result, so that equal
    # elements keep their order (indices are mapped back to the unreversed block)
    xp = namespace(block)
    if descending:
        block = xp.flip(block, axis=axis)
    kwargs = _sort_kwargs(xp, stable)
    out = xp.argsort(block, axis=axis, **kwargs) if indices else xp.sort(block, axis=axis, **kwargs)
    if descending:
        out = xp.flip(out, axis=axis)
        if indices:
            out = block.shape[axis] - 1 - out
    return out


def _sort(name: str, x: ArrayLike, axis: int | None, kind: str | None, order: Any, descending: bool,
          stable: bool | None) -> Array:
    if order is not None:
        raise ValueError("Cannot specify order when the array has no fields.")
    if kind is not None and stable is not None:
        raise ValueError("`kind` and `stable` parameters can't be provided at the same time. Use only one of them.")
    # NumPy goes by the first letter: quicksort, heapsort, mergesort or stable (the last two are stable)
    letter = kind[:1].lower() if isinstance(kind, str) else kind
    if kind is not None and letter not in ("q", "h", "m", "s"):
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")
    stable = letter in ("m", "s") if kind is not None else stable is not False
    a = as_array(x)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    indices = name == "argsort"
    return map_blocks(_sort_block, _whole_axis(a, axis), dtype=np.intp if indices else a.dtype, name=name,
                      axis=axis, descending=bool(descending), stable=stable, indices=indices)


@reused
def sort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
         descending: bool = False, stable: bool | None = None) -> Array:
    """The array sorted along ``axis`` (the flattened array when ``axis`` is None, as ``numpy.sort``), NaNs
    last; ``descending`` reverses the order, keeping equal elements in their order when the sort is stable
    (the default: ``stable=True`` or a stable ``kind``).

    Lazy. The axis is rechunked to one chunk, so each block holds whole slices along it: sorting a 1-d
    array (or ``axis=None``) puts the whole array in one block, on one device.
    """
    return _sort("sort", a, axis, kind, order, descending, stable)


def argsort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
            descending: bool = False, stable: bool | None = None) -> Array:
    """Indices (intp) that sort the array along ``axis``, as ``numpy.argsort`` (``descending`` and
    ``stable`` as in ``sort``; a stable sort lists equal elements in their order).

    Lazy; the axis is rechunked to one chunk (see ``sort`` for the memory this takes).
    """
    return _sort("argsort", a, axis, kind, order, descending, stable)


# --- searching ----------------------------------------------------------------------------------------


def _searchsorted_block(values: Any, sorted_: Any, sorter: Any = None, *, side: str) -> Any:
    xp = namespace(values, sorted_)
    common = np.result_type(sorted_.dtype, values.dtype)
    return xp.searchsorted(sorted_.astype(common, copy=False), values.astype(common, copy=False), side=side,
                           sorter=sorter)


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike | None = None) -> Array:
    """Indices (intp) where the elements of ``v`` would be inserted into the sorted 1-d ``a`` to keep it
    sorted (``side="left"``: before equal elements, ``"right"``: after them); with ``sorter``, ``a`` is
    sorted by those indices (``a[sorter]``). The result has ``v``'s shape (a 0-d Array for a scalar).

    Lazy: ``a`` (and ``sorter``) become one block, searched by every block of ``v``. ``sorter``'s values
    are not checked (NumPy raises for out-of-range ones).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    arrays = _arrays(a, v) if sorter is None else _arrays(a, v, sorter)
    a, v = arrays[:2]
    _require_1d(a.ndim)
    extra = []
    if sorter is not None:
        s = arrays[2]
        if s.dtype.kind not in "iu":
            raise TypeError("sorter must only contain integers")
        if s.shape != a.shape:
            raise ValueError("sorter.size must equal a.size")
        extra = [_whole_axis(s, 0)]
    values = v if v.ndim else reshape(v, (1,))
    out = map_blocks(_searchsorted_block, values, _whole_axis(a, 0), *extra, dtype=np.intp, name="searchsorted",
                     side=side)
    return out if v.ndim else reshape(out, ())


def _nonzero_count_block(block: Any) -> Any:
    return (block != 0).sum(keepdims=True)


def _select_nonzero(block: Any, index: Any) -> Any:
    return index[block != 0]


def flatnonzero(a: ArrayLike) -> Array:
    """Flat (C-order) indices (intp) of the nonzero elements, as ``numpy.flatnonzero``.

    The result's length depends on the data: the number of nonzero elements of each block is computed
    first (one small computation of the input); the indices themselves are then lazy, one block of them per
    block of the flattened input.
    """
    flat = ravel(as_array(a))
    per_block = map_blocks(_nonzero_count_block, flat, chunks=((1,) * flat.numblocks[0],), dtype=np.intp,
                           name="count-nonzero")
    lengths = tuple(int(n) for n in fetch(per_block))
    index = arange(flat.size, dtype=np.intp, chunks=flat.chunks, backend=flat.backend)
    return map_blocks(_select_nonzero, flat, index, chunks=(lengths,), dtype=np.intp, name="nonzero")


def nonzero(a: ArrayLike) -> tuple[Array, ...]:
    """Indices (intp) of the nonzero elements, one Array per axis, in C order, as ``numpy.nonzero``.

    Computes the number of nonzero elements per block first, which decides the length (see
    ``flatnonzero``); the indices are lazy.
    """
    a = as_array(a)
    if a.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead.")
    flat = flatnonzero(a)
    strides = [math.prod(a.shape[d + 1 :]) for d in range(a.ndim)]
    return tuple(flat // stride % n if d else flat // stride for d, (stride, n) in enumerate(zip(strides, a.shape)))


def argwhere(a: ArrayLike) -> Array:
    """Indices (intp) of the nonzero elements as an ``(N, x.ndim)`` Array, as ``numpy.argwhere``.

    Computes the number of nonzero elements per block first (see ``flatnonzero``); the indices are lazy.
    """
    a = as_array(a)
    if a.ndim == 0:  # as NumPy: a 0-d input gives N rows of no columns
        return argwhere(reshape(a, (1,)))[:, :0]
    return stack(nonzero(a), axis=1)


def count_nonzero(a: ArrayLike, axis: Any = None, *, keepdims: bool = False) -> Array:
    """Number (intp) of nonzero elements over ``axis`` (int, tuple or None for all): a lazy reduction."""
    return _reductions.sum(elementwise("not_equal", a, 0), axis=axis, dtype=np.intp, keepdims=keepdims)


def where(condition: ArrayLike, x: ArrayLike | None = None, y: ArrayLike | None = None, /) -> Any:
    """Elements of ``x`` where ``condition`` is true, else of ``y``, with broadcasting (lazy), as
    ``numpy.where``; with ``condition`` alone, ``nonzero(condition)``."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    return _elementwise_where(condition, x, y)


# --- unique -------------------------------------------------------------------------------------------


class UniqueAllResult(NamedTuple):
    """``unique_all``'s result: sorted distinct values, first indices, inverse indices, counts."""

    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class UniqueCountsResult(NamedTuple):
    """``unique_counts``'s result: sorted distinct values and how often each occurs."""

    values: Array
    counts: Array


class UniqueInverseResult(NamedTuple):
    """``unique_inverse``'s result: sorted distinct values, and each element's position among them."""

    values: Array
    inverse_indices: Array


def _distinct_block(block: Any, *, equal_nan: bool) -> Any:
    """The sorted distinct values of a block (NaNs last: one of them with ``equal_nan``, else all)."""
    xp = namespace(block)
    s = xp.sort(block.reshape(-1))
    keep = xp.ones(s.shape, dtype=bool)
    keep[1:] = s[1:] != s[:-1]  # NaN != NaN: every NaN is kept here
    if equal_nan and s.dtype.kind in "fc":
        nan = xp.isnan(s)
        keep[1:] &= ~(nan[1:] & nan[:-1])
    return s[keep]


def _distinct_count_block(block: Any, *, equal_nan: bool) -> Any:
    return namespace(block).asarray([_distinct_block(block, equal_nan=equal_nan).size])


def _first_index_row(positions: Any, index: Any, *, length: int, fill: int) -> Any:
    """For each of ``length`` positions, the first ``index`` at which it occurs in the block (else ``fill``)."""
    xp = namespace(positions)
    p, i = positions.reshape(-1), index.reshape(-1)
    order = xp.argsort(p, **_sort_kwargs(xp, True))
    p, i = p[order], i[order]
    first = xp.ones(p.shape, dtype=bool)
    first[1:] = p[1:] != p[:-1]
    out = xp.full((1, length), fill, dtype=np.intp)
    out[0, p[first]] = i[first]
    return out


def _unique(x: ArrayLike, equal_nan: bool, *, index: bool = False, inverse: bool = False,
            counts: bool = False) -> tuple[Array, Array | None, Array | None, Array | None]:
    """(values, first indices, inverse indices, counts) of the distinct values, the last three only where
    asked for (else None).

    The values decide the length and are computed: each block's distinct values are counted (one
    computation), then computed (a second one) and combined by one more sort-and-dedupe. Indices and
    counts are lazy: each element's position among the values (``searchsorted``; with distinct NaNs, the
    k-th NaN goes to the k-th NaN place), then per-block first indices and bincounts reduced over blocks.
    """
    a = as_array(x)
    flat = ravel(a)
    nb = flat.numblocks[0]
    sizes = fetch(map_blocks(_distinct_count_block, flat, chunks=((1,) * nb,), dtype=np.intp,
                             name="unique-count", equal_nan=equal_nan))
    per_block = map_blocks(_distinct_block, flat, chunks=(tuple(int(s) for s in sizes),), name="unique-block",
                           equal_nan=equal_nan)
    distinct = _distinct_block(per_block.compute(), equal_nan=equal_nan)
    values = from_array(distinct, chunks=-1, backend=flat.backend)
    if not (index or inverse or counts):
        return values, None, None, None
    positions = searchsorted(values, flat)
    nan_last = distinct.dtype.kind in "fc" and distinct.size and bool(namespace(distinct).isnan(distinct[-1]))
    if nan_last and not equal_nan:
        nan = elementwise("isnan", flat)
        positions = positions + where(nan, _reductions.cumsum(nan, axis=0, dtype=np.intp) - 1, 0)
    first = None
    if index:
        ordinal = arange(flat.size, dtype=np.intp, chunks=flat.chunks, backend=flat.backend)
        rows = _block_rows(_first_index_row, [positions, ordinal], values.size, np.intp, "unique-index",
                           length=values.size, fill=flat.size)
        first = _reductions.min(rows, axis=0)
    return (values, first, reshape(positions, a.shape) if inverse else None,
            _counts(positions, values.size) if counts else None)


def unique_values(x: ArrayLike) -> Array:
    """The sorted distinct values of ``x`` (flattened), each NaN counted as distinct (array API,
    ``numpy.unique_values``).

    The values decide the result's length, so they are computed (two passes over ``x``: per-block distinct
    counts, then the per-block distinct values, combined on the client); the result wraps them.
    """
    return _unique(x, False)[0]


def unique_counts(x: ArrayLike) -> UniqueCountsResult:
    """``(values, counts)``: the sorted distinct values (each NaN distinct) and how often each occurs (intp).

    The values are computed (see ``unique_values``); the counts are lazy (per-block counts summed as a tree).
    """
    values, _, _, counts = _unique(x, False, counts=True)
    return UniqueCountsResult(values, counts)


def unique_inverse(x: ArrayLike) -> UniqueInverseResult:
    """``(values, inverse_indices)``: the sorted distinct values (each NaN distinct) and, with ``x``'s
    shape, each element's index among them (intp), so that ``values[inverse_indices]`` rebuilds ``x``.

    The values are computed (see ``unique_values``); the inverse indices are lazy.
    """
    values, _, inverse, _ = _unique(x, False, inverse=True)
    return UniqueInverseResult(values, inverse)


def unique_all(x: ArrayLike) -> UniqueAllResult:
    """``(values, indices, inverse_indices, counts)``: the sorted distinct values (each NaN distinct), the
    flat index of each one's first occurrence, each element's index among them (``x``'s shape), and the
    counts; all intp but the values.

    The values are computed (see ``unique_values``); the rest is lazy.
    """
    return UniqueAllResult(*_unique(x, False, index=True, inverse=True, counts=True))


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False,
           axis: int | None = None, *, equal_nan: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    """``numpy.unique`` of the flattened array: the sorted distinct values (NaNs as one value unless
    ``equal_nan=False``), plus, as asked, the first indices, the inverse indices (``ar``'s shape) and the
    counts. Values are always sorted (``sorted=False`` allows any order). ``axis`` other than None is not
    supported.

    The values are computed (see ``unique_values``); the other results are lazy.
    """
    if axis is not None:
        raise NotImplementedError("unique: axis is not supported (unique rows or columns); flatten or use axis=None")
    values, first, inverse, counts = _unique(ar, bool(equal_nan), index=return_index, inverse=return_inverse,
                                             counts=return_counts)
    extra = [r for r in (first, inverse, counts) if r is not None]
    return (values, *extra) if extra else values
