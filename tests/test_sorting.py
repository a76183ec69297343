"""Sorting, searching and set functions against NumPy: sort/argsort (ascending, descending, stable, along
any axis or flattened), searchsorted, nonzero/argwhere/flatnonzero/count_nonzero and the unique family, on
random shapes (zero-size included), random chunkings, repeated values and NaNs; laziness; bad input."""
from __future__ import annotations

import math
import warnings
from typing import Any

import dask
import numpy as np
import pytest
from conftest import assert_eq, axis_chunks, to_host
from dask.callbacks import Callback
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_gpunumeric as gnp

DTYPES = [np.int32, np.int64, np.uint8, np.float32, np.float64, np.bool_]
FLOATS = [np.float32, np.float64]


# --- strategies and helpers (also used by test_statistics) ----------------------------------------------


@st.composite
def shapes(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3, max_side: int = 6) -> tuple[int, ...]:
    ndim = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))


def values(shape: tuple[int, ...], dtype: Any, seed: int, nan_fraction: float = 0.0, low: int = -3,
           high: int = 3) -> np.ndarray:
    """Small integers (many repeats) of ``dtype``, with NaNs at ``nan_fraction`` of the places for floats."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "u":
        low = max(low, 0)
    x = rng.integers(low, high + 1, size=shape).astype(dt)
    if dt.kind == "f" and nan_fraction:
        x[rng.random(shape) < nan_fraction] = np.nan
    return x


@st.composite
def arrays(draw: st.DrawFn, dtypes: list = DTYPES, min_dims: int = 0, max_dims: int = 3, max_side: int = 6,
           nans: bool = True, shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, gnp.Array]:
    """A NumPy array (repeated values, NaNs in some float arrays) and the same data randomly chunked."""
    shape = draw(shapes(min_dims, max_dims, max_side)) if shape is None else shape
    dtype = draw(st.sampled_from(dtypes))
    nan_fraction = draw(st.sampled_from([0.0, 0.3, 1.0])) if nans else 0.0
    x = values(shape, dtype, draw(st.integers(0, 2**32 - 1)), nan_fraction)
    return x, gnp.from_array(x, chunks=tuple(draw(axis_chunks(n, empty=True)) for n in shape))


def check(a: gnp.Array, expected: Any, **kwargs: Any) -> None:
    """``assert_eq``, and every computed block has the shape its chunks declare."""
    assert_eq(a, expected, **kwargs)
    blocks = dask.get(a.__dask_graph__(), list(dask.core.flatten(a.__dask_keys__())))
    for index, block in zip(np.ndindex(a.numblocks), blocks):
        assert block.shape == tuple(c[i] for c, i in zip(a.chunks, index)), (index, block.shape, a.chunks)


class TaskCounter(Callback):
    """Counts the tasks Dask runs while active (to check that building a result computes nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
        self.count += 1


def quiet(func: Any, *args: Any, **kwargs: Any) -> Any:
    """NumPy's result without its RuntimeWarnings (all-NaN slices, empty means)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return func(*args, **kwargs)


@st.composite
def axis_or_none(draw: st.DrawFn, ndim: int) -> int | None:
    if ndim == 0 or draw(st.booleans()):
        return None
    return draw(st.integers(-ndim, ndim - 1))


# --- sort / argsort ---------------------------------------------------------------------------------------


def _expected_sort(x: np.ndarray, axis: int | None, descending: bool, indices: bool) -> np.ndarray:
    """NumPy's stable sort; descending as the array API reference does (reverse, sort, reverse)."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if not descending:
        return np.argsort(x, axis=axis, kind="stable") if indices else np.sort(x, axis=axis, kind="stable")
    flipped = np.flip(x, axis=axis)
    if not indices:
        return np.flip(np.sort(flipped, axis=axis, kind="stable"), axis=axis)
    return x.shape[axis] - 1 - np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis=axis)


@given(data=st.data(), descending=st.booleans(), indices=st.booleans())
def test_sort_argsort(data: st.DataObject, descending: bool, indices: bool) -> None:
    x, a = data.draw(arrays(min_dims=1))
    axis = data.draw(axis_or_none(x.ndim))
    func = gnp.argsort if indices else gnp.sort
    check(func(a, axis=axis, descending=descending), _expected_sort(x, axis, descending, indices))


@given(data=st.data())
@settings(max_examples=10)
def test_sort_kinds_and_unstable(data: st.DataObject) -> None:
    x, a = data.draw(arrays(min_dims=1, nans=False))
    kind = data.draw(st.sampled_from([None, "quicksort", "mergesort", "heapsort", "stable", "quick", "S"]))
    assert_eq(gnp.sort(a, kind=kind), np.sort(x, kind=kind))
    assert_eq(gnp.sort(a, stable=False), np.sort(x))
    # an unstable argsort still sorts
    order = to_host(gnp.argsort(a, axis=0, stable=False).compute())
    assert_eq(np.take_along_axis(x, order, axis=0), np.sort(x, axis=0))


def test_sort_errors() -> None:
    a = gnp.from_array(np.arange(6.0).reshape(2, 3), chunks=1)
    with pytest.raises(np.exceptions.AxisError):
        gnp.sort(a, axis=2)
    with pytest.raises(np.exceptions.AxisError):
        gnp.argsort(gnp.asarray(3.0))
    with pytest.raises(ValueError, match="sort kind"):
        gnp.sort(a, kind="bogo")
    with pytest.raises(ValueError, match="order"):
        gnp.sort(a, order="f0")
    with pytest.raises(ValueError, match="kind"):
        gnp.argsort(a, kind="stable", stable=True)
    with pytest.raises(TypeError):
        gnp.sort(a, axis=1.5)


# --- searchsorted -------------------------------------------------------------------------------------


@given(data=st.data(), side=st.sampled_from(["left", "right"]), use_sorter=st.booleans())
def test_searchsorted(data: st.DataObject, side: str, use_sorter: bool) -> None:
    n = data.draw(st.integers(0, 8))
    base, a = data.draw(arrays(dtypes=[np.int64, np.float32, np.float64], shape=(n,)))
    v, b = data.draw(arrays(dtypes=[np.int32, np.float64], max_dims=2))
    if use_sorter:
        sorter = np.argsort(base, kind="stable")
        s = gnp.from_array(sorter, chunks=data.draw(axis_chunks(n)))
        expected = np.searchsorted(base, v, side=side, sorter=sorter)
        check(gnp.searchsorted(a, b, side=side, sorter=s), expected)
        check(gnp.searchsorted(a, b, side, sorter), expected)  # a host sorter, positionally
    else:
        base = np.sort(base)
        a = gnp.from_array(base, chunks=a.chunks)
        check(gnp.searchsorted(a, b, side=side), np.searchsorted(base, v, side=side))


def test_searchsorted_scalars_and_lists() -> None:
    a = gnp.from_array(np.array([1.0, 2.0, 2.0, 5.0]), chunks=3)
    assert_eq(gnp.searchsorted(a, 2.0), np.searchsorted([1.0, 2.0, 2.0, 5.0], 2.0))
    assert_eq(gnp.searchsorted(a, [0, 2, 9], side="right"),
              np.searchsorted([1.0, 2.0, 2.0, 5.0], [0, 2, 9], side="right"))


def test_searchsorted_errors() -> None:
    a = gnp.from_array(np.arange(4), chunks=2)
    with pytest.raises(ValueError, match="too deep"):
        gnp.searchsorted(gnp.ones((2, 2)), 1)
    with pytest.raises(ValueError, match="side"):
        gnp.searchsorted(a, 1, side="middle")
    with pytest.raises(ValueError, match="sorter.size"):
        gnp.searchsorted(a, 1, sorter=np.arange(3))
    with pytest.raises(TypeError, match="integers"):
        gnp.searchsorted(a, 1, sorter=np.arange(4.0))


# --- nonzero and friends ----------------------------------------------------------------------------


@given(data=st.data())
def test_nonzero_argwhere_flatnonzero(data: st.DataObject) -> None:
    x, a = data.draw(arrays())
    check(gnp.flatnonzero(a), np.flatnonzero(x))
    check(gnp.argwhere(a), np.argwhere(x))
    if x.ndim:
        got = gnp.nonzero(a)
        expected = np.nonzero(x)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            check(g, e)


@given(data=st.data(), keepdims=st.booleans())
def test_count_nonzero(data: st.DataObject, keepdims: bool) -> None:
    x, a = data.draw(arrays())
    axis = data.draw(st.one_of(axis_or_none(x.ndim), st.permutations(range(x.ndim)).map(tuple)))
    check(gnp.count_nonzero(a, axis=axis, keepdims=keepdims), np.count_nonzero(x, axis=axis, keepdims=keepdims))


def test_nonzero_errors() -> None:
    with pytest.raises(ValueError, match="0d"):
        gnp.nonzero(gnp.asarray(1.0))
    with pytest.raises(np.exceptions.AxisError):
        gnp.count_nonzero(gnp.ones((2, 3)), axis=2)


# --- unique -------------------------------------------------------------------------------------------


def _nan_mask(v: np.ndarray) -> np.ndarray:
    return np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, dtype=bool)


@given(data=st.data())
def test_unique_all_counts_inverse_values(data: st.DataObject) -> None:
    x, a = data.draw(arrays(max_side=5))
    expected = np.unique_all(x)  # NaNs distinct; NumPy uses a stable sort here, so NaN places are ordered
    got = gnp.unique_all(a)
    assert type(got).__name__ == "UniqueAllResult" and got._fields == expected._fields
    for g, e in zip(got, expected):
        check(g, e)
    check(gnp.unique_values(a), expected.values)
    values, counts = gnp.unique_counts(a)
    check(values, expected.values)
    check(counts, expected.counts)
    inverse = gnp.unique_inverse(a)
    check(inverse.values, expected.values)
    check(inverse.inverse_indices, expected.inverse_indices)


@given(data=st.data(), flags=st.tuples(st.booleans(), st.booleans(), st.booleans()), equal_nan=st.booleans())
def test_unique_numpy(data: st.DataObject, flags: tuple[bool, bool, bool], equal_nan: bool) -> None:
    x, a = data.draw(arrays(max_side=5))
    expected = np.unique(x, *flags, equal_nan=equal_nan)
    got = gnp.unique(a, *flags, equal_nan=equal_nan)
    if not any(flags):
        check(got, expected)
        return
    assert len(got) == len(expected)
    inverse_at = 1 + flags[0] if flags[1] else None
    for k, (g, e) in enumerate(zip(got, expected)):
        if k == inverse_at and not equal_nan:
            # NumPy's inverse alone comes from an unstable sort: NaN places may be permuted among NaNs
            h = to_host(g.compute())
            nan = _nan_mask(x)
            assert_eq(h[~nan], e[~nan])
            assert sorted(h[nan].tolist()) == sorted(e[nan].tolist())
        else:
            check(g, e)


def test_unique_of_many_blocks_and_errors() -> None:
    x = np.random.default_rng(0).integers(0, 50, size=400).astype(np.float64)
    x[::7] = np.nan
    a = gnp.from_array(x, chunks=13)
    for g, e in zip(gnp.unique_all(a), np.unique_all(x)):
        assert_eq(g, e)
    assert_eq(gnp.unique(a), np.unique(x))
    with pytest.raises(NotImplementedError, match="axis"):
        gnp.unique(a, axis=0)


# --- laziness -----------------------------------------------------------------------------------------


def test_lazy_and_shape_deciding_computations() -> None:
    """Functions with data-independent shapes run no task when called; the others run only the small
    computations that decide the shape."""
    x = np.array([[3.0, 0.0, 1.0], [0.0, 2.0, 2.0]])
    a = gnp.from_array(x, chunks=1)
    with TaskCounter() as counter:
        gnp.sort(a, axis=0)
        gnp.argsort(a, axis=None, descending=True)
        gnp.searchsorted(gnp.arange(5, chunks=2), a)
        gnp.count_nonzero(a, axis=1)
    assert counter.count == 0
    with TaskCounter() as counter:
        gnp.nonzero(a)
    assert 0 < counter.count <= 3 * a.npartitions  # per-block counts only
    result = gnp.unique_all(a)
    assert_eq(result.counts, np.unique_all(x).counts)
    assert math.prod(result.inverse_indices.shape) == x.size
