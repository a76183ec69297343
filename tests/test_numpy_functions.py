"""NumPy functions gnp now has natively (api/stacking.py, api/numeric.py), each against NumPy: through
``gnp.<name>`` and through NumPy's dispatch (``numpy.<name>(gnp_array)``), on several chunkings, with
NumPy's exceptions for bad input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import assert_eq, check_like_numpy

import dask_gpunumeric as gnp

RNG = np.random.default_rng(20)
M = RNG.standard_normal((6, 5))
V = RNG.standard_normal(7)
CHUNKS = [2, 3, 100]


def both(name: str, *args, chunks: int = 2, **kwargs) -> None:
    """``gnp.<name>`` and ``numpy.<name>`` on gnp Arrays give NumPy's result (or its exception)."""
    ours = [gnp.asarray(a, chunks=chunks) if isinstance(a, np.ndarray) else a for a in args]
    numpy_func = getattr(np, name)
    check_like_numpy(lambda: getattr(gnp, name)(*ours, **kwargs), lambda: numpy_func(*args, **kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)  # native: dispatch finds it
        check_like_numpy(lambda: numpy_func(*ours, **kwargs), lambda: numpy_func(*args, **kwargs))


def each(results, expected) -> None:
    assert isinstance(results, list) and len(results) == len(expected)
    for r, e in zip(results, expected):
        assert_eq(r, e)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_atleast(chunks):
    for func in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for a in (np.float64(2.0) * np.ones(()), V, M, M[None]):
            both(func, a, chunks=chunks)
        ours = getattr(gnp, func)(gnp.asarray(V, chunks=chunks), gnp.asarray(M, chunks=chunks))
        ref = getattr(np, func)(V, M)
        assert isinstance(ours, tuple) and len(ours) == 2
        for o, r in zip(ours, ref):
            assert_eq(o, r)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_stacks(chunks):
    a, b = gnp.asarray(M, chunks=chunks), gnp.asarray(M * 2, chunks=chunks)
    u, v = gnp.asarray(V, chunks=chunks), gnp.asarray(V + 1, chunks=chunks)
    assert_eq(gnp.vstack([a, b]), np.vstack([M, M * 2]))
    assert_eq(gnp.vstack((u, v)), np.vstack((V, V + 1)))
    assert_eq(gnp.hstack([a, b]), np.hstack([M, M * 2]))
    assert_eq(gnp.hstack((u, v)), np.hstack((V, V + 1)))
    assert_eq(gnp.dstack([a, b]), np.dstack([M, M * 2]))
    assert_eq(gnp.column_stack([u, v]), np.column_stack([V, V + 1]))
    assert_eq(np.vstack([a, b]), np.vstack([M, M * 2]))
    assert_eq(gnp.vstack([a, b], dtype=np.float32), np.vstack([M, M * 2], dtype=np.float32))
    assert_eq(gnp.append(a, b), np.append(M, M * 2))
    assert_eq(gnp.append(a, b, axis=1), np.append(M, M * 2, axis=1))
    with pytest.raises(ValueError):
        gnp.vstack([a, u])
    with pytest.raises(ValueError):
        np.vstack([M, V])


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("sections", [3, [1, 4], [2, 2, 9], [-2]])
def test_splits(chunks, sections):
    x = gnp.asarray(M, chunks=chunks)
    each(gnp.array_split(x, sections), np.array_split(M, sections))
    each(np.array_split(x, sections, 1), np.array_split(M, sections, 1))
    each(gnp.hsplit(x, [2]), np.hsplit(M, [2]))
    each(gnp.vsplit(x, 2), np.vsplit(M, 2))
    each(gnp.split(x, 2), np.split(M, 2))
    with pytest.raises(ValueError, match="equal division"):
        gnp.split(x, 4)
    with pytest.raises(ValueError, match="larger than 0"):
        gnp.array_split(x, 0)
    with pytest.raises(ValueError):
        gnp.vsplit(gnp.asarray(V), 2)
    each(gnp.dsplit(gnp.asarray(M[:, :, None] * np.ones(4), chunks=chunks), 2), np.dsplit(M[:, :, None] * np.ones(4), 2))


@pytest.mark.parametrize("chunks", CHUNKS)
def test_flips_and_rotations(chunks):
    cube = RNG.standard_normal((3, 4, 5))
    both("fliplr", M, chunks=chunks)
    both("flipud", M, chunks=chunks)
    both("fliplr", V, chunks=chunks)  # ValueError as NumPy
    for k in range(-1, 5):
        both("rot90", M, k, chunks=chunks)
        both("rot90", cube, k, (2, 0), chunks=chunks)
    both("rot90", M, 1, (0, 0))
    both("rot90", M, 1, (0, 5))


def test_shape_ndim_size():
    x = gnp.asarray(M, chunks=2)
    assert gnp.shape(x) == np.shape(x) == M.shape
    assert gnp.ndim(x) == np.ndim(x) == 2
    assert gnp.size(x) == np.size(x) == M.size and gnp.size(x, 1) == np.size(M, 1)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_kron(chunks):
    small = np.arange(1.0, 5.0).reshape(2, 2)
    both("kron", M, small, chunks=chunks)
    both("kron", V, small, chunks=chunks)
    both("kron", V, V[:3], chunks=chunks)
    both("kron", M, np.float64(2.0) * np.ones(()), chunks=chunks)
    both("kron", np.arange(6).reshape(2, 3), np.arange(4).reshape(2, 2), chunks=chunks)


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("offset", [-2, 0, 1, 7])
def test_diagonal_and_trace(chunks, offset):
    cube = RNG.standard_normal((4, 3, 5))
    both("diagonal", M, offset, chunks=chunks)
    both("diagonal", cube, offset, 2, 0, chunks=chunks)
    both("trace", M, offset, chunks=chunks)
    both("trace", cube, offset, 0, 2, chunks=chunks)
    both("trace", np.arange(12, dtype=np.int32).reshape(3, 4), offset, chunks=chunks)
    both("diagonal", V)
    both("diagonal", M, 0, 1, 1)


@pytest.mark.parametrize("args", [(3,), (3, 5), (4, 2, 1), (4, 4, -1), (3, None, 2)])
def test_tri_identity_logspace(args):
    assert_eq(gnp.tri(*args), np.tri(*args))
    assert_eq(gnp.tri(*args, dtype=np.int32), np.tri(*args, dtype=np.int32))
    assert_eq(gnp.identity(args[0]), np.identity(args[0]))
    assert_eq(gnp.identity(args[0], np.int8), np.identity(args[0], np.int8))
    assert_eq(gnp.logspace(0.0, args[0], 7), np.logspace(0.0, args[0], 7))
    assert_eq(gnp.logspace(1, 2, 5, False, 2.0), np.logspace(1, 2, 5, False, 2.0))
    assert_eq(gnp.logspace(0, 3, 4, dtype=np.int64), np.logspace(0, 3, 4, dtype=np.int64))


@pytest.mark.parametrize("chunks", CHUNKS)
def test_cross(chunks):
    a, b = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 3))
    both("cross", a, b, chunks=chunks)
    both("cross", a.T, b.T, axis=0, chunks=chunks)
    both("cross", a, b[0], chunks=chunks)
    both("cross", a, b.T, axisb=0, axisc=0, chunks=chunks)
    for p, q in ((a[:, :2], b), (a, b[:, :2]), (a[:, :2], b[:, :2])):  # NumPy < 2.5: deprecated; 2.5: ValueError
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            both("cross", p, q, chunks=chunks)
    both("cross", M, M)  # ValueError: vectors of length 5
    both("cross", np.arange(15, dtype=np.int32).reshape(5, 3), np.arange(3, dtype=np.int32), chunks=chunks)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_isin_and_interp(chunks):
    values = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    for test in (np.array([1, 5, 7]), np.array([], dtype=int), np.array([[9, 3], [2, 2]])):
        both("isin", values, test, chunks=chunks)
        both("isin", values, test, invert=True, chunks=chunks)
        assert_eq(gnp.isin(gnp.asarray(values, chunks=chunks), gnp.asarray(test)), np.isin(values, test))
    both("isin", M, M[0], chunks=chunks)
    table_x, table_f = np.array([0.0, 1.0, 2.5, 4.0]), np.array([1.0, -1.0, 3.0, 0.5])
    x = np.linspace(-1.0, 5.0, 13)
    both("interp", x, table_x, table_f, chunks=chunks)
    both("interp", x, table_x, table_f, -7.0, 7.0, chunks=chunks)
    both("interp", x, table_x, table_f + 1j, chunks=chunks)
    both("interp", x, table_x, table_f, period=3.0, chunks=chunks)
    both("interp", x, table_x, table_f[:3], chunks=chunks)  # ValueError as NumPy
    assert_eq(gnp.interp(gnp.asarray(x, chunks=chunks), gnp.asarray(table_x), gnp.asarray(table_f)),
              np.interp(x, table_x, table_f))


@pytest.mark.parametrize("chunks", CHUNKS)
def test_lexsort(chunks):
    first = np.array([1, 5, 1, 4, 3, 4, 4, 1])
    second = np.array([9.0, 4.0, 0.0, 4.0, 0.0, 2.0, 1.0, np.nan])
    both("lexsort", (first, second), chunks=chunks)
    both("lexsort", [second, first], chunks=chunks)
    grid = RNG.integers(0, 3, (3, 4, 5))
    both("lexsort", grid, chunks=chunks)
    both("lexsort", grid, 0, chunks=chunks)
    assert_eq(gnp.lexsort([3, 1, 2]), np.lexsort([3, 1, 2]))
    both("lexsort", (first, second[:3]))  # ValueError as NumPy


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("kth", [0, 3, -1, [1, 4]])
def test_partition(chunks, kth):
    data = RNG.integers(0, 10, (5, 6)).astype(np.float64)
    x = gnp.asarray(data, chunks=chunks)
    for axis in (-1, 0, None):
        ours = gnp.fetch(np.partition(x, kth, axis=axis))
        order = gnp.fetch(gnp.argpartition(x, kth, axis=axis))
        flat = data if axis is not None else data.ravel()
        np.testing.assert_array_equal(np.take_along_axis(flat, order, axis=-1 if axis is None else axis), ours)
        ref = np.partition(data, kth, axis=axis)
        # NumPy's contract, on the partitioned axis moved last: the kth element in its sorted place,
        # nothing greater before it, nothing smaller after
        ours_last = np.moveaxis(ours, 0 if axis is None else axis, -1)
        ref_last = np.moveaxis(ref, 0 if axis is None else axis, -1)
        for k in np.atleast_1d(kth) % ours_last.shape[-1]:
            np.testing.assert_array_equal(ours_last[..., k], ref_last[..., k])
            assert (ours_last[..., :k] <= ours_last[..., k:k + 1]).all()
            assert (ours_last[..., k + 1:] >= ours_last[..., k:k + 1]).all()
    with pytest.raises(ValueError, match="out of bounds"):
        gnp.partition(x, 6)
    with pytest.raises(ValueError):
        np.partition(data, 6)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_apply_along_axis(chunks):
    cube = RNG.standard_normal((3, 4, 5))
    both("apply_along_axis", np.sum, 0, M, chunks=chunks)
    both("apply_along_axis", np.cumsum, 1, M, chunks=chunks)
    both("apply_along_axis", lambda v, p: v[::2] ** p, 2, cube, 2, chunks=chunks)
    both("apply_along_axis", np.max, -1, cube, chunks=chunks)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_vander_polyval_polyfit(chunks):
    x = np.linspace(-1.0, 1.0, 40)
    y = 3.0 * x**3 - 2.0 * x + 0.5 + 0.01 * np.cos(40 * x)
    both("vander", x, chunks=chunks)
    both("vander", x, 5, True, chunks=chunks)
    both("vander", np.arange(5, dtype=np.int32), chunks=chunks)
    both("vander", M)  # ValueError as NumPy
    coef = np.array([2.0, -1.0, 0.5])
    both("polyval", coef, x, chunks=chunks)
    both("polyval", np.array([3, 0, 1]), np.arange(6), chunks=chunks)
    assert_eq(gnp.polyval(gnp.asarray(coef), gnp.asarray(x, chunks=chunks)), np.polyval(coef, x))
    for deg in (1, 3, 5):
        check_like_numpy(lambda: gnp.polyfit(gnp.asarray(x, chunks=chunks), gnp.asarray(y, chunks=chunks), deg),
                         lambda: np.polyfit(x, y, deg), rtol=1e-8, atol=1e-12)
    both_y = np.stack([y, 2 * y], axis=1)
    check_like_numpy(lambda: gnp.polyfit(gnp.asarray(x, chunks=chunks), gnp.asarray(both_y, chunks=chunks), 2),
                     lambda: np.polyfit(x, both_y, 2), rtol=1e-8, atol=1e-12)
    w = np.linspace(1.0, 2.0, 40)
    check_like_numpy(lambda: gnp.polyfit(gnp.asarray(x, chunks=chunks), gnp.asarray(y, chunks=chunks), 2, w=w),
                     lambda: np.polyfit(x, y, 2, w=w), rtol=1e-8, atol=1e-12)
    ours = gnp.polyfit(gnp.asarray(x, chunks=chunks), y, 2, full=True)
    ref = np.polyfit(x, y, 2, full=True)
    assert_eq(ours[0], ref[0], rtol=1e-8, atol=1e-12)
    assert_eq(ours[1], ref[1], rtol=1e-6)
    assert ours[2] == ref[2] and ours[4] == ref[4]
    assert_eq(ours[3], ref[3], rtol=1e-8)
    for bad in (lambda m: m.polyfit(x, y, -1), lambda m: m.polyfit(M, M, 1), lambda m: m.polyfit(x, y[:3], 1)):
        check_like_numpy(lambda: bad(gnp), lambda: bad(np))


SPECIAL = np.array([1.5, -np.inf, np.nan, np.inf, -0.0, 2.0, -3.0])
COMPLEX = np.array([1 + 2j, -1 - 0.5j, 3 + 0j, -2j])


@pytest.mark.parametrize("chunks", CHUNKS)
def test_predicates_and_small_helpers(chunks):
    for name in ("isposinf", "isneginf", "iscomplex", "isreal", "nan_to_num", "angle", "ediff1d", "copy"):
        both(name, SPECIAL, chunks=chunks)
    for name in ("iscomplex", "isreal", "angle", "isposinf"):  # isposinf: TypeError for complex, as NumPy
        both(name, COMPLEX, chunks=chunks)
    both("angle", COMPLEX, True, chunks=chunks)
    both("angle", np.arange(-3, 3, dtype=np.int32), chunks=chunks)
    both("nan_to_num", SPECIAL.astype(np.float32), nan=-1.0, posinf=9.0, chunks=chunks)
    both("nan_to_num", np.arange(5), chunks=chunks)
    both("ediff1d", M, [7.0], np.array([-1.0, -2.0]), chunks=chunks)
    both("ediff1d", np.arange(5), None, [0.5], chunks=chunks)  # TypeError: float into int, as NumPy
    assert gnp.iscomplexobj(gnp.asarray(COMPLEX)) is True and gnp.isrealobj(gnp.asarray(SPECIAL)) is True


@pytest.mark.parametrize("chunks", CHUNKS)
def test_products_and_axes(chunks):
    cube = RNG.standard_normal((3, 4, 5))
    both("inner", M, RNG.standard_normal((2, 5)), chunks=chunks)
    both("inner", V, V, chunks=chunks)
    both("inner", cube, M, chunks=chunks)
    both("inner", M, M.T)  # ValueError, as NumPy
    both("vdot", COMPLEX, COMPLEX[::-1], chunks=chunks)
    both("vdot", M, M, chunks=chunks)
    both("diagflat", M[:2, :2], 1, chunks=chunks)
    for axis, start in ((2, 0), (0, 3), (1, -1), (2, 2), (0, 5)):
        both("rollaxis", cube, axis, start, chunks=chunks)


@pytest.mark.parametrize("m", [0, 1, 2, 7, 12])
def test_windows_and_index_grids(m):
    for name in ("hamming", "hanning", "blackman", "bartlett"):
        assert_eq(getattr(gnp, name)(m), getattr(np, name)(m), rtol=1e-14, atol=1e-15)
    assert_eq(gnp.indices((2, m)), np.indices((2, m)))
    for ours, ref in zip(gnp.indices((3, m), sparse=True), np.indices((3, m), sparse=True)):
        assert_eq(ours, ref)
    for func in ("tril_indices", "triu_indices"):
        for ours, ref in zip(getattr(gnp, func)(m, 1), getattr(np, func)(m, 1)):
            assert_eq(ours, ref)
    for ours, ref in zip(gnp.diag_indices(m, 3), np.diag_indices(m, 3)):
        assert_eq(ours, ref)


def test_array_constructors_and_dtype_utilities():
    assert_eq(gnp.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]]))
    assert_eq(gnp.array(5.0, ndmin=2), np.array(5.0, ndmin=2))
    assert_eq(gnp.array([1, 2], dtype=np.float32), np.array([1, 2], dtype=np.float32))
    assert_eq(gnp.asanyarray([1.0]), np.asanyarray([1.0]))
    assert_eq(gnp.ascontiguousarray(3), np.ascontiguousarray(3))
    x = gnp.asarray(np.ones(3, np.float32))
    assert gnp.common_type(x, gnp.asarray(np.ones(2))) is np.common_type(np.ones(3, np.float32), np.ones(2))
    assert gnp.promote_types(np.int8, np.uint8) == np.promote_types(np.int8, np.uint8)
    assert gnp.broadcast_shapes((2, 1), (3,)) == (2, 3) and gnp.issubdtype(x.dtype, np.floating)
