"""Selection by integer positions: ``take`` and ``take_along_axis``, and the helpers that bring index data
to the host (its values decide the result's shape, so a gnp Array of indices is computed first, as indexing
does)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import namespace
from .array import Array, ArrayLike, host_value
from .blockwise import map_blocks
from .creation import as_array, from_array
from .elementwise import align_chunks
from .indexing import getitem
from .manipulation import broadcast_shape, normalize_axis, ravel, rechunk
from .reductions import store_output

__all__ = ["take", "take_along_axis"]


def _host_integers(value: Any) -> np.ndarray:
    """Integer (or boolean) data as a NumPy array, with NumPy's TypeError for other dtypes."""
    out = host_value(value)
    if out.size == 0 and out.dtype.kind == "f":  # an empty list
        return out.astype(np.intp)
    if out.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {out.dtype!r} to dtype('int64') according to the rule 'safe'")
    return out


def _index_along(axis: int, ndim: int, index: Any) -> tuple[Any, ...]:
    """An index tuple applying ``index`` on ``axis`` and taking everything on the other axes."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def take(a: ArrayLike, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise") -> Array:
    """Elements of ``a`` at integer ``indices`` along ``axis`` (of the flattened array when None), as
    ``numpy.take``: the result has ``indices``' shape in place of the axis. ``mode`` "raise" (IndexError for an
    index out of range), "wrap" or "clip". A gnp Array of indices is computed first (its values decide the
    plan); a single integer index selecting one element is scalar indexing (``gnp.allowscalar``)."""
    a = as_array(a)
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
    return store_output("take", getitem(a, _index_along(axis, a.ndim, idx[()] if idx.ndim == 0 else idx)), out)


def _take_along_axis_block(block: Any, indices: Any, *, axis: int) -> Any:
    return namespace(block, indices).take_along_axis(block, indices, axis=axis)


def take_along_axis(arr: ArrayLike, indices: ArrayLike, axis: int | None = -1) -> Array:
    """Elements of ``x`` picked along ``axis`` by an integer array of the same number of dimensions
    (broadcast against ``x`` on the other axes), as ``numpy.take_along_axis``; ``axis=None`` works on the
    flattened ``x`` with 1-d ``indices``.

    Per block: ``x`` is made one block along ``axis`` and each block of ``indices`` picks from the matching
    block of ``x``, so ``indices`` may be a lazy Array. Host indices are checked (IndexError out of range);
    the values of lazy ones are not (that would compute them)."""
    a = as_array(arr)
    lazy = isinstance(indices, Array)
    idx = indices if lazy else host_value(indices)
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
