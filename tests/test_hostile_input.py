"""Hostile and odd input against NumPy: index expressions of every kind, valid or not (slices with any
bounds and steps, negative and out-of-range integers, ``...`` (also twice), ``None``, integer and boolean
arrays of any shape and values, lists, floats, too many indices) on odd arrays (0-d, zero-size axes,
zero-length and one-element blocks, uneven chunks, up to 32 axes); and elementwise work and reductions on
the same arrays. We give NumPy's result, or raise the exception NumPy raises; on NumPy and CuPy blocks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from conftest import assert_eq, axis_chunks, check_like_numpy


@st.composite
def odd_arrays(draw: st.DrawFn) -> tuple[np.ndarray, gnp.Array]:
    """NumPy data and the same as a gnp Array: mostly up to 4 axes of length 0 to 7, sometimes many axes
    (up to 32, most of length 1); chunks uneven, with zero-length or one-element blocks now and then."""
    if draw(st.integers(0, 9)) == 0:
        ndim = draw(st.integers(8, 32))
        shape = [1] * ndim
        for d in draw(st.lists(st.integers(0, ndim - 1), max_size=3)):
            shape[d] = draw(st.integers(0, 3))
    else:
        shape = draw(st.lists(st.integers(0, 7), max_size=4))
    dtype = draw(st.sampled_from([np.int64, np.float32, np.float64, np.bool_]))
    size = int(np.prod(shape))
    x = ((np.arange(size) * 7 % 11) - 5).astype(dtype).reshape(shape)
    style = draw(st.sampled_from(["random", "ones", "whole"]))
    if style == "ones":  # one-element blocks (where the number of blocks stays small)
        chunks = tuple(1 if n <= 4 else n for n in shape)
    elif style == "whole":
        chunks = tuple(max(n, 1) for n in shape)
    else:  # zero-length blocks on few axes only: their number multiplies over the axes
        chunks = tuple(draw(axis_chunks(n, empty=len(shape) <= 4)) for n in shape)
    return x, gnp.from_array(x, chunks=chunks)


@st.composite
def integers(draw: st.DrawFn, n: int) -> int:
    """Integers for an axis of length ``n``: mostly in range (negative ones too), now and then out of it."""
    if n and draw(st.integers(0, 5)):
        return draw(st.integers(-n, n - 1))
    return draw(st.integers(-n - 3, -n - 1) | st.integers(n, n + 2))


@st.composite
def index_arrays(draw: st.DrawFn, n: int) -> object:
    """Integer arrays or boolean masks (mostly of the axis' length), as NumPy arrays or lists."""
    if draw(st.booleans()):
        length = draw(st.sampled_from([n, n, n, n + 1, max(n - 1, 0), 0]))
        out = np.array(draw(st.lists(st.booleans(), min_size=length, max_size=length)), dtype=bool)
    else:
        shape = draw(st.sampled_from([(0,), (1,), (3,), (2, 2), (1, 3)]))
        values = draw(st.lists(integers(n), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        out = np.array(values, dtype=np.int64).reshape(shape)
    return out.tolist() if out.ndim == 1 and out.size and draw(st.booleans()) else out


@st.composite
def any_index(draw: st.DrawFn, shape: tuple[int, ...]) -> object:
    """An index expression of any kind for an array of ``shape``, valid or not."""
    parts: list[object] = []
    count = draw(st.integers(0, len(shape))) if draw(st.integers(0, 4)) else len(shape) + draw(st.integers(1, 2))
    for d in range(count):  # now and then too many
        n = shape[d] if d < len(shape) else 1
        kind = draw(st.sampled_from(["int", "slice", "slice", "array", "array", "none", "ellipsis", "other"]))
        if kind == "int":
            parts.append(draw(integers(n) | st.builds(np.int32, st.integers(-n, max(n - 1, 0)))))
        elif kind == "slice":
            bound = st.none() | integers(n) | st.just(2**62)
            parts.append(slice(draw(bound), draw(bound), draw(st.none() | st.integers(-4, 4))))
        elif kind == "array":
            parts.append(draw(index_arrays(n)))
        elif kind == "none":
            parts.append(None)
        elif kind == "ellipsis":
            parts.append(Ellipsis)
        else:
            parts.append(draw(st.sampled_from([1.0, True, False, np.bool_(True), "a", slice(0.5, 2)])))
    if len(parts) == 1 and draw(st.booleans()):
        return parts[0]
    return tuple(parts)


@given(st.data())
def test_any_index_like_numpy(data: st.DataObject) -> None:
    x, a = data.draw(odd_arrays())
    index = data.draw(any_index(x.shape))
    with gnp.allowscalar():
        check_like_numpy(lambda: a[index], lambda: x[index])


@given(st.data())
def test_any_index_assignment_like_numpy(data: st.DataObject) -> None:
    x, a = data.draw(odd_arrays())
    index = data.draw(any_index(x.shape))
    value = data.draw(st.sampled_from([0, -1, 2.5, True]))

    def numpy() -> np.ndarray:
        out = x.copy()
        out[index] = value
        return out

    def ours() -> gnp.Array:
        out = gnp.asarray(a, copy=True)  # a new Array: assignment rebinds it, not ``a``
        out[index] = value
        return out

    with gnp.allowscalar():
        check_like_numpy(ours, numpy)


@given(st.data())
def test_operations_on_odd_arrays_like_numpy(data: st.DataObject) -> None:
    x, a = data.draw(odd_arrays())
    # out-of-range axes too; NumPy's ufunc reductions take axis 0 or -1 of a 0-d array (a legacy quirk of
    # theirs that its own mean() and the array API refuse): we refuse it
    axes = st.integers(-x.ndim - 1, x.ndim) if x.ndim else st.sampled_from([1, -2])
    axis = data.draw(st.none() | axes)
    numeric = x.astype(np.float64)
    b = gnp.astype(a, np.float64)
    check_like_numpy(lambda: gnp.sum(a * 2 + 1, axis=axis), lambda: np.sum(x * 2 + 1, axis=axis))
    check_like_numpy(lambda: gnp.max(a, axis=axis), lambda: np.max(x, axis=axis))
    check_like_numpy(lambda: gnp.mean(b, axis=axis), lambda: np.mean(numeric, axis=axis))
    check_like_numpy(lambda: gnp.cumsum(a, axis=axis), lambda: np.cumsum(x, axis=axis))
    assert_eq(gnp.exp(b) - b * 2, np.exp(numeric) - numeric * 2)
    assert_eq(a.reshape(-1), x.reshape(-1))
    assert_eq(gnp.transpose(a), np.transpose(x))


@pytest.mark.parametrize("byteorder", [">", "<"])
def test_data_in_either_byte_order(byteorder):
    """Big-endian data (FITS files, some stores) becomes an Array of the same values in native byte order
    (CuPy knows no other; kernels never see another), and computes like NumPy on either backend."""
    ref = np.arange(-6.0, 6.0).astype(np.dtype("f8").newbyteorder(byteorder)).reshape(3, 4)
    native = ref.astype(np.float64)
    a = gnp.from_array(ref, chunks=(2, 3))
    assert a.dtype == np.float64
    assert_eq(a[1:, ::-1], native[1:, ::-1])
    assert_eq(gnp.exp(a) * 2 - a, np.exp(ref) * 2 - ref)
    assert_eq(gnp.sum(a * a, axis=0), (ref * ref).sum(axis=0))
