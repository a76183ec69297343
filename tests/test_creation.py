"""Creating Arrays, against NumPy: from_array/asarray (every chunks form Dask takes, copy semantics),
zeros/ones/full/empty and their ``*_like``, arange, linspace, eye, dask.array round trips, bad input."""
from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp

DTYPES = ["bool", "int32", "int64", "uint8", "float32", "float64", "complex128"]


@st.composite
def shape_and_data(draw: Any, min_ndim: int = 0, max_ndim: int = 3, max_side: int = 12) -> np.ndarray:
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return (rng.standard_normal(shape) * 10).astype(dtype) if dtype.kind != "b" else rng.random(shape) < 0.5


@st.composite
def chunks_for(draw: Any, shape: tuple[int, ...]) -> Any:
    """Chunks in one of the forms Dask accepts, for ``shape``."""
    def block_len(n: int) -> int:
        return draw(st.integers(1, max(n, 1)))

    def explicit(n: int) -> tuple[int, ...]:
        if n == 0:
            return (0,)
        cuts = sorted(draw(st.lists(st.integers(1, n - 1), max_size=4, unique=True))) if n > 1 else []
        bounds = [0, *cuts, n]
        return tuple(b - a for a, b in zip(bounds, bounds[1:]))

    form = draw(st.sampled_from(["auto", "int", "ints", "tuples", "-1", "dict", "mixed", "bytes"]))
    if form == "auto":
        return "auto"
    if form == "int":
        return block_len(max(shape, default=1))
    if form == "ints":
        return tuple(block_len(n) for n in shape)
    if form == "tuples":
        return tuple(explicit(n) for n in shape)
    if form == "-1":
        return -1
    if form == "dict":
        keys = draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda k: k % len(shape))) \
            if shape else []
        return {k: block_len(shape[k]) for k in keys}
    if form == "mixed":  # per axis: an int, -1, None, "auto" or explicit lengths
        return tuple(draw(st.sampled_from([block_len(n), -1, None, "auto", explicit(n)])) for n in shape)
    return draw(st.sampled_from(["8B", "64B", "1KiB"]))


def check_chunks(a: gnp.Array, chunks: Any, shape: tuple[int, ...]) -> None:
    """``a`` is chunked as Dask chunks ``shape`` given ``chunks``, where Dask's answer is the reference:
    not for "auto" (gnp's block size differs by backend), nor for byte sizes on empty arrays (where Dask
    divides by zero; gnp makes whole axes)."""
    parts = chunks if isinstance(chunks, tuple) else (chunks,)
    assert tuple(map(sum, a.chunks)) == shape
    if "auto" in parts:
        return
    if any(isinstance(c, str) for c in parts) and 0 in shape:
        assert a.chunks == tuple((n,) for n in shape)
        return
    if isinstance(chunks, dict):  # gnp takes negative axes, as dask.array.rechunk does
        chunks = {k % len(shape): v for k, v in chunks.items()}
    assert a.chunks == da.empty(shape, chunks=chunks, dtype=a.dtype).chunks, (chunks, a.chunks)


# --- from_array -------------------------------------------------------------------------------------


@given(data=st.data())
def test_from_array_chunks(data: Any) -> None:
    x = data.draw(shape_and_data())
    chunks = data.draw(chunks_for(x.shape))
    a = gnp.from_array(x, chunks=chunks)
    assert isinstance(a, gnp.Array)
    assert a.backend == BACKEND
    check_chunks(a, chunks, x.shape)
    assert_eq(a, x)


@pytest.mark.parametrize("chunks", [0, (2, 0), (2,), (2, 2, 2), ((1, 1), (4,)), ((3,), (2, 1)), "foo", 1.5,
                                    (2, -3), ((4, -1), (4,)), ((), (4,)), -2])
def test_from_array_bad_chunks(chunks: Any) -> None:
    with pytest.raises(ValueError, match="invalid chunks"):
        gnp.from_array(np.ones((3, 4)), chunks=chunks)


def test_from_array_auto_chunks_limit() -> None:
    """"auto" follows gnp's block size, and a byte size in chunks sets it instead."""
    x = np.zeros((64, 64))
    with gnp.config.set(chunk_size="4KiB"):
        a = gnp.from_array(x)
    assert a.npartitions > 1 and max(a.chunksize) * min(a.chunksize) * 8 <= 4096
    b = gnp.from_array(x, chunks="2KiB")
    assert b.chunks == da.from_array(x, chunks="2KiB").chunks
    assert_eq(a, x)
    assert_eq(b, x)


@pytest.mark.parametrize("value", [[[1, 2], [3, 4]], [1.5, 2.5], [True, False], [1 + 2j], [], 3, 2.5, True, 1j,
                                   np.float32(1.5), np.uint8(7), np.array(4, dtype=np.int16)])
def test_from_array_python_and_scalars(value: Any) -> None:
    expected = np.asarray(value)
    for convert in (gnp.from_array, gnp.asarray):
        a = convert(value)
        assert isinstance(a, gnp.Array)
        assert_eq(a, expected)


class HasArray:
    """Not an ndarray, but convertible through ``__array__``."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)


def test_from_array_array_protocol() -> None:
    x = np.arange(10, dtype=np.int16).reshape(2, 5)
    a = gnp.from_array(HasArray(x), chunks=(1, 2))
    assert a.chunks == ((1, 1), (2, 2, 1))
    assert_eq(a, x)
    assert_eq(gnp.asarray(HasArray(x), dtype=np.float32), x.astype(np.float32))


def test_from_array_bad_data() -> None:
    with pytest.raises(ValueError):
        np.asarray([[1, 2], [3]])
    with pytest.raises(ValueError, match="cannot make an Array"):
        gnp.from_array([[1, 2], [3]])
    with pytest.raises(TypeError, match="dtype object"):
        gnp.from_array(np.array([object()]))


@pytest.mark.parametrize("dtype", ["float32", "int8", "complex128", "bool"])
def test_from_array_dtype(dtype: str) -> None:
    x = np.arange(-3, 7).reshape(2, 5)
    assert_eq(gnp.from_array(x, chunks=2, dtype=dtype), x.astype(dtype))
    assert_eq(gnp.asarray(x, dtype=dtype), np.asarray(x, dtype=dtype))


def test_from_dask_array_input() -> None:
    x = np.arange(30.0).reshape(5, 6)
    d = da.from_array(x, chunks=(2, 4)) * 2
    a = gnp.from_array(d)
    assert a.chunks == d.chunks
    assert_eq(a, x * 2)
    b = gnp.from_array(d, chunks=3)
    assert b.chunks == ((3, 2), (3, 3))
    assert_eq(b, x * 2)
    assert_eq(gnp.asarray(d), x * 2)


def test_from_gnp_array_input() -> None:
    x = np.arange(30.0).reshape(5, 6)
    g = gnp.from_array(x, chunks=(2, 4))
    assert gnp.from_array(g) is g
    h = gnp.from_array(g, chunks={1: 3})
    assert h.chunks == ((2, 2, 1), (3, 3))
    assert_eq(h, x)
    assert_eq(gnp.from_array(g, dtype=np.float32), x.astype(np.float32))


# --- asarray and copies -----------------------------------------------------------------------------


def test_asarray_returns_arrays_as_they_are() -> None:
    g = gnp.from_array(np.arange(6), chunks=2)
    assert gnp.asarray(g) is g
    assert gnp.asarray(g, copy=False) is g
    assert gnp.asarray(g, dtype=g.dtype) is g


def test_asarray_copy_true_gives_independent_arrays() -> None:
    x = np.arange(6)
    g = gnp.from_array(x, chunks=2)
    h = gnp.asarray(g, copy=True)
    assert h is not g
    with gnp.allowscalar():
        h[0] = 100
    assert_eq(g, x)
    assert_eq(h, np.r_[100, x[1:]])

    source = np.arange(5.0) + 0.5
    snap = gnp.asarray(source, copy=True)
    source[0] = -1.0
    assert_eq(snap, np.arange(5.0) + 0.5)


@pytest.mark.parametrize("make", [
    lambda: [1, 2, 3],
    lambda: np.arange(3),  # with a dtype change
    lambda: gnp.arange(3, chunks=2),  # with a dtype change
])
def test_asarray_copy_false_refuses_copies(make: Any) -> None:
    obj = make()
    dtype = None if isinstance(obj, list) else np.float64
    with pytest.raises(ValueError):
        np.asarray(obj if not isinstance(obj, gnp.Array) else np.arange(3), dtype=dtype, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        gnp.asarray(obj, dtype=dtype, copy=False)


def test_asarray_device_cpu() -> None:
    a = gnp.asarray(np.arange(4), device="cpu")
    assert a.backend == "numpy"
    assert isinstance(a.compute(), np.ndarray)
    np.testing.assert_array_equal(a.compute(), np.arange(4))


# --- zeros, ones, full, empty -----------------------------------------------------------------------


SHAPES = [3, (3,), (2, 3), (), (0, 4), np.int64(5), (np.int32(2), 2)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [None, "int32", "bool", "complex128", "float32"])
@pytest.mark.parametrize("name", ["zeros", "ones"])
def test_zeros_ones(name: str, shape: Any, dtype: Any) -> None:
    a = getattr(gnp, name)(shape, dtype=dtype, chunks=2)
    assert_eq(a, getattr(np, name)(shape, dtype=dtype))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [None, "int32", "float32"])
def test_empty(shape: Any, dtype: Any) -> None:
    a = gnp.empty(shape, dtype=dtype, chunks=2)
    expected = np.empty(shape, dtype=dtype)
    assert a.shape == expected.shape and a.dtype == expected.dtype
    out = a.compute()
    assert out.shape == expected.shape and out.dtype == expected.dtype


@pytest.mark.parametrize("fill", [2, 2.5, True, 1j, np.float32(1.5), np.uint8(3), np.int16(-4), 2**40, -0.0])
@pytest.mark.parametrize("shape", [4, (2, 3), ()])
def test_full_dtype_from_fill_value(fill: Any, shape: Any) -> None:
    assert_eq(gnp.full(shape, fill, chunks=2), np.full(shape, fill))


@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128", "bool"])
def test_full_dtype_given(dtype: str) -> None:
    assert_eq(gnp.full((3, 5), 3, dtype=dtype, chunks=(2, 2)), np.full((3, 5), 3, dtype=dtype))


@given(data=st.data())
def test_creation_chunks(data: Any) -> None:
    shape = tuple(data.draw(st.lists(st.integers(0, 12), max_size=3)))
    chunks = data.draw(chunks_for(shape))
    a = gnp.ones(shape, chunks=chunks, dtype=np.int32)
    check_chunks(a, chunks, shape)
    assert_eq(a, np.ones(shape, dtype=np.int32))


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like", "full_like"])
@pytest.mark.parametrize("style", ["function", "numpy"])
def test_like_keeps_chunks(name: str, style: str) -> None:
    x = np.arange(35, dtype=np.int16).reshape(5, 7)
    g = gnp.from_array(x, chunks=((1, 4), (3, 3, 1)))
    args = (g, 9) if name == "full_like" else (g,)
    np_args = (x, 9) if name == "full_like" else (x,)
    a = getattr(gnp if style == "function" else np, name)(*args)
    assert isinstance(a, gnp.Array)
    assert a.chunks == g.chunks and a.backend == g.backend
    expected = getattr(np, name)(*np_args)
    if name == "empty_like":
        assert a.shape == expected.shape and a.dtype == expected.dtype
        assert a.compute().shape == x.shape
    else:
        assert_eq(a, expected)
    b = getattr(gnp, name)(*args, dtype=np.float32)
    assert b.dtype == np.float32 and b.chunks == g.chunks
    c = getattr(gnp, name)(*args, shape=(2, 3))
    assert c.shape == (2, 3) and c.dtype == x.dtype


def test_like_of_non_arrays() -> None:
    assert_eq(gnp.zeros_like([[1, 2, 3]]), np.zeros_like([[1, 2, 3]]))
    assert_eq(gnp.full_like(np.arange(4.0), 2), np.full_like(np.arange(4.0), 2))


# --- arange, linspace, eye --------------------------------------------------------------------------


@given(start=st.integers(-20, 20), stop=st.integers(-20, 20) | st.none(), step=st.integers(-5, 5).filter(bool),
       chunks=st.integers(1, 6))
def test_arange_int(start: int, stop: Any, step: int, chunks: int) -> None:
    if stop is None:
        assert_eq(gnp.arange(start, chunks=chunks), np.arange(start))
    else:
        assert_eq(gnp.arange(start, stop, step, chunks=chunks), np.arange(start, stop, step))


@given(start=st.floats(-10, 10), stop=st.floats(-10, 10), step=st.floats(-3, 3).filter(lambda s: abs(s) > 0.05),
       dtype=st.sampled_from([None, "float32", "float64"]), chunks=st.integers(1, 50))
def test_arange_float(start: float, stop: float, step: float, dtype: Any, chunks: int) -> None:
    expected = np.arange(start, stop, step, dtype=dtype)
    assert_eq(gnp.arange(start, stop, step, dtype=dtype, chunks=chunks), expected, atol=1e-12 * abs(step))


@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), ((2, 9), {}), ((9, 2, -3), {}), ((5, 0), {}), ((0, 1, 0.25), {}), ((1, 5, 1.5), {}),
    ((5,), {"dtype": "float32"}), ((np.int32(4),), {}), ((np.uint8(4),), {}), ((True, 5), {}),
    ((2**40, 2**40 + 5), {}), ((0.0, 3), {}), ((3,), {"dtype": "int8"}), ((-1.5, 2.5, 0.5), {}),
    # the dtype comes from every argument, the stop of a one-argument call included
    ((40.0,), {}), ((np.float32(3),), {}), ((2, np.float32(6)), {}), ((np.int8(2), 9, np.float16(2)), {}),
])
def test_arange_cases(args: tuple, kwargs: dict) -> None:
    assert_eq(gnp.arange(*args, chunks=2, **kwargs), np.arange(*args, **kwargs))


def test_arange_step_zero() -> None:
    for args in [(0, 5, 0), (0.0, 1.0, 0.0)]:
        with pytest.raises(ZeroDivisionError):
            np.arange(*args)
        with pytest.raises(ZeroDivisionError):
            gnp.arange(*args)


@given(start=st.integers(-10, 10) | st.floats(-10, 10), stop=st.integers(-10, 10) | st.floats(-10, 10),
       num=st.integers(0, 20), endpoint=st.booleans(), dtype=st.sampled_from([None, "float32", "int64"]),
       chunks=st.integers(1, 7))
def test_linspace(start: Any, stop: Any, num: int, endpoint: bool, dtype: Any, chunks: int) -> None:
    expected = np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
    assert_eq(gnp.linspace(start, stop, num, endpoint=endpoint, dtype=dtype, chunks=chunks), expected, atol=1e-12)


def test_linspace_bad_num() -> None:
    with pytest.raises(ValueError):
        np.linspace(0, 1, -1)
    with pytest.raises(ValueError, match="must be non-negative"):
        gnp.linspace(0, 1, -1)
    with pytest.raises(TypeError):
        np.linspace(0, 1, 2.5)
    with pytest.raises(TypeError):
        gnp.linspace(0, 1, 2.5)


@given(n=st.integers(0, 12), m=st.integers(0, 12) | st.none(), k=st.integers(-14, 14),
       dtype=st.sampled_from([None, "int32", "bool", "float32"]), chunks=st.integers(1, 5))
def test_eye(n: int, m: Any, k: int, dtype: Any, chunks: int) -> None:
    assert_eq(gnp.eye(n, m, k=k, dtype=dtype, chunks=chunks), np.eye(n, m, k=k, dtype=dtype))


# --- dask.array and backends ------------------------------------------------------------------------


@given(data=st.data())
def test_dask_array_round_trip(data: Any) -> None:
    x = data.draw(shape_and_data())
    chunks = data.draw(chunks_for(x.shape))
    a = gnp.from_array(x, chunks=chunks)
    d = a.to_dask_array()
    assert isinstance(d, da.Array)
    assert d.chunks == a.chunks and d.shape == a.shape and d.dtype == a.dtype
    np.testing.assert_array_equal(to_host(d.compute()), x)
    b = gnp.from_dask_array(d)
    assert isinstance(b, gnp.Array) and b.chunks == a.chunks
    assert_eq(b, x)


def test_dask_array_operations_round_trip() -> None:
    x = np.arange(24.0).reshape(4, 6)
    d = gnp.from_array(x, chunks=(3, 4)).to_dask_array()
    e = (d.T @ d + 1).rechunk((2, 5))  # dask.array's own operations on gnp blocks
    back = gnp.from_dask_array(e)
    assert back.chunks == e.chunks
    assert_eq(back, x.T @ x + 1)
    assert_eq(gnp.from_dask_array(da.arange(10, chunks=3)), np.arange(10))


def test_dask_array_unknown_chunks() -> None:
    d = da.from_array(np.arange(10), chunks=3)
    d = d[d > 4]  # chunk lengths unknown until computed
    assert_eq(gnp.from_dask_array(d), np.arange(5, 10))


def test_to_backend_numpy() -> None:
    x = np.arange(12.0).reshape(3, 4)
    a = gnp.from_array(x, chunks=2)
    h = a.to_backend("numpy")
    assert h.backend == "numpy" and h.chunks == a.chunks
    out = h.compute()
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x)
    assert h.to_backend("numpy") is h
    assert_eq(h + 1, x + 1)


def test_dask_compute_and_persist() -> None:
    x = np.arange(10)
    a = gnp.from_array(x, chunks=3)
    (out,) = dask.compute(a)
    np.testing.assert_array_equal(to_host(out), x)
    p = a.persist()
    assert isinstance(p, gnp.Array) and p.chunks == a.chunks
    assert_eq(p, x)


# --- bad shapes -------------------------------------------------------------------------------------


BAD_SHAPES = [(-1, ValueError), ((2, -1), ValueError), (2.5, TypeError), ((2, 2.0), TypeError), ("3", TypeError),
              (None, TypeError), ((True, 2), TypeError)]


@pytest.mark.parametrize("shape, error", BAD_SHAPES)
@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "full"])
def test_bad_shape(name: str, shape: Any, error: type[Exception]) -> None:
    args = (shape, 1) if name == "full" else (shape,)
    with pytest.raises(error):
        getattr(np, name)(*args)
    with pytest.raises(error):
        getattr(gnp, name)(*args)


@pytest.mark.parametrize("args, error", [((-1,), ValueError), ((2, -1), ValueError), ((2.5,), TypeError),
                                         ((2, 2.0), TypeError)])
def test_eye_bad_shape(args: tuple, error: type[Exception]) -> None:
    with pytest.raises(error):
        np.eye(*args)
    with pytest.raises(error):
        gnp.eye(*args)
