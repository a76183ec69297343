"""Layout operations against NumPy on random shapes and chunkings: reshape, transpose and friends,
expand_dims/squeeze, broadcasting, concat/stack, flip, roll, rechunk, ravel, and random chains of them."""
from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp

DTYPES = [np.int64, np.float32, np.float64]

# --- strategies ---------------------------------------------------------------------------------------


@st.composite
def shapes(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 4, max_side: int = 10) -> tuple[int, ...]:
    ndim = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))


@st.composite
def chunked_arrays(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 4, max_side: int = 10,
                   shape: tuple[int, ...] | None = None, dtype: type | None = None) -> tuple[np.ndarray, gnp.Array]:
    """A NumPy array of distinct values and the same data as a randomly chunked gnp Array."""
    if shape is None:
        shape = draw(shapes(min_dims, max_dims, max_side))
    dtype = dtype or draw(st.sampled_from(DTYPES))
    size = math.prod(shape)
    x = (np.arange(size) - size // 2).astype(dtype).reshape(shape)
    return x, gnp.from_array(x, chunks=tuple(draw(axis_chunks(n)) for n in shape))


def check_blocks(a: gnp.Array) -> None:
    """Each computed block has the shape its chunks declare, and the Array's dtype and backend."""
    blocks = dask.get(a.__dask_graph__(), list(dask.core.flatten(a.__dask_keys__())))
    for index, block in zip(np.ndindex(a.numblocks), blocks):
        assert block.shape == tuple(c[i] for c, i in zip(a.chunks, index)), (index, block.shape, a.chunks)
        assert block.dtype == a.dtype
        assert ("cupy" if type(block).__module__.startswith("cupy") else "numpy") == a.backend


def check(a: gnp.Array, expected: np.ndarray) -> None:
    assert_eq(a, expected)
    check_blocks(a)


@st.composite
def factor_shapes(draw: st.DrawFn, size: int, max_dims: int = 5) -> tuple[int, ...]:
    """A random shape with ``size`` elements (length-1 axes included; a 0 somewhere when ``size`` is 0)."""
    if size == 0:
        dims = draw(st.lists(st.integers(0, 5), min_size=1, max_size=max_dims))
        dims[draw(st.integers(0, len(dims) - 1))] = 0
        return tuple(dims)
    dims, left = [], size
    while left > 1 and len(dims) < max_dims - 1:
        d = draw(st.sampled_from([k for k in range(1, left + 1) if left % k == 0]))
        dims.append(d)
        left //= d
    if left > 1 or draw(st.booleans()):
        dims.append(left)
    for _ in range(draw(st.integers(0, max(0, max_dims - len(dims))))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(draw(st.permutations(dims)))


# --- reshape ------------------------------------------------------------------------------------------


@given(st.data())
def test_reshape(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    shape = data.draw(factor_shapes(x.size))
    check(gnp.reshape(a, shape), x.reshape(shape))
    if shape and x.size:
        i = data.draw(st.integers(0, len(shape) - 1))
        with_unknown = (*shape[:i], -1, *shape[i + 1 :])
        check(a.reshape(with_unknown), x.reshape(with_unknown))
    check(a.reshape(*shape) if shape else a.reshape(()), x.reshape(shape))


@pytest.mark.parametrize(
    "shape, new",
    [
        ((4, 6), (24,)), ((4, 6), (6, 4)), ((4, 6), (2, 2, 6)), ((4, 6), (8, 3)), ((4, 6), (1, 24, 1)),
        ((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((2, 3, 4), (4, 3, 2)), ((24,), (2, 3, 4)), ((1,), ()),
        ((), (1, 1)), ((1, 1), ()), ((0, 3), (3, 0)), ((0, 3), (-1, 3)), ((3, 1, 4), (3, 4)), ((5, 7), (7, 5)),
        ((4, 6), (-1,)), ((12, 1), (1, 12)), ((4, 6), (-2, 12)),
    ],
)
def test_reshape_examples(shape: tuple, new: tuple) -> None:
    x = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    for chunks in [1, 2, 5]:
        a = gnp.from_array(x, chunks=chunks)
        check(a.reshape(new), x.reshape(new))


@pytest.mark.parametrize("new", [(5, 5), (25,), (-1, -1), (0, -1), (7, -1), (-2, -3), (-2, 5), (4, 6, 2)])
def test_reshape_bad_shape(new: tuple) -> None:
    x = np.arange(24).reshape(4, 6)
    a = gnp.from_array(x, chunks=3)
    with pytest.raises(ValueError):
        x.reshape(new)
    with pytest.raises(ValueError):
        a.reshape(new)


def test_reshape_zero_size_unknown_axis() -> None:
    x = np.zeros((0, 3))
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(ValueError):
        x.reshape(0, -1)
    with pytest.raises(ValueError):
        a.reshape(0, -1)
    check(a.reshape(3, -1), x.reshape(3, -1))


def test_reshape_large_chunked_keeps_blocks() -> None:
    x = np.arange(6 * 8 * 10).reshape(6, 8, 10)
    a = gnp.from_array(x, chunks=(2, 4, 5))
    out = a.reshape(48, 10)
    check(out, x.reshape(48, 10))
    assert out.numblocks[0] > 1  # reshape does not collapse the array into one block
    check(a.reshape(6, 80), x.reshape(6, 80))
    check(a.reshape(-1).reshape(10, 48), x.reshape(-1).reshape(10, 48))


# --- ravel / flatten ----------------------------------------------------------------------------------


@given(chunked_arrays())
def test_ravel_flatten(pair: tuple[np.ndarray, gnp.Array]) -> None:
    x, a = pair
    check(gnp.ravel(a), np.ravel(x))
    check(a.ravel(), x.ravel())
    check(a.flatten(), x.flatten())
    check(np.ravel(a), np.ravel(x))


# --- axes ---------------------------------------------------------------------------------------------


@given(st.data())
def test_transpose_family(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    signed = tuple(p - x.ndim if data.draw(st.booleans()) else p for p in perm)
    check(gnp.permute_dims(a, signed), np.permute_dims(x, signed))
    check(gnp.transpose(a, perm), np.transpose(x, perm))
    check(a.transpose(perm), x.transpose(perm))
    check(a.transpose(*perm) if perm else a.transpose(), x.transpose(*perm))
    check(gnp.transpose(a), np.transpose(x))
    check(a.T, x.T)
    check(np.transpose(a, perm), np.transpose(x, perm))
    if x.ndim >= 2:
        check(gnp.matrix_transpose(a), np.matrix_transpose(x))
        check(a.mT, x.mT)
        i, j = data.draw(st.integers(-x.ndim, x.ndim - 1)), data.draw(st.integers(-x.ndim, x.ndim - 1))
        check(gnp.swapaxes(a, i, j), np.swapaxes(x, i, j))
        check(a.swapaxes(i, j), x.swapaxes(i, j))
    if x.ndim >= 1:
        k = data.draw(st.integers(1, x.ndim))
        src = data.draw(st.permutations(range(x.ndim)))[:k]
        dst = data.draw(st.permutations(range(-x.ndim, 0)))[:k]
        check(gnp.moveaxis(a, src, dst), np.moveaxis(x, src, dst))
        check(gnp.moveaxis(a, src[0], dst[0]), np.moveaxis(x, src[0], dst[0]))


def test_axes_errors() -> None:
    x = np.zeros((2, 3, 4))
    a = gnp.from_array(x, chunks=2)
    for axes in [(0, 1), (0, 1, 1), (0, 1, 2, 3)]:
        with pytest.raises(ValueError):
            np.transpose(x, axes)
        with pytest.raises(ValueError):
            gnp.permute_dims(a, axes)
    with pytest.raises(np.exceptions.AxisError):
        np.transpose(x, (0, 1, 3))
    with pytest.raises(np.exceptions.AxisError):
        gnp.permute_dims(a, (0, 1, 3))
    with pytest.raises(np.exceptions.AxisError):
        gnp.swapaxes(a, 0, 3)
    with pytest.raises(np.exceptions.AxisError):
        gnp.moveaxis(a, 3, 0)
    with pytest.raises(ValueError):
        np.moveaxis(x, (0, 1), (0,))
    with pytest.raises(ValueError):
        gnp.moveaxis(a, (0, 1), (0,))
    with pytest.raises(ValueError):
        gnp.moveaxis(a, (0, 0), (1, 2))
    with pytest.raises(ValueError):
        np.matrix_transpose(np.zeros(3))
    with pytest.raises(ValueError):
        gnp.matrix_transpose(gnp.zeros(3))


@given(st.data())
def test_expand_dims(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(max_dims=3))
    n_new = data.draw(st.integers(1, 3))
    out_ndim = x.ndim + n_new
    axes = tuple(d - out_ndim if data.draw(st.booleans()) else d
                 for d in data.draw(st.permutations(range(out_ndim)))[:n_new])
    check(gnp.expand_dims(a, axes), np.expand_dims(x, axes))
    single = data.draw(st.integers(-x.ndim - 1, x.ndim))
    check(gnp.expand_dims(a, axis=single), np.expand_dims(x, single))
    check(np.expand_dims(a, axes), np.expand_dims(x, axes))


def test_expand_dims_errors() -> None:
    x = np.zeros((2, 3))
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(np.exceptions.AxisError):
        np.expand_dims(x, 3)
    with pytest.raises(np.exceptions.AxisError):
        gnp.expand_dims(a, 3)
    with pytest.raises(ValueError):
        np.expand_dims(x, (0, 0))
    with pytest.raises(ValueError, match="duplicate"):
        gnp.expand_dims(a, (0, 0))
    check(gnp.expand_dims(a, -3), np.expand_dims(x, -3))


@given(st.data())
def test_squeeze(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=3))
    x, a = data.draw(chunked_arrays(shape=shape))
    check(gnp.squeeze(a), np.squeeze(x))
    check(a.squeeze(), x.squeeze())
    ones = [d for d, s in enumerate(x.shape) if s == 1]
    if ones:
        axes = tuple(data.draw(st.lists(st.sampled_from(ones), min_size=1, max_size=len(ones), unique=True)))
        check(gnp.squeeze(a, axis=axes), np.squeeze(x, axis=axes))
        check(gnp.squeeze(a, axes[0] - x.ndim), np.squeeze(x, axes[0] - x.ndim))
    others = [d for d, s in enumerate(x.shape) if s != 1]
    if others:
        d = data.draw(st.sampled_from(others))
        with pytest.raises(ValueError):
            np.squeeze(x, axis=d)
        with pytest.raises(ValueError, match="size not equal to one"):
            gnp.squeeze(a, axis=d)


def test_squeeze_axis_out_of_range() -> None:
    a = gnp.from_array(np.zeros((1, 3)), chunks=2)
    with pytest.raises(np.exceptions.AxisError):
        gnp.squeeze(a, axis=2)


# --- broadcasting -------------------------------------------------------------------------------------


@st.composite
def broadcastable(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that ``shape`` broadcasts to: new leading axes, length-1 axes stretched."""
    lead = draw(st.lists(st.integers(0, 4), max_size=2))
    return (*lead, *(draw(st.integers(0, 4)) if s == 1 else s for s in shape))


@given(st.data())
def test_broadcast_to(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_dims=3, max_side=4))
    x, a = data.draw(chunked_arrays(shape=shape))
    target = data.draw(broadcastable(x.shape))
    check(gnp.broadcast_to(a, target), np.broadcast_to(x, target))
    check(np.broadcast_to(a, target), np.broadcast_to(x, target))


@pytest.mark.parametrize(
    "shape, target", [((3,), (4,)), ((2, 3), (3,)), ((2, 3), (2, 1)), ((3,), (3, 2)), ((0,), (1,))]
)
def test_broadcast_to_bad(shape: tuple, target: tuple) -> None:
    x = np.zeros(shape)
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(ValueError):
        np.broadcast_to(x, target)
    with pytest.raises(ValueError):
        gnp.broadcast_to(a, target)


def test_broadcast_to_int_shape_and_chunks() -> None:
    x = np.arange(1.0, 2.0)
    a = gnp.from_array(x, chunks=1)
    check(gnp.broadcast_to(a, 5), np.broadcast_to(x, 5))
    out = gnp.broadcast_to(gnp.from_array(np.arange(3.0), chunks=2), (4, 3), chunks=(2, 3))
    check(out, np.broadcast_to(np.arange(3.0), (4, 3)))
    assert out.chunks == ((2, 2), (3,))


@given(st.data())
def test_broadcast_arrays(data: st.DataObject) -> None:
    base = data.draw(shapes(max_dims=3, max_side=4))
    pairs = []
    for _ in range(data.draw(st.integers(1, 3))):
        # each operand: base with some axes set to 1 and some leading axes dropped
        shape = tuple(1 if data.draw(st.booleans()) else s for s in base)
        shape = shape[data.draw(st.integers(0, len(shape))):]
        pairs.append(data.draw(chunked_arrays(shape=shape)))
    outs = gnp.broadcast_arrays(*(a for _, a in pairs))
    expected = np.broadcast_arrays(*(x for x, _ in pairs))
    assert len(outs) == len(expected)
    for out, e in zip(outs, expected):
        check(out, e)


def test_broadcast_arrays_bad() -> None:
    with pytest.raises(ValueError):
        np.broadcast_arrays(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError):
        gnp.broadcast_arrays(gnp.zeros(3), gnp.zeros(4))


# --- joining ------------------------------------------------------------------------------------------


@given(st.data())
def test_concat(data: st.DataObject) -> None:
    shape = data.draw(shapes(min_dims=1, max_dims=3, max_side=6))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    pairs = []
    for _ in range(data.draw(st.integers(1, 4))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 6))
        pairs.append(data.draw(chunked_arrays(shape=tuple(s), dtype=dtype)))
    arrays, xs = [a for _, a in pairs], [x for x, _ in pairs]
    check(gnp.concat(arrays, axis=axis), np.concatenate(xs, axis=axis))
    check(gnp.concatenate(arrays, axis=axis), np.concatenate(xs, axis=axis))
    check(np.concatenate(arrays, axis=axis), np.concatenate(xs, axis=axis))
    check(gnp.concat(arrays, axis=None), np.concatenate(xs, axis=None))


def test_concat_default_axis_and_mixed_chunkings() -> None:
    x, y = np.arange(12.0).reshape(3, 4), -np.arange(8.0).reshape(2, 4)
    a = gnp.from_array(x, chunks=(2, (1, 3)))
    b = gnp.from_array(y, chunks=(1, (2, 1, 1)))
    check(gnp.concat([a, b]), np.concatenate([x, y]))
    check(gnp.concat((b, a, b)), np.concatenate((y, x, y)))
    check(gnp.concat([a.T, b.T], axis=1), np.concatenate([x.T, y.T], axis=1))


@pytest.mark.parametrize(
    "shapes_, axis",
    [([(2, 3), (2, 4)], 0), ([(2, 3), (3,)], 0), ([(2, 3), (2, 3, 1)], 1), ([(), ()], 0), ([(2, 3), (2, 3)], 2)],
)
def test_concat_bad(shapes_: list, axis: int) -> None:
    xs = [np.zeros(s) for s in shapes_]
    arrays = [gnp.asarray(x) for x in xs]
    with pytest.raises(ValueError):
        np.concatenate(xs, axis=axis)
    with pytest.raises(ValueError):
        gnp.concat(arrays, axis=axis)


def test_concat_empty_list() -> None:
    with pytest.raises(ValueError):
        np.concatenate([])
    with pytest.raises(ValueError):
        gnp.concat([])


@pytest.mark.parametrize(
    "dtypes, widens",
    [
        ((np.int32, np.float32), True), ((np.float32, np.float64), True), ((np.int32, np.int64), True),
        ((np.bool_, np.int64), False), ((np.float32, np.float32), False), ((np.int8, np.bool_, np.int8), False),
    ],
)
def test_concat_dtype_promotion(dtypes: tuple, widens: bool) -> None:
    xs = [np.arange(3).astype(d) for d in dtypes]
    arrays = [gnp.from_array(x, chunks=2) for x in xs]
    expected = np.concatenate(xs)
    if widens:
        with gnp.config.set(guards="error"), pytest.raises(gnp.PromotionError, match="allowpromotion") as info:
            gnp.concat(arrays)
        assert isinstance(info.value, TypeError)
        with gnp.allowpromotion():
            check(gnp.concat(arrays), expected)
    else:
        check(gnp.concat(arrays), expected)


@given(st.data())
def test_stack(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_dims=3, max_side=5))
    dtype = data.draw(st.sampled_from(DTYPES))
    pairs = [data.draw(chunked_arrays(shape=shape, dtype=dtype)) for _ in range(data.draw(st.integers(1, 3)))]
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    arrays, xs = [a for _, a in pairs], [x + i for i, (x, _) in enumerate(pairs)]
    arrays = [a + i for i, a in enumerate(arrays)]
    check(gnp.stack(arrays, axis=axis), np.stack(xs, axis=axis))
    check(np.stack(arrays, axis=axis), np.stack(xs, axis=axis))


def test_stack_errors() -> None:
    with pytest.raises(ValueError):
        np.stack([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError):
        gnp.stack([gnp.zeros(2), gnp.zeros(3)])
    with pytest.raises(ValueError):
        gnp.stack([])
    with pytest.raises(np.exceptions.AxisError):
        np.stack([np.zeros(2)], axis=2)
    with pytest.raises(np.exceptions.AxisError):
        gnp.stack([gnp.zeros(2)], axis=2)
    check(gnp.stack([gnp.asarray(np.array(1.0)), gnp.asarray(np.array(2.0))]), np.stack([1.0, 2.0]))


# --- flip / roll --------------------------------------------------------------------------------------


@given(st.data())
def test_flip(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    check(gnp.flip(a), np.flip(x))
    check(np.flip(a), np.flip(x))
    if x.ndim:
        d = data.draw(st.integers(-x.ndim, x.ndim - 1))
        check(gnp.flip(a, axis=d), np.flip(x, axis=d))
        axes = tuple(data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True)))
        check(gnp.flip(a, axis=axes), np.flip(x, axis=axes))


def test_flip_errors() -> None:
    a = gnp.from_array(np.zeros((2, 3)), chunks=2)
    with pytest.raises(np.exceptions.AxisError):
        gnp.flip(a, axis=2)
    with pytest.raises(ValueError):
        gnp.flip(a, axis=(0, 0))


@given(st.data())
def test_roll(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    shift = data.draw(st.integers(-25, 25))
    check(gnp.roll(a, shift), np.roll(x, shift))
    check(np.roll(a, shift), np.roll(x, shift))
    if x.ndim:
        axes = tuple(data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=3)))
        shifts = tuple(data.draw(st.lists(st.integers(-25, 25), min_size=len(axes), max_size=len(axes))))
        check(gnp.roll(a, shifts, axis=axes), np.roll(x, shifts, axis=axes))
        check(gnp.roll(a, shift, axis=axes), np.roll(x, shift, axis=axes))
        check(gnp.roll(a, shift, axis=axes[0]), np.roll(x, shift, axis=axes[0]))


def test_roll_errors() -> None:
    x = np.zeros((2, 3))
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(ValueError):
        np.roll(x, (1, 2), axis=(0, 1, 1))
    with pytest.raises(ValueError):
        gnp.roll(a, (1, 2), axis=(0, 1, 1))
    with pytest.raises(np.exceptions.AxisError):
        gnp.roll(a, 1, axis=2)


# --- rechunk ------------------------------------------------------------------------------------------


@st.composite
def chunk_specs(draw: st.DrawFn, shape: tuple[int, ...]) -> object:
    """Every form of chunks: an int, a block shape (with -1/None per axis), explicit tuples, a dict,
    -1, "auto" or a byte size."""
    kind = draw(st.sampled_from(["int", "blockshape", "explicit", "dict", "minus-one", "auto", "bytes"]))
    if kind == "int":
        return draw(st.integers(1, 6))
    if kind == "blockshape":
        return tuple(draw(st.sampled_from([-1, None, 1, 2, 3, 7])) for _ in shape)
    if kind == "explicit":
        return tuple(draw(axis_chunks(n)) for n in shape)
    if kind == "dict":
        if not shape:
            return {}
        axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), max_size=2,
                             unique_by=lambda d: d % len(shape)))
        return {d: draw(st.sampled_from([-1, 1, 2, 4])) for d in axes}
    if kind == "minus-one":
        return -1
    if kind == "auto":
        return "auto"
    return draw(st.sampled_from(["16B", "64B", "1KiB"]))


def _expected_chunks(spec: object, a: gnp.Array) -> tuple[tuple[int, ...], ...] | None:
    """The chunks dask.array's rechunk gives for a fixed spec or a byte size (None for "auto", which depends
    on each library's block size setting, and for byte sizes of empty arrays, which Dask can't divide)."""
    if spec == "auto" or isinstance(spec, str) and 0 in a.shape:
        return None
    return da.zeros(a.shape, chunks=a.chunks, dtype=a.dtype).rechunk(spec).chunks


@given(st.data())
def test_rechunk(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    spec = data.draw(chunk_specs(x.shape))
    out = a.rechunk(spec)
    check(out, x)
    check(gnp.rechunk(a, spec), x)
    expected = _expected_chunks(spec, a)
    if expected is not None:  # byte sizes too: irregular chunks may keep blocks over the size, as in Dask
        assert out.chunks == expected, (spec, out.chunks, expected)
    for c, n in zip(out.chunks, x.shape):
        assert sum(c) == n


def test_rechunk_bad() -> None:
    a = gnp.from_array(np.zeros((4, 6)), chunks=3)
    with pytest.raises(ValueError):
        a.rechunk(((1, 2), (6,)))
    with pytest.raises(ValueError):
        a.rechunk(((4,),))


# --- a random chain of layout operations --------------------------------------------------------------


def _ops(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[str, object]:
    """One layout operation applicable to an array of ``shape``, as (name, parameters)."""
    ndim = len(shape)
    names = ["reshape", "ravel", "expand_dims", "flip", "roll", "rechunk", "concat", "stack", "broadcast_to"]
    if ndim:
        names += ["transpose", "moveaxis", "getitem"]
    if ndim >= 2:
        names += ["swapaxes", "matrix_transpose"]
    if 1 in shape:
        names.append("squeeze")
    name = draw(st.sampled_from(names))
    if name == "reshape":
        return name, draw(factor_shapes(math.prod(shape), max_dims=4))
    if name == "expand_dims":
        return name, draw(st.integers(-ndim - 1, ndim))
    if name == "flip":
        return name, draw(st.none() | st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(tuple)) \
            if ndim else None
    if name == "roll":
        return name, (draw(st.integers(-12, 12)), draw(st.none() | st.integers(-ndim, ndim - 1)) if ndim else None)
    if name == "rechunk":
        return name, tuple(draw(axis_chunks(n)) for n in shape)
    if name in ("concat", "stack"):
        return name, draw(st.integers(-ndim, ndim - 1)) if ndim else 0
    if name == "broadcast_to":
        return name, draw(broadcastable(shape))
    if name == "transpose":
        return name, tuple(draw(st.permutations(range(ndim))))
    if name == "moveaxis":
        return name, (draw(st.integers(0, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if name == "getitem":
        return name, tuple(slice(draw(st.none() | st.integers(-6, 6)), draw(st.none() | st.integers(-6, 6)),
                                 draw(st.sampled_from([None, 1, 2, -1, -3]))) for _ in range(ndim))
    if name == "swapaxes":
        return name, (draw(st.integers(0, ndim - 1)), draw(st.integers(0, ndim - 1)))
    if name == "squeeze":
        return name, shape.index(1)
    return name, None


def _apply(name: str, params: object, v: object, ns: object) -> object:
    """Apply the operation through namespace ``ns`` (numpy or gnp) to ``v``."""
    if name == "reshape":
        return ns.reshape(v, params)
    if name == "ravel":
        return ns.ravel(v)
    if name == "expand_dims":
        return ns.expand_dims(v, params)
    if name == "flip":
        return ns.flip(v, axis=params)
    if name == "roll":
        return ns.roll(v, params[0], axis=params[1])
    if name == "rechunk":
        return v.rechunk(params) if ns is gnp else v
    if name == "concat":
        return ns.concatenate([v, ns.flip(v)], axis=params) if v.ndim else ns.stack([v, v])
    if name == "stack":
        return ns.stack([v, -v], axis=params)
    if name == "broadcast_to":
        return ns.broadcast_to(v, params)
    if name == "transpose":
        return ns.transpose(v, params)
    if name == "moveaxis":
        return ns.moveaxis(v, *params)
    if name == "getitem":
        return v[params]
    if name == "swapaxes":
        return ns.swapaxes(v, *params)
    if name == "matrix_transpose":
        return ns.matrix_transpose(v)
    return ns.squeeze(v, axis=params)


@given(st.data())
def test_random_layout_chain(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(max_dims=3, max_side=6))
    steps = []
    for _ in range(data.draw(st.integers(1, 5))):
        if x.size > 2000:
            break
        name, params = _ops(data.draw, x.shape)
        steps.append((name, params))
        x, a = _apply(name, params, x, np), _apply(name, params, a, gnp)
        assert a.shape == x.shape, (steps, a.shape, x.shape)
    check(a, x)


# --- on a distributed cluster -------------------------------------------------------------------------


def test_layout_on_distributed_cluster(client: object) -> None:
    x = np.arange(120.0).reshape(4, 6, 5)
    a = gnp.from_array(x, chunks=(3, (2, 1, 3), 2))
    out = gnp.roll(gnp.concat([a, gnp.flip(a, axis=0)], axis=1).reshape(8, 30).T, 7, axis=0)
    expected = np.roll(np.concatenate([x, np.flip(x, axis=0)], axis=1).reshape(8, 30).T, 7, axis=0)
    assert out.backend == BACKEND
    np.testing.assert_array_equal(to_host(client.compute(out).result()), expected)
    persisted = client.persist(out.rechunk((5, 3)))
    assert persisted.chunks == ((5,) * 6, (3, 3, 2))
    moved = gnp.moveaxis(persisted.reshape(2, 15, 8), 0, -1)
    expected = np.moveaxis(expected.reshape(2, 15, 8), 0, -1)
    np.testing.assert_array_equal(to_host(client.compute(moved).result()), expected)
