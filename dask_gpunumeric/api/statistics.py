"""Statistics: the NaN-skipping reductions and scans, order statistics (median, quantiles), histograms,
averages, covariance and correlation, bincount and digitize, with NumPy's semantics and dtypes.

NaN-skipping functions replace NaNs by the operation's identity (``where(isnan(x), identity, x)``) and use
the existing reductions, so they fuse like them. Order statistics rechunk the reduced axes into one block
(merged into one axis) and sort each block there. Counts are per-block bincounts summed over blocks as a
tree reduction (``_sorting._counts``).
"""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import numpy as np

from ..backend import namespace
from . import reductions as _reductions
from .array import Array, ArrayLike, host_value
from .blockwise import map_blocks
from .creation import as_array, from_array, full_like, zeros
from .elementwise import clip, conj, elementwise, imag, isnan, logical_not, real, sqrt, where
from .elementwise import where as where_  # where a parameter is called ``where``
from ..runtime.fetch import fetch
from .manipulation import (
    broadcast_to, concat, matrix_transpose, moveaxis, normalize_axes, permute_dims, ravel, reshape, squeeze,
)
from .reductions import NO_VALUE, store_output
from .sorting import _arrays, _block_rows, _counts, _require_1d, _searchsorted_block, _whole_axis, searchsorted
from .tensor import matmul

__all__ = [
    "average", "bincount", "corrcoef", "cov", "digitize", "histogram", "median", "nanargmax", "nanargmin",
    "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian", "nanmin", "nanpercentile", "nanprod",
    "nanquantile", "nanstd", "nansum", "nanvar", "percentile", "ptp", "quantile",
]


def _probe(a: Array) -> np.ndarray:
    """A one-element NumPy array of ``a``'s dtype, to ask NumPy for result dtypes (and its errors)."""
    return np.zeros((1,), dtype=a.dtype)


def _nan_to(a: Array, value: float) -> Array:
    """``a`` with NaNs replaced by ``value`` (``a`` itself when its dtype has no NaN)."""
    return where(isnan(a), value, a) if a.dtype.kind in "fc" else a


def _check_block(values: Any, bad: Any, *, error: type[Exception], message: str) -> Any:
    if bool(bad):
        raise error(message)
    return values


def _raise_if(values: Array, bad: Array, error: type[Exception], message: str) -> Array:
    """``values``, raising ``error(message)`` when computed if ``bad`` is true anywhere: NumPy's
    data-dependent errors, without computing anything now (every block waits for ``any(bad)``)."""
    return map_blocks(_check_block, values, _reductions.any(bad), dtype=values.dtype, name="check", error=error,
                      message=message)


# --- NaN-skipping reductions and scans ----------------------------------------------------------------


def nansum(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE,
           initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Sum over ``axis`` treating NaNs as zero (0 for an all-NaN slice), as ``numpy.nansum``."""
    return _reductions.sum(_nan_to(as_array(a), 0), axis, dtype, out, keepdims, initial, where)


def nanprod(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE,
            initial: Any = NO_VALUE, where: Any = True) -> Array:
    """Product over ``axis`` treating NaNs as one (1 for an all-NaN slice), as ``numpy.nanprod``."""
    return _reductions.prod(_nan_to(as_array(a), 1), axis, dtype, out, keepdims, initial, where)


def _nan_extreme(kind: str, a: ArrayLike, axis: Any, out: Any, keepdims: Any, initial: Any, where: Any) -> Array:
    x = as_array(a)
    reduce = getattr(_reductions, kind)
    if x.dtype.kind not in "fc":
        return reduce(x, axis, out, keepdims, initial, where)
    result = reduce(_nan_to(x, np.inf if kind == "min" else -np.inf), axis, None, keepdims, initial, where)
    if initial is NO_VALUE:  # an all-NaN slice gives NaN (with ``initial``: ``initial``)
        result = where_(_reductions.all(isnan(x), axis, None, keepdims, where=where), np.nan, result)
    return store_output(kind, result, out)


def nanmin(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE, initial: Any = NO_VALUE,
           where: Any = True) -> Array:
    """Smallest element over ``axis`` ignoring NaNs (NaN for an all-NaN slice), as ``numpy.nanmin``."""
    return _nan_extreme("min", a, axis, out, keepdims, initial, where)


def nanmax(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: Any = NO_VALUE, initial: Any = NO_VALUE,
           where: Any = True) -> Array:
    """Largest element over ``axis`` ignoring NaNs (NaN for an all-NaN slice), as ``numpy.nanmax``."""
    return _nan_extreme("max", a, axis, out, keepdims, initial, where)


def _nan_count(x: Array, axis: Any, keepdims: bool) -> Array:
    """Number (intp) of non-NaN elements over ``axis``."""
    return _reductions.sum(logical_not(isnan(x)), axis=axis, dtype=np.intp, keepdims=keepdims)


def _nanmean(x: Array, axis: Any, dtype: Any, keepdims: bool) -> Array:
    out_dtype = np.mean(_probe(x), dtype=dtype).dtype
    total = _reductions.sum(_nan_to(x, 0), axis=axis, dtype=out_dtype, keepdims=keepdims)
    return total / _nan_count(x, axis, keepdims).astype(out_dtype)


def _selected(x: Array, where: Any) -> Any:
    """The mask of the elements a NaN-skipping reduction takes: not NaN, and where ``where`` is true."""
    return logical_not(isnan(x)) if where is True else logical_not(isnan(x)) & where


def nanmean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: Any = NO_VALUE, *,
            where: Any = True) -> Array:
    """Mean over ``axis`` of the non-NaN elements (NaN for an all-NaN slice), as ``numpy.nanmean``."""
    x = as_array(a)
    if x.dtype.kind not in "fc":
        return _reductions.mean(x, axis, dtype, out, keepdims, where=where)
    if where is not True:
        return _reductions.mean(_nan_to(x, 0), axis, dtype, out, keepdims, where=_selected(x, where))
    return store_output("mean", _nanmean(x, axis, dtype, keepdims is True), out)


def _nanvar(a: ArrayLike, axis: Any, dtype: Any, out: Any, ddof: Any, keepdims: Any, where: Any,
            correction: Any, root: bool) -> Array:
    if correction is not None:
        if ddof:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    x = as_array(a)
    statistic = _reductions.std if root else _reductions.var
    if x.dtype.kind not in "fc":
        return statistic(x, axis, dtype, out, ddof, keepdims, where=where)
    if where is not True:
        return statistic(_nan_to(x, 0), axis, dtype, out, ddof, keepdims, where=_selected(x, where))
    keepdims = keepdims is True
    avg = _nanmean(x, axis, dtype, True)
    deviation = where_(isnan(x), 0, _nan_to(x, 0).astype(avg.dtype, copy=False) - avg)
    squares = real(deviation * conj(deviation)) if deviation.dtype.kind == "c" else deviation * deviation
    out_dtype = np.var(_probe(x), dtype=dtype).dtype
    total = _reductions.sum(squares, axis=axis, dtype=out_dtype, keepdims=keepdims)
    dof = _nan_count(x, axis, keepdims) - ddof
    # as NumPy: NaN where no degrees of freedom are left
    result = where_(dof <= 0, np.nan, total / dof.astype(out_dtype))
    return store_output("var", sqrt(result) if root else result, out)


def nanvar(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: Any = NO_VALUE, *, where: Any = True, mean: Any = NO_VALUE, correction: Any = None) -> Array:
    """Variance over ``axis`` of the non-NaN elements, as ``numpy.nanvar``: ``ddof`` (or ``correction``) is
    subtracted from their count; NaN for slices with no degrees of freedom left (all NaN included). A
    precomputed ``mean`` is accepted and not needed."""
    return _nanvar(a, axis, dtype, out, ddof, keepdims, where, correction, False)


def nanstd(a: ArrayLike, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: Any = NO_VALUE, *, where: Any = True, mean: Any = NO_VALUE, correction: Any = None) -> Array:
    """Standard deviation over ``axis`` of the non-NaN elements (square root of ``nanvar``)."""
    return _nanvar(a, axis, dtype, out, ddof, keepdims, where, correction, True)


def _nan_arg(kind: str, a: ArrayLike, axis: int | None, keepdims: bool) -> Array:
    x = as_array(a)
    reduce = getattr(_reductions, kind)
    if x.dtype.kind not in "fc":
        return reduce(x, axis=axis, keepdims=keepdims)
    out = reduce(_nan_to(x, np.inf if kind == "argmin" else -np.inf), axis=axis, keepdims=keepdims)
    all_nan = _reductions.all(isnan(x), axis=axis, keepdims=keepdims)
    return _raise_if(out, all_nan, ValueError, "All-NaN slice encountered")


def nanargmin(a: ArrayLike, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index (intp) of the smallest non-NaN element along ``axis`` (flattened when None), as
    ``numpy.nanargmin``. An all-NaN slice raises ValueError, when the result is computed."""
    return store_output("argmin", _nan_arg("argmin", a, axis, keepdims), out)


def nanargmax(a: ArrayLike, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
    """Index (intp) of the largest non-NaN element along ``axis`` (flattened when None), as
    ``numpy.nanargmax``. An all-NaN slice raises ValueError, when the result is computed."""
    return store_output("argmax", _nan_arg("argmax", a, axis, keepdims), out)


def nancumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative sum along ``axis`` (flattened when None) treating NaNs as zero, as ``numpy.nancumsum``."""
    return store_output("cumsum", _reductions.cumsum(_nan_to(as_array(a), 0), axis=axis, dtype=dtype), out)


def nancumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
    """Cumulative product along ``axis`` (flattened when None) treating NaNs as one, as ``numpy.nancumprod``."""
    return store_output("cumprod", _reductions.cumprod(_nan_to(as_array(a), 1), axis=axis, dtype=dtype), out)


# --- order statistics ---------------------------------------------------------------------------------

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")
_POSITION_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _lerp(a: Any, b: Any, t: Any, xp: Any) -> Any:
    """NumPy's interpolation between ``a`` and ``b`` (exact at both ends)."""
    diff = b - a
    return xp.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def _in_order_at(block: Any, positions: tuple[Any, ...], xp: Any) -> Any:
    """``block`` with the elements at ``positions`` (index arrays along the last axis) where sorting would put
    them (NaNs last): on NumPy blocks, where every slice needs the same positions, a partition at them
    (linear time, as NumPy's own quantiles); else the whole sort."""
    rows = [p.reshape(-1, p.shape[-1]) for p in positions]
    if xp is np and block.size and all((r == r[0]).all() for r in rows):
        return np.partition(block, np.unique(np.concatenate([r[0] for r in rows])), axis=-1)
    return xp.sort(block, axis=-1)


def _order_statistics_block(block: Any, *, qs: tuple[float, ...], method: str, skip_nan: bool, work: np.dtype,
                            position: np.dtype) -> Any:
    """Quantiles ``qs`` along the last axis of a block (which is replaced by one value per quantile), with
    NumPy's ``method``s; "median" is NumPy's median (the mean of the two middle elements). A slice with a
    NaN gives NaN, unless ``skip_nan``: then quantiles of the other elements (NaN if there are none). Each
    quantile's position among the sorted elements is computed in ``position``, the dtype of NumPy's: that of
    the fractions (float32 for a float32 ``q``)."""
    xp = namespace(block)
    n = block.shape[-1]
    rest = block.shape[:-1]
    if n == 0:
        return xp.full((*rest, len(qs)), np.nan, dtype=work)
    has_nan = block.dtype.kind in "fc"
    nans = xp.isnan(block).sum(axis=-1, keepdims=True) if has_nan else xp.zeros((*rest, 1), dtype=np.intp)
    count = n - nans if skip_nan else xp.full((*rest, 1), n)
    last = xp.maximum(count - 1, 0)
    virtual = (count - 1).astype(position) * xp.asarray(qs, dtype=position)
    if method in ("lower", "higher", "nearest"):
        pick = {"lower": xp.floor, "higher": xp.ceil, "nearest": xp.around}[method](virtual)
        low = xp.clip(pick, 0, last).astype(np.intp)
        s = _in_order_at(block, (low,), xp)
        out = xp.take_along_axis(s, low, axis=-1).astype(work)
    else:
        if method in ("midpoint", "median"):
            virtual = 0.5 * (xp.floor(virtual) + xp.ceil(virtual))
        low = xp.clip(xp.floor(virtual), 0, last).astype(np.intp)
        high = xp.minimum(low + 1, last)
        s = _in_order_at(block, (low, high), xp)
        a = xp.take_along_axis(s, low, axis=-1).astype(work)
        b = xp.take_along_axis(s, high, axis=-1).astype(work)
        fraction = virtual - xp.floor(virtual)
        if method == "median":
            out = xp.where(fraction == 0, a, (a + b) / 2)
        else:
            if method == "midpoint":
                fraction = xp.where(fraction == 0, 0.0, 0.5)
            out = _lerp(a, b, fraction.astype(work), xp)
    if has_nan and not skip_nan:
        out = xp.where(nans > 0, np.nan, out)
    return out


def _order_statistics(x: Array, q: np.ndarray, axis: Any, keepdims: bool, method: str, skip_nan: bool,
                      dtype: np.dtype, name: str) -> Array:
    """Quantiles ``q`` (fractions, any shape: the result's leading axes) over ``axis``. The reduced axes are
    moved last, merged and rechunked into one block, so each block holds whole slices: a reduction over all
    axes puts the whole array in one block."""
    axes = normalize_axes(axis, x.ndim)
    kept = [d for d in range(x.ndim) if d not in axes]
    kept_shape = tuple(x.shape[d] for d in kept)
    merged = reshape(permute_dims(x, kept + list(axes)), (*kept_shape, math.prod(x.shape[d] for d in axes)))
    merged = _whole_axis(merged, merged.ndim - 1)
    out = map_blocks(_order_statistics_block, merged, chunks=(*merged.chunks[:-1], (q.size,)), dtype=dtype,
                     name=name, qs=tuple(float(v) for v in q.reshape(-1)), method=method, skip_nan=skip_nan,
                     work=dtype, position=q.dtype)
    rest = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdims else kept_shape
    return reshape(moveaxis(out, -1, 0), (*q.shape, *rest))


def median(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Array:
    """Median over ``axis`` (int, tuple or None for all), as ``numpy.median``: the mean of the two middle
    elements for an even count, NaN for a slice with a NaN or no elements; float64 for integer input.

    Lazy; the reduced axes go into one block (see ``quantile``). ``overwrite_input`` has no effect."""
    x = as_array(a)
    dtype = np.median(_probe(x)).dtype
    return store_output("median", _order_statistics(x, np.asarray(0.5), axis, keepdims, "median", False, dtype,
                                                       "median"), out)


def nanmedian(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Array:
    """Median over ``axis`` of the non-NaN elements (NaN for an all-NaN slice), as ``numpy.nanmedian``.

    Lazy; the reduced axes go into one block (see ``quantile``). ``overwrite_input`` has no effect."""
    x = as_array(a)
    dtype = np.nanmedian(_probe(x)).dtype
    return store_output("nanmedian", _order_statistics(x, np.asarray(0.5), axis, keepdims, "median", True, dtype,
                                                          "nanmedian"), out)


def _quantile(name: str, a: ArrayLike, q: Any, axis: Any, method: str, keepdims: bool, weights: Any) -> Array:
    if weights is not None:
        raise NotImplementedError(f"{name}: weights= is not supported (NumPy takes them with method='inverted_cdf' "
                                  "only); leave them out")
    x = as_array(a)
    q_host = host_value(q)
    # NumPy checks q, the method and the dtype on a one-element probe, and gives the result dtype
    numpy_func = getattr(np, name)
    probe_q = q if isinstance(q, (int, float, list, tuple)) else q_host  # Python numbers stay weak
    dtype = numpy_func(_probe(x), probe_q, method=method).dtype
    if method not in _METHODS:
        raise NotImplementedError(f"{name}: method {method!r} is not supported; use one of {_METHODS}")
    skip_nan = name.startswith("nan")
    if skip_nan and x.size == 0:  # as NumPy: the NaN mean of the empty input, whatever q
        return nanmean(x, axis=axis, keepdims=keepdims)
    axes = normalize_axes(axis, x.ndim)
    if builtins.any(x.shape[d] == 0 for d in axes):  # as NumPy (mostly an IndexError there)
        raise IndexError(f"{name}: cannot take quantiles of empty slices (axis {axis} of shape {x.shape})")
    fractions = np.asarray(np.true_divide(q_host, 100) if name.endswith("percentile") else q_host)
    # NumPy computes the positions in the fractions' dtype (float32 for a float32 q)
    position = fractions.dtype if fractions.dtype in _POSITION_DTYPES else np.dtype(np.float64)
    return _order_statistics(x, fractions.astype(position), axis, keepdims, method, skip_nan, dtype,
                             name)


def percentile(a: ArrayLike, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False, *, weights: Any = None) -> Array:
    """The ``q``-th percentiles (0 to 100; a number or an array, whose axes lead the result) over ``axis``,
    as ``numpy.percentile``; ``method`` is one of "linear", "lower", "higher", "midpoint", "nearest". A slice
    with a NaN gives NaN.

    Lazy; the reduced axes are merged into one block, sorted there: a reduction over all axes puts the whole
    array in one block. ``overwrite_input`` has no effect."""
    return store_output("percentile", _quantile("percentile", a, q, axis, method, keepdims, weights), out)


def quantile(a: ArrayLike, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, weights: Any = None) -> Array:
    """The ``q``-th quantiles (0 to 1) over ``axis``, as ``numpy.quantile`` (see ``percentile``)."""
    return store_output("quantile", _quantile("quantile", a, q, axis, method, keepdims, weights), out)


def nanpercentile(a: ArrayLike, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                  method: str = "linear", keepdims: bool = False, *, weights: Any = None) -> Array:
    """``percentile`` of the non-NaN elements (NaN for an all-NaN slice), as ``numpy.nanpercentile``."""
    return store_output("nanpercentile", _quantile("nanpercentile", a, q, axis, method, keepdims, weights), out)


def nanquantile(a: ArrayLike, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False, *, weights: Any = None) -> Array:
    """``quantile`` of the non-NaN elements (NaN for an all-NaN slice), as ``numpy.nanquantile``."""
    return store_output("nanquantile", _quantile("nanquantile", a, q, axis, method, keepdims, weights), out)


# --- counting -----------------------------------------------------------------------------------------


def _bin_index_block(values: Any, edges: Any) -> Any:
    """Each value's bin among ``edges`` (the last bin includes its right edge); values outside the edges
    (and NaNs) go to an extra bin, numbered ``len(edges) - 1``."""
    xp = namespace(values, edges)
    bins = edges.shape[0] - 1
    i = _searchsorted_block(values, edges, side="right") - 1
    i = xp.where(values == edges[-1], bins - 1, i)
    return xp.where((i < 0) | (i >= bins), bins, i)


def _bin_edges(x: Array, bins: Any, range: tuple[Any, Any] | None) -> tuple[np.ndarray, Any]:  # noqa: A002
    """NumPy's bin edges (a host array) for ``bins`` (a count or the edges) and ``range``, and the range they
    span (with a count and no range, the data's minimum and maximum, computed first)."""
    probe = np.empty((0,), dtype=x.dtype)  # NumPy's rules on the edges' dtype, with our data's dtype
    if isinstance(bins, str):
        raise NotImplementedError(
            f"histogram: bins={bins!r} (an estimator) is not supported; give a number of bins or the edges"
        )
    if np.ndim(bins) == 0 and range is None and x.size:
        low, high = (x.dtype.type(v) for v in fetch((_reductions.min(x), _reductions.max(x))))
        if not (np.isfinite(low) and np.isfinite(high)):
            raise ValueError(f"autodetected range of [{low}, {high}] is not finite")
        range = (low, high)  # noqa: A001
    return np.histogram_bin_edges(probe, bins if np.ndim(bins) == 0 else host_value(bins), range=range), range


def _histogram_row(values: Any, *, bins: int, range: tuple[Any, Any]) -> Any:  # noqa: A002
    """NumPy's counts of one block of NumPy data in ``bins`` equal bins over ``range`` (NumPy's own fast
    path for equal bins: its counts add up over blocks to those of the whole array)."""
    return np.histogram(values.reshape(-1), bins=bins, range=range)[0].reshape(1, bins)


def _histogram_dtype(x: Array, edges: np.ndarray, weights: Array | None, density: bool) -> np.dtype:
    """The dtype of NumPy's histogram, from a one-element probe."""
    probe_weights = None if weights is None else np.zeros((1,), dtype=weights.dtype)
    with np.errstate(all="ignore"):
        return np.histogram(np.zeros((1,), dtype=x.dtype), edges, weights=probe_weights, density=density)[0].dtype


def histogram(a: ArrayLike, bins: Any = 10, range: tuple[Any, Any] | None = None,  # noqa: A002
              density: bool | None = None, weights: ArrayLike | None = None) -> tuple[Array, Array]:
    """``(counts, edges)`` of the flattened data, as ``numpy.histogram``: ``bins`` is a number of equal bins
    over ``range`` (default: the data's minimum and maximum) or the edges (increasing); each bin includes its
    left edge, the last one its right edge too. ``weights`` (``a``'s shape) are summed instead of counting;
    ``density`` divides by the total and the bin widths.

    The counts are lazy: per-block counts (NumPy's histogram on NumPy blocks with equal bins, else bincounts
    of each value's bin) summed as a tree reduction. The edges are computed on the host;
    with a number of bins and no ``range`` that computes the data's minimum and maximum first.
    """
    x, w = (as_array(a), None) if weights is None else _arrays(a, weights)
    if w is not None and w.shape != x.shape:
        raise ValueError("weights should have the same shape as a.")
    if x.dtype == bool:  # as NumPy (which warns)
        x = x.astype(np.uint8)
    edges, outer = _bin_edges(x, bins, range)
    nbins = edges.size - 1
    flat = ravel(x)
    edges_arr = from_array(edges, chunks=-1, backend=x.backend)
    if w is None and np.ndim(bins) == 0 and x.backend == "numpy" and x.size:
        rows = _block_rows(_histogram_row, [flat], nbins, np.intp, "histogram", bins=nbins, range=outer)
        counts = _reductions.sum(rows, axis=0, dtype=np.intp)
    else:
        index = map_blocks(_bin_index_block, flat, edges_arr, dtype=np.intp, name="histogram-bin")
        counts = _counts(index, nbins + 1, None if w is None else ravel(w))[:nbins]
    counts = counts.astype(_histogram_dtype(x, edges, w, False), copy=False)
    if density:
        dtype = _histogram_dtype(x, edges, w, True)
        widths = from_array(np.diff(edges).astype(dtype), chunks=-1, backend=x.backend)
        total = counts.astype(dtype, copy=False)
        counts = total / widths / _reductions.sum(total)
    return counts, edges_arr


def bincount(x: ArrayLike, /, weights: ArrayLike | None = None, minlength: int = 0) -> Array:
    """How often each value ``0, 1, ..., max(x)`` occurs in the 1-d non-negative integer ``x`` (at least
    ``minlength`` of them), or the sum of the matching ``weights`` (float64), as ``numpy.bincount``.

    The length depends on the data: the minimum and maximum of ``x`` are computed first (also checking for
    negative values), even when ``minlength`` turns out long enough; the counts are lazy (per-block
    bincounts summed as a tree reduction).
    """
    a, w = (as_array(x), None) if weights is None else _arrays(x, weights)
    _require_1d(a.ndim)
    if not np.can_cast(a.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {a.dtype!r} to {np.dtype(np.intp)!r} according to the rule "
                        "'safe'")
    minlength = operator.index(minlength)
    if minlength < 0:
        raise ValueError("'minlength' must not be negative")
    if w is not None:
        if w.shape != a.shape:
            raise ValueError("The weights and list don't have the same length.")
        if w.dtype.kind == "c":
            raise TypeError(f"Cannot cast array data from {w.dtype!r} to dtype('float64') according to the rule 'safe'")
    if not a.size:  # as NumPy: no data gives intp zeros, weighted or not
        return zeros((minlength,), dtype=np.intp, backend=a.backend)
    low, high = fetch((_reductions.min(a), _reductions.max(a)))
    if low < 0:
        raise ValueError("'list' argument must have no negative elements")
    return _counts(a, builtins.max(int(high) + 1, minlength), w)


def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False) -> Array:
    """Index (intp) of the bin each element of ``x`` falls in, as ``numpy.digitize``: ``bins`` is 1-d and
    increasing (``bins[i-1] <= x < bins[i]`` gives ``i``; ``<`` and ``<=`` swap with ``right``) or decreasing.

    ``bins`` (small) is brought to the host to check its monotonicity; the result is lazy.
    """
    a = as_array(x)
    if a.dtype.kind == "c":
        raise TypeError("x may not be complex")
    edges = host_value(bins)
    _require_1d(edges.ndim)
    side = "left" if right else "right"
    if np.all(edges[1:] >= edges[:-1]):
        return searchsorted(from_array(edges, chunks=-1, backend=a.backend), a, side=side)
    if np.all(edges[1:] <= edges[:-1]):
        return edges.size - searchsorted(from_array(edges[::-1], chunks=-1, backend=a.backend), a, side=side)
    raise ValueError("bins must be monotonically increasing or decreasing")


# --- averages, spread, covariance ---------------------------------------------------------------------


def average(a: ArrayLike, axis: Any = None, weights: ArrayLike | None = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """Weighted mean over ``axis`` (int, tuple or None), as ``numpy.average``: ``weights`` has ``a``'s shape,
    or the shape of the reduced axes; integer input gives float64. With ``returned``, also the sum of the
    weights (or the number of elements averaged), broadcast to the result's shape.

    Lazy; weights summing to zero raise ZeroDivisionError when the result is computed.
    """
    x, w = (as_array(a), None) if weights is None else _arrays(a, weights)
    axes = None if axis is None else normalize_axes(axis, x.ndim)
    if w is None:
        avg = _reductions.mean(x, axis=axes, keepdims=keepdims)
        scale = full_like(avg, x.size / avg.size)
    else:
        if w.shape != x.shape:
            if axes is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if w.shape != tuple(x.shape[d] for d in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
            w = permute_dims(w, tuple(int(i) for i in np.argsort(axes)))
            w = reshape(w, tuple(s if d in axes else 1 for d, s in enumerate(x.shape)))
        extra = ("f8",) if x.dtype.kind in "biu" else ()
        dtype = np.result_type(x.dtype, w.dtype, *extra)
        w = w.astype(dtype, copy=False)
        scale = _reductions.sum(w, axis=axes, dtype=dtype, keepdims=keepdims)
        total = _reductions.sum(x.astype(dtype, copy=False) * w, axis=axes, keepdims=keepdims)
        avg = _raise_if(total / scale, scale == 0, ZeroDivisionError, "Weights sum to zero, can't be normalized")
    if not returned:
        return avg
    return avg, scale if scale.shape == avg.shape else broadcast_to(scale, avg.shape)


def ptp(a: ArrayLike, axis: Any = None, out: Any = None, keepdims: bool = False) -> Array:
    """Range (maximum minus minimum) over ``axis``, as ``numpy.ptp`` (integers wrap around as in NumPy)."""
    x = as_array(a)
    dtype = np.subtract(_probe(x), _probe(x)).dtype  # NumPy's error for bool
    return store_output("ptp", _reductions._reduce("ptp", x, axis, keepdims, dtype), out)


def _variables(v: Array, rowvar: bool, dtype: np.dtype, name: str) -> Array:
    """Observations as a 2-d Array, one variable per row (``numpy.array(v, ndmin=2)``, transposed unless
    ``rowvar``), of ``dtype``."""
    if v.ndim > 2:
        raise ValueError(f"{name} has more than 2 dimensions")
    rows = reshape(v, (1,) * (2 - v.ndim) + v.shape) if v.ndim < 2 else v
    # NumPy's rules: m is transposed when it is 2-d, y when it has more than one row
    if not rowvar and (v.ndim == 2 if name == "m" else rows.shape[0] != 1):
        rows = matrix_transpose(rows)
    return rows.astype(dtype, copy=False)


def cov(m: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, bias: bool = False, ddof: int | None = None,
        fweights: Any = None, aweights: Any = None, *, dtype: Any = None) -> Array:
    """Covariance matrix of the variables in the rows of ``m`` (columns unless ``rowvar``) and of ``y``, as
    ``numpy.cov`` (normalized by N - 1, or N with ``bias``, or N - ``ddof``); float64 unless ``dtype``.
    A single variable gives a 0-d Array. ``fweights``/``aweights`` are not supported.

    Lazy: the centred observations times their transpose, as a blocked matrix product.
    """
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights and aweights are not supported")
    arrays = _arrays(m) if y is None else _arrays(m, y)
    if dtype is None:
        dtype = np.result_type(*(v.dtype for v in arrays), np.float64)
    observations = [_variables(v, rowvar, np.dtype(dtype), name) for v, name in zip(arrays, ("m", "y"))]
    if observations[0].shape[0] == 0:
        return from_array(np.empty((0, 0)), backend=arrays[0].backend)  # as NumPy: float64, whatever dtype
    obs = concat(observations, axis=0) if len(observations) > 1 else observations[0]
    if ddof is None:
        ddof = 0 if bias else 1
    factor = obs.shape[1] - ddof
    with np.errstate(divide="ignore"):  # as NumPy: no degrees of freedom left gives inf (times 0: NaN)
        scale = float(np.true_divide(1, builtins.max(factor, 0)))
    centred = obs - _reductions.mean(obs, axis=1, keepdims=True)
    transposed = matrix_transpose(centred)
    product = matmul(centred, conj(transposed) if centred.dtype.kind == "c" else transposed)
    return squeeze(product * scale)


def corrcoef(x: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, *, dtype: Any = None) -> Array:
    """Pearson correlation coefficients of the variables in the rows of ``x`` (columns unless ``rowvar``)
    and of ``y``, as ``numpy.corrcoef``: the covariance divided by the standard deviations, clipped to
    [-1, 1] (real and imaginary parts apart). Lazy."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    n = c.shape[0]
    stddev = sqrt(real(c[np.arange(n), np.arange(n)]))
    c = c / stddev[:, None] / stddev[None, :]
    if c.dtype.kind == "c":
        return elementwise("add", clip(real(c), -1, 1), clip(imag(c), -1, 1) * 1j)
    return clip(c, -1, 1)
