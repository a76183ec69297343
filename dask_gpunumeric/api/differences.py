"""Differences and integrals along an axis: ``diff``, ``gradient`` and ``trapezoid``, built from shifted
slices combined elementwise (coordinate arrays of ``gradient`` are computed first: they decide the plan)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import guards as _guards
from .array import Array, ArrayLike, host_value
from .creation import as_array, from_array, operator_index
from .elementwise import elementwise, promoting
from .indexing import getitem
from .manipulation import broadcast_to, concat, normalize_axes, normalize_axis, reshape
from .reductions import sum as _sum
from .selection import _index_along
from .recipes import reused

__all__ = ["diff", "gradient", "trapezoid"]


@reused
def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Array:
    """The ``n``-th discrete difference along ``axis`` (``out[i] = x[i+1] - x[i]``, ``!=`` for booleans),
    after joining ``prepend``/``append`` (scalars are broadcast to one slice), as ``numpy.diff``. Shifted
    slices subtracted elementwise."""
    a = as_array(a)
    n = operator_index(n)
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis(axis, a.ndim)
    ends = []
    for value in (prepend, append):
        if value is not None:
            end = as_array(value)
            ends.append(broadcast_to(end, a.shape[:axis] + (1,) + a.shape[axis + 1 :]) if end.ndim == 0 else end)
        else:
            ends.append(None)
    if ends[0] is not None or ends[1] is not None:
        a = concat([e for e in (ends[0], a, ends[1]) if e is not None], axis=axis)
    op = "not_equal" if a.dtype == bool else "subtract"
    for _ in range(n):
        a = elementwise(op, getitem(a, _index_along(axis, a.ndim, slice(1, None))),
                        getitem(a, _index_along(axis, a.ndim, slice(None, -1))))
    return a


def _spacings(varargs: tuple[Any, ...], f: Array, axes: tuple[int, ...]) -> list[Any]:
    """NumPy's spacing arguments of ``gradient``, one per axis: a scalar, or the differences of a coordinate
    vector (a scalar again when they are all equal)."""
    if not varargs:
        return [1.0] * len(axes)
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return [varargs[0]] * len(axes)
    if len(varargs) != len(axes):
        raise TypeError("invalid number of arguments")
    out = []
    for d, spacing in zip(axes, varargs):
        if np.ndim(spacing) == 0:
            out.append(spacing)
            continue
        coords = host_value(spacing)
        if coords.ndim != 1:
            raise ValueError("distances must be either scalars or 1d")
        if len(coords) != f.shape[d]:
            raise ValueError("when 1d, distances must match the length of the corresponding dimension")
        if coords.dtype.kind in "iu":
            coords = coords.astype(np.float64)
        steps = np.diff(coords)
        out.append(steps[0] if (steps == steps[0]).all() else steps)
    return out


def _gradient_along(f: Array, axis: int, dx: Any, edge_order: int) -> Array:
    """NumPy's gradient along one axis: central differences inside, one-sided ones at both ends."""
    if f.shape[axis] < edge_order + 1:
        raise ValueError(
            "Shape of array too small to calculate a numerical gradient, at least (edge_order + 1) elements "
            "are required."
        )

    def part(start: int | None, stop: int | None) -> Array:
        return getitem(f, _index_along(axis, f.ndim, slice(start, stop)))

    def coefficient(values: np.ndarray) -> Array:  # a vector laid along ``axis``
        shape = tuple(-1 if d == axis else 1 for d in range(f.ndim))
        return from_array(values.reshape(shape), backend=f.backend)

    n = f.shape[axis]
    uniform = np.ndim(dx) == 0
    if uniform:
        inside = (part(2, None) - part(None, -2)) / (2.0 * dx)
    else:
        dx1, dx2 = dx[:-1], dx[1:]
        a = -dx2 / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        inside = coefficient(a) * part(None, -2) + coefficient(b) * part(1, -1) + coefficient(c) * part(2, None)
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / (dx if uniform else dx[0])
        last = (part(n - 1, n) - part(n - 2, n - 1)) / (dx if uniform else dx[-1])
    else:
        if uniform:
            a, b, c = -1.5 / dx, 2.0 / dx, -0.5 / dx
        else:
            dx1, dx2 = dx[0], dx[1]
            a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = -dx1 / (dx2 * (dx1 + dx2))
        first = a * part(0, 1) + b * part(1, 2) + c * part(2, 3)
        if uniform:
            a, b, c = 0.5 / dx, -2.0 / dx, 1.5 / dx
        else:
            dx1, dx2 = dx[-2], dx[-1]
            a = dx2 / (dx1 * (dx1 + dx2))
            b = -(dx2 + dx1) / (dx1 * dx2)
            c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = a * part(n - 3, n - 2) + b * part(n - 2, n - 1) + c * part(n - 1, n)
    return concat([first, inside, last], axis=axis)


def gradient(f: ArrayLike, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Array | tuple[Array, ...]:
    """The gradient of ``f`` along ``axis`` (all axes by default), as ``numpy.gradient``: second-order central
    differences inside, first- or second-order (``edge_order``) one-sided differences at the ends. Spacing:
    none (1), one scalar for all axes, or one scalar or coordinate vector per axis. One Array for one axis, a
    tuple otherwise; floating input keeps its dtype, other input gives float64. Built from shifted slices."""
    a = as_array(f)
    axes = normalize_axes(axis, a.ndim)
    spacings = _spacings(varargs, a, axes)
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
    if a.dtype.kind in "iu":
        a = a.astype(np.float64)
    with _guards.allowpromotion():  # NumPy computes in the spacings' dtype and stores in ``otype``
        out = tuple(_gradient_along(a, d, dx, edge_order).astype(otype, copy=False) for d, dx in zip(axes, spacings))
    return out[0] if len(out) == 1 else out


def trapezoid(y: ArrayLike, x: ArrayLike | None = None, dx: Any = 1.0, axis: int = -1) -> Array:
    """The integral of ``y`` along ``axis`` by the trapezoidal rule, with sample points ``x`` (1-d, or
    broadcasting against ``y``) or uniform spacing ``dx``, as ``numpy.trapezoid`` (a lazy 0-d Array for 1-d
    ``y``): ``sum(d * (y[1:] + y[:-1]) / 2)``."""
    a = as_array(y)
    axis = normalize_axis(axis, a.ndim)
    xs = None if x is None else as_array(x)
    with promoting("trapezoid", a, xs):
        if xs is None:
            d: Any = dx
        elif xs.ndim == 1:
            d = diff(xs)
            d = reshape(d, tuple(d.shape[0] if e == axis else 1 for e in range(a.ndim)))
        else:
            d = diff(xs, axis=axis)
        upper = getitem(a, _index_along(axis, a.ndim, slice(1, None)))
        lower = getitem(a, _index_along(axis, a.ndim, slice(None, -1)))
        return _sum(d * (upper + lower) / 2.0, axis=axis)
