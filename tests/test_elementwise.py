"""Elementwise functions, operators, broadcasting over misaligned chunks, NEP 50 dtype rules and the
promotion guard, all checked against NumPy."""
from __future__ import annotations

import concurrent.futures
import operator

import numpy as np
import pytest
from conftest import assert_eq, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.api.elementwise import _BINARY, _UNARY, FUNCTIONS

DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.float32, np.float64, np.complex128]
INT_DTYPES = [np.int8, np.int32, np.int64, np.uint8]
FLOAT_DTYPES = [np.float32, np.float64]


# --- data -------------------------------------------------------------------------------------------------

class Domain:
    """Where inputs are drawn from: a float interval (real parts of complex numbers too) and an integer
    interval (clipped to the dtype), optionally without zeros (divisors)."""

    def __init__(self, lo: float = -4.0, hi: float = 4.0, ilo: int = -10, ihi: int = 10, nonzero: bool = False):
        self.lo, self.hi, self.ilo, self.ihi, self.nonzero = lo, hi, ilo, ihi, nonzero


DEFAULT = Domain()
POSITIVE = Domain(0.1, 10.0, 1, 10)
NONZERO = Domain(nonzero=True)
UNARY_DOMAINS = {
    **dict.fromkeys(["log", "log2", "log10", "sqrt"], POSITIVE),
    "log1p": Domain(-0.5, 10.0, 0, 10),
    **dict.fromkeys(["acosh", "arccosh"], Domain(1.0, 10.0, 1, 10)),
    **dict.fromkeys(["asin", "acos", "arcsin", "arccos"], Domain(-0.95, 0.95, -1, 1)),
    **dict.fromkeys(["atanh", "arctanh"], Domain(-0.9, 0.9, 0, 0)),
    **dict.fromkeys(["exp", "expm1", "exp2", "cosh", "sinh"], Domain(-5.0, 5.0, -5, 5)),
    "tan": Domain(-1.2, 1.2, -1, 1),
    "reciprocal": Domain(0.5, 5.0, 1, 5, nonzero=True),
}
BINARY_DOMAINS = {  # name -> (domain of x1, domain of x2)
    **dict.fromkeys(["divide", "true_divide", "floor_divide", "remainder", "mod", "fmod"], (DEFAULT, NONZERO)),
    **dict.fromkeys(["pow", "power", "float_power"], (Domain(0.5, 3.0, 0, 3), Domain(0.0, 3.0, 0, 3))),
    **dict.fromkeys(
        ["bitwise_left_shift", "bitwise_right_shift", "left_shift", "right_shift"], (DEFAULT, Domain(0, 6, 0, 6))
    ),
    "ldexp": (DEFAULT, Domain(-3.0, 3.0, -3, 3)),
}


def make_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type, domain: Domain = DEFAULT) -> np.ndarray:
    """Random values of ``dtype`` inside ``domain``."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        out = rng.random(shape) < 0.5
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(domain.ilo, info.min), min(domain.ihi, info.max)
        out = rng.integers(lo, max(lo, hi) + 1, size=shape).astype(dtype)
    else:
        out = rng.uniform(domain.lo, domain.hi, size=shape)
        if dtype.kind == "c":
            out = out + 1j * rng.uniform(-1.0, 1.0, size=shape)
        out = out.astype(dtype)
    out = np.asarray(out)
    if domain.nonzero:
        out[out == 0] = 1
    return out


def tolerance(dtype: np.dtype) -> dict:
    """Comparison tolerances for a result dtype: tight, with a small absolute part for values near 0."""
    atol = {"float16": 1e-3, "float32": 1e-6, "complex64": 1e-6}.get(np.dtype(dtype).name, 1e-12)
    return {"atol": atol} if np.dtype(dtype).kind in "fc" else {}


def numpy_result(func, *args, **kwargs):  # noqa: ANN001, ANN201
    """NumPy's result, or the TypeError it raises (returned, not raised)."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(func(*args, **kwargs))
    except TypeError as e:
        return e


def check(func, np_func, np_args: list, gnp_args: list, **kwargs) -> None:  # noqa: ANN001
    """gnp gives NumPy's values and dtype, or a TypeError where NumPy raises one."""
    expected = numpy_result(np_func, *np_args, **kwargs)
    if isinstance(expected, TypeError):
        with pytest.raises(TypeError):
            func(*gnp_args, **kwargs)
        return
    assert_eq(func(*gnp_args, **kwargs), expected, **tolerance(expected.dtype))


# --- shapes and chunkings -------------------------------------------------------------------------------

@st.composite
def chunkings(draw, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:  # noqa: ANN001
    """A random explicit chunking of ``shape`` (at most 4 blocks per axis)."""
    out = []
    for n in shape:
        cuts = draw(st.sets(st.integers(1, n - 1), max_size=3)) if n > 1 else set()
        bounds = [0, *sorted(cuts), n]
        out.append(tuple(b - a for a, b in zip(bounds, bounds[1:])) if n else (0,))
    return tuple(out)


shapes = st.lists(st.integers(0, 12), max_size=3).map(tuple)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def broadcastable_shapes(draw, n: int, max_size: int = 7) -> list[tuple[int, ...]]:  # noqa: ANN001
    """``n`` shapes of different ndim that broadcast together, some axes of length 1."""
    full = draw(st.lists(st.integers(0, max_size), max_size=3))
    out = []
    for _ in range(n):
        ndim = draw(st.integers(0, len(full)))
        tail = full[len(full) - ndim:]
        out.append(tuple(1 if draw(st.integers(0, 3)) == 0 else s for s in tail))
    return out


def chunked(data, np_array: np.ndarray) -> gnp.Array:  # noqa: ANN001
    """``np_array`` as an Array with a chunking drawn by hypothesis."""
    return gnp.from_array(np_array, chunks=data.draw(chunkings(np_array.shape)))


def supported(name: str, dtypes: tuple) -> bool:
    """Whether NumPy has ``name`` for operands of these dtypes."""
    return not isinstance(numpy_result(getattr(np, name), *[np.empty((0,), d) for d in dtypes]), TypeError)


# --- every function, every dtype ------------------------------------------------------------------------

def test_function_table_complete() -> None:
    # the table covers the array API 2024.12 elementwise functions and each has its NumPy counterpart
    standard = {
        "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
        "bitwise_left_shift", "bitwise_invert", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil",
        "conj", "copysign", "cos", "cosh", "divide", "equal", "exp", "expm1", "floor", "floor_divide",
        "greater", "greater_equal", "hypot", "imag", "isfinite", "isinf", "isnan", "less", "less_equal", "log",
        "log1p", "log2", "log10", "logaddexp", "logical_and", "logical_not", "logical_or", "logical_xor",
        "maximum", "minimum", "multiply", "negative", "nextafter", "not_equal", "positive", "pow", "real",
        "reciprocal", "remainder", "sign", "signbit", "sin", "sinh", "square", "sqrt", "subtract", "tan",
        "tanh", "trunc",
    }
    assert standard <= set(FUNCTIONS)
    assert {"clip", "where", "round"} <= set(dir(gnp))
    for name in FUNCTIONS:
        assert callable(getattr(np, name)), name
        assert getattr(gnp, name) is FUNCTIONS[name]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_unary_dtypes(name: str, dtype: type) -> None:
    x = make_data(np.random.default_rng(0), (5, 4), dtype, UNARY_DOMAINS.get(name, DEFAULT))
    check(getattr(gnp, name), getattr(np, name), [x], [gnp.from_array(x, chunks=(2, 3))])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(_BINARY))
def test_binary_dtypes(name: str, dtype: type) -> None:
    rng = np.random.default_rng(1)
    d1, d2 = BINARY_DOMAINS.get(name, (DEFAULT, DEFAULT))
    x1, x2 = make_data(rng, (5, 4), dtype, d1), make_data(rng, (5, 4), dtype, d2)
    check(getattr(gnp, name), getattr(np, name), [x1, x2],
          [gnp.from_array(x1, chunks=(2, 3)), gnp.from_array(x2, chunks=(3, 1))])


@pytest.mark.parametrize("name", sorted(_UNARY))
@given(data=st.data(), shape=shapes, seed=seeds)
def test_unary_shapes_and_chunks(name: str, data, shape: tuple[int, ...], seed: int) -> None:  # noqa: ANN001
    dtype = data.draw(st.sampled_from([d for d in DTYPES if supported(name, (d,))]))
    x = make_data(np.random.default_rng(seed), shape, dtype, UNARY_DOMAINS.get(name, DEFAULT))
    check(getattr(gnp, name), getattr(np, name), [x], [chunked(data, x)])


@pytest.mark.parametrize("name", sorted(_BINARY))
@given(data=st.data(), shapes=broadcastable_shapes(2), seed=seeds)
def test_binary_shapes_chunks_and_mixed_dtypes(name: str, data, shapes: list, seed: int) -> None:  # noqa: ANN001
    # operands of different ndim, length-1 axes and independent chunkings, any pair of dtypes
    dtypes = data.draw(st.tuples(st.sampled_from(DTYPES), st.sampled_from(DTYPES)))
    rng = np.random.default_rng(seed)
    d1, d2 = BINARY_DOMAINS.get(name, (DEFAULT, DEFAULT))
    x1, x2 = make_data(rng, shapes[0], dtypes[0], d1), make_data(rng, shapes[1], dtypes[1], d2)
    with gnp.allowpromotion():
        check(getattr(gnp, name), getattr(np, name), [x1, x2], [chunked(data, x1), chunked(data, x2)])


def test_numpy_ufuncs_dispatch_to_gnp() -> None:
    x = np.linspace(0.5, 3, 12).reshape(3, 4)
    a = gnp.from_array(x, chunks=(2, 3))
    for name in ("sin", "exp", "log", "add", "arctan2", "logaddexp", "left_shift"):
        ufunc = getattr(np, name)
        args = (x,) * ufunc.nin if name != "left_shift" else (x.astype(np.int32), np.int32(2))
        gargs = (a,) * ufunc.nin if name != "left_shift" else (a.astype(np.int32), np.int32(2))
        out = ufunc(*gargs)
        assert isinstance(out, gnp.Array), name
        assert_eq(out, ufunc(*args))


# --- broadcasting and chunk alignment -------------------------------------------------------------------

@given(data=st.data(), shapes=broadcastable_shapes(3), seed=seeds)
def test_three_operands_broadcast_misaligned(data, shapes: list, seed: int) -> None:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    c = make_data(rng, shapes[0], np.bool_)
    x, y = make_data(rng, shapes[1], np.float64), make_data(rng, shapes[2], np.float64)
    gc, gx, gy = chunked(data, c), chunked(data, x), chunked(data, y)
    out = gnp.where(gc, gx, gy)
    assert_eq(out, np.where(c, x, y))
    assert tuple(map(sum, out.chunks)) == out.shape
    assert_eq(gnp.clip(gx, gy, None) * gc, np.clip(x, y, None) * c)
    assert_eq((gx + gy) * gc - gx, (x + y) * c - x)


def test_misaligned_chunks_are_rechunked_to_a_common_grid() -> None:
    # per axis, operands take the chunking with the fewest blocks (the first operand's on a tie)
    x = np.arange(42.0).reshape(6, 7)
    y = np.arange(7.0)
    a = gnp.from_array(x, chunks=((2, 4), (3, 4)))
    b = gnp.from_array(x * 2, chunks=((3, 3), (7,)))
    c = gnp.from_array(y, chunks=((1, 5, 1),))
    out = a + b - c
    assert out.chunks == ((2, 4), (7,))
    assert_eq(out, x + 2 * x - y)


def test_repeated_shifted_slices_keep_the_block_count() -> None:
    u = np.arange(24.0 * 20).reshape(24, 20)
    g = gnp.from_array(u, chunks=(8, 7))
    for _ in range(4):  # a stencil written with shifted slices, applied again and again
        g = gnp.concat([g[:1], 0.25 * (g[:-2] + g[2:] + g[1:-1] * 2), g[-1:]], axis=0)
        u = np.concatenate([u[:1], 0.25 * (u[:-2] + u[2:] + u[1:-1] * 2), u[-1:]], axis=0)
    assert_eq(g, u)
    assert len(g.chunks[0]) <= 5 and g.chunks[1] == (7, 7, 6)


@pytest.mark.parametrize("shapes", [[(0,), (1,)], [(1,), (0,)], [(0, 3), (1, 3)], [(2, 1, 0), (1, 4, 1)],
                                    [(3, 0), ()]])
def test_broadcast_zero_length_axes(shapes: list) -> None:
    x1, x2 = np.ones(shapes[0]), np.full(shapes[1], 2.0)
    out = gnp.from_array(x1) + gnp.from_array(x2)
    assert tuple(map(sum, out.chunks)) == out.shape
    assert_eq(out, x1 + x2)


@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2, 3), (3, 2)], [(5, 1, 2), (4, 3)]])
def test_shapes_that_do_not_broadcast(shapes: list) -> None:
    with pytest.raises(ValueError):
        np.ones(shapes[0]) + np.ones(shapes[1])
    a, b = gnp.ones(shapes[0]), gnp.ones(shapes[1])
    with pytest.raises(ValueError, match="could not be broadcast"):
        a + b
    with pytest.raises(ValueError, match="could not be broadcast"):
        gnp.where(True, a, b)


def test_zero_d_operands() -> None:
    x = np.arange(1.0, 13.0).reshape(3, 4)
    a = gnp.from_array(x, chunks=(2, 3))
    s = gnp.sum(a)
    assert s.ndim == 0
    assert_eq(s * a, x.sum() * x)
    assert_eq(a / s, x / x.sum())
    assert_eq(s + s, np.asarray(2 * x.sum()))
    assert_eq(gnp.where(a > 6, s, -s), np.where(x > 6, x.sum(), -x.sum()))
    z = gnp.from_array(np.array(2.5))
    assert_eq(z * a, 2.5 * x)
    assert_eq(gnp.sqrt(z), np.sqrt(np.array(2.5)))
    assert_eq(gnp.maximum(z, s), np.maximum(2.5, x.sum()))


def test_list_and_numpy_operands() -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    a = gnp.from_array(x, chunks=1)
    assert_eq(a + [1, 2, 3], x + [1, 2, 3])
    assert_eq(gnp.multiply([[1], [2]], a), np.multiply([[1], [2]], x))
    assert_eq(gnp.add(np.ones(3, np.int64), a), np.ones(3, np.int64) + x)
    assert_eq(gnp.exp(np.array([0.0, 1.0])), np.exp(np.array([0.0, 1.0])))


# --- Python scalars weak, NumPy scalars strong (NEP 50) ---------------------------------------------------

@pytest.mark.parametrize(("dtype", "scalar"), [
    (np.float32, 2.0), (np.float32, 3), (np.float32, True), (np.int8, 1), (np.int8, -3), (np.uint8, 200),
    (np.int32, 7), (np.int64, 2), (np.bool_, True), (np.bool_, 2), (np.bool_, 1.5), (np.complex128, 2.0),
    (np.float64, 1j), (np.float32, np.float32(2.0)), (np.int8, np.int8(3)), (np.int64, 1.5),
])
def test_python_scalars_are_weak(dtype: type, scalar: object) -> None:
    x = make_data(np.random.default_rng(2), (4, 5), dtype, POSITIVE)
    a = gnp.from_array(x, chunks=(3, 2))
    for op in (operator.add, operator.mul, operator.sub):
        if dtype is np.bool_ and op is operator.sub and isinstance(scalar, bool):
            continue
        assert_eq(op(a, scalar), op(x, scalar))
        assert_eq(op(scalar, a), op(scalar, x))
    assert_eq(gnp.maximum(a, scalar), np.maximum(x, scalar))


def test_weak_scalar_keeps_narrow_dtypes() -> None:
    assert (gnp.ones(3, dtype=np.float32) * 2.0).dtype == np.float32
    assert (gnp.ones(3, dtype=np.int8) + 1).dtype == np.int8
    assert (gnp.ones(3, dtype=np.uint8) * 3).dtype == np.uint8
    assert (gnp.ones(3, dtype=np.float32) + 1j).dtype == np.complex64


@pytest.mark.parametrize(("dtype", "scalar"), [(np.int8, 1000), (np.uint8, -1), (np.int8, -129)])
def test_python_int_out_of_bounds(dtype: type, scalar: int) -> None:
    with pytest.raises(OverflowError):
        np.ones(3, dtype) + scalar
    with pytest.raises(OverflowError):
        gnp.ones(3, dtype=dtype) + scalar


@pytest.mark.parametrize(("dtype", "scalar"), [
    (np.float32, np.float64(2.0)), (np.int8, np.int64(1)), (np.int32, np.float32(1.5)), (np.uint8, np.int8(-1)),
])
def test_numpy_scalars_are_strong(dtype: type, scalar: np.generic) -> None:
    x = make_data(np.random.default_rng(3), (5,), dtype, POSITIVE)
    a = gnp.from_array(x, chunks=2)
    with pytest.warns(gnp.PromotionWarning):
        a + scalar
    with gnp.allowpromotion():
        assert_eq(a + scalar, x + scalar)
        assert_eq(scalar * a, scalar * x)


# --- where, clip, round, astype, real/imag/conj ---------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_where(dtype: type) -> None:
    rng = np.random.default_rng(4)
    c = rng.random((4, 1, 6)) < 0.5
    x, y = make_data(rng, (3, 6), dtype), make_data(rng, (4, 3, 1), dtype)
    gc = gnp.from_array(c, chunks=(3, 1, 4))
    gx, gy = gnp.from_array(x, chunks=(2, 5)), gnp.from_array(y, chunks=(1, 2, 1))
    assert_eq(gnp.where(gc, gx, gy), np.where(c, x, y))
    assert_eq(gnp.where(gc, gx, 0), np.where(c, x, 0))
    assert_eq(gnp.where(gc, 1, gy), np.where(c, 1, y))
    # a non-boolean condition means "nonzero"
    assert_eq(gnp.where(gx, gx, gy), np.where(x, x, y))


def test_where_scalars_and_guard() -> None:
    c = np.array([True, False, True])
    gc = gnp.from_array(c, chunks=2)
    assert_eq(gnp.where(gc, 1, 2.0), np.where(c, 1, 2.0))
    f32 = np.arange(3, dtype=np.float32)
    assert_eq(gnp.where(gc, gnp.from_array(f32), 2.0), np.where(c, f32, 2.0))
    # the condition never counts for promotion, the two branches do
    with pytest.warns(gnp.PromotionWarning):
        gnp.where(gc, gnp.from_array(f32), gnp.from_array(f32.astype(np.float64)))
    with gnp.allowpromotion():
        assert_eq(gnp.where(gc, gnp.from_array(f32), f32.astype(np.float64)), np.where(c, f32, f32.astype(np.float64)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64])
def test_clip(dtype: type) -> None:
    rng = np.random.default_rng(5)
    x = make_data(rng, (6, 5), dtype)
    lo, hi = make_data(rng, (5,), dtype, Domain(-4, 0, -5, 2)), make_data(rng, (6, 1), dtype, Domain(0, 4, 3, 8))
    a = gnp.from_array(x, chunks=(4, 2))
    glo, ghi = gnp.from_array(lo, chunks=3), gnp.from_array(hi, chunks=5)
    assert_eq(gnp.clip(a, glo, ghi), np.clip(x, lo, hi))
    assert_eq(gnp.clip(a, None, ghi), np.clip(x, None, hi))
    assert_eq(gnp.clip(a, glo), np.clip(x, lo, None))
    assert_eq(gnp.clip(a, 1, None), np.clip(x, 1, None))
    assert_eq(gnp.clip(a, 1, 3), np.clip(x, 1, 3))
    assert_eq(gnp.clip(a, None, None), np.clip(x, None, None))
    assert_eq(a.clip(2, 5), x.clip(2, 5))
    assert_eq(gnp.clip(a, lo, hi), np.clip(x, lo, hi))  # NumPy bounds


def test_clip_dtype_rules() -> None:
    x = np.arange(-5, 5, dtype=np.int8)
    a = gnp.from_array(x, chunks=3)
    # Python integers beyond the dtype's range are no bound at all (as in NumPy)
    assert_eq(gnp.clip(a, -1000, 1000), np.clip(x, -1000, 1000))
    assert_eq(gnp.clip(a, -1000, 2), np.clip(x, -1000, 2))
    f = np.linspace(-2, 2, 9, dtype=np.float32)
    g = gnp.from_array(f, chunks=4)
    assert_eq(gnp.clip(g, -1.5, 0.5), np.clip(f, -1.5, 0.5))
    # bounds of a wider dtype promote like the ufunc, behind the guard
    lo = np.full(9, -1.0)
    with pytest.warns(gnp.PromotionWarning):
        gnp.clip(g, gnp.from_array(lo), None)
    with gnp.allowpromotion():
        assert_eq(gnp.clip(g, gnp.from_array(lo), None), np.clip(f, lo, None))
        assert_eq(gnp.clip(a, 1.5, None), np.clip(x, 1.5, None))


@pytest.mark.parametrize("decimals", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int32, np.int64])
def test_round(dtype: type, decimals: int) -> None:
    rng = np.random.default_rng(6)
    x = make_data(rng, (7, 3), dtype, Domain(-500.0, 500.0, -500, 500))
    a = gnp.from_array(x, chunks=(3, 2))
    assert_eq(gnp.round(a, decimals=decimals), np.round(x, decimals=decimals))
    assert_eq(a.round(decimals), x.round(decimals))
    assert_eq(np.round(a, decimals), np.round(x, decimals))


def test_round_default_is_half_to_even() -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])
    assert_eq(gnp.round(gnp.from_array(x, chunks=3)), np.round(x))


@pytest.mark.parametrize("to", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("source", [np.bool_, np.int8, np.int64, np.uint8, np.float32, np.float64])
def test_astype(source: type, to: type) -> None:
    # floats outside the target's range convert differently on each platform (C leaves it undefined)
    lo = 0 if np.dtype(to).kind == "u" and np.dtype(source).kind == "f" else -100
    x = make_data(np.random.default_rng(7), (5, 3), source, Domain(lo, 100.0, lo, 100))
    a = gnp.from_array(x, chunks=2)
    with np.errstate(all="ignore"):
        expected = x.astype(to)
    assert_eq(a.astype(to), expected)
    assert_eq(gnp.astype(a, to), expected)


def test_astype_copy_and_casting() -> None:
    a = gnp.from_array(np.arange(4, dtype=np.float32), chunks=3)
    assert gnp.astype(a, np.float32, copy=False) is a
    assert a.astype(np.float32, copy=False) is a
    assert_eq(a.astype(np.float32), np.arange(4, dtype=np.float32))
    assert_eq(a.astype(np.float64, copy=False), np.arange(4, dtype=np.float64))
    for to, casting in [(np.int32, "safe"), (np.float16, "safe"), (np.int64, "same_kind"), (np.float64, "no")]:
        with pytest.raises(TypeError):
            np.arange(4, dtype=np.float32).astype(to, casting=casting)
        with pytest.raises(TypeError, match=casting):
            a.astype(to, casting=casting)
    assert_eq(a.astype(np.float64, casting="safe"), np.arange(4, dtype=np.float64))
    assert_eq(a.astype(np.float16, casting="same_kind"), np.arange(4, dtype=np.float16))


@pytest.mark.parametrize("dtype", [np.complex128, np.float32, np.int32])
def test_real_imag_conj(dtype: type) -> None:
    x = make_data(np.random.default_rng(8), (4, 6), dtype)
    a = gnp.from_array(x, chunks=(3, 4))
    assert_eq(a.real, x.real)
    assert_eq(a.imag, x.imag)
    assert_eq(a.conj(), x.conj())
    assert_eq(a.conjugate(), x.conjugate())
    assert_eq(gnp.real(a), np.real(x))
    assert_eq(gnp.imag(a), np.imag(x))
    assert_eq(gnp.conj(a), np.conj(x))
    assert_eq(abs(a), abs(x))


# --- operators ------------------------------------------------------------------------------------------

BINARY_OPERATORS = {
    "add": (operator.add, DEFAULT), "sub": (operator.sub, DEFAULT), "mul": (operator.mul, DEFAULT),
    "truediv": (operator.truediv, NONZERO), "floordiv": (operator.floordiv, NONZERO),
    "mod": (operator.mod, NONZERO), "pow": (operator.pow, Domain(0.0, 3.0, 0, 3)),
    "and": (operator.and_, DEFAULT), "or": (operator.or_, DEFAULT), "xor": (operator.xor, DEFAULT),
    "lshift": (operator.lshift, Domain(0, 6, 0, 6)), "rshift": (operator.rshift, Domain(0, 6, 0, 6)),
    "eq": (operator.eq, DEFAULT), "ne": (operator.ne, DEFAULT), "lt": (operator.lt, DEFAULT),
    "le": (operator.le, DEFAULT), "gt": (operator.gt, DEFAULT), "ge": (operator.ge, DEFAULT),
}
SCALARS = {"bool": True, "int": 2, "float": 2.0, "complex": 1.5 + 0.5j}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", sorted(BINARY_OPERATORS))
def test_binary_operator(op: str, dtype: type) -> None:
    func, domain = BINARY_OPERATORS[op]
    rng = np.random.default_rng(9)
    base = Domain(0.5, 3.0, 0, 3) if op == "pow" else DEFAULT
    x, y = make_data(rng, (5, 4), dtype, base), make_data(rng, (4,), dtype, domain)
    a, b = gnp.from_array(x, chunks=(2, 3)), gnp.from_array(y, chunks=1)
    check(func, func, [x, y], [a, b])  # Array op Array
    check(func, func, [y, x], [b, a])
    check(func, func, [x, y], [a, y])  # Array op NumPy array
    check(func, func, [y, x], [y, a])  # NumPy array op Array (through __array_ufunc__)
    if not isinstance(numpy_result(func, y, x), TypeError):
        assert isinstance(func(y, a), gnp.Array)
    with gnp.allowpromotion():  # int8 * 2.0 is float64
        for s in SCALARS.values():  # Python scalars on either side
            if op in ("pow", "lshift", "rshift") and not isinstance(s, bool):
                s = type(s)(3)  # not 2: NumPy's ``x ** 2`` is ``square(x)``, int8 for bool x
            check(func, func, [x, s], [a, s])
            check(func, func, [s, y], [s, b])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["neg", "pos", "invert", "abs"])
def test_unary_operator(op: str, dtype: type) -> None:
    func = {"neg": operator.neg, "pos": operator.pos, "invert": operator.invert, "abs": abs}[op]
    x = make_data(np.random.default_rng(10), (3, 5), dtype)
    check(func, func, [x], [gnp.from_array(x, chunks=(2, 2))])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
                                "lshift", "rshift"])
@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.float32, np.bool_])
def test_inplace_operator_rebinds(op: str, dtype: type) -> None:
    func, domain = BINARY_OPERATORS[op]
    ifunc = getattr(operator, f"i{op}")
    rng = np.random.default_rng(11)
    x, y = make_data(rng, (4, 3), dtype, Domain(0.5, 3.0, 0, 3)), make_data(rng, (3,), dtype, domain)
    for other in (y, y.dtype.type(y[0]), gnp.from_array(y, chunks=2)):
        a = gnp.from_array(x, chunks=(3, 2))
        before = a
        other_np = to_host(other.compute()) if isinstance(other, gnp.Array) else other
        expected = x.copy()
        try:
            with np.errstate(all="ignore"):
                expected = ifunc(expected, other_np)
        except TypeError:
            with pytest.raises(TypeError):
                ifunc(a, other)
            continue
        a = ifunc(a, other)
        assert a is not before
        assert_eq(a, expected)
        assert_eq(before, x)  # the Array rebound from is unchanged


def test_inplace_same_kind_casting() -> None:
    x = np.arange(6, dtype=np.int64)
    a = gnp.from_array(x, chunks=4)
    with pytest.raises(TypeError):
        x += 1.5
    with pytest.raises(TypeError, match="same_kind"):
        a += 1.5
    with pytest.raises(TypeError):
        a /= 2
    b = gnp.from_array(np.arange(6, dtype=np.int32), chunks=4)
    with pytest.raises(TypeError):
        b += 1.5
    g = gnp.from_array(np.arange(6, dtype=np.float32), chunks=4)
    f = np.arange(6, dtype=np.float32)  # a separate buffer: from_array does not copy its input
    g *= 2.5
    f *= 2.5
    assert_eq(g, f)
    with gnp.allowpromotion():
        f64 = np.linspace(0, 1, 6)
        g += gnp.from_array(f64, chunks=5)
        f += f64
        assert_eq(g, f)  # float64 result cast back to float32 (same_kind)


@pytest.mark.parametrize("other", [{}, "a", None, object(), {1, 2}])
def test_unsupported_operands(other: object) -> None:
    x = np.arange(3.0)
    a = gnp.from_array(x)
    for func in (operator.add, operator.mul, operator.sub, operator.truediv, operator.pow, operator.and_,
                 operator.lt):
        with pytest.raises(TypeError):
            func(x, other)
        with pytest.raises(TypeError):
            func(a, other)
        with pytest.raises(TypeError):
            func(other, a)
    with pytest.raises(TypeError):
        gnp.add(a, other)
    with pytest.raises(TypeError):
        gnp.sin(other)


@pytest.mark.parametrize("other", ["a", None, {}, object()])
def test_equality_with_unsupported_operand(other: object) -> None:
    # NumPy 2: == and != with something that is no array operand compare elementwise unequal
    x = np.arange(6.0).reshape(2, 3)
    a = gnp.from_array(x, chunks=(1, 2))
    assert_eq(a == other, x == other)
    assert_eq(a != other, x != other)
    assert_eq(other == a, other == x)
    assert_eq(other != a, other != x)
    with pytest.raises(TypeError):
        a < other  # noqa: B015


class _Deferring:
    """An operand that opts out of NumPy's operators (``__array_ufunc__ = None``) and handles them itself."""

    __array_ufunc__ = None

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        return np.zeros(3)

    def __radd__(self, other: object) -> str:
        return "radd"

    def __rmul__(self, other: object) -> str:
        return "rmul"


def test_operators_defer_to_array_ufunc_none() -> None:
    x, a = np.arange(3.0), gnp.from_array(np.arange(3.0))
    assert x + _Deferring() == a + _Deferring() == "radd"
    assert x * _Deferring() == a * _Deferring() == "rmul"
    with pytest.raises(TypeError):
        x - _Deferring()
    with pytest.raises(TypeError):
        a - _Deferring()


def test_numpy_ufunc_dtype_argument() -> None:
    x = np.array([100, 120, -100], dtype=np.int8)
    a = gnp.from_array(x, chunks=2)
    # the loop runs in the dtype asked for (no int8 overflow), explicitly: the guard doesn't apply
    assert_eq(np.add(a, a, dtype=np.int16), np.add(x, x, dtype=np.int16))
    assert_eq(np.multiply(a, 3, dtype=np.float64), np.multiply(x, 3, dtype=np.float64))
    assert_eq(np.sqrt(a.astype(np.uint8), dtype=np.float32), np.sqrt(x.astype(np.uint8), dtype=np.float32))
    f = np.linspace(-1, 1, 5, dtype=np.float32)
    g = gnp.from_array(f, chunks=2)
    assert_eq(np.add(g, f.astype(np.float64), dtype=np.float32), np.add(f, f.astype(np.float64), dtype=np.float32))
    for args, dtype in [((f, f), np.int32), ((f + 1j, f), np.float64)]:  # same_kind input casting fails
        with pytest.raises(TypeError):
            np.add(*args, dtype=dtype)
        with pytest.raises(TypeError):
            np.add(*[gnp.from_array(v) for v in args], dtype=dtype)
    with pytest.raises(TypeError):
        np.less(f, f, dtype=np.float64)
    with pytest.raises(TypeError):
        np.less(g, g, dtype=np.float64)


# --- the promotion guard --------------------------------------------------------------------------------

@pytest.mark.parametrize(("d1", "d2"), [
    (np.float32, np.float64), (np.int32, np.float32), (np.int8, np.int16), (np.uint8, np.int8),
    (np.float32, np.complex128), (np.int32, np.int64), (np.float16, np.float32),
])
def test_promotion_guard(d1: type, d2: type) -> None:
    rng = np.random.default_rng(12)
    x, y = make_data(rng, (4, 3), d1, POSITIVE), make_data(rng, (3,), d2, POSITIVE)
    a, b = gnp.from_array(x, chunks=2), gnp.from_array(y, chunks=2)
    for func in (operator.add, operator.mul, gnp.maximum, lambda p, q: q - p):
        with gnp.config.set(guards="error"):
            with pytest.raises(gnp.PromotionError) as info:
                func(a, b)
            message = str(info.value)
            assert isinstance(info.value, TypeError)
            assert np.dtype(d1).name in message and np.dtype(d2).name in message
            assert "allowpromotion" in message
            assert func is not operator.add or message.startswith("add")  # names the operation
            with pytest.raises(TypeError):
                func(a, y)  # a NumPy array operand counts like an Array
        with pytest.warns(gnp.PromotionWarning):
            func(a, y)
    with gnp.allowpromotion():
        assert_eq(a + b, x + y)
        assert_eq(b * a, y * x)

    @gnp.allowpromotion
    def decorated(p: gnp.Array, q: gnp.Array) -> gnp.Array:
        return p - q

    @gnp.allowpromotion()
    def decorated_called(p: gnp.Array, q: gnp.Array) -> gnp.Array:
        return gnp.hypot(p, q) if np.dtype(d1).kind == np.dtype(d2).kind == "f" else p * q

    assert_eq(decorated(a, b), x - y)
    expected = np.hypot(x, y) if np.dtype(d1).kind == np.dtype(d2).kind == "f" else x * y
    assert_eq(decorated_called(a, b), expected)
    with pytest.warns(gnp.PromotionWarning):
        a - b  # the switch is off again outside


def test_promotion_guard_off_by_config() -> None:
    x, y = np.ones(4, np.float32), np.arange(4.0)
    a, b = gnp.from_array(x, chunks=3), gnp.from_array(y, chunks=2)
    with gnp.config.set(allow_promotion=True):
        assert_eq(a + b, x + y)
        assert_eq(gnp.where(b > 1, a, b), np.where(y > 1, x, y))
        with gnp.allowpromotion(enabled=False):  # strict here
            with pytest.raises(gnp.PromotionError):
                a + b
    with pytest.warns(gnp.PromotionWarning):
        a + b
    # set globally (not as a context manager): other threads see it too
    gnp.config.set(allow_promotion=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            out = pool.submit(operator.mul, a, b).result()
        assert_eq(out, x * y)
    finally:
        gnp.config.set(allow_promotion=None)  # back to the guards' mode
    with pytest.warns(gnp.PromotionWarning):
        a * b


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=lambda d: np.dtype(d).name)
def test_promotion_guard_allows(dtype: type) -> None:
    rng = np.random.default_rng(13)
    x = make_data(rng, (3, 4), dtype, POSITIVE)
    a = gnp.from_array(x, chunks=2)
    b = rng.random((3, 4)) < 0.5
    gb = gnp.from_array(b, chunks=3)
    # bool operands are never widened: bool with anything is fine
    assert_eq(a + gb, x + b)
    assert_eq(gb * a, b * x)
    assert_eq(gnp.logical_and(gb, a), np.logical_and(b, x))
    # weak Python scalars of the same kind, and same-dtype operands
    scalar = {"i": 2, "u": 2, "f": 2.0, "c": 2.0 + 1j}[np.dtype(dtype).kind]
    assert_eq(a * scalar, x * scalar)
    assert_eq(a + a, x + x)
    assert_eq(a * 1, x * 1)


def test_promotion_guard_only_for_widening() -> None:
    # equal itemsize changes of kind are not a widening; unary functions never are
    i64, f64 = np.arange(5, dtype=np.int64), np.linspace(0.5, 2, 5)
    assert_eq(gnp.from_array(i64) + gnp.from_array(f64), i64 + f64)
    assert_eq(gnp.sqrt(gnp.from_array(np.arange(5, dtype=np.int8))), np.sqrt(np.arange(5, dtype=np.int8)))
    # ldexp's integer exponent is not converted to the mantissa's dtype
    m, e = np.linspace(-2, 2, 5, dtype=np.float32), np.arange(-2, 3, dtype=np.int32)
    assert_eq(gnp.ldexp(gnp.from_array(m), gnp.from_array(e)), np.ldexp(m, e))
    assert_eq(gnp.ldexp(gnp.from_array(m.astype(np.float64)), gnp.from_array(e.astype(np.int8))),
              np.ldexp(m.astype(np.float64), e.astype(np.int8)))


def test_promotion_guard_through_numpy_ufunc() -> None:
    x = np.arange(4, dtype=np.float64)
    a = gnp.from_array(np.arange(4, dtype=np.float32))
    with pytest.warns(gnp.PromotionWarning):
        x + a
    with pytest.warns(gnp.PromotionWarning):
        np.multiply(a, x)
    with gnp.allowpromotion():
        assert_eq(x + a, x + np.arange(4, dtype=np.float32))


# --- long chains ----------------------------------------------------------------------------------------

def _chain(xp, x, y, s):  # noqa: ANN001, ANN202
    z = (x * 2.0 + 1.0) / 3.0 - xp.sin(x)
    z = xp.abs(z) ** 2 + xp.exp(-x * x) * y
    z = xp.where(z > 1.0, xp.sqrt(z), -z) + s
    z = xp.maximum(z, y - 0.5) * xp.cos(y) + xp.tanh(z)
    z = xp.log1p(xp.abs(z)) - xp.floor(z) + xp.clip(z, -1.0, 1.0)
    return (z > 0.25) ^ (y < 0.0), z


@pytest.mark.slow
@given(data=st.data(), shapes=broadcastable_shapes(2, max_size=9), seed=seeds)
def test_long_chain(data, shapes: list, seed: int) -> None:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES))
    x, y = make_data(rng, shapes[0], dtype), make_data(rng, shapes[1], dtype)
    a, b = chunked(data, x), chunked(data, y)
    s = gnp.sum(a) / (a.size or 1)
    expected_s = x.sum(dtype=dtype) / (x.size or 1)
    mask, values = _chain(gnp, a, b, s)
    with np.errstate(all="ignore"):
        np_mask, np_values = _chain(np, x, y, expected_s)
    assert_eq(values, np_values, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5)
    if dtype == np.float64:  # float32 sums differ in the last bits, which may flip z > 0.25
        assert_eq(mask, np_mask)
    assert mask.dtype == np.bool_ and mask.shape == np_mask.shape


def test_long_integer_chain() -> None:
    x = np.arange(-30, 30, dtype=np.int32).reshape(6, 10)
    a = gnp.from_array(x, chunks=(4, 3))
    out, expected = a, x
    for _ in range(3):
        out = ((out * 3 + 7) // 2 - (out % 5)) ^ (out << 1) | (out & 6)
        expected = ((expected * 3 + 7) // 2 - (expected % 5)) ^ (expected << 1) | (expected & 6)
    assert_eq(out, expected)
    assert_eq(gnp.sum(out, axis=0), expected.sum(axis=0))


def test_chain_on_distributed_cluster(client) -> None:  # noqa: ANN001
    x = np.linspace(-3, 3, 90).reshape(9, 10)
    a = gnp.from_array(x, chunks=(4, 3))
    b = gnp.from_array(x[0], chunks=6)
    out = gnp.exp(-a * a) * gnp.cos(b) + gnp.where(a > 0, a, 0.5 * a) ** 2 - gnp.sum(a) / 7
    expected = np.exp(-x * x) * np.cos(x[0]) + np.where(x > 0, x, 0.5 * x) ** 2 - x.sum() / 7
    computed = client.compute(out).result()
    np.testing.assert_allclose(to_host(computed), expected, rtol=1e-12, atol=1e-12)
    persisted = client.persist(out)  # blocks held by the cluster: later work on them goes to the client
    np.testing.assert_allclose(to_host(client.compute(persisted + 1).result()), expected + 1, rtol=1e-12,
                               atol=1e-12)


# --- edge values ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite", "signbit", "sign", "floor", "maximum", "minimum",
                                  "fmax", "fmin", "copysign", "nextafter", "sqrt", "log", "exp"])
def test_special_values(name: str) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-310, 1e308])
    y = x[::-1].copy()
    func = getattr(np, name)
    args = (x,) if func.nin == 1 else (x, y)
    with np.errstate(all="ignore"):
        expected = func(*args)
    out = getattr(gnp, name)(*[gnp.from_array(a, chunks=4) for a in args])
    assert_eq(out, expected)
    if expected.dtype.kind == "f":  # signs of zeros too
        np.testing.assert_array_equal(np.signbit(to_host(out.compute())), np.signbit(expected))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_wraparound(dtype: type) -> None:
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 0, 1], dtype=dtype)
    a = gnp.from_array(x, chunks=3)
    with np.errstate(all="ignore"):
        assert_eq(a + 1, x + 1)
        assert_eq(a * 2, x * 2)
        assert_eq(-a, -x)
        assert_eq(a - x[::-1], x - x[::-1])


@pytest.mark.parametrize("emulated", [False, True], ids=["numpy-blocks", "emulated-kernel"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logaddexp2_is_fused_and_matches_numpy(dtype: type, emulated: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import _cuda_emulator
    from conftest import BACKEND

    from dask_gpunumeric.api.explain import plan

    if emulated:
        if _cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy":
            pytest.skip("the kernel emulator needs a host C++ compiler and NumPy blocks")
        _cuda_emulator.emulated_fused(monkeypatch)
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-60, 60, 40), [np.inf, -np.inf, np.nan, 1.0, -np.inf]]).astype(dtype)
    y = np.concatenate([rng.uniform(-60, 60, 40), [np.inf, -np.inf, 0.0, 1.0, 2.0]]).astype(dtype)
    a, b = gnp.from_array(x, chunks=11), gnp.from_array(y, chunks=11)
    factor = 4 if emulated else 2  # another expression, not the graph cached by the other run
    out = gnp.logaddexp2(a, b) * factor
    assert [g["ops"] for g in plan(out)["groups"]] == [["logaddexp2", "multiply"]]
    with np.errstate(invalid="ignore"):  # inf - inf
        expected, expected_plain = np.logaddexp2(x, y) * factor, np.logaddexp2(x, y)
    np.testing.assert_allclose(gnp.fetch(out), expected, rtol=4 * np.finfo(dtype).eps)
    dispatched = np.logaddexp2(a, b)  # NumPy's ufunc on gnp arrays: a gnp array
    assert isinstance(dispatched, gnp.Array)
    assert_eq(dispatched, expected_plain)


@pytest.mark.parametrize("operands", [("x", "y"), ("x", 2.5), (3, "x"), ("i", 7), ("x", "i"), (1.0, "x"), ("x", 2),
                                      ("x", np.float32(2.5)), (np.float32(4), "x"), ("i", np.int64(7))])
@pytest.mark.parametrize("name", ["add", "multiply", "true_divide", "power", "maximum", "arctan2"])
def test_short_build_path_makes_the_general_node(name: str, operands: tuple) -> None:
    """The common case (Arrays of the same chunks, Python and NumPy numbers) is built on a short path: the node, its
    name and metadata are those of the general constructor, and the values NumPy's."""
    from dask_gpunumeric.expr import Elemwise

    host = {"x": np.linspace(0.5, 2.0, 12, dtype=np.float32), "y": np.linspace(1.0, 3.0, 12, dtype=np.float32),
            "i": np.arange(1, 13, dtype=np.int64)}
    lazy = {k: gnp.asarray(v, chunks=5) for k, v in host.items()}
    args = [lazy.get(o, o) if isinstance(o, str) else o for o in operands]
    result = getattr(gnp, name)(*args)
    expected = getattr(np, name)(*[host.get(o, o) if isinstance(o, str) else o for o in operands])
    node = result.expr
    if type(node) is Elemwise:
        general = Elemwise(*node.operands)
        assert (general._name, general.chunks, general.dtype, general.backend) == \
            (node._name, node.chunks, node.dtype, node.backend)
    assert result.dtype == expected.dtype
    assert_eq(result, expected)


def test_nodes_built_again_are_their_constructors_with_every_operand_and_guard():
    """Operations built again on the same Arrays and numbers (plain code called again) give the nodes their
    constructors give, NumPy's bits (a zero's sign; NaN where NumPy's is), and for other numbers, dtypes and
    chunks nodes of their own; a widening operation raises the promotion guard's error on every call."""
    import dask

    host = np.array([1.5, -2.0, 0.0, 3.25, -0.0, 7.0], dtype=np.float32)
    numbers = (1.5, -0.0, 0.0, np.float32(-0.0), np.float32(0.0), float("nan"), 2, True, 1.5, -0.0, 0.0)
    for dtype, chunks in ((np.float32, 3), (np.float64, 3), (np.float32, 2)):
        h = host.astype(dtype)
        (x,) = dask.persist(gnp.asarray(h, chunks=chunks))
        for _ in range(2):
            for c in numbers:
                for built, want in ((x * c, h * c), (c - x, c - h), (gnp.where(x > c, x, c), np.where(h > c, h, c))):
                    assert built.expr._name == type(built.expr)(*built.expr.operands)._name
                    got = gnp.fetch(built)
                    # NaN's payload is the device's (CUDA's NaN is not NumPy's bits); everything else bit for bit
                    numbers_at = ~np.isnan(want)
                    assert got.dtype == want.dtype and np.array_equal(np.isnan(got), ~numbers_at), (dtype, chunks, c)
                    assert got[numbers_at].tobytes() == want[numbers_at].tobytes(), (dtype, chunks, c)
        with gnp.config.set(guards="error"):
            for _ in range(2):
                with pytest.raises(TypeError):
                    x.astype(np.float32) * np.float64(1.5)


@pytest.mark.parametrize("zeros", [(0.0, -0.0), (-0.0, 0.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zero_numbers_keep_their_sign_in_either_order(zeros: tuple, dtype: type) -> None:
    """Products, differences and selects of a zero number (0.0 == -0.0 in Python, of one hash), one sign after
    the other, each called often enough to run kernels specialized to its values on CuPy blocks, plain and
    accelerated (a function that reads the number is traced by value): NumPy's bits through ``gnp.fetch`` and
    ``np.asarray``."""
    import dask

    from dask_gpunumeric.kernels import cuda as _cuda
    from dask_gpunumeric.kernels.fused import _Kernel

    @gnp.accelerate
    def clamp(x: gnp.Array, c: float) -> gnp.Array:
        return x if c > 1 else gnp.where(x > c, x, c)

    h = np.array([1.5, -2.0, 0.0, 3.25, -0.0, 7.0, -0.0], dtype=dtype)
    (x,) = dask.persist(gnp.asarray(h, chunks=4))
    for c in zeros:
        expected = (h * c, c - h, np.where(h > c, h, c), np.where(h < c, h, c), np.where(h > c, h * 1.5, c))
        for repeat in range(_Kernel.SPECIALIZE_AFTER + 2):
            if repeat == _Kernel.SPECIALIZE_AFTER:
                _cuda.wait_for_background_compiles()  # (the specialized kernels run from here)
            built = (x * c, c - x, gnp.where(x > c, x, c), gnp.where(x < c, x, c), gnp.where(x > c, x * 1.5, c))
            for got, want in zip(built, expected):
                assert gnp.fetch(got).tobytes() == want.tobytes(), (c, repeat, got.expr._name)
                with gnp.allowfetch():
                    assert np.asarray(got).tobytes() == want.tobytes(), (c, repeat, got.expr._name)
            assert gnp.fetch(clamp(x, c)).tobytes() == expected[2].tobytes(), (c, repeat)


def test_complex_numbers_of_signed_zero_parts_get_their_own_traced_plans() -> None:
    """An accelerated function that reads a complex number (traced by value) called with complex(1, 0.0), then
    complex(1, -0.0), equal in Python and of one hash: each gets NumPy's bits (the imaginary zero's sign)."""

    @gnp.accelerate
    def shift(x: gnp.Array, c: complex) -> gnp.Array:
        return x if c.real > 2 else x + c

    h = np.array([1.5 - 0.0j, complex(-2.0, -0.0), 3.0 + 1.0j])
    x = gnp.asarray(h, chunks=2)
    for c in (complex(1, 0.0), complex(1, -0.0), complex(1, 0.0)):
        assert gnp.fetch(shift(x, c)).tobytes() == (h + c).tobytes(), c
        with gnp.allowfetch():
            assert np.asarray(shift(x, c)).tobytes() == (h + c).tobytes(), c


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_arithmetic_rounds_each_operation_as_numpy(dtype: type) -> None:
    """A fused kernel rounds every multiply and add as NumPy does (no fused multiply-add): ``x * x - y * y`` is
    exactly zero where ``x == y``, and a Horner step and a stencil-like sum give NumPy's bits through every entry
    point."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(3000) * 3).astype(dtype)
    b = (rng.standard_normal(3000)).astype(dtype)
    x, y = gnp.from_array(a, chunks=1000), gnp.from_array(b, chunks=1000)
    horner = ((a * dtype(0.3) + dtype(1.7)) * a - dtype(2.1)) * a + b
    cases = [(x * x - x * x, a * a - a * a), (x * y + x, a * b + a), (((x * 0.3 + 1.7) * x - 2.1) * x + y, horner),
             (4 * x - y * y - x * y, 4 * a - b * b - a * b)]
    for ours, expected in cases:
        assert_eq(ours, expected)
        for got in (gnp.fetch(ours), np.asarray(ours), to_host(ours.compute())):
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8), expected.view(np.uint8))
