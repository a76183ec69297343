"""Functions that run on one block (or a few) inside Dask tasks, for NumPy and CuPy blocks alike.

They take the array module from their inputs (``_backend.namespace``), so a task is the same on a laptop
and on a GPU worker. Everything here is a plain top-level function so that tasks pickle.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops.reductions import REDUCTIONS
from ..backend import module, namespace, to_backend

# --- data in ------------------------------------------------------------------------------------------


def as_block(piece: Any, dtype: np.dtype, backend: str) -> Any:
    """A piece of user data as a block of the backend, with the array's dtype."""
    if isinstance(piece, np.ndarray) and not piece.dtype.isnative:
        piece = piece.astype(dtype)  # to native byte order on the host: CuPy takes no other
    block = to_backend(piece, backend)
    return block if block.dtype == dtype else block.astype(dtype)


def create(
    kind: str,
    offset: tuple[int, ...],
    shape: tuple[int, ...],
    global_shape: tuple[int, ...],
    dtype: np.dtype,
    backend: str,
    params: tuple,
) -> Any:
    """One block of a created array, computed from its position (``offset`` in the whole array)."""
    xp = module(backend)
    if kind == "full":
        value = params[0]
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)) and value == 0 and not np.signbit(value):
            return xp.zeros(shape, dtype=dtype)  # a memset on a GPU, where CuPy's full runs a copy kernel
        return xp.full(shape, value, dtype=dtype)
    if kind == "empty":
        return xp.empty(shape, dtype=dtype)
    if kind == "arange":
        # NumPy's values, bit for bit: x[0] = start and x[1] = start + step cast to the dtype, then
        # x[i] = x[0] + i * (x[1] - x[0]) computed in the dtype
        start, step = params
        first, second = dtype.type(start), dtype.type(start + step)
        out = xp.arange(offset[0], offset[0] + shape[0]).astype(dtype) * (second - first) + first
        if offset[0] <= 1 < offset[0] + shape[0]:
            out[1 - offset[0]] = second
        return out.astype(dtype, copy=False)
    if kind == "linspace":
        start, step, num, stop, endpoint = params
        i = xp.arange(offset[0], offset[0] + shape[0], dtype=np.float64)
        out = start + i * step
        if endpoint and num > 1 and offset[0] + shape[0] == num:
            out[-1] = stop
        return (xp.floor(out) if dtype.kind in "iu" else out).astype(dtype)  # NumPy floors for integers
    if kind == "eye":
        (k,) = params
        rows = xp.arange(offset[0], offset[0] + shape[0])[:, None]
        cols = xp.arange(offset[1], offset[1] + shape[1])[None, :]
        return (cols - rows == k).astype(dtype)
    if kind.startswith("random-"):
        from . import philox as _philox

        key, stream, dist_params = params
        return _philox.draw_block(
            kind.removeprefix("random-"), key, stream, global_shape, offset, shape, dtype, dist_params, xp=xp
        )
    raise ValueError(f"unknown creation kind {kind!r}")


# --- elementwise --------------------------------------------------------------------------------------

_SPECIAL = {"astype", "where", "clip"}
_LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}


def elemwise(op: str, dtype: np.dtype, kwargs: dict, *args: Any) -> Any:
    """Apply the array module's function ``op`` to the arguments and return a block of ``dtype``."""
    xp = namespace(*args)
    if op == "astype":
        src = args[0]
        if src.dtype.kind == "f" and dtype.kind == "u" and dtype.itemsize < 8:
            # NumPy (x86) converts floats to small unsigned ints through int64, wrapping negatives;
            # CuPy clamps them: go through int64 on both so that the values agree
            src = src.astype(np.int64)
        return src.astype(dtype, copy=False)
    func = getattr(xp, op)
    if op in _LOGICAL:  # CuPy has no complex loops for these; a complex number is true when nonzero
        args = tuple(a != 0 if np.iscomplexobj(a) else a for a in args)
    with np.errstate(all="ignore"):
        out = func(*args, **kwargs)
    if not isinstance(out, xp.ndarray) or out.dtype != dtype:
        out = xp.asarray(out).astype(dtype, copy=False)
    return out


def apply(func: Any, kwargs: dict, dtype: np.dtype, *blocks: Any) -> Any:
    """``func(*blocks, **kwargs)`` as a block of ``dtype`` (the task of a ``map_blocks``)."""
    out = func(*blocks, **kwargs)
    xp = namespace(*blocks) if blocks else np
    return out if isinstance(out, xp.ndarray) and out.dtype == dtype else xp.asarray(out).astype(dtype, copy=False)


# --- layout -------------------------------------------------------------------------------------------


def transpose(block: Any, axes: tuple[int, ...]) -> Any:
    """The block with its axes permuted."""
    return block.transpose(axes)


def reshape(block: Any, shape: tuple[int, ...]) -> Any:
    """The block reshaped (C order)."""
    return block.reshape(shape)


def broadcast(block: Any, shape: tuple[int, ...]) -> Any:
    """The block broadcast to ``shape`` (a read-only view where the array module allows)."""
    return namespace(block).broadcast_to(block, shape)


def _local_index(block: Any, index: tuple[Any, ...]) -> Any:
    xp = namespace(block)
    out = block[tuple(ix if isinstance(ix, slice) else slice(None) for ix in index)]
    for axis, ix in enumerate(index):
        if not isinstance(ix, slice):
            out = xp.take(out, xp.asarray(ix), axis=axis)
    return out


def concatenate_nested(pieces: Sequence[Any], grid: tuple[int, ...]) -> Any:
    """Join blocks laid out in C order on an n-d ``grid`` into one array."""
    if not grid:
        return pieces[0]
    if len(pieces) == 1:
        return pieces[0]
    xp = namespace(*pieces)
    step = len(pieces) // grid[0]
    parts = [concatenate_nested(pieces[i * step : (i + 1) * step], grid[1:]) for i in range(grid[0])]
    axis = parts[0].ndim - len(grid)
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=axis)


def assemble(
    blocks: Sequence[Any],
    local_indices: Sequence[tuple[Any, ...]],
    grid: tuple[int, ...],
    perms: tuple[Any, ...],
    drop: tuple[int, ...],
) -> Any:
    """Cut each block by its local index, join the pieces on ``grid``, reorder and drop axes."""
    if len(blocks) == 1:
        view = _one_view(local_indices[0], perms, drop)
        if view is not None:  # a basic slice of one block (``x[:, 0]``): one view, not a view of a view
            return blocks[0][view]
    pieces = [_local_index(b, ix) for b, ix in zip(blocks, local_indices)]
    out = concatenate_nested(pieces, grid)
    xp = namespace(out)
    for axis, perm in enumerate(perms):
        if perm is not None:
            out = xp.take(out, xp.asarray(perm), axis=axis)
    if drop:
        out = out[tuple(0 if d in drop else slice(None) for d in range(out.ndim))]
    return out


def _one_view(local: tuple[Any, ...], perms: tuple[Any, ...], drop: tuple[int, ...]) -> tuple[Any, ...] | None:
    """The one basic index that ``assemble`` of a single piece amounts to, where it cuts the piece with slices of
    step 1 (a dropped axis's being one element long) and reorders nothing; else None."""
    view = []
    for axis, ix in enumerate(local):
        if type(ix) is not slice or ix.step not in (None, 1) or perms[axis] is not None:
            return None
        if axis in drop:
            if ix.start is None or ix.stop != ix.start + 1 or ix.start < 0:
                return None
            ix = ix.start
        view.append(ix)
    return tuple(view)


def cut(block: Any, local: tuple[slice, ...]) -> Any:
    """A contiguous copy of ``block[local]``: a halo strip, so that only its elements travel."""
    return namespace(block).ascontiguousarray(block[local])


def halo_block(pieces: Sequence[Any], layout: tuple) -> Any:
    """A block extended by halos from its pieces: ``layout`` is the extended shape and, per piece, the
    local index to cut from it (None for a strip cut already) and where it goes. A single piece is a view."""
    shape, places = layout
    if len(pieces) == 1:
        local = places[0][0]
        return pieces[0] if local is None else pieces[0][local]
    xp = namespace(*pieces)
    out = xp.empty(shape, dtype=pieces[0].dtype)
    for piece, (local, dest) in zip(pieces, places):
        out[dest] = piece if local is None else piece[local]
    return out


def concatenate_grid(blocks: Sequence[Any], numblocks: tuple[int, ...]) -> Any:
    """All blocks of an array joined into one (what compute returns)."""
    return concatenate_nested(list(blocks), numblocks)


def setitem(block: Any, local: tuple[slice, ...], value: Any) -> Any:
    """A copy of the block with ``block[local] = value``."""
    out = block.copy()
    xp = namespace(out)
    out[local] = value if np.isscalar(value) else xp.asarray(value)
    return out


def matmul_piece(a: Any, b: Any, take_a: tuple, take_b: tuple, dtype: np.dtype) -> Any:
    """One product of a blocked matrix product: ``op(a[index]) @ op(b[index])`` for ``take = (index, transposed)``
    (index None: the whole block), ``op`` transposing where asked: views, so the library multiplies with a
    transpose flag and copies nothing."""
    (index_a, ta), (index_b, tb) = take_a, take_b
    a = a if index_a is None else a[index_a]
    b = b if index_b is None else b[index_b]
    xp = namespace(a, b)
    return xp.asarray(xp.matmul(a.T if ta else a, b.T if tb else b), dtype=dtype)  # NumPy's 1-d @ 1-d: a scalar


def sum_blocks(blocks: Sequence[Any]) -> Any:
    """The sum of blocks of one shape and dtype (the products of a blocked matrix product)."""
    out = blocks[0] + blocks[1]
    for block in blocks[2:]:
        out += block
    return namespace(*blocks).asarray(out)  # NumPy's sum of 0-d arrays: a scalar


# --- reductions ---------------------------------------------------------------------------------------


def reduce_chunk(
    kind: str, block: Any, axes: tuple[int, ...], dtype: np.dtype, params: tuple, offsets: tuple[int, ...]
) -> dict[str, Any]:
    """The partial reduction of one block (reduced axes kept with length 1; ``ops.reductions``)."""
    return REDUCTIONS[kind].partial(namespace(block), block, axes, dtype, params, offsets)


def reduce_combine(
    kind: str, partials: Sequence[dict[str, Any]], grid: tuple[int, ...], axes: tuple[int, ...], params: tuple
) -> dict[str, Any]:
    """Combine partials laid out on ``grid`` into one partial: each array field joined on the grid (counts
    as a list) for the reduction's combine."""
    fields = {name: [p[name] for p in partials] if isinstance(value, int)
              else concatenate_nested([p[name] for p in partials], grid) for name, value in partials[0].items()}
    xp = namespace(*(v for v in fields.values() if not isinstance(v, list)))
    return REDUCTIONS[kind].combine(xp, fields, grid, axes, params)


def reduce_finish(
    kind: str, partial: dict[str, Any], axes: tuple[int, ...], keepdims: bool, dtype: np.dtype, params: tuple
) -> Any:
    """The final value from the last partial, with the reduced axes removed unless ``keepdims``."""
    xp = namespace(*partial.values())
    out = REDUCTIONS[kind].finish(xp, partial, dtype, params)
    if not keepdims:
        out = out.reshape(tuple(s for d, s in enumerate(out.shape) if d not in axes))
    return xp.asarray(out).astype(dtype, copy=False)


# --- scans --------------------------------------------------------------------------------------------

_SCAN_FUNC = {"cumsum": "cumsum", "cumprod": "cumprod"}
_SCAN_COMBINE = {"cumsum": "add", "cumprod": "multiply"}


def scan_local(kind: str, block: Any, axis: int, dtype: np.dtype) -> Any:
    """The scan of one block on its own."""
    xp = namespace(block)
    return getattr(xp, _SCAN_FUNC[kind])(block, axis=axis, dtype=dtype)


def scan_carry(kind: str, previous: Any, local_before: Any, axis: int) -> Any:
    """The running total entering the next block: the previous carry combined with the last slice of the
    block before."""
    xp = namespace(local_before)
    last = xp.take(local_before, [local_before.shape[axis] - 1], axis=axis) if local_before.shape[axis] else None
    if last is None:
        return previous
    return last if previous is None else getattr(xp, _SCAN_COMBINE[kind])(previous, last)


def scan_apply(kind: str, local: Any, carry: Any) -> Any:
    """A block's final scan: its local scan combined with the carry from the blocks before."""
    if carry is None:
        return local
    xp = namespace(local)
    return getattr(xp, _SCAN_COMBINE[kind])(local, carry).astype(local.dtype, copy=False)
