"""``pad``: constant modes join constant blocks; the modes that repeat elements ("edge", "reflect",
"symmetric", "wrap") are one ``Gather``; NumPy's other modes run through ``dask.array.pad``."""
from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..expr import plan as _plan
from ..expr import Gather
from ..expr.tokens import _plain_repr
from .array import Array, ArrayLike
from .creation import as_array, full
from .interop import run_fallback
from .manipulation import concat
from .recipes import Templates, reused

__all__ = ["pad"]


# the keyword arguments NumPy allows with each mode
_PAD_KWARGS = {
    "constant": {"constant_values"}, "edge": set(), "wrap": set(), "reflect": {"reflect_type"},
    "symmetric": {"reflect_type"}, "empty": set(), "linear_ramp": {"end_values"}, "maximum": {"stat_length"},
    "mean": {"stat_length"}, "median": {"stat_length"}, "minimum": {"stat_length"},
}

_PAD_BY_INDEX = ("edge", "reflect", "symmetric", "wrap")


def _pairs(value: Any, ndim: int) -> tuple[tuple[Any, Any], ...]:
    """NumPy's (before, after) pair per axis from a scalar, one pair, or one pair per axis."""
    arr = np.asarray(value)
    if arr.ndim < 3 and arr.size == 1:
        return ((arr.flat[0], arr.flat[0]),) * ndim
    if arr.ndim < 3 and arr.size == 2 and arr.shape != (2, 1):
        return ((arr.flat[0], arr.flat[1]),) * ndim
    return tuple(tuple(p) for p in np.broadcast_to(arr, (ndim, 2)))


def _pad_widths(pad_width: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    widths = np.asarray(pad_width)
    if widths.dtype.kind != "i":
        raise TypeError("`pad_width` must be of integral type.")
    pairs = tuple((int(b), int(e)) for b, e in _pairs(widths, ndim))
    if any(b < 0 or e < 0 for b, e in pairs):
        raise ValueError("index can't contain negative values")
    return pairs


def _pad_constant(a: Array, widths: tuple[tuple[int, int], ...], values: tuple[tuple[Any, Any], ...]) -> Array:
    """Constant blocks joined before and after along each axis in turn (later axes cover the corners); made again
    from the nodes kept for ``a``'s name, the widths and the values' exact bits where they were made before
    (stencils written with shifted slices pad on every step)."""
    texts = tuple(_plain_repr(v) for pair in values for v in pair)
    key = None if None in texts else (a.expr._name, widths, texts)
    return _PADDED.made(key, (a.expr,), lambda: _joined_constants(a, widths, values))


# the nodes of ``_joined_constants`` by the names of the array, the widths and the values' texts
_PADDED = Templates()


def _joined_constants(a: Array, widths: tuple[tuple[int, int], ...], values: tuple[tuple[Any, Any], ...]) -> Array:
    """``_pad_constant``'s result, made anew."""
    for d, ((before, after), pair) in enumerate(zip(widths, values)):
        if not before and not after:
            continue
        parts = []
        for width, value in ((before, pair[0]), (after, pair[1])):
            shape = a.shape[:d] + (width,) + a.shape[d + 1 :]
            chunks = a.chunks[:d] + ((width,),) + a.chunks[d + 1 :]
            parts.append(full(shape, _assigned(value, a.dtype), dtype=a.dtype, chunks=chunks,
                              backend=a.backend) if width else None)
        a = concat([p for p in (parts[0], a, parts[1]) if p is not None], axis=d)
    return a


def _assigned(value: Any, dtype: np.dtype) -> Any:
    """``value`` as NumPy's assignment into an array of ``dtype`` (``numpy.pad``'s) casts it: 1.5 -> 1 for
    integers, NaN and values out of range refused (ValueError, OverflowError)."""
    out = np.empty((), dtype=dtype)
    out[()] = value
    return out[()]


def _pad_by_index(a: Array, widths: tuple[tuple[int, int], ...], mode: str) -> Array:
    """One ``Gather``: along each padded axis the original chunks, with new chunks before and after taking
    the elements that NumPy's mode repeats (found by padding the positions ``arange(n)``)."""
    plan = []
    for d, (before, after) in enumerate(widths):
        chunks, n = a.chunks[d], a.shape[d]
        if not before and not after:
            plan.append(_plan.identity_plan(chunks))
            continue
        if n == 0:
            raise ValueError(f"can't extend empty axis {d} using modes other than 'constant' or 'empty'")
        positions = np.pad(np.arange(n), (before, after), mode=mode)
        size = max(chunks)
        axis_plan = _plan.identity_plan(chunks)
        if before:
            axis_plan = _plan.take_plan(chunks, positions[:before], _plan.split_even(before, size)) + axis_plan
        if after:
            axis_plan = axis_plan + _plan.take_plan(chunks, positions[before + n :], _plan.split_even(after, size))
        plan.append(axis_plan)
    return Array(Gather(tuple(plan), (), a.dtype, a.expr))


@reused
def pad(array: ArrayLike, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Array:
    """The array padded by ``pad_width`` (one int, one (before, after) pair, or a pair per axis), as
    ``numpy.pad``.

    Native modes: "constant" (``constant_values``) and "empty" join constant blocks; "edge", "reflect",
    "symmetric" and "wrap" are one ``Gather`` of the original blocks plus the repeated elements. NumPy's other
    modes (linear_ramp, maximum, mean, median, minimum, a function) run through ``dask.array.pad`` (with a
    ``FallbackWarning``); ``reflect_type="odd"`` is not supported (NotImplementedError)."""
    a = as_array(array)
    if not callable(mode):
        if mode not in _PAD_KWARGS:
            raise ValueError(f"mode '{mode}' is not supported")
        unsupported = set(kwargs) - _PAD_KWARGS[mode]
        if unsupported:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    if kwargs.get("reflect_type", "even") != "even":
        if kwargs["reflect_type"] != "odd":
            raise ValueError("unsupported value for reflect_type, must be one of (`even`, `odd`)")
        raise NotImplementedError("pad: reflect_type='odd' is not supported; use the default 'even'")
    widths = _pad_widths(pad_width, a.ndim)
    if mode in ("constant", "empty"):
        return _pad_constant(a, widths, _pairs(kwargs.get("constant_values", 0), a.ndim))
    if mode in _PAD_BY_INDEX:
        return _pad_by_index(a, widths, mode)
    return run_fallback("numpy.pad", da.pad, (a, widths, mode), kwargs)
