"""``map_overlap``: run a function on blocks extended by halos from their neighbours (stencils).

Each block gets ``depth`` elements from each neighbour along each axis (only those strips move), the
function runs on the extended block, and the halos are trimmed off its result. At the array's edges the
halo comes from ``boundary``: "periodic" (wrap around), "nearest" (repeat the edge), "reflect" (mirror,
edge excluded, as ``numpy.pad``'s "reflect"), "symmetric" (mirror, edge included), "none" (no halo at the
edges: edge blocks are smaller), or a number (a constant).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..expr import plan as _plan
from ..expr import Gather, Overlap
from ..expr.plan import EDGE_MAPS, axis_segments
from ..backend import namespace
from .array import Array, ArrayLike
from .blockwise import map_blocks
from .creation import as_array
from .manipulation import expand_dims, normalize_axis
from .padding import pad

def _axis_halos(chunks: Sequence[int], depth: int, boundary: str) -> tuple[list[list[_plan.Segment]], tuple[int, ...], list[int]]:
    """Per block: the segments of its extended range, the extended chunk lengths, and its left halo size."""
    n = sum(chunks)
    segments = [axis_segments(o - depth, o + size + depth, n, boundary)
                for o, size in zip(_plan.offsets(chunks), chunks)]
    lefts = [min(depth, o) if boundary == "none" else depth for o in _plan.offsets(chunks)]
    return segments, tuple(sum(seg[3] for seg in segs) for segs in segments), lefts


def _normalize(value: Any, ndim: int, default: Any, what: str) -> tuple[Any, ...]:
    if isinstance(value, dict):
        return tuple(value.get(d, value.get(d - ndim, default)) for d in range(ndim))
    if isinstance(value, (tuple, list)):
        if len(value) != ndim:
            raise ValueError(f"map_overlap: {what} has {len(value)} entries for {ndim} axes")
        return tuple(value)
    return (value,) * ndim


def _extend(a: Array, depths: tuple[int, ...], boundaries: tuple[Any, ...]) -> tuple[Array, list[list[int]]]:
    """The array with every block extended by its halos, and each block's left halo size per axis."""
    constant = [not isinstance(b, str) for b in boundaries]
    if any(constant):  # constants: pad those axes first, then take halos from inside the padded array
        widths = [(d, d) if c else (0, 0) for d, c in zip(depths, constant)]
        values = [(b, b) if c else (0, 0) for b, c in zip(boundaries, constant)]
        padded = pad(a, widths, mode="constant", constant_values=values)
    else:
        padded = a
    plan, lefts = [], []
    for axis, (chunks, depth, boundary) in enumerate(zip(a.chunks, depths, boundaries)):
        if constant[axis]:
            offsets = _plan.offsets(chunks)
            segs = [[(0, o, 1, size + 2 * depth)] for o, size in zip(offsets, chunks)]
            lengths, left = tuple(size + 2 * depth for size in chunks), [depth] * len(chunks)
        else:
            if boundary not in (*EDGE_MAPS, "none"):
                raise ValueError(f"map_overlap: unknown boundary {boundary!r}; use 'periodic', 'nearest', "
                                 "'reflect', 'symmetric', 'none' or a number")
            if depth > sum(chunks) and boundary != "none":
                raise ValueError(f"map_overlap: depth {depth} exceeds the axis length {sum(chunks)}")
            segs, lengths, left = _axis_halos(chunks, depth, boundary)
        source = padded.chunks[axis]
        plan.append(tuple(
            (tuple(p for p in _plan.segments_plan([source], s, (n,))[0][0]), None) for s, n in zip(segs, lengths)
        ))
        lefts.append(left)
    return Array(Overlap(tuple(plan), (), a.dtype, padded.expr)), lefts


def map_overlap(func: Callable[..., Any], *arrays: ArrayLike, depth: Any = 1, boundary: Any = "none",
                trim: bool = True, dtype: Any = None, name: str | None = None, **kwargs: Any) -> Array:
    """``func`` on every block extended by ``depth`` elements of its neighbours (per axis: an int, a tuple or
    a dict by axis), with ``boundary`` at the array's edges (per axis too; see the module docstring); the
    halos are trimmed off the results unless ``trim=False``. Arrays must have the same shape (they are
    rechunked to the first one's chunks). ``func`` must return a block of its input's shape and be a
    picklable top-level function working on NumPy and CuPy blocks, like ``map_blocks``'s."""
    if not arrays:
        raise TypeError("map_overlap needs at least one array")
    arrs = [as_array(a) for a in arrays]
    first = arrs[0]
    if any(a.shape != first.shape for a in arrs):
        raise ValueError(f"map_overlap: arrays must have the same shape, got {[a.shape for a in arrs]}")
    arrs = [a if a.chunks == first.chunks else a.rechunk(first.chunks) for a in arrs]
    depths = tuple(int(d) for d in _normalize(depth, first.ndim, 0, "depth"))
    if any(d < 0 for d in depths):
        raise ValueError("map_overlap: depth must be non-negative")
    boundaries = _normalize(boundary, first.ndim, "none", "boundary")
    extended = [_extend(a, depths, boundaries) for a in arrs]
    lefts = extended[0][1]
    out = map_blocks(func, *[e for e, _ in extended], dtype=dtype, name=name or getattr(func, "__name__", None),
                     **kwargs)
    if not trim:
        return out
    plan = tuple(
        tuple(
            (tuple(_plan.segments_plan([out.chunks[axis]], [(0, sum(out.chunks[axis][:i]) + left, 1, size)],
                                       (size,))[0][0]), None)
            for i, (left, size) in enumerate(zip(lefts[axis], first.chunks[axis]))
        )
        for axis in range(first.ndim)
    )
    return Array(Gather(plan, (), out.dtype, out.expr))


def _window_view(block: Any, window: int, axis: int) -> Any:
    """The sliding windows of one block extended by its forward halo (its trailing length-1 axis dropped):
    a strided view, no copy."""
    return namespace(block).lib.stride_tricks.sliding_window_view(block[..., 0], window, axis=axis)


def _windows_along(a: Array, window: int, axis: int) -> Array:
    """Windows of ``window`` elements along one axis, as a new last axis: output block i along ``axis``
    is input block i extended by the ``window - 1`` elements after it (a forward halo), viewed as windows."""
    n = a.shape[axis]
    out_chunks, left = [], n - window + 1  # the output keeps the input's blocks, cut short at the end
    for size in a.chunks[axis]:
        out_chunks.append(min(size, left))
        left -= out_chunks[-1]
    out_chunks = [c for c in out_chunks if c] or [0]
    plan = []
    for d, chunks in enumerate(a.chunks):
        if d == axis:
            spans = [(o, size + window - 1) for o, size in zip(_plan.offsets(out_chunks), out_chunks)]
        else:
            spans = list(zip(_plan.offsets(chunks), chunks))
        plan.append(tuple(_plan.segments_plan([chunks], [(0, o, 1, length)], (length,))[0] for o, length in spans))
    extended = expand_dims(Array(Gather(tuple(plan), (), a.dtype, a.expr)), axis=-1)
    chunks = tuple(tuple(out_chunks) if d == axis else c for d, c in enumerate(a.chunks)) + ((window,),)
    return map_blocks(_window_view, extended, chunks=chunks, name="sliding-window", window=window, axis=axis)


def sliding_window_view(x: ArrayLike, window_shape: Any, axis: Any = None, *, subok: bool = False,
                        writeable: bool = False) -> Array:
    """Sliding windows of ``window_shape`` over ``axis`` (all axes when None), each window along new last
    axes, as ``numpy.lib.stride_tricks.sliding_window_view``. Each block holds views of its input block
    extended by the ``window - 1`` elements that follow it, so the windows cost no copy of their own.
    ``subok`` and ``writeable`` are accepted for NumPy compatibility; Arrays are read-only anyway."""
    a = as_array(x)
    windows = (window_shape,) if np.ndim(window_shape) == 0 else tuple(window_shape)
    windows = tuple(int(w) for w in windows)
    if any(w < 0 for w in windows):
        raise ValueError("`window_shape` cannot contain negative values")
    if axis is None:
        if len(windows) != a.ndim:
            raise ValueError(f"Since axis is `None`, must provide window_shape for all dimensions of `x`; got "
                             f"{len(windows)} window_shape elements and `x.ndim` is {a.ndim}.")
        axes = tuple(range(a.ndim))
    else:
        axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
        if len(axes) != len(windows):
            raise ValueError(f"Must provide matching length window_shape and axis; got {len(windows)} "
                             f"window_shape elements and {len(axes)} axes elements.")
        axes = tuple(normalize_axis(ax, a.ndim) for ax in axes)
    lengths = list(a.shape)
    for ax, w in zip(axes, windows):
        if w > lengths[ax]:
            raise ValueError("window shape cannot be larger than input array shape")
        if w == 0:
            raise ValueError("sliding_window_view: windows of length 0 are not supported; use a length of 1 or more")
        lengths[ax] -= w - 1
    for ax, w in zip(axes, windows):  # one axis at a time: NumPy's result, repeated axes included
        a = _windows_along(a, w, ax)
    return a
