"""Array utilities against NumPy on random shapes (zero-size included) and chunkings: take,
take_along_axis, tile, repeat, meshgrid, tril/triu, diag, diff, gradient, trapezoid, isclose, allclose,
array_equal, pad, convolve; and NumPy's exceptions for bad input."""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, check_like_numpy, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.api import interop as _protocols
from dask_gpunumeric.api import comparison, convolution, differences, matrices, padding, selection, tiling

DTYPES = [np.int64, np.float32, np.float64]

# --- strategies and helpers ---------------------------------------------------------------------------


@st.composite
def shapes(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3, max_side: int = 6) -> tuple[int, ...]:
    ndim = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))


def chunk(draw: st.DrawFn, x: np.ndarray) -> gnp.Array:
    """``x`` as a randomly chunked gnp Array."""
    return gnp.from_array(x, chunks=tuple(draw(axis_chunks(n)) for n in x.shape))


@st.composite
def arrays(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3, max_side: int = 6,
           shape: tuple[int, ...] | None = None, dtypes: list[Any] = DTYPES) -> tuple[np.ndarray, gnp.Array]:
    """A NumPy array of distinct values (half negative) and the same data randomly chunked."""
    shape = draw(shapes(min_dims, max_dims, max_side)) if shape is None else shape
    size = math.prod(shape)
    x = (np.arange(size) - size // 2).astype(draw(st.sampled_from(dtypes))).reshape(shape)
    return x, chunk(draw, x)


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which fallbacks have warned already (each warns once per session)."""
    monkeypatch.setattr(_protocols, "_WARNED", set())


# --- take ---------------------------------------------------------------------------------------------


@given(st.data())
def test_take(data: st.DataObject) -> None:
    x, a = data.draw(arrays())
    axis = data.draw(st.none() | st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1)) if x.ndim else None
    n = x.size if axis is None else x.shape[axis]
    mode = data.draw(st.sampled_from(["raise", "wrap", "clip"]))
    low, high = (-n, n - 1) if mode == "raise" else (-2 * n - 3, 2 * n + 3)
    idx_shape = data.draw(shapes(1, 2, 4)) if n else (0,)
    values = data.draw(st.lists(st.integers(low, high), min_size=math.prod(idx_shape),
                                max_size=math.prod(idx_shape))) if n else []
    indices = np.asarray(values, dtype=np.int64).reshape(idx_shape)
    if data.draw(st.booleans()):
        indices = chunk(data.draw, indices)  # a lazy index array is computed first
    assert_eq(gnp.take(a, indices, axis=axis, mode=mode), np.take(x, np.asarray(indices), axis=axis, mode=mode))


def test_take_scalar_and_bool_indices() -> None:
    x = np.arange(12).reshape(3, 4)
    a = gnp.from_array(x, chunks=2)
    assert_eq(gnp.take(a, 2, axis=1), np.take(x, 2, axis=1))
    assert_eq(gnp.take(a, [True, False, True], axis=0), np.take(x, [True, False, True], axis=0))
    assert_eq(gnp.take(a, [], axis=0), np.take(x, [], axis=0))
    with pytest.warns(gnp.ScalarIndexingWarning):
        gnp.take(a, 5)
    with gnp.allowscalar():
        assert_eq(gnp.take(a, 5), np.take(x, 5))


def test_take_errors() -> None:
    a = gnp.arange(5, chunks=2)
    with pytest.raises(IndexError, match="out of bounds"):
        gnp.take(a, [5])
    with pytest.raises(TypeError):
        gnp.take(a, np.array([1.5]))
    with pytest.raises(ValueError, match="clipmode"):
        gnp.take(a, [0], mode="nearest")
    with pytest.raises(IndexError):
        gnp.take(a, [0], axis=1)
    with pytest.raises(IndexError, match="empty"):
        gnp.take(gnp.zeros((0,)), [0], mode="wrap")
    with pytest.raises(ValueError, match="wrong shape"):
        gnp.take(a, [0], out=np.empty(3))


# --- take_along_axis ----------------------------------------------------------------------------------


@given(st.data())
def test_take_along_axis(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    d0 = axis % x.ndim
    n = x.shape[d0]
    shape = tuple(
        data.draw(st.integers(0, 4)) if n and d == d0 else 0 if d == d0
        else data.draw(st.sampled_from([s, 1] if s != 1 else [1, 3])) for d, s in enumerate(x.shape)
    )
    indices = np.asarray(data.draw(st.lists(st.integers(-n, max(n - 1, 0)), min_size=math.prod(shape),
                                            max_size=math.prod(shape))), dtype=np.int64).reshape(shape)
    lazy = data.draw(st.booleans())
    result = gnp.take_along_axis(a, chunk(data.draw, indices) if lazy else indices, axis)
    assert_eq(result, np.take_along_axis(x, indices, axis))


def test_take_along_axis_flat_and_errors() -> None:
    x = np.arange(12).reshape(3, 4)
    a = gnp.from_array(x, chunks=2)
    assert_eq(gnp.take_along_axis(a, np.array([11, 0, -1]), None), np.take_along_axis(x, np.array([11, 0, -1]), None))
    with pytest.raises(IndexError, match="integer"):
        gnp.take_along_axis(a, np.zeros((3, 1)), 1)
    with pytest.raises(ValueError, match="same number of dimensions"):
        gnp.take_along_axis(a, np.zeros(3, dtype=int), 1)
    with pytest.raises(ValueError, match="single dimension"):
        gnp.take_along_axis(a, np.zeros((3, 1), dtype=int), None)
    with pytest.raises(IndexError, match="out of bounds"):
        gnp.take_along_axis(a, np.full((3, 1), 4), 1)
    with pytest.raises(IndexError, match="shape mismatch"):
        gnp.take_along_axis(a, np.zeros((2, 1), dtype=int), 1)
    with pytest.raises(np.exceptions.AxisError):
        gnp.take_along_axis(a, np.zeros((3, 1), dtype=int), 2)


# --- tile and repeat ----------------------------------------------------------------------------------


@given(st.data())
def test_tile(data: st.DataObject) -> None:
    x, a = data.draw(arrays(max_side=4))
    reps = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), max_size=4).map(tuple))
    assert_eq(gnp.tile(a, reps), np.tile(x, reps))


def test_tile_errors() -> None:
    a = gnp.arange(3)
    with pytest.raises(ValueError, match="negative"):
        gnp.tile(a, (2, -1))
    with pytest.raises(TypeError):
        gnp.tile(a, 1.5)


@given(st.data())
def test_repeat(data: st.DataObject) -> None:
    x, a = data.draw(arrays())
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1)) if x.ndim else None
    n = x.size if axis is None else x.shape[axis]
    repeats = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=n, max_size=n) | st.just([2]))
    if isinstance(repeats, list) and data.draw(st.booleans()):
        repeats = gnp.from_array(np.asarray(repeats, dtype=np.int64))  # lazy counts are computed first
    expected = np.repeat(x, repeats if not isinstance(repeats, gnp.Array) else to_host(repeats.compute()), axis=axis)
    assert_eq(gnp.repeat(a, repeats, axis=axis), expected)


def test_repeat_errors() -> None:
    a = gnp.arange(3)
    with pytest.raises(ValueError, match="negative"):
        gnp.repeat(a, -1)
    with pytest.raises(ValueError, match="negative"):
        gnp.repeat(a, [1, -1, 2])
    with pytest.raises(ValueError, match="broadcast"):
        gnp.repeat(a, [1, 2])
    with pytest.raises(TypeError):
        gnp.repeat(a, 1.5)


# --- meshgrid -----------------------------------------------------------------------------------------


@given(st.data())
def test_meshgrid(data: st.DataObject) -> None:
    vectors = data.draw(st.lists(arrays(min_dims=1, max_dims=1, max_side=5), max_size=3))
    indexing = data.draw(st.sampled_from(["xy", "ij"]))
    sparse = data.draw(st.booleans())
    result = gnp.meshgrid(*(a for _, a in vectors), indexing=indexing, sparse=sparse)
    expected = np.meshgrid(*(x for x, _ in vectors), indexing=indexing, sparse=sparse)
    assert isinstance(result, tuple) and len(result) == len(expected)
    for r, e in zip(result, expected):
        assert_eq(r, e)
    if not sparse:
        assert len({r.chunks for r in result}) <= 1  # chunked alike: they combine without rechunking


def test_meshgrid_errors() -> None:
    with pytest.raises(ValueError, match="indexing"):
        gnp.meshgrid(gnp.arange(3), indexing="xz")


# --- triangles and diagonals --------------------------------------------------------------------------


@given(st.data())
def test_tril_triu(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, max_dims=4, max_side=5, dtypes=[*DTYPES, np.bool_]))
    k = data.draw(st.integers(-6, 6))
    assert_eq(gnp.tril(a, k), np.tril(x, k))
    assert_eq(gnp.triu(a, k=k), np.triu(x, k=k))


def test_tril_triu_errors() -> None:
    with pytest.raises(TypeError):
        gnp.tril(gnp.asarray(1.0))
    with pytest.raises(TypeError):
        gnp.triu(gnp.ones((2, 2)), 1.5)


@given(st.data())
def test_diag(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, max_dims=2, dtypes=[*DTYPES, np.bool_]))
    k = data.draw(st.integers(-7, 7))
    assert_eq(gnp.diag(a, k), np.diag(x, k))


def test_diag_errors() -> None:
    with pytest.raises(ValueError, match="1- or 2-d"):
        gnp.diag(gnp.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="1- or 2-d"):
        gnp.diag(gnp.asarray(1.0))


# --- differences --------------------------------------------------------------------------------------


@given(st.data())
def test_diff(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, dtypes=[*DTYPES, np.bool_]))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = data.draw(st.integers(0, 3))
    ends = {}
    for name in ("prepend", "append"):
        kind = data.draw(st.sampled_from(["none", "scalar", "array"]))
        if kind == "scalar":
            ends[name] = (x.dtype.type(3),) * 2
        elif kind == "array":
            shape = list(x.shape)
            shape[axis] = data.draw(st.integers(0, 2))
            end = np.full(shape, 7, dtype=x.dtype)
            ends[name] = (end, chunk(data.draw, end))
    assert_eq(gnp.diff(a, n, axis, **{k: v[1] for k, v in ends.items()}),
              np.diff(x, n, axis, **{k: v[0] for k, v in ends.items()}))


def test_diff_errors() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        gnp.diff(gnp.arange(3), -1)
    with pytest.raises(ValueError, match="at least one dimensional"):
        gnp.diff(gnp.asarray(1.0))
    with pytest.raises(np.exceptions.AxisError):
        gnp.diff(gnp.arange(3), axis=1)
    with pytest.raises(ValueError):
        gnp.diff(gnp.ones((2, 3)), prepend=np.ones((3, 1)))


@st.composite
def coordinates(draw: st.DrawFn, n: int) -> np.ndarray:
    """Increasing sample points: evenly spaced or not, integer or float."""
    if draw(st.booleans()):
        return np.arange(n) * draw(st.sampled_from([1, 2, 0.5]))
    steps = draw(st.lists(st.floats(0.25, 4.0), min_size=n, max_size=n))
    return np.cumsum(steps)


@given(st.data())
def test_gradient(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, max_side=5))
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1) | st.just(tuple(range(x.ndim))[::-1]))
    axes = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    kind = data.draw(st.sampled_from(["none", "one", "each"]))
    spacing: tuple[Any, ...] = ()
    if kind == "one":
        spacing = (data.draw(st.sampled_from([2, 0.5, np.float64(1.5)])),)
    elif kind == "each":
        spacing = tuple(data.draw(st.sampled_from([0.5, "coords"])) for _ in axes)
        spacing = tuple(data.draw(coordinates(x.shape[d])) if s == "coords" else s for s, d in zip(spacing, axes))
    edge_order = data.draw(st.sampled_from([1, 2]))
    tol = {"rtol": 1e-4, "atol": 1e-4} if x.dtype == np.float32 else {"rtol": 1e-9, "atol": 1e-9}
    check_like_numpy(lambda: gnp.gradient(a, *spacing, axis=axis, edge_order=edge_order),
                     lambda: np.gradient(x, *spacing, axis=axis, edge_order=edge_order), **tol)


def test_gradient_errors() -> None:
    a = gnp.ones((4, 3))
    with pytest.raises(TypeError, match="invalid number of arguments"):
        gnp.gradient(a, 1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="scalars or 1d"):
        gnp.gradient(a, np.ones((4, 3)), 1.0)
    with pytest.raises(ValueError, match="match the length"):
        gnp.gradient(a, np.arange(3.0), 1.0)
    with pytest.raises(ValueError, match="greater than 2"):
        gnp.gradient(a, edge_order=3)
    with pytest.raises(ValueError, match="too small"):
        gnp.gradient(gnp.ones((2, 3)), edge_order=2)


@given(st.data())
def test_trapezoid(data: st.DataObject) -> None:
    y, a = data.draw(arrays(min_dims=1))
    axis = data.draw(st.integers(-y.ndim, y.ndim - 1))
    kind = data.draw(st.sampled_from(["dx", "x", "none"]))
    kwargs: dict[str, Any] = {}
    if kind == "dx":
        kwargs["dx"] = data.draw(st.sampled_from([0.5, 2]))
    elif kind == "x":
        coords = data.draw(coordinates(y.shape[axis]))
        kwargs["x"] = coords.astype(y.dtype) if y.dtype == np.float32 else coords  # no implicit widening
    tol = {"rtol": 1e-4, "atol": 1e-3} if y.dtype == np.float32 else {"rtol": 1e-9, "atol": 1e-9}
    assert_eq(gnp.trapezoid(a, axis=axis, **kwargs), np.trapezoid(y, axis=axis, **kwargs), **tol)


def test_trapezoid_length_two_axis(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An axis of length 2 with sample points: ``diff(x)`` is read only through a reshape, outside the stencil
    cluster; the stencil pass must store it (it once made a kernel with no outputs, which the source check
    rejects when kernels are generated: on CuPy blocks, or with GNP_KERNEL_DUMP_DIR set as in CI)."""
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path))
    y, x = np.array([[-3], [5]]), np.array([1, 4])
    assert_eq(gnp.trapezoid(gnp.from_array(y, chunks=(2, 1)), x=x, axis=0), np.trapezoid(y, x=x, axis=0))
    assert list(tmp_path.glob("*.cu"))


def test_trapezoid_nd_x() -> None:
    y = np.arange(12.0).reshape(3, 4)
    x = np.cumsum(np.arange(1.0, 13.0)).reshape(3, 4)
    assert_eq(gnp.trapezoid(gnp.from_array(y, chunks=2), gnp.from_array(x, chunks=(1, 3)), axis=0),
              np.trapezoid(y, x, axis=0))
    with pytest.raises(ValueError):
        gnp.trapezoid(gnp.ones((3, 4)), x=np.arange(3.0))
    y32 = gnp.ones(4, dtype=np.float32)
    with pytest.warns(gnp.PromotionWarning):
        gnp.trapezoid(y32, x=np.arange(4.0))
    with gnp.allowpromotion():
        assert_eq(gnp.trapezoid(y32, x=np.arange(4.0)), np.trapezoid(np.ones(4, dtype=np.float32), x=np.arange(4.0)))


# --- comparison ---------------------------------------------------------------------------------------

SPECIAL = [0.0, 1.0, -1.0, 1.0 + 1e-9, 1.0 + 1e-3, 1e-9, np.nan, np.inf, -np.inf]


@st.composite
def comparable_pair(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, gnp.Array, gnp.Array]:
    shape = draw(shapes(0, 3, 4))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
    values = [v for v in SPECIAL if dtype != np.int64 or float(v).is_integer()]
    size = math.prod(shape)
    x = np.asarray(draw(st.lists(st.sampled_from(values), min_size=size, max_size=size)), dtype=dtype).reshape(shape)
    y_shape = shape[draw(st.integers(0, len(shape))):]  # b broadcasts against a
    y = np.asarray(draw(st.lists(st.sampled_from(values), min_size=math.prod(y_shape),
                                 max_size=math.prod(y_shape))), dtype=dtype).reshape(y_shape)
    return x, y, chunk(draw, x), chunk(draw, y)


@given(comparable_pair(), st.booleans(), st.sampled_from([(1e-5, 1e-8), (0.0, 0.0), (1e-2, 0.5)]))
def test_isclose_allclose(pair: tuple, equal_nan: bool, tolerances: tuple[float, float]) -> None:
    x, y, a, b = pair
    rtol, atol = tolerances
    assert_eq(gnp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan),
              np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))
    result = gnp.allclose(a, b, rtol, atol, equal_nan)
    assert type(result) is bool and result == np.allclose(x, y, rtol, atol, equal_nan)


def test_isclose_scalars_and_promotion() -> None:
    x = np.array([1.0, 1.0 + 1e-9, 2.0, np.inf], dtype=np.float32)
    a = gnp.from_array(x, chunks=3)
    assert_eq(gnp.isclose(a, 1.0), np.isclose(x, 1.0))
    assert_eq(gnp.isclose(1, a), np.isclose(1, x))
    assert_eq(gnp.isclose(gnp.arange(3, dtype=np.int32), gnp.arange(3, dtype=np.int32)), np.ones(3, dtype=bool))
    with pytest.warns(gnp.PromotionWarning):
        gnp.isclose(gnp.arange(3, dtype=np.int32), gnp.arange(3, dtype=np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        gnp.isclose(gnp.ones(3), gnp.ones(2))


@given(comparable_pair(), st.booleans(), st.booleans())
def test_array_equal(pair: tuple, equal_nan: bool, same: bool) -> None:
    x, y, a, b = pair
    if same:
        y, b = x, a
    result = gnp.array_equal(a, b, equal_nan=equal_nan)
    assert type(result) is bool and result == np.array_equal(x, y, equal_nan=equal_nan)
    assert gnp.array_equiv(a, b) is np.array_equiv(x, y)


# --- pad ----------------------------------------------------------------------------------------------


@st.composite
def pad_widths(draw: st.DrawFn, ndim: int) -> Any:
    form = draw(st.sampled_from(["int", "pair", "each"]))
    width = st.integers(0, 7)
    if form == "int":
        return draw(width)
    if form == "pair":
        return (draw(width), draw(width))
    return tuple((draw(width), draw(width)) for _ in range(ndim))


@given(st.data())
def test_pad(data: st.DataObject) -> None:
    x, a = data.draw(arrays(max_side=5, dtypes=[*DTYPES, np.bool_]))
    widths = data.draw(pad_widths(x.ndim))
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    kwargs: dict[str, Any] = {}
    if mode == "constant" and data.draw(st.booleans()):
        kwargs["constant_values"] = data.draw(st.sampled_from([5, (1, 2), ((1, 2),) * x.ndim, 2.5]))
    if mode in ("reflect", "symmetric") and data.draw(st.booleans()):
        kwargs["reflect_type"] = "even"
    check_like_numpy(lambda: gnp.pad(a, widths, mode, **kwargs), lambda: np.pad(x, widths, mode, **kwargs))


def test_pad_empty_mode() -> None:
    a = gnp.from_array(np.arange(6.0).reshape(2, 3), chunks=2)
    assert gnp.pad(a, 1, "empty").shape == (4, 5)


def test_pad_errors() -> None:
    a = gnp.ones((2, 3))
    with pytest.raises(ValueError, match="negative"):
        gnp.pad(a, -1)
    with pytest.raises(TypeError, match="integral"):
        gnp.pad(a, 1.5)
    with pytest.raises(ValueError):
        gnp.pad(a, ((1, 2), (3, 4), (5, 6)))
    with pytest.raises(ValueError, match="not supported"):
        gnp.pad(a, 1, "nearest")
    with pytest.raises(ValueError, match="unsupported keyword"):
        gnp.pad(a, 1, "edge", constant_values=3)
    with pytest.raises(ValueError, match="empty axis"):
        gnp.pad(gnp.ones((0, 3)), 1, "reflect")
    with pytest.raises(NotImplementedError, match="odd"):
        gnp.pad(a, 1, "reflect", reflect_type="odd")


def test_pad_fallback_modes(fresh_warnings: None) -> None:
    x = np.arange(12.0).reshape(3, 4)
    a = gnp.from_array(x, chunks=2)
    with pytest.warns(gnp.FallbackWarning, match="numpy.pad"):
        out = gnp.pad(a, 2, "mean")
    assert isinstance(out, gnp.Array) and out.backend == BACKEND
    assert_eq(out, np.pad(x, 2, "mean"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gnp.FallbackWarning)
        assert_eq(gnp.pad(a, (1, 3), "linear_ramp", end_values=5), np.pad(x, (1, 3), "linear_ramp", end_values=5))


# --- convolve -----------------------------------------------------------------------------------------


@given(st.data())
def test_convolve(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, max_dims=1, max_side=12))
    y, v = data.draw(arrays(min_dims=1, max_dims=1, max_side=6, dtypes=[x.dtype.type]))
    mode = data.draw(st.sampled_from(["full", "same", "valid"]))
    check_like_numpy(lambda: gnp.convolve(a, v, mode), lambda: np.convolve(x, y, mode), atol=1e-3)


def test_convolve_scalars_and_errors() -> None:
    assert_eq(gnp.convolve(gnp.asarray(2.0), gnp.arange(3.0)), np.convolve(2.0, np.arange(3.0)))
    with pytest.raises(ValueError, match="1-d"):
        gnp.convolve(gnp.ones((2, 2)), gnp.ones(2))
    with pytest.raises(ValueError, match="mode"):
        gnp.convolve(gnp.ones(3), gnp.ones(2), "middle")
    with pytest.raises(ValueError, match="cannot be empty"):
        gnp.convolve(gnp.ones(3), gnp.ones(0))
    with pytest.warns(gnp.PromotionWarning):
        gnp.convolve(gnp.ones(3, dtype=np.float32), gnp.ones(2, dtype=np.float64))


def test_convolve_keeps_the_long_array_split() -> None:
    a = gnp.from_array(np.arange(100.0), chunks=10)
    out = gnp.convolve(a, np.ones(5) / 5, "same")
    assert out.numblocks == (10,)
    assert_eq(out, np.convolve(np.arange(100.0), np.ones(5) / 5, "same"))


@pytest.mark.parametrize("module", [selection, tiling, matrices, differences, comparison, padding, convolution])
def test_all_exported(module) -> None:
    assert sorted(module.__all__) == sorted(
        name for name, f in vars(module).items() if callable(f) and not name.startswith("_")
        and getattr(f, "__module__", None) == module.__name__
    )
    assert all(getattr(gnp, name) is getattr(module, name) for name in module.__all__)
