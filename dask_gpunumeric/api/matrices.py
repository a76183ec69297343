"""Building matrices: ``tril`` and ``triu`` (per block from its offsets: no data movement) and ``diag``."""
from __future__ import annotations

from typing import Any

from ..backend import namespace
from .array import Array, ArrayLike
from .blockwise import map_blocks
from .creation import as_array, eye, full, operator_index
from .elementwise import elementwise
from .linalg import diagonal
from .manipulation import broadcast_to, concat, expand_dims

__all__ = ["diag", "tril", "triu"]


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


def tril(m: ArrayLike, k: int = 0) -> Array:
    """The lower triangle of the last two axes (elements with ``col - row <= k``), zeros above, as
    ``numpy.tril``. Per block from its offsets: no data movement."""
    return _triangle("tril", m, k, True)


def triu(m: ArrayLike, k: int = 0) -> Array:
    """The upper triangle of the last two axes (elements with ``col - row >= k``), zeros below, as
    ``numpy.triu``. Per block from its offsets: no data movement."""
    return _triangle("triu", m, k, False)


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
