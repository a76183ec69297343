"""Statistics against NumPy: the NaN-skipping reductions and scans (all-NaN slices included), median and
quantiles (every method, NaNs, keepdims, axis tuples), histogram, bincount, digitize, average, ptp, cov and
corrcoef, on random shapes (zero-size included) and chunkings; laziness; bad input raising NumPy's errors."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from conftest import assert_eq, axis_chunks
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from test_sorting import FLOATS, TaskCounter, arrays, axis_or_none, check, quiet, values

import dask_gpunumeric as gnp

NUMBERS = [np.int32, np.int64, np.float32, np.float64]


@st.composite
def axes(draw: st.DrawFn, ndim: int) -> Any:
    """None, an int or a tuple of distinct axes (maybe negative)."""
    form = draw(st.sampled_from(["none", "int", "tuple"]))
    if form == "none" or ndim == 0:
        return None
    if form == "int":
        return draw(st.integers(-ndim, ndim - 1))
    k = draw(st.integers(1, ndim))
    return tuple(draw(st.permutations(range(ndim)))[:k])


def _nonempty_slices(x: np.ndarray, axis: Any) -> bool:
    reduced = range(x.ndim) if axis is None else np.atleast_1d(axis) % max(x.ndim, 1)
    return all(x.shape[d] for d in reduced)


# --- NaN-skipping reductions and scans ----------------------------------------------------------------


@given(data=st.data(), func=st.sampled_from(["nansum", "nanprod", "nanmean", "nanvar", "nanstd", "nanmin", "nanmax"]),
       keepdims=st.booleans())
def test_nan_reductions(data: st.DataObject, func: str, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS))
    axis = data.draw(axes(x.ndim))
    if func in ("nanmin", "nanmax") and not _nonempty_slices(x, axis):
        with pytest.raises(ValueError, match="zero-size"):
            getattr(gnp, func)(a, axis=axis)
        return
    kwargs: dict[str, Any] = {"keepdims": keepdims}
    if func in ("nanvar", "nanstd"):
        kwargs["ddof"] = data.draw(st.integers(0, 2))
    expected = quiet(getattr(np, func), x, axis=axis, **kwargs)
    check(getattr(gnp, func)(a, axis=axis, **kwargs), expected, rtol=1e-4 if x.dtype == np.float32 else None)


@given(data=st.data())
@settings(max_examples=15)
def test_nan_reductions_dtype_and_correction(data: st.DataObject) -> None:
    x, a = data.draw(arrays(dtypes=FLOATS, min_dims=1))
    assert_eq(gnp.nansum(a, dtype=np.float64), quiet(np.nansum, x, dtype=np.float64))
    assert_eq(gnp.nanmean(a, axis=0, dtype=np.float64), quiet(np.nanmean, x, axis=0, dtype=np.float64))
    assert_eq(gnp.nanvar(a, axis=-1, correction=1), quiet(np.nanvar, x, axis=-1, correction=1),
              rtol=1e-4 if x.dtype == np.float32 else None)


@given(data=st.data(), func=st.sampled_from(["nanargmin", "nanargmax"]), keepdims=st.booleans())
def test_nanargmin_nanargmax(data: st.DataObject, func: str, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS, min_dims=1))
    axis = data.draw(axis_or_none(x.ndim))
    if not _nonempty_slices(x, axis):
        with pytest.raises(ValueError):
            getattr(gnp, func)(a, axis=axis)
        return
    result = getattr(gnp, func)(a, axis=axis, keepdims=keepdims)  # lazy: an all-NaN slice raises when computed
    try:
        expected = getattr(np, func)(x, axis=axis, keepdims=keepdims)
    except ValueError:
        with pytest.raises(ValueError, match="All-NaN slice"):
            result.compute()
        return
    check(result, expected)


@given(data=st.data(), func=st.sampled_from(["nancumsum", "nancumprod"]))
def test_nan_scans(data: st.DataObject, func: str) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS))
    axis = data.draw(axis_or_none(x.ndim))
    check(getattr(gnp, func)(a, axis=axis), getattr(np, func)(x, axis=axis))


# --- order statistics ---------------------------------------------------------------------------------


def numpy_order_statistic(func: str, x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
    """NumPy's result; cases where NumPy fails to reshape zero-size data (several reduced axes) are skipped."""
    try:
        return quiet(getattr(np, func), x, *args, **kwargs)
    except ValueError as e:
        if x.size or "cannot reshape" not in str(e):
            raise
        reject()


@given(data=st.data(), func=st.sampled_from(["median", "nanmedian"]), keepdims=st.booleans())
def test_median(data: st.DataObject, func: str, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=[*NUMBERS, np.bool_]))
    axis = data.draw(axes(x.ndim))
    expected = numpy_order_statistic(func, x, axis=axis, keepdims=keepdims)
    check(getattr(gnp, func)(a, axis=axis, keepdims=keepdims), expected)


@given(data=st.data(), func=st.sampled_from(["percentile", "quantile", "nanpercentile", "nanquantile"]),
       method=st.sampled_from(["linear", "lower", "higher", "midpoint", "nearest"]), keepdims=st.booleans())
def test_quantiles(data: st.DataObject, func: str, method: str, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS))
    axis = data.draw(axes(x.ndim))
    scale = 100 if "percentile" in func else 1
    # (NumPy's nan-quantiles misplace results for 2-d q over several axes: 2-d q for the others only)
    two_d = [] if func.startswith("nan") else [[[0.1, 1.0], [0.0, 0.5]]]
    q = data.draw(st.sampled_from([0.5, 0, 1, [0.25, 0.75], *two_d]))
    q = np.multiply(q, scale).tolist() if isinstance(q, list) else q * scale
    try:
        expected = numpy_order_statistic(func, x, q, axis=axis, method=method, keepdims=keepdims)
    except IndexError:  # NumPy's error for quantiles of empty slices
        with pytest.raises(IndexError):
            getattr(gnp, func)(a, q, axis=axis, method=method, keepdims=keepdims)
        return
    # NumPy's nan-quantiles of all-NaN float32 slices may come as float32 where other data give float64
    all_nan_quirk = func.startswith("nan") and x.dtype == np.float32 and bool(np.isnan(x).any())
    check(getattr(gnp, func)(a, q, axis=axis, method=method, keepdims=keepdims), expected,
          rtol=1e-5 if x.dtype == np.float32 else 1e-12, check_dtype=not all_nan_quirk)


@given(data=st.data(), func=st.sampled_from(["percentile", "quantile", "nanpercentile", "nanquantile"]),
       q_dtype=st.sampled_from([np.float32, np.float16]), as_array=st.booleans())
def test_quantiles_of_a_narrow_float_q(data: st.DataObject, func: str, q_dtype: type, as_array: bool) -> None:
    """A float32 (or float16) ``q`` places each quantile where NumPy does, which computes the positions in q's
    dtype: the same bits, not only close (``q`` given as a NumPy array, or as an Array made from one)."""
    x, a = data.draw(arrays(dtypes=[np.float64, np.int64]))
    scale = 100 if "percentile" in func else 1
    q = np.asarray([0.1, 0.333, 0.9], dtype=q_dtype) * q_dtype(scale)
    try:
        expected = numpy_order_statistic(func, x, q)
    except IndexError:  # NumPy's error for quantiles of empty slices
        return
    check(getattr(gnp, func)(a, gnp.asarray(q) if as_array else q), expected, rtol=0)


def test_quantile_errors() -> None:
    a = gnp.from_array(np.arange(6.0), chunks=4)
    with pytest.raises(ValueError, match="Percentiles"):
        gnp.percentile(a, 101)
    with pytest.raises(ValueError, match="Quantiles"):
        gnp.quantile(a, [0.5, -0.1])
    with pytest.raises(ValueError, match="method"):
        gnp.quantile(a, 0.5, method="bogus")
    with pytest.raises(NotImplementedError, match="method"):
        gnp.quantile(a, 0.5, method="weibull")
    with pytest.raises(TypeError):
        gnp.quantile(gnp.asarray(np.ones(3, dtype=complex)), 0.5)
    with pytest.raises(IndexError):
        gnp.quantile(gnp.zeros((2, 0)), 0.5, axis=1)
    with pytest.raises(np.exceptions.AxisError):
        gnp.median(a, axis=1)
    out = np.empty(())  # NumPy's out=: written at once, a fetch (guarded)
    with gnp.config.set(guards="error"), pytest.raises(gnp.FetchError, match="out="):
        gnp.median(a, out=out)
    with gnp.allowfetch():
        assert gnp.median(a, out=out) is out
    assert out == 2.5


# --- counting -----------------------------------------------------------------------------------------


@given(data=st.data(), density=st.booleans())
def test_histogram(data: st.DataObject, density: bool) -> None:
    x, a = data.draw(arrays(dtypes=[*NUMBERS, np.bool_], nans=False))
    form = data.draw(st.sampled_from(["count", "range", "edges"]))
    if form == "count" and x.size:
        kwargs: dict[str, Any] = {"bins": data.draw(st.integers(1, 7))}
    elif form == "range" or form == "count":
        ranges = st.sampled_from([(-2, 2), (0.5, 1.5), (1, 1)])
        kwargs = {"bins": data.draw(st.integers(1, 7)), "range": data.draw(ranges)}
    else:
        kwargs = {"bins": data.draw(st.sampled_from([[-3, 0, 0.5, 3], [0, 1], [-1, -1, 2], np.float32([-2.5, 2.5])]))}
    weights = None
    if data.draw(st.booleans()):
        w_dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int64]))
        w = values(x.shape, w_dtype, data.draw(st.integers(0, 99)))
        weights = (w, gnp.from_array(w, chunks=a.chunks))
    expected = quiet(np.histogram, x, density=density, weights=None if weights is None else weights[0], **kwargs)
    counts, edges = gnp.histogram(a, density=density, weights=None if weights is None else weights[1], **kwargs)
    check(counts, expected[0])
    assert_eq(edges, expected[1])


def test_histogram_errors_and_nans() -> None:
    x = np.array([1.0, np.nan, 3.0])
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(ValueError, match="not finite"):
        gnp.histogram(a)
    counts, _ = gnp.histogram(a, bins=2, range=(0, 4))  # NaNs fall outside every bin
    assert_eq(counts, np.histogram(x, bins=2, range=(0, 4))[0])
    with pytest.raises(ValueError, match="monotonically"):
        gnp.histogram(a, bins=[0, 2, 1])
    with pytest.raises(ValueError, match="positive"):
        gnp.histogram(a, bins=0, range=(0, 1))
    with pytest.raises(ValueError, match="max must be larger"):
        gnp.histogram(a, bins=2, range=(2, 1))
    with pytest.raises(ValueError, match="same shape"):
        gnp.histogram(a, weights=np.ones(2))
    with pytest.raises(NotImplementedError, match="estimator"):
        gnp.histogram(a, bins="auto")


@given(data=st.data(), minlength=st.integers(0, 9), weighted=st.booleans())
def test_bincount(data: st.DataObject, minlength: int, weighted: bool) -> None:
    n = data.draw(st.integers(0, 12))
    dtype = data.draw(st.sampled_from([np.int64, np.uint8, np.int32, np.bool_]))
    x = values((n,), dtype, data.draw(st.integers(0, 99)), low=0, high=6)
    a = gnp.from_array(x, chunks=data.draw(axis_chunks(n)))
    if weighted:
        w = values((n,), np.float32, data.draw(st.integers(0, 99)))
        check(gnp.bincount(a, weights=gnp.from_array(w, chunks=3), minlength=minlength),
              np.bincount(x, weights=w, minlength=minlength))
    else:
        check(gnp.bincount(a, minlength=minlength), np.bincount(x, minlength=minlength))


def test_bincount_errors() -> None:
    with pytest.raises(ValueError, match="negative elements"):
        gnp.bincount(gnp.from_array(np.array([1, -1, 2]), chunks=2))
    with pytest.raises(ValueError, match="minlength"):
        gnp.bincount(gnp.arange(3), minlength=-1)
    with pytest.raises(TypeError, match="safe"):
        gnp.bincount(gnp.asarray(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match="too deep"):
        gnp.bincount(gnp.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="too small depth"):
        gnp.bincount(gnp.asarray(np.int64(3)))
    with pytest.raises(ValueError, match="same length"):
        gnp.bincount(gnp.arange(3), weights=np.ones(2))


@given(data=st.data(), right=st.booleans(),
       bins=st.sampled_from([[0.0], [-1, 0, 2], [3, 1, 1, -2], [1, 1], [], [-2.5, -0.5, 0.5, 2.5]]))
def test_digitize(data: st.DataObject, right: bool, bins: list) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS))
    edges = np.asarray(bins, dtype=float)
    check(gnp.digitize(a, edges, right=right), np.digitize(x, edges, right=right))


def test_digitize_errors() -> None:
    a = gnp.from_array(np.arange(4.0), chunks=3)
    with pytest.raises(ValueError, match="monotonically"):
        gnp.digitize(a, [1, 3, 2])
    with pytest.raises(ValueError, match="too deep"):
        gnp.digitize(a, [[1, 2]])
    with pytest.raises(TypeError, match="complex"):
        gnp.digitize(gnp.asarray(np.ones(2, dtype=complex)), [1, 2])


# --- averages, spread, covariance ---------------------------------------------------------------------


@given(data=st.data(), returned=st.booleans(), keepdims=st.booleans())
def test_average(data: st.DataObject, returned: bool, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS, nans=False, min_dims=1))
    axis = data.draw(axes(x.ndim))
    form = data.draw(st.sampled_from(["none", "full", "axis"] if axis is not None else ["none", "full"]))
    kwargs: dict[str, Any] = {"axis": axis, "returned": returned, "keepdims": keepdims}
    if form == "none":
        w = None
        if x.size == 0 or quiet(np.mean, x, axis=axis).size == 0:
            return  # NumPy divides by zero computing the number of elements averaged
    else:
        shape = x.shape if form == "full" else tuple(x.shape[d] for d in np.atleast_1d(axis))
        w = values(shape, data.draw(st.sampled_from([np.float32, np.int64])), data.draw(st.integers(0, 99)), low=1)
    try:
        expected = quiet(np.average, x, weights=w, **kwargs)
    except ZeroDivisionError:
        result = gnp.average(a, weights=w, **kwargs)  # lazy: raises when computed
        with pytest.raises(ZeroDivisionError):
            (result[0] if returned else result).compute()
        return
    got = gnp.average(a, weights=w, **kwargs)
    if returned:
        check(got[0], expected[0])
        check(got[1], expected[1])
    else:
        check(got, expected)


def test_average_errors() -> None:
    a = gnp.from_array(np.arange(6.0).reshape(2, 3), chunks=1)
    with pytest.raises(TypeError, match="Axis must be specified"):
        gnp.average(a, weights=[1, 2, 3])
    with pytest.raises(ValueError, match="consistent"):
        gnp.average(a, axis=0, weights=[1, 2, 3])
    with pytest.raises(ZeroDivisionError):
        gnp.average(a, axis=1, weights=[1, -1, 0]).compute()
    expected = np.average(np.arange(6.0).reshape(2, 3), axis=1, weights=[1, 0, 2])
    assert_eq(gnp.average(a, axis=1, weights=[1, 0, 2]), expected)


@given(data=st.data(), keepdims=st.booleans())
def test_ptp(data: st.DataObject, keepdims: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS))
    axis = data.draw(axes(x.ndim))
    if not _nonempty_slices(x, axis):
        with pytest.raises(ValueError):
            gnp.ptp(a, axis=axis)
        return
    check(gnp.ptp(a, axis=axis, keepdims=keepdims), np.ptp(x, axis=axis, keepdims=keepdims))


@given(data=st.data(), rowvar=st.booleans(), bias=st.booleans(), with_y=st.booleans())
@settings(max_examples=25)
def test_cov_corrcoef(data: st.DataObject, rowvar: bool, bias: bool, with_y: bool) -> None:
    x, a = data.draw(arrays(dtypes=NUMBERS, nans=False, min_dims=1, max_dims=2))
    y = b = None
    if with_y:
        observations = x.shape[-1] if x.ndim == 1 or rowvar else x.shape[0]
        shape = (observations,) if x.ndim == 1 else ((data.draw(st.integers(2, 3)), observations) if rowvar
                                                    else (observations, data.draw(st.integers(2, 3))))
        y, b = data.draw(arrays(dtypes=FLOATS, nans=False, shape=shape))
    ddof = data.draw(st.sampled_from([None, 0, 2]))
    try:
        expected = quiet(np.cov, x, y, rowvar=rowvar, bias=bias, ddof=ddof)
    except ValueError:  # observations of x and y that don't match
        with pytest.raises(ValueError):
            gnp.cov(a, b, rowvar=rowvar, bias=bias, ddof=ddof)
        return
    check(gnp.cov(a, b, rowvar=rowvar, bias=bias, ddof=ddof), expected, atol=1e-12)
    if expected.size:
        assert_eq(gnp.corrcoef(a, b, rowvar=rowvar), quiet(np.corrcoef, x, y, rowvar=rowvar), atol=1e-12)


def test_cov_corrcoef_complex_dtype_and_errors() -> None:
    x = np.array([[1 + 2j, 2, 4 - 1j], [0, 1j, 3]])
    a = gnp.from_array(x, chunks=(1, 2))
    assert_eq(gnp.cov(a), np.cov(x))
    assert_eq(gnp.corrcoef(a), np.corrcoef(x))
    r = np.arange(6.0).reshape(2, 3)
    assert_eq(gnp.cov(gnp.from_array(r, chunks=1), dtype=np.float32), np.cov(r, dtype=np.float32))
    with pytest.raises(ValueError, match="more than 2"):
        gnp.cov(gnp.ones((2, 2, 2)))
    with pytest.raises(NotImplementedError, match="weights"):
        gnp.cov(a, fweights=[1, 1, 1])
    with pytest.raises(ValueError):
        gnp.cov(a, gnp.ones((2, 4)))


# --- laziness -----------------------------------------------------------------------------------------


def test_lazy() -> None:
    """Only the data-deciding parts compute: histogram edges without a range, bincount's length."""
    a = gnp.from_array(np.array([[1.0, np.nan, 2.0], [3.0, 4.0, np.nan]]), chunks=1)
    with TaskCounter() as counter:
        for func in (gnp.nansum, gnp.nanmean, gnp.nanstd, gnp.nanmin, gnp.nanargmax, gnp.nancumsum, gnp.median, gnp.nanmedian, gnp.ptp):
            func(a, axis=1)
        gnp.percentile(a, [10, 90], axis=0)
        gnp.histogram(a, bins=3, range=(0, 5))
        gnp.digitize(a, [1, 2])
        gnp.average(a, axis=1, weights=[1, 2, 3], returned=True)
        gnp.cov(a)
        gnp.corrcoef(a)
    assert counter.count == 0
    with TaskCounter() as counter:
        gnp.bincount(gnp.from_array(np.array([0, 3, 1]), chunks=2))
    assert counter.count > 0


def test_arguments_from_host_data_are_read_without_running_anything() -> None:
    """q, bin edges and indices given as Arrays of host data (``gnp.asarray([5, 50, 95])``, as code written for
    JAX or CuPy passes them) are read as they are; an Array computed from them is computed first. Either way
    the results are NumPy's."""
    x = np.random.default_rng(3).normal(size=(40,))
    a = gnp.from_array(x, chunks=16)
    q, edges, index = gnp.asarray([5.0, 50.0, 95.0]), gnp.asarray([-1.0, 0.0, 2.0]), gnp.asarray([3, 0, 7])
    with TaskCounter() as counter:
        from_computed = gnp.quantile(a, q / 100)
    assert counter.count > 0
    with TaskCounter() as counter, warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FetchWarning)  # (nothing is fetched: the guard stays silent)
        built = (gnp.percentile(a, q), from_computed, gnp.histogram(a, edges)[0], a[index], gnp.take(a, index))
    assert counter.count == 0
    with pytest.warns(gnp.FetchWarning, match="indexing with"):
        assert_eq(a[index + 0], x[[3, 0, 7]])
    expected = (np.percentile(x, [5, 50, 95]), np.quantile(x, [0.05, 0.5, 0.95]),
                np.histogram(x, [-1.0, 0.0, 2.0])[0], x[[3, 0, 7]], np.take(x, [3, 0, 7]))
    for result, wanted in zip(built, expected):
        check(result, wanted)
