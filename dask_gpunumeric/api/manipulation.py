"""Changing layout without changing values: rechunk, reshape, transpose, expand/squeeze, broadcast (and
meshgrid), concat, stack, flip, roll. All of them build ``Gather``, ``Transpose`` or ``BlockReshape`` expressions."""
from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from dask.array.core import common_blockdim

from ..expr import plan as _plan
from ..expr import ArrayExpr, BlockReshape, Broadcast, Chunks, Gather, Transpose
from ..backend import to_numpy
from .array import Array, ArrayLike
from .creation import as_array, check_order, normalize_chunks, operator_index
from .guards import check_fetch, check_promotion
from .recipes import reused


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """A non-negative axis, with NumPy's AxisError for out-of-range axes."""
    try:
        axis = operator.index(axis)  # as NumPy: a float axis is a TypeError, not truncated
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(axis).__name__}") from None
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """A tuple of distinct non-negative axes from None (all), an int or a sequence of ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = tuple(normalize_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return out


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of operand shapes, with NumPy's error for shapes that don't broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            f"{op}: operands could not be broadcast together with shapes "
            + " ".join(str(s) for s in shapes)
        ) from None


# --- out= ---------------------------------------------------------------------------------------------


def check_output_cast(what: str, result: np.dtype, out: np.dtype, casting: str) -> None:
    """NumPy's TypeError when a result can't be stored in an ``out`` of another dtype by ``casting``."""
    if not np.can_cast(result, out, casting=casting):
        raise TypeError(f"Cannot cast ufunc '{what}' output from {result!r} to {out!r} with casting rule '{casting}'")


def store(what: str, result: Array, out: Any, casting: str = "same_kind") -> Any:
    """NumPy's ``out=``: ``result`` cast to ``out``'s dtype (allowed by ``casting``, else NumPy's TypeError)
    and broadcast to its shape. A gnp Array ``out`` is rebound to that lazy result (as ``out[...] = result``
    would) and returned; a NumPy ``out`` is written now (a fetch: see ``gnp.allowfetch``). Without ``out``
    (None) the result is returned."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"{what}: out must be a tuple of one array (the function has one output)")
        (out,) = out
    if out is None:
        return result
    if not isinstance(out, (Array, np.ndarray)):
        raise TypeError("return arrays must be of ArrayType")
    check_output_cast(what, result.dtype, out.dtype, casting)
    if result.shape != out.shape:
        if len(result.shape) > len(out.shape) or \
                any(r not in (1, o) for r, o in zip(result.shape[::-1], out.shape[::-1])):
            raise ValueError(f"non-broadcastable output operand with shape {out.shape} doesn't match the broadcast "
                             f"shape {result.shape}")
        result = broadcast_to(result, out.shape)
    value = result if result.dtype == out.dtype else result.astype(out.dtype)
    if isinstance(out, np.ndarray):
        check_fetch(f"{what}(..., out=<numpy.ndarray>)")
        out[...] = to_numpy(value.compute())
        return out
    out._rebind(value.expr)
    return out


# --- rechunk ------------------------------------------------------------------------------------------


def rechunk_expr(x: ArrayExpr, chunks: tuple[tuple[int, ...], ...]) -> ArrayExpr:
    """``x`` with new explicit chunks (same shape)."""
    if chunks == x.chunks:
        return x
    key = ("rechunk", x.chunks, chunks)  # (stencils written with shifted slices align theirs on every step)
    known = _GATHER_PLANS.get(key)
    if known is None:
        plan = tuple(
            _plan.segments_plan([x.chunks[d]], [(0, 0, 1, x.shape[d])], chunks[d]) for d in range(x.ndim)
        )
        known = plan, Gather(plan, (), x.dtype, x).chunks, {}
        _remember_gather(key, known)
    return Gather.of_plan(known[0], (), x, known[1], known[2])


def rechunk(x: ArrayLike, chunks: Any = "auto") -> Array:
    """The array with new chunks (every form Dask accepts: "auto", ints, tuples, dicts, -1)."""
    a = as_array(x)
    new = normalize_chunks(chunks, a.shape, a.dtype, a.backend, previous_chunks=a.chunks)
    if tuple(map(sum, new)) != a.shape:
        raise ValueError(f"chunks {chunks!r} do not add up to the shape {a.shape}")
    return Array(rechunk_expr(a.expr, new))


# --- transpose / axes ---------------------------------------------------------------------------------


@reused
def permute_dims(a: ArrayLike, axes: Sequence[int] | None = None) -> Array:
    """Axes reordered: output axis i is input axis ``axes[i]``."""
    a = as_array(a)
    axes = tuple(normalize_axis(ax, a.ndim) for ax in axes)
    if sorted(axes) != list(range(a.ndim)):
        raise ValueError(f"axes {axes} don't match array of {a.ndim} dimensions")
    if axes == tuple(range(a.ndim)):
        return a
    return Array(Transpose.of(a.expr, axes))


@reused
def transpose(a: ArrayLike, axes: Sequence[int] | None = None) -> Array:
    """Axes reversed, or reordered by ``axes`` (as ``numpy.transpose``)."""
    a = as_array(a)
    if axes is None:  # (``x.T``: one tuple per number of axes, whose token text is kept by identity)
        reversed_axes = _REVERSED_AXES.get(a.ndim) or _REVERSED_AXES.setdefault(a.ndim, tuple(range(a.ndim))[::-1])
        return Array(Transpose.of(a.expr, reversed_axes)) if a.ndim > 1 else a
    return permute_dims(a, axes)


_REVERSED_AXES: dict[int, tuple[int, ...]] = {}


def matrix_transpose(x: ArrayLike, /) -> Array:
    """The last two axes swapped."""
    a = as_array(x)
    if a.ndim < 2:
        raise ValueError("matrix_transpose needs an array of at least 2 dimensions")
    return permute_dims(a, (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2))


@reused
def moveaxis(a: ArrayLike, source: Any, destination: Any) -> Array:
    """Axes moved to new positions, the others keeping their order (as ``numpy.moveaxis``)."""
    a = as_array(a)
    src = normalize_axes(source, a.ndim)
    dst = normalize_axes(destination, a.ndim)
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of elements")
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(a, order)


@reused
def swapaxes(a: ArrayLike, axis1: int, axis2: int) -> Array:
    """Two axes exchanged."""
    a = as_array(a)
    order = list(range(a.ndim))
    i, j = normalize_axis(axis1, a.ndim), normalize_axis(axis2, a.ndim)
    order[i], order[j] = order[j], order[i]
    return permute_dims(a, order)


# --- reshape ------------------------------------------------------------------------------------------


def _block_reshape(a: ArrayExpr, out_chunks: tuple[tuple[int, ...], ...], source_axes: list[int | None]) -> Array:
    """Reshape when each output axis is an input axis (same chunks) or a new length-1 axis."""
    source_of = {}
    numblocks = tuple(len(c) for c in out_chunks)
    for index in itertools.product(*(range(n) for n in numblocks)):
        src = [0] * a.ndim
        for out_axis, in_axis in enumerate(source_axes):
            if in_axis is not None:
                src[in_axis] = index[out_axis]
        source_of[index] = tuple(src)
    return Array(BlockReshape.of(a, out_chunks, source_of))


@reused
def expand_dims(a: ArrayLike, axis: Any = 0) -> Array:
    """New length-1 axes inserted at ``axis`` (an int or a tuple, positions in the result)."""
    a = as_array(a)
    n_new = 1 if isinstance(axis, (int, np.integer)) else len(axis)
    axes = normalize_axes(axis, a.ndim + n_new)
    it = iter(range(a.ndim))
    source_axes = [None if d in axes else next(it) for d in range(a.ndim + n_new)]
    chunks = tuple((1,) if s is None else a.chunks[s] for s in source_axes)
    return _block_reshape(a.expr, chunks, source_axes)


@reused
def squeeze(a: ArrayLike, axis: Any = None) -> Array:
    """Length-1 axes removed (all of them, or those named by ``axis``)."""
    a = as_array(a)
    if axis is None:
        axes = tuple(d for d, s in enumerate(a.shape) if s == 1)
    else:
        axes = normalize_axes(axis, a.ndim)
        for d in axes:
            if a.shape[d] != 1:
                raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    if not axes:
        return a
    expr = a.expr
    if any(a.numblocks[d] > 1 for d in axes):  # a length-1 axis cut with empty blocks, e.g. (0, 1)
        expr = rechunk_expr(expr, tuple((1,) if d in axes else c for d, c in enumerate(a.chunks)))
    source_axes = [d for d in range(a.ndim) if d not in axes]
    return _block_reshape(expr, tuple(a.chunks[d] for d in source_axes), source_axes)


def _resolve_shape(shape: Any, size: int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(operator_index(s) for s in shape)
    unknown = [i for i, s in enumerate(shape) if s < 0]  # NumPy takes any negative length as -1
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    known = math.prod(s for s in shape if s >= 0)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if s < 0 else s for s in shape)
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return shape


@reused
def reshape(a: ArrayLike, /, shape: Any, order: str = "C", *, copy: bool | None = None) -> Array:
    """The array with a new shape, C order (as ``numpy.reshape``; one axis may be -1).

    Blocks are cut so that each holds whole rows of both shapes: every axis but the first is made one
    chunk, with row blocks sized to a common multiple of the old and new row lengths. ``order="F"`` is refused.
    """
    check_order(order, "reshape")
    a = as_array(a)
    shape = _resolve_shape(shape, a.size)
    if shape == a.shape:
        return a
    if a.size == 0 or a.ndim == 0 or len(shape) == 0:
        return _reshape_single_block(a, shape)
    squeezed = tuple(s for s in a.shape if s != 1)
    if squeezed == tuple(s for s in shape if s != 1):
        return expand_dims(squeeze(a), tuple(d for d, s in enumerate(shape) if s == 1)) if 1 in shape else squeeze(a)
    row_in = math.prod(a.shape[1:])
    row_out = math.prod(shape[1:])
    unit = math.lcm(row_in, row_out)  # elements per row-group that both shapes cut whole
    rows_per_unit = unit // row_in
    target_rows = max(rows_per_unit, (max(a.chunks[0]) // rows_per_unit) * rows_per_unit)
    in_rows = _plan.split_even(a.shape[0], target_rows)
    aligned = rechunk_expr(a.expr, (in_rows, *((s,) for s in a.shape[1:])))
    out_rows = tuple(r * row_in // row_out for r in in_rows)
    out_chunks = (out_rows, *((s,) for s in shape[1:]))
    source_of = {(i, *(0,) * (len(shape) - 1)): (i, *(0,) * (a.ndim - 1)) for i in range(len(in_rows))}
    return Array(BlockReshape.of(aligned, out_chunks, source_of))


def _reshape_single_block(a: Array, shape: tuple[int, ...]) -> Array:
    one = rechunk_expr(a.expr, tuple((s,) for s in a.shape))
    return Array(BlockReshape.of(one, tuple((s,) for s in shape), {(0,) * len(shape): (0,) * a.ndim}))


@reused
def ravel(a: ArrayLike, order: str = "C") -> Array:
    """The elements as a 1-d Array, C order (``order="F"`` is refused)."""
    return reshape(a, (-1,), order)


# --- broadcasting -------------------------------------------------------------------------------------


@reused
def broadcast_to(array: ArrayLike, shape: Any, subok: bool = False, *, chunks: Any = None) -> Array:
    """The array broadcast to ``shape`` (new and stretched axes are single chunks unless ``chunks``)."""
    a = as_array(array)
    shape = tuple(shape) if not isinstance(shape, (int, np.integer)) else (int(shape),)
    if broadcast_shape("broadcast_to", [a.shape, shape]) != shape:
        raise ValueError(f"cannot broadcast an array of shape {a.shape} to shape {shape}")
    if shape == a.shape:
        return a
    lead = len(shape) - a.ndim
    out_chunks = tuple(
        a.chunks[d - lead] if d >= lead and a.shape[d - lead] == shape[d] else (shape[d],) for d in range(len(shape))
    )
    out = Array(Broadcast.of(a.expr, out_chunks))
    return out if chunks is None else out.rechunk(chunks)


def broadcast_arrays(*args: ArrayLike, subok: bool = False) -> list[Array]:
    """The arrays broadcast against each other."""
    arrs = [as_array(a) for a in args]
    shape = broadcast_shape("broadcast_arrays", [a.shape for a in arrs])
    return [broadcast_to(a, shape) for a in arrs]


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
        out.append(along if sparse or ndim == 1 else Array(Broadcast.of(along.expr, tuple(chunks))))
    return tuple(out)


# --- joining ------------------------------------------------------------------------------------------


@reused
def concat(arrays: Sequence[ArrayLike], /, axis: int | None = 0, out: Any = None, *, dtype: Any = None,
           casting: str = "same_kind") -> Array:
    """Arrays joined along an existing axis (``axis=None`` flattens them first), as ``numpy.concatenate``:
    in ``dtype`` if given (each array cast by ``casting``), ``out`` as in ``store``."""
    arrs = [as_array(a) for a in arrays]
    if dtype is not None:
        for a in arrs:
            if not np.can_cast(a.dtype, dtype, casting=casting):
                raise TypeError(f"Cannot cast array data from {a.dtype!r} to {np.dtype(dtype)!r} according to the rule "
                                f"'{casting}'")
        arrs = [a.astype(dtype, copy=False) for a in arrs]
    if not arrs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        arrs, axis = [ravel(a) for a in arrs], 0
    ndim = arrs[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    if any(a.ndim != ndim for a in arrs):
        raise ValueError("all the input arrays must have same number of dimensions")
    axis = normalize_axis(axis, ndim)
    for a in arrs[1:]:
        for d in range(ndim):
            if d != axis and a.shape[d] != arrs[0].shape[d]:
                raise ValueError(
                    f"all the input array dimensions except for the concatenation axis must match exactly, "
                    f"but along dimension {d}, the array at index 0 has size {arrs[0].shape[d]} and another "
                    f"has size {a.shape[d]}"
                )
    dtype = np.result_type(*[a.dtype for a in arrs])
    check_promotion("concat", [a.dtype for a in arrs], dtype)
    arrs = [a if a.dtype == dtype else a.astype(dtype) for a in arrs]
    target = [
        None if d == axis else common_blockdim({a.chunks[d] for a in arrs}) for d in range(ndim)
    ]
    exprs = [
        rechunk_expr(a.expr, tuple(a.chunks[d] if d == axis else target[d] for d in range(ndim))) for a in arrs
    ]
    segments = [(i, 0, 1, e.shape[axis]) for i, e in enumerate(exprs)]
    axis_chunks = tuple(c for e in exprs for c in e.chunks[axis] if c) or (0,)
    plan = tuple(
        _plan.segments_plan([e.chunks[axis] for e in exprs], segments, axis_chunks) if d == axis
        else _plan.identity_plan(exprs[0].chunks[d])
        for d in range(ndim)
    )
    return store("concatenate", Array(Gather(plan, (), dtype, *exprs)), out, casting)


@reused
def stack(arrays: Sequence[ArrayLike], axis: int = 0, out: Any = None, *, dtype: Any = None,
          casting: str = "same_kind") -> Array:
    """Arrays of equal shape joined along a new axis (``dtype``, ``casting``, ``out`` as in ``concat``)."""
    arrs = [as_array(a) for a in arrays]
    if not arrs:
        raise ValueError("need at least one array to stack")
    if len({a.shape for a in arrs}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = normalize_axis(axis, arrs[0].ndim + 1)
    return concat([expand_dims(a, axis) for a in arrs], axis, out, dtype=dtype, casting=casting)


# plans of ``_gather_axes`` by (chunks, segments), and of ``roll`` by ("roll", chunks, shift, axis), with the result's
# chunks and token texts by dtype: the same plan object each time (its token text is then written once,
# ``Gather.of_plan``), as time-stepping code repeats its rolls and flips
_GATHER_PLANS: dict[tuple, Any] = {}
_GATHER_PLANS_SIZE = 256
_SAME = object()  # the plan of a roll that moves nothing: the array itself


def _gather_axes(a: Array, segments: dict[int, tuple[list[_plan.Segment], tuple[int, ...]]]) -> Array:
    """Gather along the given axes (segments and output chunks per axis), other axes passed through."""
    plan, chunks, texts = _gather_plan(a, segments)
    return Array(Gather.of_plan(plan, (), a.expr, chunks, texts))


def _gather_plan(a: Array, segments: dict[int, tuple[list[_plan.Segment], tuple[int, ...]]]
                 ) -> tuple[tuple, Chunks, dict]:
    """The plan of ``_gather_axes``, the result's chunks and its token texts by dtype (``Gather.of_plan``)."""
    key = (a.chunks, tuple((d, tuple(segs), out) for d, (segs, out) in sorted(segments.items())))
    known = _GATHER_PLANS.get(key)
    if known is None:
        plan = tuple(
            _plan.segments_plan([a.chunks[d]], segments[d][0], segments[d][1]) if d in segments
            else _plan.identity_plan(a.chunks[d])
            for d in range(a.ndim)
        )
        known = plan, Gather(plan, (), a.dtype, a.expr).chunks, {}
        _remember_gather(key, known)
    return known


def _remember_gather(key: tuple, known: Any) -> None:
    if len(_GATHER_PLANS) >= _GATHER_PLANS_SIZE:
        _GATHER_PLANS.clear()
    _GATHER_PLANS[key] = known


@reused
def flip(m: ArrayLike, axis: Any = None) -> Array:
    """Elements in reverse order along ``axis`` (all axes by default)."""
    a = as_array(m)
    axes = normalize_axes(axis, a.ndim)
    return _gather_axes(
        a, {d: ([(0, a.shape[d] - 1, -1, a.shape[d])], tuple(reversed(a.chunks[d]))) for d in axes if a.shape[d]}
    )


def roll(a: ArrayLike, shift: Any, axis: Any = None) -> Array:
    """Elements shifted cyclically by ``shift`` along ``axis`` (flattened when ``axis`` is None)."""
    a = as_array(a)
    # one int shift along one axis (time-stepping code's rolls): the plan by (chunks, shift, axis), made once
    one_axis = type(axis) is int or axis is None and a.ndim == 1
    key = ("roll", a.chunks, shift, axis) if type(shift) is int and one_axis else None
    known = _GATHER_PLANS.get(key) if key is not None else None
    if known is None:
        if axis is None and a.ndim != 1:  # (a 1-d array is its own ravel)
            return reshape(roll(ravel(a), shift, axis=0), a.shape)
        known = _roll_plan(a, shift, 0 if axis is None else axis)
        if key is not None:
            _remember_gather(key, known)
    if known is _SAME:
        return a
    plan, chunks, texts = known
    return Array(Gather.of_plan(plan, (), a.expr, chunks, texts))


def _roll_plan(a: Array, shift: Any, axis: Any) -> tuple[tuple, Chunks, dict] | Any:
    """The gather plan of ``roll(a, shift, axis)`` (``_gather_plan``), or ``_SAME`` where nothing moves."""
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences of the same length")
    total: dict[int, int] = {}
    for s, ax in zip(shifts, axes):
        d = normalize_axis(ax, a.ndim)
        total[d] = total.get(d, 0) + int(s)
    segments = {}
    for d, s in total.items():
        n = a.shape[d]
        s = s % n if n else 0
        if s:
            segments[d] = ([(0, n - s, 1, s), (0, 0, 1, n - s)], a.chunks[d])
    return _gather_plan(a, segments) if segments else _SAME


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Array, ...]:
    """The arrays along ``axis``, as a tuple (the inverse of ``stack``)."""
    a = as_array(x)
    if a.ndim == 0:
        raise ValueError("unstack needs an array of at least one dimension")
    axis = normalize_axis(axis, a.ndim)
    return tuple(squeeze(_gather_axes(a, {axis: ([(0, i, 1, 1)], (1,))}), axis=axis) for i in range(a.shape[axis]))
