"""Indexing: ``x[index]`` and functional ``x[index] = value``, NumPy semantics.

Reading is native for every NumPy index: basic indices (ints, slices with any step, ``...``, ``None``) are
one ``Gather``; one advanced index (an integer array or a boolean mask) is a ``Gather`` along its axis; several
(integers then count as advanced) move their axes to the front, merge them and take flat positions there.
Writing is a ``SetItem`` for basic indices and a ``where`` over the selected elements for advanced ones. A
boolean mask or integer index that is itself a lazy Array is computed first, since it decides the result's
shape.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import guards as _guards
from ..expr import plan as _plan
from .array import Array, host_value
from .creation import full
from ..backend import to_numpy
from ..expr import Elemwise, Gather, SetItem
from ..expr.tokens import keep_text
from .recipes import Templates, reused


def _normalize(index: Any, ndim: int) -> tuple[Any, ...]:
    """The index as a tuple with Ellipsis expanded, lazy Arrays computed and array-likes as NumPy arrays."""
    if not isinstance(index, tuple):
        index = (index,)
    out: list[Any] = []
    for ix in index:
        if isinstance(ix, Array):
            ix = host_value(ix, f"indexing with {_guards.describe(ix)} (it decides the result's shape)")
        elif isinstance(ix, list):
            ix = np.asarray(ix)
            ix = ix.astype(np.intp) if ix.size == 0 else ix  # NumPy takes empty lists as integers
        elif isinstance(ix, (bool, np.bool_)):
            ix = np.asarray(ix)  # a 0-d mask: a new axis of length 1 (True) or 0 (False)
        elif type(ix).__module__.startswith("cupy"):
            ix = to_numpy(ix)
        if isinstance(ix, np.ndarray) and ix.ndim == 0 and ix.dtype.kind in "iu":
            ix = int(ix)
        if isinstance(ix, np.ndarray) and ix.dtype.kind not in "iub":
            raise IndexError(
                "arrays used as indices must be of integer (or boolean) type"
            )
        if not isinstance(ix, (slice, type(None), type(Ellipsis), np.ndarray)):
            from .creation import operator_index

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
    ellipsis = [i for i, ix in enumerate(out) if ix is Ellipsis]  # by identity: `in` would compare arrays
    if ellipsis:
        i = ellipsis[0]
        out[i : i + 1] = [slice(None)] * (ndim - used)
    else:
        out.extend([slice(None)] * (ndim - used))
    return tuple(out)


def _check_int(i: int, n: int, axis: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    return i % n


def _is_advanced(ix: Any) -> bool:
    return isinstance(ix, np.ndarray)


def getitem(x: Array, index: Any) -> Array:
    """``x[index]`` with NumPy semantics (lazy)."""
    known = _slices_key(x, index)
    planned = _SLICE_PLANS.get(known) if known is not None else None
    if planned is not None:  # the plan of this index of these chunks, made before (stencil code repeats them)
        if planned is _WHOLE:
            return x
        plan, drop, chunks, heads = planned
        return Array(Gather.of_plan(plan, drop, x.expr, chunks, heads))
    out = _indexed(x, index)
    if known is not None:  # (an index of slices and ints: ``_basic_getitem``'s Gather, or x itself)
        e = out.expr
        _remember_slices(known, _WHOLE if out is x else (e.operand("plan"), e.operand("drop"), out.chunks, {}))
    return out


@reused
def _indexed(x: Array, index: Any) -> Array:
    """``getitem``'s result where no plan of its slices was made before."""
    index = _normalize(index, x.ndim)
    _check_in_numpy_order(x.shape, index)
    _guards.check_scalar_index(x.shape, index, "reading", x.backend)
    if not any(_is_advanced(ix) for ix in index):
        return _basic_getitem(x, index)
    x, index = _new_axes_as_slices(x, index)
    advanced = [ix for ix in index if _is_advanced(ix)]
    if len(advanced) > 1:
        return _pointwise_getitem(x, index)
    return _advanced_getitem(x, index, advanced[0])


# plans of basic indices (slices with int or None bounds, ints, one ``...``) by (chunks, index): valid, and the
# same plan object each time (its token text is then the same work, and it is small)
_SLICE_PLANS: dict[tuple, Any] = {}  # (plan, axes dropped, chunks of the result, token heads by dtype)
_SLICE_PLANS_SIZE = 256
_WHOLE = object()  # the plan of slices that take every element: the array itself


def _slices_key(x: Array, index: Any, slices_only: bool = False) -> tuple | None:
    """The key of an index of slices (with int or None bounds), ints (not on every axis: that one element is
    the scalar guard's) and at most one ``...``, no more than ``x`` has axes; else None. ``slices_only``: of
    an index of slices alone, one per axis of ``x``."""
    items = index if type(index) is tuple else (index,)
    if slices_only and len(items) != x.ndim:
        return None
    bounds: list[Any] = []
    ints = ellipsis = 0
    for ix in items:
        kind = type(ix)
        if kind is slice:
            start, stop, step = ix.start, ix.stop, ix.step
            if not (type(start) in _BOUND and type(stop) in _BOUND and type(step) in _BOUND):
                return None
            bounds.append((start, stop, step))
        elif slices_only:
            return None
        elif kind is int:
            bounds.append(ix)
            ints += 1
        elif ix is Ellipsis and not ellipsis:
            bounds.append(ix)
            ellipsis = 1
        else:
            return None
    if len(items) - ellipsis > x.ndim or ints >= x.ndim:
        return None
    return x.chunks, tuple(bounds)


_BOUND = frozenset({int, type(None)})


def _remember_slices(key: tuple, plan: Any) -> None:
    if len(_SLICE_PLANS) >= _SLICE_PLANS_SIZE:
        _SLICE_PLANS.clear()
    _SLICE_PLANS[key] = plan


def _check_in_numpy_order(shape: tuple[int, ...], index: tuple[Any, ...]) -> None:
    """The error NumPy raises first for a normalized index: boolean masks that don't match their axes
    (IndexError), then from left to right integers out of bounds (IndexError) and slices with a zero step
    (ValueError) or non-integer bounds (TypeError). Integer arrays are checked later, as NumPy does."""
    placed, axis = [], 0
    for ix in index:
        placed.append((ix, axis))
        axis += 0 if ix is None else ix.ndim if _is_advanced(ix) and ix.dtype == bool else 1
    for ix, axis in placed:
        if _is_advanced(ix) and ix.dtype == bool and ix.ndim:
            _check_mask(ix, shape, axis)
    for ix, axis in placed:
        if isinstance(ix, slice):
            ix.indices(shape[axis])
        elif isinstance(ix, int):
            _check_int(ix, shape[axis], axis)


def _new_axes_as_slices(x: Array, index: tuple[Any, ...]) -> tuple[Array, tuple[Any, ...]]:
    """``None`` and 0-d masks among advanced indices as new length-1 axes of ``x``, taken by a whole slice or
    by the mask's ``nonzero()``: the same result as NumPy's, its placement rules for advanced axes included."""
    from .manipulation import expand_dims

    positions, out, axis = [], [], 0
    for ix in index:
        if ix is None or (_is_advanced(ix) and ix.ndim == 0):  # 0-d integer arrays are ints by now
            positions.append(axis)
            out.append(slice(None) if ix is None else np.flatnonzero(ix))
            axis += 1
        else:
            out.append(ix)
            axis += ix.ndim if _is_advanced(ix) and ix.dtype == bool else 1
    return (expand_dims(x, tuple(positions)) if positions else x), tuple(out)


def _basic_getitem(x: Array, index: tuple[Any, ...]) -> Array:
    from .manipulation import expand_dims

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


def _check_mask(mask: np.ndarray, shape: tuple[int, ...], axis: int) -> None:
    """NumPy's IndexError for a boolean mask that does not match the axes it covers from ``axis`` on (as in
    NumPy, a mask axis of length 0 matches any length: it selects nothing)."""
    covered = shape[axis : axis + mask.ndim]
    if len(covered) != mask.ndim or any(m not in (n, 0) for m, n in zip(mask.shape, covered)):
        raise IndexError(
            f"boolean index did not match indexed array along axis {axis}; size of axis is "
            f"{covered} but size of corresponding boolean axis is {mask.shape}"
        )


def _check_bounds(indices: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Integer indices into an axis of length ``n`` made non-negative, with NumPy's IndexError."""
    flat = indices.astype(np.int64)
    bad = flat[(flat < -n) | (flat >= n)]
    if bad.size:
        raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n}")
    return flat % max(n, 1)


def _advanced_getitem(x: Array, index: tuple[Any, ...], adv: np.ndarray) -> Array:
    """One integer array or mask (n-d masks covering several axes) among integers and slices."""
    from .manipulation import moveaxis, reshape

    pos = next(i for i, ix in enumerate(index) if _is_advanced(ix))
    # the selected axes land where the advanced index was, after the slices before it
    at = sum(1 for ix in index[:pos] if isinstance(ix, slice))
    if adv.dtype == bool:
        _check_mask(adv, x.shape, pos)
        if adv.ndim != 1:  # the mask's axes merged into one
            x = reshape(x, (*x.shape[:pos], math.prod(x.shape[pos : pos + adv.ndim]), *x.shape[pos + adv.ndim :]))
        out = _take(x, np.flatnonzero(adv), pos, index[:pos] + (slice(None),) + index[pos + 1 :])
        n_selected = 1
    else:
        out = _take(x, _check_bounds(adv.reshape(-1), x.shape[pos], pos), pos, index)
        if adv.ndim != 1:
            out = reshape(out, (*out.shape[:at], *adv.shape, *out.shape[at + 1 :]))
        n_selected = adv.ndim
    # NumPy counts integers as advanced indices too: when a slice separates them from the array, the
    # selected axes go first
    combined = [i for i, ix in enumerate(index) if not isinstance(ix, slice)]
    if at and combined[-1] - combined[0] + 1 != len(combined):
        out = moveaxis(out, tuple(range(at, at + n_selected)), tuple(range(n_selected)))
    return out


def _pointwise_getitem(x: Array, index: tuple[Any, ...]) -> Array:
    """Several advanced indices (integers among them count as advanced): the indexed axes moved to the
    front and merged into one, selected there by one integer array of flat positions."""
    from .manipulation import moveaxis, permute_dims, reshape

    entries: list[Any] = []  # one per axis: a slice, or integer indices (masks become their nonzero())
    for ix in index:
        if _is_advanced(ix) and ix.dtype == bool:
            _check_mask(ix, x.shape, len(entries))
            entries.extend(np.nonzero(ix))
        else:  # integers are checked even when the broadcast selection is empty, as NumPy does
            axis = len(entries)
            entries.append(_check_int(ix, x.shape[axis], axis) if isinstance(ix, int) else ix)
    adv_axes = [d for d, e in enumerate(entries) if not isinstance(e, slice)]
    rest = [d for d, e in enumerate(entries) if isinstance(e, slice)]
    try:
        arrays = np.broadcast_arrays(*(np.asarray(entries[d]) for d in adv_axes))
    except ValueError:
        shapes = " ".join(str(np.shape(entries[d])) for d in adv_axes)
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes}"
        ) from None
    lengths = tuple(x.shape[d] for d in adv_axes)
    flat = np.ravel_multi_index(
        tuple(_check_bounds(a.reshape(-1), n, d) for a, n, d in zip(arrays, lengths, adv_axes)), lengths
    ) if arrays[0].size else np.zeros(0, dtype=np.int64)
    merged = reshape(permute_dims(x, adv_axes + rest), (math.prod(lengths), *(x.shape[d] for d in rest)))
    taken = _take(merged, flat, 0, (slice(None), *(entries[d] for d in rest)))
    shape = arrays[0].shape
    out = reshape(taken, (*shape, *taken.shape[1:]))
    if adv_axes[-1] - adv_axes[0] + 1 == len(adv_axes) and adv_axes[0]:  # adjacent: they stay in place
        out = moveaxis(out, tuple(range(len(shape))), tuple(range(adv_axes[0], adv_axes[0] + len(shape))))
    return out


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


def setitem(x: Array, index: Any, value: Any) -> Array:
    """The Array after ``x[index] = value`` (a new expression; ``x`` itself is rebound by the caller)."""
    if isinstance(index, Array) and index.dtype == bool and index.shape == x.shape and _is_scalar_like(value):
        from .elementwise import elementwise  # (here only: setitem runs on every stencil step)

        return elementwise("where", index, value, x, dtype=x.dtype)
    known = _slices_key(x, index, slices_only=True)
    if isinstance(value, Array):
        whole = _update_as_elementwise(x, index, value, known)
        if whole is not None:
            return whole
    region = _REGION_PLANS.get(known) if known is not None else None
    if region is not None:  # these slices of these chunks, met before (stencil updates repeat them)
        region_plan, region_chunks = region
        keep_text(region_plan)
        index = index if type(index) is tuple else (index,)
    else:
        items = index if isinstance(index, tuple) else (index,)
        one_element = len(items) == x.ndim and all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items
        )
        index = _normalize(index, x.ndim)
        _guards.check_scalar_index(x.shape, index, "setting", x.backend)
        if one_element and (value.ndim if isinstance(value, Array) else np.ndim(value)):
            raise ValueError("setting an array element with a sequence.")  # as NumPy, for integers only
        if any(_is_advanced(ix) for ix in index):
            return _advanced_setitem(x, index, value)
        region_plan, region_chunks = _region(x, index)
        if known is not None:
            if len(_REGION_PLANS) >= _SLICE_PLANS_SIZE:
                _REGION_PLANS.clear()
            _REGION_PLANS[known] = region_plan, region_chunks
    if not isinstance(value, Array) and _is_scalar_like(value):
        v: Any = np.asarray(value).astype(x.dtype)[()]
    elif isinstance(value, Array) and (value.dtype, value.backend, value.chunks) == (x.dtype, x.backend,
                                                                                      region_chunks) and \
            all(type(ix) is slice for ix in index):
        v = value.expr  # already the region's shape, dtype and chunks (stencil updates, as users write them)
    else:
        from .manipulation import reshape

        target_shape: list[int] = []  # of x[index]: new axes (None) of length 1, integers' axes dropped
        axes = iter(region_chunks)
        for ix in index:
            chunks = (1,) if ix is None else next(axes)
            if not isinstance(ix, (int, np.integer)):
                target_shape.append(sum(chunks))
        # the target's axes from new axes (None) removed, length-1 axes for integers inserted
        varr = reshape(_value_array(value, x, tuple(target_shape)), tuple(map(sum, region_chunks)))
        v = varr.rechunk(region_chunks).expr
    if any(not p or all(h is None for h in p) for p in region_plan):
        return x
    return Array(SetItem.made([x.expr, v, region_plan], x.chunks, x.dtype, x.backend))


# Updates ``x[box] = x[box] <op> view`` whose op has an exact identity: ``view`` padded with it (per value
# dtype, other operand dtype kind) to x's shape. x - (+0) and x + (-0.0) are x bit for bit, -0.0 included.
_IDENTITIES: dict[str, Any] = {"subtract": lambda kind: 0, "add": lambda kind: -0.0 if kind == "f" else 0,
                               "multiply": lambda kind: 1}


def _exact_round_trip(dtype: np.dtype, wide: np.dtype) -> bool:
    """Is ``dtype -> wide -> dtype`` exact for every value (integers: only into floats that hold them)?"""
    if dtype == wide:
        return True
    if dtype.kind not in "iuf" or wide.kind not in "iuf" or not np.can_cast(dtype, wide, "safe"):
        return False
    return not (dtype.kind in "iu" and wide.kind == "f" and 2 * dtype.itemsize > wide.itemsize)


def _update_as_elementwise(x: Array, index: tuple | slice, value: Array, known: tuple | None) -> Array | None:
    """``x[box] = x[box] <op> v`` (``x[box] <op>= v``) for a box of slices of step 1 and a view ``v`` (a slice
    of an array, a shifted slice in stencils) as the elementwise ``x <op> pad(v)``, padded past the box with
    an identity of ``op`` that leaves ``x`` unchanged bit for bit: the shifted-slice form of the same stencil,
    which the optimizer plans as one. None where the update is not of that form.

    Plain code makes the same updates call after call (the same names): their nodes are kept as templates by
    the names of ``x`` and ``value`` and the box (``known``: ``_slices_key`` of the index, slices only), and made
    again on ``x`` and ``v`` (``_UPDATES``)."""
    items = index if type(index) is tuple else (index,)
    if len(items) > x.ndim or not all(type(ix) is slice for ix in items):
        return None
    inner = value.expr  # the op, under the cast of ``x[box] <op>= v`` back to x's dtype if there is one
    if isinstance(inner, Elemwise) and inner.operands[0] == "astype" and inner.dtype == x.dtype:
        inner = inner.args[0]
    if not isinstance(inner, Elemwise) or inner.operands[0] not in _IDENTITIES or inner.operands[2]:  # op, kwargs
        return None
    if len(inner.args) != 2 or not all(isinstance(v, Gather) for v in inner.args):
        return None
    key = None if known is None else (x.expr._name, known[1], value.expr._name)
    return _UPDATES.made(key, (x.expr, inner.args[1]), lambda: _shifted_update(x, items, inner))


# the nodes of ``_shifted_update`` (or None) by the names of x and the value and the box's bounds
_UPDATES = Templates()


def _shifted_update(x: Array, items: tuple[slice, ...], inner: Elemwise) -> Array | None:
    """``_update_as_elementwise``'s result for the update ``x[items] = inner``, ``inner`` the op of two views."""
    from .elementwise import elementwise  # (only for updates of that form: setitem runs on every stencil step)
    from .manipulation import rechunk_expr

    op = inner.operands[0]
    a, b = inner.args
    if b.shape != a.shape or b.backend != x.backend:
        return None
    if b.dtype.kind not in "iuf" or (op == "add" and inner.dtype.kind == "f" and b.dtype.kind != "f"):
        return None
    if not _exact_round_trip(x.dtype, inner.dtype):
        return None
    view = getitem(x, items).expr
    if a._name not in (view._name, rechunk_expr(view, a.chunks)._name):  # (rechunked to align with v)
        return None
    box = [ix.indices(n) for ix, n in zip(items + (slice(None),) * (x.ndim - len(items)), x.shape)]
    if any(step != 1 or stop <= start for start, stop, step in box):
        return None
    widths = tuple((start, n - stop) for (start, stop, _), n in zip(box, x.shape))
    fill = np.asarray(_IDENTITIES[op](inner.dtype.kind), dtype=b.dtype)[()]
    padded = _constant_padded(Array(b), widths, fill, x.chunks) if any(map(any, widths)) else Array(b)
    # (the user's ``x[box] <op> v`` asked the promotion guard; this rewrite of its assignment asks none, as NumPy's cast)
    whole = elementwise(op, x, padded, skip_promotion=2)
    if whole.dtype != inner.dtype:
        return None
    return whole if whole.dtype == x.dtype else whole.astype(x.dtype)


def _constant_padded(a: Array, widths: tuple[tuple[int, int], ...], fill: np.generic, chunks: tuple) -> Array:
    """``pad(a, widths, constant_values=fill)`` (``fill`` of ``a``'s dtype) cut along its padded axes into those of
    ``chunks`` (the chunks of an array of the padded shape): one ``Gather`` of the constant strips and ``a`` per padded
    axis, their plans and strips made once per layout (``_pad_layout``), so that padding a view of a new array on every
    step of a loop (setitem's shifted-slice rewrite) makes nothing but those nodes."""
    key = (a.chunks, a.dtype, a.backend, widths, fill.tobytes(), chunks)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _pad_layout(a, widths, fill, chunks)
    e = a.expr
    for plan, before, after in layout:
        e = Gather(plan, (), a.dtype, *[s for s in (before, e, after) if s is not None])
    return Array(e)


# ``_pad_layout`` by (chunks, dtype, backend of the array, widths, fill's bytes, chunks to cut into)
_LAYOUTS: dict[tuple, list[tuple[tuple, Any, Any]]] = {}
_LAYOUTS_SIZE = 256


def _pad_layout(a: Array, widths: tuple[tuple[int, int], ...], fill: np.generic, chunks: tuple) -> list[tuple]:
    """Per padded axis of ``_constant_padded``: the plan of its ``Gather`` (its text kept) and the constant strips
    before and after (or None)."""
    shape, current = list(a.shape), list(a.chunks)
    layout = []
    for d, (before, after) in enumerate(widths):
        if not before and not after:
            continue
        strips = [full(tuple(shape[:d] + [width] + shape[d + 1 :]), fill, dtype=a.dtype,
                       chunks=tuple(current[:d] + [(width,)] + current[d + 1 :]), backend=a.backend).expr
                  if width else None for width in (before, after)]
        parts = ([(before, (before,))] if before else []) + [(shape[d], current[d])] + \
                ([(after, (after,))] if after else [])  # (length, chunks along d) of the joined pieces
        segments = [(i, 0, 1, length) for i, (length, _) in enumerate(parts)]
        plan = tuple(_plan.segments_plan([c for _, c in parts], segments, chunks[d]) if k == d
                     else _plan.identity_plan(current[k]) for k in range(a.ndim))
        keep_text(plan)
        layout.append((plan, *strips))
        shape[d] += before + after
        current[d] = chunks[d]
    return layout


# region plans of updates by slices alone, by (chunks, bounds) as ``_SLICE_PLANS``
_REGION_PLANS: dict[tuple, tuple[tuple, tuple]] = {}


def _region(x: Array, index: tuple[Any, ...]) -> tuple[tuple, tuple]:
    """The region of ``x`` that a basic ``index`` (normalized) updates: per axis, for each chunk, the piece of
    the value it takes and where (None: not touched); and the value's chunks."""
    region_plan, region_chunks = [], []
    for axis, ix in enumerate(ix for ix in index if ix is not None):
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
    return tuple(region_plan), tuple(region_chunks)


def _is_scalar_like(value: Any) -> bool:
    return np.isscalar(value) or (isinstance(value, (Array, np.ndarray)) and value.ndim == 0)


def _value_array(value: Any, x: Array, shape: tuple[int, ...]) -> Array:
    """A value to assign as an Array of ``x``'s dtype and backend broadcast to ``shape``, NumPy's way: surplus
    leading length-1 axes dropped, then broadcast (ValueError when it doesn't)."""
    from .creation import as_operand
    from .manipulation import broadcast_to, reshape

    varr = Array(as_operand(value, x.backend, force_array=True))
    extra = varr.ndim - len(shape)
    if extra > 0 and all(s == 1 for s in varr.shape[:extra]):
        varr = reshape(varr, varr.shape[extra:])
    return broadcast_to(varr if varr.dtype == x.dtype else varr.astype(x.dtype), shape)


def _advanced_setitem(x: Array, index: tuple[Any, ...], value: Any) -> Array:
    """``x[index] = value`` with advanced indices: a ``where`` over the mask of the selected elements, taking
    a scalar value as it is and, from an array value, the element NumPy writes at each place (the last one
    for repeated indices). The mask and the value's source positions are host arrays of ``x``'s size."""
    from .creation import from_array
    from .elementwise import elementwise
    from .manipulation import reshape

    if _is_scalar_like(value):
        selected = np.zeros(x.shape, dtype=bool)
        selected[index] = True
        new: Any = value
    else:
        positions = np.arange(x.size).reshape(x.shape)[index]
        flat = reshape(_value_array(value, x, positions.shape), (-1,))
        if not positions.size:
            return x
        source = np.full(x.size, -1, dtype=np.int64)
        source[positions.reshape(-1)] = np.arange(positions.size)  # repeated positions: the last one wins
        selected = (source >= 0).reshape(x.shape)
        new = getitem(flat, np.maximum(source, 0).reshape(x.shape))
    mask = from_array(selected, chunks=x.chunks, backend=x.backend)
    return elementwise("where", mask, new, x, dtype=x.dtype)
