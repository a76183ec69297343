"""Reductions and scans against NumPy: every function as ``gnp.f(x)``, as a method and as ``np.f(x)``
(through ``__array_function__``), over random shapes (zero-size axes included), random chunkings (zero-length
blocks included), dtypes, axes and ``keepdims``; error cases; tree reductions over many blocks."""
from __future__ import annotations

import math
import warnings
from typing import Any

import dask
import numpy as np
import pytest
from conftest import assert_eq, axis_chunks, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp

DTYPES = ["bool", "int32", "int64", "uint8", "float32", "float64", "complex128"]
REDUCTIONS = ["sum", "prod", "mean", "var", "std", "min", "max", "all", "any"]
STYLES = ["function", "method", "numpy"]


# --- strategies and helpers -------------------------------------------------------------------------


@st.composite
def shapes_and_chunks(draw: Any, min_ndim: int = 0, max_ndim: int = 3, max_side: int = 12) -> tuple:
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))
    return shape, tuple(draw(axis_chunks(n, empty=True)) for n in shape)


@st.composite
def axes(draw: Any, ndim: int) -> Any:
    """None, an int (maybe negative) or a tuple of distinct axes (maybe empty, negative, unordered)."""
    form = draw(st.sampled_from(["none", "int", "tuple"]))
    if form == "none" or (form == "int" and ndim == 0):
        return None
    if form == "int":
        a = draw(st.integers(0, ndim - 1))
        return a - ndim if draw(st.booleans()) else a
    perm = draw(st.permutations(range(ndim)))
    k = draw(st.integers(0, ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in perm[:k])


def dtype_targets(dtype: str, targets: list[str]) -> st.SearchStrategy:
    """No ``dtype=`` (None) or one that ``dtype`` casts to with the same kind."""
    return st.sampled_from([None, *(t for t in targets if np.can_cast(dtype, t, "same_kind"))])


def dtype_kwarg(dtype: str | None) -> dict[str, Any]:
    return {} if dtype is None else {"dtype": np.dtype(dtype)}


def values(shape: tuple[int, ...], dtype: Any, seed: int, multiplicative: bool = False) -> np.ndarray:
    """Data whose sums (or, if ``multiplicative``, products) are exact in every dtype: small integers, or
    for products ±1, ±1j, 2, 0.5 and a few zeros, so that any order of evaluation gives NumPy's result."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if multiplicative:
        pool = {"u": [1, 2, 3, 1, 0], "i": [1, -1, 2, 3, 0], "f": [1, -1, 2, 0.5, 0],
                "c": [1, -1, 1j, -1j, 2, 0.5, 0]}[dt.kind]
        p = np.r_[np.full(len(pool) - 1, 0.98 / (len(pool) - 1)), 0.02]
        return rng.choice(np.array(pool), size=shape, p=p).astype(dt)
    if dt.kind == "u":
        return rng.integers(0, 10, shape).astype(dt)
    if dt.kind == "c":
        return (rng.integers(-5, 6, shape) + 1j * rng.integers(-5, 6, shape)).astype(dt)
    return rng.integers(-5, 6, shape).astype(dt)


def numpy_result(func: Any, *args: Any, **kwargs: Any) -> Any:
    """NumPy's result, or the exception it raises (NumPy's warnings about empty slices silenced)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the expected outcome of the gnp call
            return e


def call(style: str, name: str, a: gnp.Array, **kwargs: Any) -> Any:
    """``gnp.name(a, ...)``, ``a.name(...)`` or ``np.name(a, ...)``."""
    if style == "function":
        return getattr(gnp, name)(a, **kwargs)
    if style == "method":
        return getattr(a, name)(**kwargs)
    return getattr(np, name)(a, **kwargs)


def check(name: str, style: str, x: np.ndarray, chunks: Any, *, rtol: float | None = None,
          **kwargs: Any) -> None:
    """``name`` on ``x`` (chunked as given) agrees with NumPy: same result, dtype and shape, or the same
    exception type raised at call time."""
    expected = numpy_result(getattr(np, name), x, **kwargs)
    a = gnp.from_array(x, chunks=chunks)
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)):
            call(style, name, a, **kwargs)
        return
    result = call(style, name, a, **kwargs)
    assert isinstance(result, gnp.Array), type(result)
    if np.ndim(expected) == 0:
        assert result.shape == ()
    assert_eq(result, expected, rtol=rtol)


def _rtol(name: str, dtype: Any) -> float | None:
    # var/std are not exact for any data: tree-combined (Chan) against NumPy's two-pass formula
    if name in ("var", "std") and np.dtype(dtype) == np.float32:
        return 1e-4
    return None


# --- reductions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REDUCTIONS)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES),
       keepdims=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_reduction(name: str, data: Any, dtype: str, style: str, keepdims: bool, seed: int) -> None:
    shape, chunks = data.draw(shapes_and_chunks())
    axis = data.draw(axes(len(shape)))
    x = values(shape, dtype, seed, multiplicative=name == "prod")
    check(name, style, x, chunks, rtol=_rtol(name, dtype), axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std"])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES),
       seed=st.integers(0, 2**32 - 1))
def test_reduction_dtype(name: str, data: Any, dtype: str, style: str, seed: int) -> None:
    """``dtype=`` (any same-kind cast; var/std: floats, since NumPy's integer var truncates its mean)."""
    out_dtype = data.draw(dtype_targets(dtype, ["float32", "float64"] if name in ("var", "std") else DTYPES))
    shape, chunks = data.draw(shapes_and_chunks(max_ndim=2))
    axis = data.draw(axes(len(shape)))
    x = values(shape, dtype, seed, multiplicative=name == "prod")
    check(name, style, x, chunks, rtol=_rtol(name, out_dtype or dtype), axis=axis, **dtype_kwarg(out_dtype))


@pytest.mark.parametrize("name", ["var", "std"])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES),
       ddof=st.integers(0, 4), use_correction=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_var_std_ddof(name: str, data: Any, dtype: str, style: str, ddof: int, use_correction: bool,
                      seed: int) -> None:
    """``ddof`` and ``correction`` subtract from N; N <= ddof gives inf (or nan for 0/0) as in NumPy."""
    shape, chunks = data.draw(shapes_and_chunks(max_ndim=2, max_side=6))
    axis = data.draw(axes(len(shape)))
    x = values(shape, dtype, seed)
    kw = {"correction": ddof} if use_correction else {"ddof": ddof}
    check(name, style, x, chunks, rtol=_rtol(name, dtype), axis=axis, **kw)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("style", STYLES)
def test_ddof_and_correction_together(name: str, style: str) -> None:
    x = np.arange(6.0)
    with pytest.raises(ValueError, match="ddof and correction"):
        getattr(np, name)(x, ddof=1, correction=1)
    with pytest.raises(ValueError, match="ddof and correction"):
        call(style, name, gnp.from_array(x, chunks=2), ddof=1, correction=1)


@pytest.mark.parametrize("name", ["argmin", "argmax"])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES),
       keepdims=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_arg_reduction(name: str, data: Any, dtype: str, style: str, keepdims: bool, seed: int) -> None:
    """The first extreme element's index (ties are frequent with these small integers)."""
    shape, chunks = data.draw(shapes_and_chunks())
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)) if shape else None
    check(name, style, values(shape, dtype, seed), chunks, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("name", ["min", "max", "argmin", "argmax"])
@given(data=st.data(), dtype=st.sampled_from(["float32", "float64"]), style=st.sampled_from(STYLES),
       seed=st.integers(0, 2**32 - 1))
def test_nan_propagates(name: str, data: Any, dtype: str, style: str, seed: int) -> None:
    """NaN wins in min/max, and argmin/argmax give the first NaN's index, as in NumPy."""
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1, max_ndim=2))
    x = values(shape, dtype, seed)
    rng = np.random.default_rng(seed)
    x[rng.random(shape) < data.draw(st.sampled_from([0.05, 0.3]))] = np.nan
    axis = data.draw(st.none() | st.integers(0, len(shape) - 1))
    check(name, style, x, chunks, axis=axis)


@pytest.mark.parametrize("name", ["min", "max", "argmin", "argmax"])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((0,), 0), ((3, 0), 1), ((3, 0), None), ((0, 4), 0)])
def test_empty_without_identity(name: str, shape: tuple, axis: Any) -> None:
    """min/max/argmin/argmax of nothing: ValueError at call time, as NumPy."""
    x = np.zeros(shape)
    with pytest.raises(ValueError):
        getattr(np, name)(x, axis=axis)
    a = gnp.from_array(x, chunks=2)
    for style in STYLES:
        with pytest.raises(ValueError, match="zero-size array|empty sequence"):
            call(style, name, a, axis=axis)


@pytest.mark.parametrize("name", ["min", "max", "argmin", "argmax"])
def test_empty_other_axis(name: str) -> None:
    """Reducing a non-empty axis of an array with a zero-size axis is fine (an empty result)."""
    x = np.zeros((0, 4))
    assert_eq(getattr(gnp, name)(gnp.from_array(x, chunks=2), axis=1), getattr(np, name)(x, axis=1))


@pytest.mark.parametrize("name", REDUCTIONS + ["argmin", "argmax", "cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [2, -3, (0, 2), (5,)])
def test_bad_axis(name: str, axis: Any) -> None:
    x = np.ones((2, 3))
    if name in ("argmin", "argmax", "cumsum", "cumprod") and isinstance(axis, tuple):
        with pytest.raises(TypeError):
            getattr(np, name)(x, axis=axis)
        expected: type[Exception] = TypeError
    else:
        with pytest.raises(np.exceptions.AxisError):
            getattr(np, name)(x, axis=axis)
        expected = np.exceptions.AxisError
    a = gnp.from_array(x, chunks=1)
    for style in STYLES:
        with pytest.raises(expected):
            call(style, name, a, axis=axis)


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", [(0, 0), (1, -1), (0, 1, -2)])
def test_duplicate_axes(name: str, axis: tuple) -> None:
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        getattr(np, name)(x, axis=axis)
    a = gnp.from_array(x, chunks=1)
    for style in STYLES:
        with pytest.raises(ValueError, match="duplicate value in 'axis'"):
            call(style, name, a, axis=axis)


@pytest.mark.parametrize("name", REDUCTIONS + ["argmin", "argmax"])
@pytest.mark.parametrize("style", STYLES)
def test_full_reduction_is_lazy_0d(name: str, style: str) -> None:
    x = np.arange(1, 25, dtype=np.float64).reshape(2, 3, 4)
    r = call(style, name, gnp.from_array(x, chunks=(1, 2, 3)))
    assert isinstance(r, gnp.Array) and r.shape == ()
    assert_eq(r, getattr(np, name)(x))


def test_out_is_refused() -> None:
    a = gnp.ones(4, chunks=2)
    with pytest.raises(TypeError, match="out= is not supported"):
        gnp.sum(a, out=np.empty(()))


# --- scans ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES),
       seed=st.integers(0, 2**32 - 1))
def test_scan(name: str, data: Any, dtype: str, style: str, seed: int) -> None:
    out_dtype = data.draw(dtype_targets(dtype, DTYPES))
    shape, chunks = data.draw(shapes_and_chunks())
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)) if shape else None
    x = values(shape, dtype, seed, multiplicative=name == "cumprod")
    check(name, style, x, chunks, axis=axis, **dtype_kwarg(out_dtype))


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(["function", "numpy"]),
       include_initial=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_cumulative(name: str, data: Any, dtype: str, style: str, include_initial: bool, seed: int) -> None:
    """Array API scans: ``include_initial`` prepends the identity; ``axis`` is required for ndim > 1."""
    out_dtype = data.draw(dtype_targets(dtype, DTYPES))
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1))
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    x = values(shape, dtype, seed, multiplicative=name == "cumulative_prod")
    check(name, style, x, chunks, axis=axis, include_initial=include_initial, **dtype_kwarg(out_dtype))


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_cumulative_needs_axis(name: str) -> None:
    x = np.ones((2, 3))
    with pytest.raises(ValueError):
        getattr(np, name)(x)
    a = gnp.from_array(x, chunks=1)
    for style in ("function", "numpy"):
        with pytest.raises(ValueError, match="axis"):
            call(style, name, a)


# --- tree shape -------------------------------------------------------------------------------------


@pytest.mark.parametrize("split_every", [None, 2, 3, 8, 100])
def test_many_blocks_integers_exact(split_every: Any) -> None:
    """64 blocks (and 8 x 8 blocks in 2-D) through trees of any fan-in: integer results are exact."""
    rng = np.random.default_rng(0)
    x = rng.integers(-(2**40), 2**40, 640, dtype=np.int64)
    y = x.reshape(40, 16)
    settings = {} if split_every is None else {"split_every": split_every}
    with gnp.config.set(**settings), dask.config.set(scheduler="threads"):
        a = gnp.from_array(x, chunks=10)
        b = gnp.from_array(y, chunks=(5, 2))
        assert a.numblocks == (64,) and b.numblocks == (8, 8)
        assert_eq(gnp.sum(a), np.sum(x))
        assert_eq(gnp.prod(a % 7 + 1), np.prod(x % 7 + 1))  # wraps around in int64, like NumPy
        assert_eq(gnp.max(a), np.max(x))
        assert_eq(gnp.argmin(a), np.argmin(x))
        assert_eq(gnp.sum(b), np.sum(y))
        assert_eq(gnp.sum(b, axis=0), np.sum(y, axis=0))
        assert_eq(gnp.argmax(b, axis=0), np.argmax(y, axis=0))
        assert_eq(gnp.min(b, axis=(1, 0), keepdims=True), np.min(y, axis=(1, 0), keepdims=True))
        assert_eq(gnp.any(b == y[3, 4]), np.any(y == y[3, 4]))
        assert_eq(gnp.cumsum(a), np.cumsum(x))


def test_thousand_blocks() -> None:
    x = np.arange(3000, dtype=np.int64)
    a = gnp.from_array(x, chunks=3)
    assert a.numblocks == (1000,)
    with dask.config.set(scheduler="threads"):  # the tree, not the scheduler, is under test
        assert_eq(gnp.sum(a), np.sum(x))
        assert_eq(gnp.mean(a), np.mean(x))
        assert_eq(gnp.argmax(a), np.argmax(x))


@pytest.mark.parametrize("split_every", [2, 3, 8, 27])
@pytest.mark.parametrize("shape, chunks, axis", [
    ((1000,), 1, None), ((40, 60), (1, 2), None), ((40, 60), (1, 2), 0), ((64, 3), (1, 3), None),
    ((8, 8, 8), 1, (0, 2)),
])
def test_tree_fan_in(split_every: int, shape: tuple, chunks: Any, axis: Any) -> None:
    """No task of a reduction's graph takes more than ``split_every`` inputs (2 per reduced axis at least),
    and the tree has between log(blocks) / log(fan-in) and log2(blocks per axis) combining levels."""
    a = gnp.ones(shape, chunks=chunks, dtype=np.int32)
    with gnp.config.set(split_every=split_every):
        r = gnp.sum(a, axis=axis)
    graph = dict(r.__dask_graph__())
    fan_in = max(len(node.dependencies) for node in graph.values())
    axes = range(a.ndim) if axis is None else np.atleast_1d(axis)
    several = sum(a.numblocks[d] > 1 for d in axes)
    assert fan_in <= max(split_every, 2**several), fan_in
    blocks = math.prod(a.numblocks[d] for d in axes)
    levels = len({k[1] for k in graph if isinstance(k, tuple) and "partial" in k[0]}) - 1
    assert levels >= math.ceil(math.log(blocks) / math.log(max(split_every, 2**several)) - 1e-9)
    assert levels <= max(math.ceil(math.log2(a.numblocks[d])) for d in axes)
    with dask.config.set(scheduler="threads"):
        assert_eq(r, np.sum(np.ones(shape, dtype=np.int32), axis=axis))


def test_float32_sum_over_many_blocks() -> None:
    """A float32 sum over 256 blocks stays within float32 rounding of the float64 sum, as NumPy's does."""
    rng = np.random.default_rng(1)
    x = rng.random(256 * 1000).astype(np.float32)
    exact = np.sum(x, dtype=np.float64)
    r = gnp.sum(gnp.from_array(x, chunks=1000))
    assert r.dtype == np.float32
    value = float(to_host(r.compute()))
    tol = 8 * np.finfo(np.float32).eps * exact  # a few roundings of the running total, log-depth tree
    assert abs(value - exact) <= tol, (value, exact, np.sum(x))
    assert abs(float(np.sum(x)) - exact) <= tol  # the reference meets the same bound


def test_float32_mean_var_over_many_blocks() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(64 * 500) + 10).astype(np.float32)
    a = gnp.from_array(x, chunks=500)
    assert_eq(gnp.mean(a), np.mean(x.astype(np.float64)).astype(np.float32), rtol=1e-6)
    assert_eq(gnp.var(a), np.var(x.astype(np.float64)).astype(np.float32), rtol=1e-5)


def test_distributed_reduction(client: Any) -> None:
    """A tree reduction and a scan computed on a 2-worker distributed cluster."""
    x = np.arange(240, dtype=np.int64).reshape(12, 20)
    a = gnp.from_array(x, chunks=(3, 4))
    total, cols, cs = client.compute([gnp.sum(a), gnp.var(a, axis=0), gnp.cumsum(a, axis=1)], sync=True)
    np.testing.assert_array_equal(to_host(total), np.sum(x))
    np.testing.assert_allclose(to_host(cols), np.var(x, axis=0))
    np.testing.assert_array_equal(to_host(cs), np.cumsum(x, axis=1))


@pytest.mark.parametrize("emulated", [False, True], ids=["numpy-blocks", "emulated-kernel"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16])
@pytest.mark.parametrize("chunks", [(6, 7), (4, 3)], ids=["one-block", "blocks"])
@pytest.mark.parametrize("axis", [None, 1, (0, 1)])
def test_ptp_is_fused_and_matches_numpy(axis: object, chunks: tuple, dtype: type, emulated: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import _cuda_emulator
    from conftest import BACKEND

    from dask_gpunumeric.api.explain import plan

    if emulated:
        if _cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy":
            pytest.skip("the kernel emulator needs a host C++ compiler and NumPy blocks")
        _cuda_emulator.emulated_fused(monkeypatch)
    x = np.random.default_rng(5).uniform(-100, 100, (6, 7)).astype(dtype)
    if dtype in (np.float32, np.float64):
        x[2, 3] = np.nan if axis is not None else x[2, 3]  # NaN propagates (a whole-array NaN: below)
    a = gnp.from_array(x, chunks=chunks)
    factor = 5 if emulated else 3  # another expression, not the graph cached by the other run
    out = gnp.ptp(a * factor, axis=axis)
    with np.errstate(over="ignore"):
        expected = np.ptp(x * dtype(factor), axis=axis)  # integers wrap around, as NumPy's
    (group,) = plan(out)["groups"]
    assert [w for w in (*group["ops"], *group["outputs"]) if "ptp" in w] == ["ptp-total" if chunks == (6, 7) and axis in (None, (0, 1))
                                                          else "ptp-partial"]
    got = gnp.fetch(out)
    np.testing.assert_array_equal(got, expected)
    assert np.asarray(out).dtype == np.asarray(expected).dtype
    dispatched = np.ptp(a, axis=axis)  # NumPy's function on a gnp array: a gnp array
    assert isinstance(dispatched, gnp.Array)
    np.testing.assert_array_equal(np.asarray(dispatched), np.ptp(x, axis=axis))


def test_ptp_errors_as_numpy() -> None:
    with pytest.raises(TypeError, match="boolean subtract"):
        gnp.ptp(gnp.from_array(np.array([True, False])))
    with pytest.raises(ValueError, match="zero-size array"):
        gnp.ptp(gnp.from_array(np.zeros((0, 3))), axis=0)
