"""``x[index]`` and ``x[index] = value`` against NumPy, on random shapes, chunkings and index expressions."""
from __future__ import annotations

import warnings
from typing import Any

import dask
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.api import interop as _protocols

DTYPES = [np.int64, np.float32, np.float64]


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which fallbacks have warned already (each warns once per session)."""
    monkeypatch.setattr(_protocols, "_WARNED", set())

# --- strategies ---------------------------------------------------------------------------------------


@st.composite
def chunked_arrays(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 4, max_side: int = 10,
                   shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, gnp.Array]:
    """A NumPy array of distinct values (half of them negative) and the same data as a randomly chunked
    gnp Array."""
    if shape is None:
        ndim = draw(st.integers(min_dims, max_dims))
        shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(DTYPES))
    size = int(np.prod(shape))
    x = (np.arange(size) - size // 2).astype(dtype).reshape(shape)
    chunks = tuple(draw(axis_chunks(n)) for n in shape)
    return x, gnp.from_array(x, chunks=chunks)


bounds = st.none() | st.integers(-15, 15)
steps = st.none() | st.integers(-4, 4).filter(bool)


@st.composite
def slices(draw: st.DrawFn) -> slice:
    """Slices with any start, stop and step, bounds possibly out of range."""
    return slice(draw(bounds), draw(bounds), draw(steps))


@st.composite
def axis_entry(draw: st.DrawFn, n: int, allow_int: bool = True) -> int | slice:
    """An in-range integer (possibly negative) or a slice, for an axis of length ``n``."""
    if allow_int and n > 0 and draw(st.booleans()):
        return draw(st.integers(-n, n - 1))
    return draw(slices())


@st.composite
def basic_indices(draw: st.DrawFn, shape: tuple[int, ...]) -> object:
    """A basic index: integers, slices, at most one ``...`` and a few ``None``, as a tuple or on its own."""
    ndim = len(shape)
    k = draw(st.integers(0, ndim))
    if draw(st.booleans()):
        head = draw(st.integers(0, k))
        axes = [*range(head), *range(ndim - (k - head), ndim)]
        items: list[object] = [draw(axis_entry(shape[d])) for d in axes]
        items.insert(head, Ellipsis)
    else:
        items = [draw(axis_entry(shape[d])) for d in range(k)]
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def selects_one(index: object, ndim: int) -> bool:
    """Whether ``index`` picks a single element with integers only (what allowscalar guards)."""
    items = index if isinstance(index, tuple) else (index,)
    ints = [i for i in items if isinstance(i, int) or (
        isinstance(i, np.ndarray) and i.shape == () and i.dtype.kind == "i"
    )]
    return ndim > 0 and len(ints) == ndim and all(any(i is j for j in ints) or i is Ellipsis for i in items)


def int_index_array(draw: st.DrawFn, n: int) -> np.ndarray:
    """A 1-D or 2-D integer array of valid (possibly negative) indices into an axis of length ``n``."""
    shape = draw(st.sampled_from([(0,), (1,), (3,), (6,), (2, 3), (1, 1), (3, 1), (0, 2)]))
    if n == 0:
        return np.zeros((0,) if len(shape) == 1 else (shape[0], 0), dtype=np.int64)
    values = draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return np.array(values, dtype=draw(st.sampled_from([np.int64, np.int32, np.uint8]))
                    if all(v >= 0 for v in values) else np.int64).reshape(shape)


def check_blocks(a: gnp.Array) -> None:
    """Each computed block has the shape its chunks declare and lives on the Array's backend."""
    keys = dask.core.flatten(a.__dask_keys__())
    blocks = dask.get(a.__dask_graph__(), list(keys))
    for index, block in zip(np.ndindex(a.numblocks), blocks):
        assert block.shape == tuple(c[i] for c, i in zip(a.chunks, index)), (index, block.shape, a.chunks)
        assert ("cupy" if type(block).__module__.startswith("cupy") else "numpy") == a.backend
        assert block.dtype == a.dtype


# --- basic getitem ------------------------------------------------------------------------------------


@given(st.data())
def test_basic_getitem(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    index = data.draw(basic_indices(x.shape))
    expected = x[index]
    if selects_one(index, x.ndim):
        with pytest.warns(gnp.ScalarIndexingWarning, match="allowscalar"):
            a[index]
        with gnp.allowscalar():
            out = a[index]
    else:
        out = a[index]
    assert_eq(out, expected)
    check_blocks(out)


@given(st.data())
def test_chained_basic_getitem(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=1))
    for _ in range(3):
        index = data.draw(basic_indices(x.shape))
        if selects_one(index, x.ndim):
            continue
        x, a = x[index], a[index]
    assert_eq(a, x)
    check_blocks(a)


@pytest.mark.parametrize(
    "index",
    [
        (slice(None, None, -1),), (slice(10, -20, -3), slice(None)), (slice(-100, 100), slice(5, 1)),
        (Ellipsis, slice(None, None, -2)), (None, Ellipsis, None), (1,), (-4, slice(None, None, -1)),
        (slice(None), -1), (Ellipsis,), (), (None,), (np.int64(2), slice(1, None)), (slice(2, 2),),
    ],
)
def test_basic_getitem_examples(index: tuple) -> None:
    x = np.arange(24.0).reshape(4, 6)
    a = gnp.from_array(x, chunks=(3, (2, 1, 3)))
    assert_eq(a[index], x[index])


def test_getitem_0d_and_empty() -> None:
    x = np.array(3.5)
    a = gnp.asarray(x)
    for index in [(), Ellipsis, None, (None, None), (Ellipsis, None)]:
        assert_eq(a[index], x[index])
    z = np.zeros((0, 3))
    b = gnp.from_array(z, chunks=(1, 2))
    for index in [slice(None), (slice(None), 1), (slice(None, None, -1), slice(1, None)), (None, Ellipsis)]:
        assert_eq(b[index], z[index])


# --- advanced getitem ---------------------------------------------------------------------------------


@st.composite
def advanced_indices(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple, np.ndarray]:
    """A tuple with one integer array or boolean mask (NumPy array) among integers and slices."""
    ndim = len(shape)
    pos = draw(st.integers(0, ndim - 1))
    kind = draw(st.sampled_from(["int", "mask", "mask-nd", "bool-scalar"]))
    if kind == "int":
        adv, covered = int_index_array(draw, shape[pos]), 1
    elif kind == "mask":
        adv = np.array(draw(st.lists(st.booleans(), min_size=shape[pos], max_size=shape[pos])), dtype=bool)
        covered = 1
    elif kind == "mask-nd":
        covered = draw(st.integers(1, ndim - pos))
        mshape = shape[pos : pos + covered]
        flat = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape)), max_size=int(np.prod(mshape))))
        adv = np.array(flat, dtype=bool).reshape(mshape)
    else:
        adv, covered = np.bool_(draw(st.booleans())), 0
    before = [draw(axis_entry(shape[d])) for d in range(pos)]
    after = [draw(axis_entry(shape[d])) for d in range(pos + covered, ndim)]
    after = after[: draw(st.integers(0, len(after)))]
    return (*before, adv, *after), adv


@given(st.data())
def test_advanced_getitem(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=1, max_dims=3))
    index, adv = data.draw(advanced_indices(x.shape))
    form = data.draw(st.sampled_from(["numpy", "list", "gnp"]))
    if form == "list" and adv.ndim > 0:
        index = tuple(ix.tolist() if ix is adv else ix for ix in index)
    expected = x[index]
    if form == "gnp" and adv.ndim > 0:
        index = tuple(gnp.asarray(ix) if ix is adv else ix for ix in index)
    out = a[index if len(index) > 1 or data.draw(st.booleans()) else index[0]]
    assert_eq(out, expected)
    check_blocks(out)


@given(chunked_arrays(min_dims=0, max_dims=3))
def test_getitem_with_own_mask(pair: tuple[np.ndarray, gnp.Array]) -> None:
    x, a = pair
    assert_eq(a[a > 0], x[x > 0])
    assert_eq(a[(a % 3) == 0], x[(x % 3) == 0])


@given(chunked_arrays(min_dims=1, max_dims=3))
def test_getitem_with_leading_mask(pair: tuple[np.ndarray, gnp.Array]) -> None:
    x, a = pair
    mask = x.sum(axis=tuple(range(1, x.ndim))) > 0  # one value per row: a mask on the first axis
    assert_eq(a[gnp.asarray(mask)], x[mask])
    assert_eq(a[mask, ...], x[mask, ...])


@pytest.mark.parametrize(
    "index",
    [
        ([0, -1, 2],), (slice(None), [[0, 1], [5, -6]]), (1, [[0, 1], [2, 3]]), (1, slice(None), [0, 1]),
        ([3, 3, 0], 2), (slice(None, None, -1), slice(1, None), [4, 0]), ([],), (slice(None), []),
        (np.array([True, False, True, True]),), (Ellipsis, np.array([0, 4])), (True,), (False, 1),
        (1, slice(None), True), (np.ones((4, 6), bool),), (np.arange(24).reshape(4, 6) % 5 == 0, 0),
    ],
)
def test_advanced_getitem_examples(index: tuple) -> None:
    x = np.arange(120).reshape(4, 6, 5)
    a = gnp.from_array(x, chunks=(3, (2, 1, 3), 2))
    assert_eq(a[index], x[index])


def test_getitem_zero_length_axis_with_index_array() -> None:
    x = np.zeros((0, 3))
    a = gnp.from_array(x, chunks=(1, 2))
    assert_eq(a[[]], x[[]])
    assert_eq(a[:, [0, 2]], x[:, [0, 2]])
    assert_eq(a[np.zeros(0, bool)], x[np.zeros(0, bool)])
    with pytest.raises(IndexError):
        a[[0]]


@st.composite
def pointwise_indices(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple:
    """Several advanced indices (integer arrays of broadcastable shapes, integers, masks) among slices."""
    ndim = len(shape)
    bshape = draw(st.sampled_from([(), (0,), (1,), (3,), (2, 3), (3, 1)]))
    items: list[object] = []
    d = 0
    while d < ndim:
        kind = draw(st.sampled_from(["slice", "int", "array", "mask"]))
        n = shape[d]
        if kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "array" and (n or 0 in bshape):
            sub = bshape[draw(st.integers(0, len(bshape))):]
            sub = tuple(1 if draw(st.booleans()) else s for s in sub)
            items.append(np.array(draw(st.lists(st.integers(-n, max(n - 1, -n)), min_size=int(np.prod(sub)),
                                                max_size=int(np.prod(sub)))), dtype=np.int64).reshape(sub))
        elif kind == "mask" and draw(st.booleans()):
            # exactly as many True as a 1-d index of bshape's size can broadcast with: pick from the axis
            count = draw(st.integers(0, n))
            chosen = draw(st.permutations(range(n)))[:count]
            items.append(np.isin(np.arange(n), chosen))
        else:
            items.append(draw(slices()))
        d += 1
    return tuple(items)


@given(st.data())
def test_pointwise_getitem(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=2, max_dims=4, max_side=6))
    index = data.draw(pointwise_indices(x.shape))
    try:
        expected = x[index]
    except IndexError:  # indices that don't broadcast together
        with pytest.raises(IndexError):
            a[index]
        return
    if selects_one(index, x.ndim):
        return
    out = a[index]
    assert_eq(out, expected)
    check_blocks(out)


@pytest.mark.parametrize(
    "index",
    [
        ([0, 1], [1, 2]), ([0, 3], slice(None), 1), (np.array([[0], [1]]), slice(1, 3), [0, 4]),
        (1, [0, -1], slice(None)), (slice(None), [[1], [2]], [0, 4, 3]), ([[0, 1]], 2, [3]),
        (np.array([True, False, True, False]), [5, 0]), (np.arange(24).reshape(4, 6) % 7 == 0, [1]),
        (slice(None, None, -1), np.array([True, False, True, False, True, False]), [0, 1, 2]),
        # new axes (None) and 0-d masks (True/False) next to advanced indices
        (None, [0, 2]), ([0, 1], None, 1), (Ellipsis, None, [1, 0]), (True, [0, 1]), (True, [[0], [1]]),
        (False, 1, [0]), (slice(None), False, [0]), (True, True), (False, False), (True, 1), (True, slice(None), 1),
        (slice(None), [0, 1], True), (None, True, None, [0, 1], None), (1, None, slice(None), [2, 0]),
    ],
)
def test_pointwise_getitem_examples(index: tuple, fresh_warnings: None) -> None:
    x = np.arange(120).reshape(4, 6, 5)
    a = gnp.from_array(x, chunks=(3, (2, 1, 3), 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        out = a[index]
    assert_eq(out, x[index])


def test_pointwise_getitem_errors() -> None:
    a = gnp.from_array(np.arange(120).reshape(4, 6, 5), chunks=2)
    with pytest.raises(IndexError, match="shape mismatch"):
        a[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="out of bounds"):
        a[[0, 1], :, [0, 5]]
    with pytest.raises(IndexError, match="boolean index did not match"):
        a[[0, 1], np.ones(5, bool)]




# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index, match",
    [
        (4, "out of bounds"), (-5, "out of bounds"), ((slice(None), 6), "out of bounds"),
        ((0, -7), None), (([0, 4],), "out of bounds"), ((slice(None), [-7]), "out of bounds"),
        ((0, 0, 0), "too many indices"), ((slice(None),) * 3, "too many indices"),
        ((Ellipsis, 0, 0, 0), "too many indices"), ((Ellipsis, Ellipsis), "single ellipsis"),
        (1.0, None), ((1.0, slice(None)), None), ((slice(None), 0.5), None), (np.array([1.0]), "integer"),
        ("a", None), (np.ones(3, bool), "boolean index did not match"),
        (np.ones((4, 5), bool), "boolean index did not match"),
        ((slice(None), np.ones(7, bool)), "boolean index did not match"),
        (np.ones((4, 6, 1), bool), None),
    ],
)
def test_getitem_errors(index: object, match: str | None) -> None:
    x = np.arange(24.0).reshape(4, 6)
    a = gnp.from_array(x, chunks=3)
    with pytest.raises(IndexError):
        x[index]
    with pytest.raises(IndexError, match=match):
        a[index]


def test_getitem_lazy_mask_of_wrong_shape() -> None:
    a = gnp.from_array(np.arange(24.0).reshape(4, 6), chunks=3)
    with pytest.raises(IndexError, match="boolean index did not match"):
        a[gnp.ones(5, dtype=bool)]


def test_slice_of_non_integers_is_type_error() -> None:
    x = np.arange(6)
    a = gnp.from_array(x, chunks=4)
    with pytest.raises(TypeError):
        x[1.5:3]
    with pytest.raises(TypeError):
        a[1.5:3]


# --- scalar indexing and iteration --------------------------------------------------------------------


def test_scalar_indexing_guard() -> None:
    x = np.arange(24).reshape(4, 6)
    a = gnp.from_array(x, chunks=3)
    with gnp.config.set(guards="error"), pytest.raises(gnp.ScalarIndexingError, match="allowscalar") as info:
        a[1, 2]
    assert isinstance(info.value, IndexError)
    with pytest.warns(gnp.ScalarIndexingWarning, match="allowscalar"):
        a[-1, np.int64(-2)]
    with pytest.warns(gnp.ScalarIndexingWarning):
        a[..., 1, 2]
    with pytest.warns(gnp.ScalarIndexingWarning):
        gnp.from_array(np.arange(5), chunks=2)[3]
    with gnp.allowscalar():
        out = a[1, 2]
        assert isinstance(out, gnp.Array) and out.shape == ()
        assert_eq(out, x[1, 2])
        assert out.item() == x[1, 2]
        assert_eq(a[-1, -2], x[-1, -2])
    # selecting rows, or one element through a slice or a new axis, is not scalar indexing
    assert_eq(a[1], x[1])
    assert_eq(a[1, 2:3], x[1, 2:3])
    assert_eq(a[1, None, 2], x[1, None, 2])


def test_scalar_indexing_decorator_and_config() -> None:
    x = np.arange(6.0)
    a = gnp.from_array(x, chunks=4)

    @gnp.allowscalar
    def pick(i: int) -> gnp.Array:
        return a[i]

    assert_eq(pick(4), x[4])
    with gnp.config.set(allow_scalar=True):
        assert_eq(a[-1], x[-1])
    with pytest.warns(gnp.ScalarIndexingWarning):
        a[0]


def test_iteration() -> None:
    x = np.arange(12).reshape(3, 4)
    a = gnp.from_array(x, chunks=2)
    with pytest.warns(gnp.ScalarIndexingWarning, match="allowscalar"):
        list(a)
    with pytest.warns(gnp.ScalarIndexingWarning):
        next(iter(gnp.from_array(np.arange(3), chunks=2)))
    with gnp.allowscalar():
        rows = list(a)
        assert len(rows) == 3
        for row, expected in zip(rows, x):
            assert_eq(row, expected)
        assert [r.item() for r in gnp.from_array(np.arange(3), chunks=2)] == [0, 1, 2]
    with pytest.raises(TypeError):
        iter(np.array(1.0)).__next__()
    with pytest.raises(TypeError):
        list(gnp.asarray(np.array(1.0)))


# --- setitem ------------------------------------------------------------------------------------------


@given(st.data())
def test_setitem_basic_scalar(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays())
    index = data.draw(basic_indices(x.shape))
    value = data.draw(st.sampled_from([0, -7, 2.75, True]))
    x = x.copy()
    x[index] = value
    if selects_one(index, x.ndim):
        with pytest.warns(gnp.ScalarIndexingWarning, match="allowscalar"):
            a[index] = value
        with gnp.allowscalar():
            a[index] = value
    else:
        a[index] = value
    assert_eq(a, x)
    check_blocks(a)


@given(st.data())
def test_setitem_basic_array(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=1))
    index = data.draw(basic_indices(x.shape))
    target = x[index].shape
    # a value of the target's shape, or one that broadcasts to it (leading axes dropped or added with
    # length 1, axes of length 1)
    vshape = list(target)
    if vshape and data.draw(st.booleans()):
        vshape = vshape[data.draw(st.integers(0, len(vshape))):]
    form = data.draw(st.sampled_from(["numpy", "gnp", "list"]))
    lead = data.draw(st.integers(0, 2)) if form != "list" else 0  # NumPy limits nested lists to x.ndim
    vshape = [1] * lead + [1 if s and data.draw(st.booleans()) else s for s in vshape]
    vdtype = data.draw(st.sampled_from([np.float64, np.int32, np.float32, bool]))
    value = (np.arange(int(np.prod(vshape))).reshape(vshape) * 1.5 + 100).astype(vdtype)
    operand = {"numpy": value, "gnp": gnp.from_array(value, chunks=2), "list": value.tolist()}[form]
    x = x.copy()
    try:
        x[index] = operand if form == "list" else value
    except ValueError:  # a list that lost its empty axes doesn't broadcast
        with pytest.raises(ValueError), gnp.allowscalar():
            a[index] = operand
        return
    with gnp.allowscalar():
        a[index] = operand
    assert_eq(a, x)
    check_blocks(a)


@pytest.mark.parametrize(
    "index",
    [
        (slice(None, None, -1), slice(1, None, 2)), (slice(5, 0, -2),), (1,), (-1, slice(None, None, -3)),
        (slice(None), 2), (Ellipsis, slice(2, 4)), (slice(3, 1),), (slice(None), slice(7, 9)), (Ellipsis,),
    ],
)
def test_setitem_basic_examples(index: tuple) -> None:
    x = np.arange(30).reshape(5, 6)
    a = gnp.from_array(x.copy(), chunks=((2, 3), (1, 3, 2)))
    value = -np.arange(x[index].size).reshape(x[index].shape)
    x[index] = value
    a[index] = value
    assert_eq(a, x)
    x[index] = 9.9  # float into int: truncated like NumPy
    a[index] = 9.9
    assert_eq(a, x)


def test_setitem_casts_like_numpy() -> None:
    x = np.zeros((4, 5), dtype=np.int32)
    a = gnp.from_array(x.copy(), chunks=2)
    v = np.linspace(-2.5, 2.5, 5)
    x[1:3] = v
    a[1:3] = v
    assert_eq(a, x)
    x[:, 1] = np.array([True, False, True, True])
    a[:, 1] = gnp.asarray(np.array([True, False, True, True]))
    assert_eq(a, x)
    f = np.zeros(6, dtype=np.float32)
    b = gnp.from_array(f, chunks=4)
    f[::2] = np.array([1.0e-3, 2.0, 3.25])
    b[::2] = np.array([1.0e-3, 2.0, 3.25])
    assert_eq(b, f)


def test_setitem_value_that_does_not_broadcast() -> None:
    x = np.zeros((4, 5))
    a = gnp.from_array(x, chunks=2)
    with pytest.raises(ValueError):
        x[1:3] = np.ones(3)
    with pytest.raises(ValueError):
        a[1:3] = np.ones(3)
    with pytest.raises(ValueError):
        a[1:3] = np.ones((3, 5))


def test_setitem_errors() -> None:
    a = gnp.from_array(np.zeros((4, 5)), chunks=2)
    with pytest.raises(IndexError, match="out of bounds"):
        a[4] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0] = 1.0
    with pytest.raises(IndexError):
        a[1.0] = 1.0
    with pytest.warns(gnp.ScalarIndexingWarning, match="allowscalar"):
        a[1, 2] = 1.0


def test_setitem_rebinds_and_aliases_follow() -> None:
    x = np.arange(12.0).reshape(3, 4)
    a = gnp.from_array(x.copy(), chunks=2)  # from_array keeps a reference to its input, as dask's does
    alias = a  # the same object: sees the update, as a NumPy alias does
    copy = a.copy()  # an independent Array: keeps the old values, as a NumPy copy does
    before = a[1:]  # taken before the update: keeps the old values
    xa, xc, xb = x, x.copy(), x[1:].copy()
    x[1:, ::2] = -1.0
    a[1:, ::2] = -1.0
    assert_eq(a, x)
    assert_eq(alias, xa)
    assert_eq(copy, xc)
    assert_eq(before, xb)


@given(chunked_arrays(min_dims=0, max_dims=3))
def test_setitem_own_mask_scalar(pair: tuple[np.ndarray, gnp.Array]) -> None:
    x, a = pair
    x = x.copy()
    x[x > 0] = 0
    a[a > 0] = 0
    assert_eq(a, x)
    x[x < -2] = 7.5
    a[a < -2] = 7.5
    assert_eq(a, x)
    check_blocks(a)


@given(st.data())
def test_setitem_advanced_scalar(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=1, max_dims=3))
    index, adv = data.draw(advanced_indices(x.shape))
    value = data.draw(st.sampled_from([0, -3, 1.5]))
    if data.draw(st.booleans()) and adv.ndim > 0:
        index = tuple(gnp.asarray(ix) if ix is adv else ix for ix in index)
    x = x.copy()
    x[tuple(adv if isinstance(ix, gnp.Array) else ix for ix in index)] = value
    a[index] = value
    assert_eq(a, x)
    check_blocks(a)


@given(st.data())
def test_setitem_pointwise_scalar(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=2, max_dims=3, max_side=6))
    index = data.draw(pointwise_indices(x.shape))
    x = x.copy()
    try:
        x[index] = -5
    except IndexError:
        with pytest.raises(IndexError):
            a[index] = -5
        return
    with gnp.allowscalar():
        a[index] = -5
    assert_eq(a, x)


@pytest.mark.parametrize(
    "index, value",
    [
        (([0, 2],), np.array([[1.0, 2, 3, 4, 5, 6]])), ((slice(None), [1, -1]), np.array([-1.0, -2.0])),
        ((np.array([True, False, True, False]),), np.arange(12.0).reshape(2, 6)),
        (([1, 3], slice(1, 4)), -np.arange(6.0).reshape(2, 3)),
    ],
)
def test_setitem_advanced_array_examples(index: tuple, value: object, fresh_warnings: None) -> None:
    x = np.arange(24.0).reshape(4, 6)
    a = gnp.from_array(x.copy(), chunks=(3, 4))
    x[index] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        a[index] = value
    assert_eq(a, x)


@pytest.mark.parametrize(
    "index",
    [
        ([0, 2],), ([0, 0, -1], slice(None, None, 2)), (np.array([True, False, True, False]),), ([0, 1], [2, 5]),
        (None, [1, 2]), (True, 1, [0, 5]), (slice(None), np.array([True, False, True, False, True, False])),
    ],
)
def test_setitem_native_advanced_scalar(index: tuple, fresh_warnings: None) -> None:
    x = np.arange(24.0).reshape(4, 6)
    a = gnp.from_array(x.copy(), chunks=(3, 4))
    x[index] = -1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        a[index] = -1.0
    assert_eq(a, x)


def test_setitem_one_element_needs_a_scalar() -> None:
    x = np.zeros((2, 3))
    a = gnp.from_array(x.copy(), chunks=2)
    with gnp.allowscalar():
        for value in [np.array([5.0]), [5.0], gnp.asarray(np.array([[5.0]]))]:
            with pytest.raises(ValueError):
                x[0, 1] = np.asarray(value)
            with pytest.raises(ValueError, match="sequence"):
                a[0, 1] = value
        x[0, 1, ...] = np.array([5.0])  # through an ellipsis it is broadcasting again
        a[0, 1, ...] = np.array([5.0])
        x[1, 2] = np.array(-1.0)
        a[1, 2] = np.array(-1.0)
    assert_eq(a, x)
    y = np.zeros(3)
    b = gnp.from_array(y.copy(), chunks=2)
    y[True] = np.array([1.0, 2.0, 3.0])  # a 0-d mask is not an integer
    b[True] = np.array([1.0, 2.0, 3.0])
    assert_eq(b, y)


@given(st.data())
def test_setitem_advanced_array_value(data: st.DataObject) -> None:
    x, a = data.draw(chunked_arrays(min_dims=1, max_dims=3, max_side=6))
    index, _ = data.draw(advanced_indices(x.shape) if x.ndim < 2 or data.draw(st.booleans())
                         else pointwise_indices(x.shape).map(lambda ix: (ix, None)))
    try:
        target = x[index].shape
    except IndexError:
        return
    value = np.arange(int(np.prod(target)), dtype=np.float64).reshape(target) - 50
    if data.draw(st.booleans()) and value.ndim:  # a value that broadcasts
        value = value[(slice(0, 1),) * data.draw(st.integers(1, value.ndim))]
    form = data.draw(st.sampled_from(["numpy", "gnp"]))
    x = x.copy()
    x[index] = value
    with gnp.allowscalar():
        a[index] = value if form == "numpy" else gnp.from_array(value, chunks=2)
    assert_eq(a, x)
    check_blocks(a)


# --- on a distributed cluster -------------------------------------------------------------------------


def test_indexing_on_distributed_cluster(client: object) -> None:
    x = np.arange(120.0).reshape(4, 6, 5)
    a = gnp.from_array(x, chunks=(3, (2, 1, 3), 2))
    assert a.backend == BACKEND
    index = (slice(None, None, -1), [4, 0, -1], slice(1, None, 2))
    np.testing.assert_array_equal(to_host(client.compute(a[index]).result()), x[index])
    mask = x[:, :, 0] > 30
    np.testing.assert_array_equal(to_host(client.compute(a[mask]).result()), x[mask])
    b = client.persist(a)
    y = x.copy()
    b[1:, ::2] = -1.0
    y[1:, ::2] = -1.0
    b[[0, 0], :, [1, 3]] = np.array([7.0])
    y[[0, 0], :, [1, 3]] = np.array([7.0])
    np.testing.assert_array_equal(to_host(client.compute(b).result()), y)
    np.testing.assert_array_equal(to_host(client.compute(b[1, [0, 2]]).result()), y[1, [0, 2]])


@pytest.mark.parametrize("blocks", [1024, 16384])
def test_slices_build_only_the_blocks_they_read(blocks: int) -> None:
    """A slice of an array of many blocks builds (and runs) the tasks of the blocks it reads, not one per block
    of the whole array: the graph the scheduler gets grows with the blocks read."""
    from dask.callbacks import Callback

    n = 64
    host = np.arange(blocks * n, dtype=np.float64)
    x = gnp.arange(blocks * n, chunks=n, dtype=np.float64)
    m = gnp.ones((blocks * 4, 6), chunks=(4, 3))
    cases = [
        (x[:10], host[:10], 1),
        ((gnp.exp(x / 1e6) + 1)[n - 5 : n + 5], np.exp(host[n - 5 : n + 5] / 1e6) + 1, 2),
        (x[-3:], host[-3:], 1),
        (x[:: n * (blocks // 4)], host[:: n * (blocks // 4)], 4),
        (m[5:9, 4], np.ones((blocks * 4, 6))[5:9, 4], 2),
        (gnp.ones(2**34, chunks=2**24)[:10], np.ones(10), 1),  # 128 GiB: only 10 elements are made
    ]
    for lazy, expected, blocks_read in cases:
        sizes: list[int] = []
        with Callback(start=lambda dsk: sizes.append(len(dsk))):  # noqa: B023 - used at once
            assert_eq(lazy, expected)
        assert sizes and max(sizes) <= 4 * blocks_read + 2, (sizes, blocks_read)
        assert len(dict(lazy.__dask_graph__())) <= 4 * blocks_read + 2


@pytest.mark.parametrize("index", [np.s_[5:250], np.s_[::-3], np.s_[950:20:-7], np.s_[99:101], np.s_[::100], np.s_[-1]])
def test_slices_of_created_arrays(index: Any) -> None:
    """Slicing a created array (arange, linspace, eye, random draws) computes only the region read, with the
    values of the whole array's slice."""
    a, l = gnp.arange(1000, chunks=100), gnp.linspace(-1, 1, 1000, chunks=128)
    with gnp.allowscalar():
        assert_eq(a[index], np.arange(1000)[index])
        assert_eq(l[index], np.linspace(-1, 1, 1000)[index])
    e = gnp.eye(50, chunks=20)
    assert_eq(e[3:27, 10:44:3], np.eye(50)[3:27, 10:44:3])
    r = gnp.random.default_rng(3).random((100, 30), chunks=(25, 10))
    assert_eq(r[7:61:2, ::-4], to_host(r.compute())[7:61:2, ::-4])
