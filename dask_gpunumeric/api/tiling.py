"""Repetition: ``tile`` (one ``Gather``: each axis the concatenation of its copies) and ``repeat`` (within each
block for an integer count, an integer-array selection for one count per element)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import namespace
from .array import Array, ArrayLike
from .blockwise import map_blocks
from .creation import as_array, operator_index
from .indexing import getitem
from .manipulation import _gather_axes, expand_dims, normalize_axis, ravel
from .selection import _host_integers, _index_along

__all__ = ["repeat", "tile"]


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


def repeat(a: ArrayLike, repeats: Any, axis: int | None = None) -> Array:
    """Each element repeated ``repeats`` times along ``axis`` (of the flattened array when None), as
    ``numpy.repeat``. An integer count repeats within each block (no data movement); an array of counts (one
    per element, computed first if lazy) is an integer-array selection."""
    a = as_array(a)
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
    return getitem(a, _index_along(axis, a.ndim, np.repeat(np.arange(a.shape[axis]), counts)))
