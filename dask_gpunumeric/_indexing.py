"""Indexing: ``x[index]`` and functional ``x[index] = value``, NumPy semantics.

Basic indices (ints, slices with any step, ``...``, ``None``) and one advanced index (an integer array or a
boolean mask) are native ``Gather``/``SetItem`` expressions; other advanced combinations go through the
dask.array fallback. A boolean mask or integer index that is itself a lazy Array is computed first, since
it decides the result's shape.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _guards, _plan
from ._array import Array
from ._backend import to_numpy
from ._expr import Gather, SetItem


def _normalize(index: Any, ndim: int) -> tuple[Any, ...]:
    """The index as a tuple with Ellipsis expanded, lazy Arrays computed and array-likes as NumPy arrays."""
    if not isinstance(index, tuple):
        index = (index,)
    out: list[Any] = []
    for ix in index:
        if isinstance(ix, Array):
            ix = to_numpy(ix.compute())
        elif isinstance(ix, list) or type(ix).__module__.startswith("cupy"):
            ix = to_numpy(np.asarray(ix) if isinstance(ix, list) else ix)
        if isinstance(ix, np.ndarray) and ix.ndim == 0 and ix.dtype.kind in "iu":
            ix = int(ix)
        if isinstance(ix, np.ndarray) and ix.dtype.kind not in "iub":
            raise IndexError(
                "arrays used as indices must be of integer (or boolean) type"
            )
        if not isinstance(ix, (slice, type(None), type(Ellipsis), np.ndarray, bool, np.bool_)):
            from ._creation import operator_index

            try:
                ix = operator_index(ix)
            except TypeError:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
                    f"boolean arrays are valid indices (got {type(ix).__name__})"
                ) from None
        out.append(ix)
    if sum(ix is Ellipsis for ix in out) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(
        ix.ndim if isinstance(ix, np.ndarray) and ix.dtype == bool else 0 if ix is None or ix is Ellipsis else 1
        for ix in out
    )
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed")
    if Ellipsis in out:
        i = out.index(Ellipsis)
        out[i : i + 1] = [slice(None)] * (ndim - used)
    else:
        out.extend([slice(None)] * (ndim - used))
    return tuple(out)


def _check_int(i: int, n: int, axis: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    return i % n


def _is_advanced(ix: Any) -> bool:
    return isinstance(ix, (np.ndarray, bool, np.bool_))


def getitem(x: Array, index: Any) -> Array:
    """``x[index]`` with NumPy semantics (lazy)."""
    index = _normalize(index, x.ndim)
    _guards.check_scalar_index(x.shape, index, "reading")
    advanced = [ix for ix in index if _is_advanced(ix)]
    if advanced:
        return _advanced_getitem(x, index, advanced)
    return _basic_getitem(x, index)


def _basic_getitem(x: Array, index: tuple[Any, ...]) -> Array:
    from ._manipulation import expand_dims

    plan, drop, new_axes, axis = [], [], [], 0
    for ix in index:
        if ix is None:
            new_axes.append(axis - len(drop) + len(new_axes))
            continue
        chunks, n = x.chunks[axis], x.shape[axis]
        if isinstance(ix, slice):
            segment = _plan.slice_segment(ix, n)
            _, start, step, count = segment
            out_chunks = _plan.chunks_following_input(chunks, start, step, count)
            plan.append(_plan.segments_plan([chunks], [segment], out_chunks))
        else:
            plan.append(_plan.integer_plan(chunks, _check_int(ix, n, axis)))
            drop.append(axis)
        axis += 1
    if all(isinstance(ix, slice) and ix == slice(None) for ix in index if ix is not None):
        out = x
    else:
        out = Array(Gather(tuple(plan), tuple(drop), x.dtype, x.expr))
    return expand_dims(out, tuple(new_axes)) if new_axes else out


def _advanced_getitem(x: Array, index: tuple[Any, ...], advanced: list[Any]) -> Array:
    from ._manipulation import reshape

    if len(advanced) == 1 and not any(ix is None for ix in index):
        (adv,) = advanced
        pos = next(i for i, ix in enumerate(index) if _is_advanced(ix))
        if isinstance(adv, (bool, np.bool_)):
            adv = np.asarray(adv)
        if adv.dtype == bool:
            covered = x.shape[pos : pos + adv.ndim]
            if adv.shape != covered:
                raise IndexError(
                    f"boolean index did not match indexed array along axis {pos}; size of axis is "
                    f"{covered} but size of corresponding boolean axis is {adv.shape}"
                )
            if adv.ndim != 1:
                merged = reshape(x, (*x.shape[:pos], math.prod(covered), *x.shape[pos + adv.ndim :]))
                rest = index[:pos] + (slice(None),) + index[pos + adv.ndim :]
                return _take(merged, np.flatnonzero(adv), pos, rest)
            return _take(x, np.flatnonzero(adv), pos, index)
        flat = adv.reshape(-1).astype(np.int64)
        n = x.shape[pos]
        bad = flat[(flat < -n) | (flat >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad[0])} is out of bounds for axis {pos} with size {n}")
        out = _take(x, flat % max(n, 1), pos, index)
        if adv.ndim != 1:
            axis = sum(1 for ix in index[:pos] if not isinstance(ix, (int, np.integer)))
            out = reshape(out, (*out.shape[:axis], *adv.shape, *out.shape[axis + 1 :]))
        return out
    return _fallback_getitem(x, index)


def _take(x: Array, flat: np.ndarray, pos: int, index: tuple[Any, ...]) -> Array:
    """Integer-array selection on axis ``pos``, then the remaining basic indices of ``index``."""
    size = max(x.chunks[pos], default=1) or 1
    out_chunks = _plan.split_even(len(flat), size)
    plan = tuple(
        _plan.take_plan(x.chunks[d], flat, out_chunks) if d == pos else _plan.identity_plan(x.chunks[d])
        for d in range(x.ndim)
    )
    taken = Array(Gather(plan, (), x.dtype, x.expr))
    rest = tuple(slice(None) if d == pos else ix for d, ix in enumerate(index))
    return _basic_getitem(taken, rest)


def _fallback_getitem(x: Array, index: tuple[Any, ...]) -> Array:
    from ._creation import from_dask_array
    from ._protocols import warn_fallback

    warn_fallback("getitem with several advanced indices")
    return from_dask_array(x.to_dask_array()[index])


def setitem(x: Array, index: Any, value: Any) -> Array:
    """The Array after ``x[index] = value`` (a new expression; ``x`` itself is rebound by the caller)."""
    from ._creation import as_operand
    from ._elementwise import elementwise

    if isinstance(index, Array) and index.dtype == bool and index.shape == x.shape and _is_scalar_like(value):
        return elementwise("where", index, value, x, dtype=x.dtype)
    index = _normalize(index, x.ndim)
    _guards.check_scalar_index(x.shape, index, "setting")
    if any(_is_advanced(ix) or ix is None for ix in index):
        if len(index) == x.ndim and sum(_is_advanced(ix) for ix in index) == 1 and _is_scalar_like(value):
            return _mask_setitem(x, index, value)
        return _fallback_setitem(x, index, value)
    target = _basic_getitem(x, index)
    region_plan, region_chunks = [], []
    for axis, ix in enumerate(index):
        chunks, n = x.chunks[axis], x.shape[axis]
        if isinstance(ix, slice):
            _, start, step, count = _plan.slice_segment(ix, n)
        else:
            start, step, count = _check_int(ix, n, axis), 1, 1
        pieces = _plan._split_segment(chunks, start, step, count) if count else []
        per_chunk: list[Any] = [None] * len(chunks)
        for j, (c, local, _) in enumerate(pieces):
            per_chunk[c] = (j, local)
        region_plan.append(tuple(per_chunk))
        region_chunks.append(tuple(m for _, _, m in pieces) or (0,))
    if any(not p or all(h is None for h in p) for p in region_plan):
        return x
    if _is_scalar_like(value) and not isinstance(value, Array):
        v: Any = np.asarray(value).astype(x.dtype)[()]
    else:
        from ._manipulation import broadcast_to, expand_dims

        varr = Array(as_operand(value, x.backend))
        varr = broadcast_to(varr if varr.dtype == x.dtype else varr.astype(x.dtype), target.shape)
        int_axes = tuple(d for d, ix in enumerate(index) if not isinstance(ix, slice))
        varr = expand_dims(varr, int_axes) if int_axes else varr
        v = varr.rechunk(tuple(region_chunks)).expr
    return Array(SetItem(x.expr, v, tuple(region_plan)))


def _is_scalar_like(value: Any) -> bool:
    return np.isscalar(value) or (isinstance(value, (Array, np.ndarray)) and value.ndim == 0)


def _mask_setitem(x: Array, index: tuple[Any, ...], value: Any) -> Array:
    """``x[..., idx, ...] = scalar`` with one integer array or mask: a ``where`` over a broadcast mask."""
    from ._creation import from_array
    from ._elementwise import elementwise

    mask = np.zeros(x.shape, dtype=bool)
    mask[index] = True
    return elementwise("where", from_array(mask, chunks=x.chunks, backend=x.backend), value, x, dtype=x.dtype)


def _fallback_setitem(x: Array, index: tuple[Any, ...], value: Any) -> Array:
    from ._creation import from_dask_array
    from ._protocols import warn_fallback

    warn_fallback("setitem with this index")
    d = x.to_dask_array()
    d[index] = value.to_dask_array() if isinstance(value, Array) else value
    return from_dask_array(d)
