"""The reductions: one entry each, the one place to add or change one.

A reduction runs in three steps over a tree of blocks: a *partial* per block (a dict of arrays with the reduced
axes kept with length 1, and counts), a *combine* of partials, and a *finish* from the last partial. An entry
gives the three (on the block's array module ``xp``: NumPy or CuPy), the error NumPy gives on an empty
axis, and where fused kernels compute its partials of a whole block (``fusable``) how: the simple *folds* its
partial is made of (each a reduction of one accumulator, with its accumulator dtype, C++ identity and C++
combine of two accumulators) and the C++ finish of a total from them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

Partial = dict[str, Any]


def _count(block: Any, axes: tuple[int, ...]) -> int:
    return int(np.prod([block.shape[d] for d in axes])) if axes else 1


def _extreme(xp: Any, kind: str, v: Any, axes: tuple[int, ...]) -> Any:
    """min or max over ``axes``, kept with length 1; where ``v`` is empty along a reduced axis (a block of
    length 0 there), an empty partial instead: length 0 on that axis and at most 1 on the other reduced
    axes, so that joining it with its neighbours skips it."""
    if all(v.shape[d] for d in axes):
        return getattr(xp, kind)(v, axis=axes, keepdims=True)
    return v[tuple(slice(0, 1) if d in axes else slice(None) for d in range(v.ndim))]


def _arg_extreme(xp: Any, kind: str, v: Any, axis: int) -> Any:
    """argmin/argmax along ``axis`` (kept), the first NaN winning as in NumPy (CuPy does not do that)."""
    i = getattr(xp, kind)(v, axis=axis, keepdims=True)
    if v.dtype.kind in "fc":
        nan = xp.isnan(v)
        first_nan = xp.argmax(nan, axis=axis, keepdims=True)
        i = xp.where(xp.any(nan, axis=axis, keepdims=True), first_nan, i)
    return i


# --- the steps of each reduction: partial(xp, block, axes, dtype, params, offsets), combine(xp, fields, grid,
# axes, params) of the partials' fields joined on their grid (counts as lists), finish(xp, partial, dtype, params)


def _sum_like(name: str) -> tuple[Callable, Callable]:
    def partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
        return {"v": getattr(xp, name)(block, dtype=dtype, axis=axes, keepdims=True)}

    def combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
        v = fields["v"]
        return {"v": getattr(xp, name)(v, dtype=v.dtype, axis=axes, keepdims=True)}

    return partial, combine


def _logical(name: str) -> tuple[Callable, Callable]:
    def partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
        return {"v": getattr(xp, name)(block, axis=axes, keepdims=True)}

    def combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
        return {"v": getattr(xp, name)(fields["v"], axis=axes, keepdims=True)}

    return partial, combine


def _extremes(*names: str) -> tuple[Callable, Callable]:
    """Partials holding the extremes ``names`` ("min", "max") of a block, each in its own field (``"v"`` for
    one)."""
    keys = ("v",) if len(names) == 1 else names

    def partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
        return {key: _extreme(xp, name, block, axes) for key, name in zip(keys, names)}

    def combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
        return {key: _extreme(xp, name, fields[key], axes) for key, name in zip(keys, names)}

    return partial, combine


def _arg(name: str) -> tuple[Callable, Callable]:
    def partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
        (axis,) = axes
        if block.shape[axis] == 0:  # an empty partial, skipped when joined with its neighbours
            return {"v": block, "i": xp.zeros(block.shape, dtype=np.intp)}
        i = _arg_extreme(xp, name, block, axis)
        return {"v": xp.take_along_axis(block, i, axis=axis), "i": i + offsets[0]}

    def combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
        (axis,) = axes
        v = fields["v"]
        if v.shape[axis] == 0:  # every partial of the group was empty
            return {"v": v, "i": fields["i"]}
        pick = _arg_extreme(xp, name, v, axis)
        return {"v": xp.take_along_axis(v, pick, axis=axis), "i": xp.take_along_axis(fields["i"], pick, axis=axis)}

    return partial, combine


def _mean_partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
    return {"s": xp.sum(block, dtype=params[0], axis=axes, keepdims=True), "n": _count(block, axes)}


def _mean_combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
    s = fields["s"]
    # in the partials' dtype, as NumPy's mean sums (a small integer sum would widen, and not wrap)
    return {"s": xp.sum(s, axis=axes, keepdims=True, dtype=s.dtype), "n": sum(fields["n"])}


def _mean_finish(xp: Any, partial: Partial, dtype: np.dtype, params: tuple) -> Any:
    with np.errstate(all="ignore"):
        return partial["s"] / partial["n"] if partial["n"] else partial["s"] * np.nan


def _var_partial(xp: Any, block: Any, axes: tuple, dtype: np.dtype, params: tuple, offsets: tuple) -> Partial:
    n = _count(block, axes)
    s = xp.sum(block, dtype=params[0], axis=axes, keepdims=True)
    mean = s / n if n else s
    return {"n": n, "mean": mean, "m2": xp.sum(xp.abs(block - mean) ** 2, axis=axes, keepdims=True)}


def _var_combine(xp: Any, fields: Partial, grid: tuple, axes: tuple, params: tuple) -> Partial:
    # Chan et al.: combine counts, means and sums of squared deviations. A group spans only reduced axes
    # (the grid is 1 along the others), and a partial's count is a plain int.
    mean, m2 = fields["mean"], fields["m2"]
    counts = np.array(fields["n"], dtype=np.float64).reshape(grid)
    weights = xp.asarray(counts, dtype=m2.dtype)
    n = float(counts.sum())
    if n == 0:
        return {"n": 0, "mean": mean.sum(axis=axes, keepdims=True), "m2": m2.sum(axis=axes, keepdims=True)}
    total_mean = (mean * weights).sum(axis=axes, keepdims=True) / n
    total_m2 = m2.sum(axis=axes, keepdims=True) + (weights * xp.abs(mean - total_mean) ** 2).sum(axis=axes, keepdims=True)
    return {"n": int(n), "mean": total_mean.astype(mean.dtype), "m2": total_m2.astype(m2.dtype)}


def _var_finish(xp: Any, partial: Partial, dtype: np.dtype, params: tuple) -> Any:
    ddof, sqrt = params[1], params[2]
    with np.errstate(all="ignore"):
        out = partial["m2"] / max(partial["n"] - ddof, 0)  # as NumPy: inf (or nan for 0/0) when N <= ddof
        return xp.sqrt(out) if sqrt else out


def _value(xp: Any, partial: Partial, dtype: np.dtype, params: tuple) -> Any:
    return partial["v"]


def _index(xp: Any, partial: Partial, dtype: np.dtype, params: tuple) -> Any:
    return partial["i"]


def _range(xp: Any, partial: Partial, dtype: np.dtype, params: tuple) -> Any:
    return xp.subtract(partial["max"], partial["min"], dtype=dtype)  # integers wrap, as NumPy's ptp


# --- reductions that row programs (``codegen.rows``) compute from others: rows(ops, value, count, dtype, params)
# returns the value, made with ``ops.row(kind, value, dtype, params)`` (a fusable reduction of a row, axes kept),
# ``ops.op(func, *values)`` (a ufunc, in NumPy's result dtype) and ``ops.scalar(value)``; ``count``: the row's
# elements


def _var_rows(ops: Any, value: int, count: int, dtype: np.dtype, params: tuple) -> int:
    """``_var_partial`` then ``_var_finish`` of one row: the mean, then the mean square of the deviations."""
    deviation = ops.op("subtract", value, ops.row("mean", value, params[0], (params[0],)))
    square = ops.op("square", deviation)
    m2 = ops.row("sum", square, ops.dtype(square), ())
    var = ops.op("true_divide", m2, ops.scalar(max(count - params[1], 0)))
    return ops.op("sqrt", var) if params[2] else var


# --- the accumulator dtypes of fused kernels: accumulator(value_dtype, out_dtype, params)


def _widened(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    """float64 for a float result, else the result dtype (sum, prod)."""
    return np.dtype(np.float64) if np.dtype(out).kind == "f" else np.dtype(out)


def _mean_sum(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    """float64 for a float sum dtype (``params[0]``), else that dtype."""
    return np.dtype(np.float64) if np.dtype(params[0]).kind == "f" else np.dtype(params[0])


def _boolean(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    return np.dtype(bool)


def _of_value(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    return np.dtype(value)


class Reduction(NamedTuple):
    """One reduction: ``partial``/``combine``/``finish`` (see above); ``empty``: NumPy's error message for a
    reduction over an empty axis ("" where that is fine). Fused kernels: ``folds``, the simple reductions of
    the partial's ``fields`` in order (this one itself, or others: ptp folds max and min), a mean's
    element ``count`` field; for a simple one its ``accumulator(value_dtype, out_dtype, params)`` dtype, C++
    ``identity`` ("" for the extreme value of the accumulator's dtype, as min and max start from) and
    ``combine`` of two accumulators ``{a}``, ``{b}``; ``total``: C++ of the finished value from the folds'
    results ``{0}``, ``{1}``, ... (``{S}``: the C type of ``params[0]``, ``n``: the element count). ``rows``:
    for one that is not fusable, how a row program computes it from fusable ones (``_var_rows``)."""

    name: str
    partial: Callable
    combine: Callable
    finish: Callable = _value
    empty: str = ""
    folds: tuple[str, ...] = ()
    fields: tuple[str, ...] = ("v",)
    count: str = ""
    accumulator: Callable[[np.dtype, np.dtype, tuple], np.dtype] = _of_value
    identity: str = ""
    fold_combine: str = ""
    total: str = "{0}"
    rows: Callable | None = None

    @property
    def fusable(self) -> bool:
        """Whether fused kernels compute its partials."""
        return bool(self.folds)


def _simple(name: str, steps: tuple[Callable, Callable], accumulator: Callable, identity: str, combine: str,
            **kw: Any) -> Reduction:
    """A reduction of one accumulator, fusable."""
    return Reduction(name, *steps, folds=(name,), accumulator=accumulator, identity=identity, fold_combine=combine,
                     **kw)


def _empty_message(name: str) -> str:
    return f"zero-size array to reduction operation {name} which has no identity"


REDUCTIONS: dict[str, Reduction] = {r.name: r for r in (
    _simple("sum", _sum_like("sum"), _widened, "0", "{a} + {b}"),
    _simple("prod", _sum_like("prod"), _widened, "1", "{a} * {b}"),
    _simple("mean", (_mean_partial, _mean_combine), _mean_sum, "0", "{a} + {b}", finish=_mean_finish,
            fields=("s",), count="n", total="(({S}){0} / ({S})n)"),
    _simple("all", _logical("all"), _boolean, "true", "{a} && {b}"),
    _simple("any", _logical("any"), _boolean, "false", "{a} || {b}"),
    _simple("min", _extremes("min"), _of_value, "", "gnp_minimum({a}, {b})", empty=_empty_message("minimum")),
    _simple("max", _extremes("max"), _of_value, "", "gnp_maximum({a}, {b})", empty=_empty_message("maximum")),
    Reduction("var", _var_partial, _var_combine, _var_finish, rows=_var_rows),
    Reduction("argmin", *_arg("argmin"), _index, empty="attempt to get argmin of an empty sequence"),
    Reduction("argmax", *_arg("argmax"), _index, empty="attempt to get argmax of an empty sequence"),
    Reduction("ptp", *_extremes("max", "min"), _range, empty=_empty_message("maximum"), folds=("max", "min"),
              fields=("max", "min"), total="({0} - {1})"),
)}

#: The reductions whose partials fused kernels compute.
FUSABLE = frozenset(r.name for r in REDUCTIONS.values() if r.fusable)
#: The reductions of rows that row programs compute.
ROW_FUSABLE = FUSABLE | frozenset(r.name for r in REDUCTIONS.values() if r.rows)


def folds(name: str) -> Sequence[Reduction]:
    """The simple reductions a fused kernel folds for reduction ``name``."""
    return [REDUCTIONS[f] for f in REDUCTIONS[name].folds]
