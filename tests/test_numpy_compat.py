"""NumPy's return types and warnings where the array API and NumPy users rely on them: finfo/iinfo fields
as Python numbers, pinv with one rtol per matrix, unsupported dtypes refused clearly, integer division by
a zero scalar warning as NumPy does; and ``gnp.coverage()`` telling the truth about each function."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import assert_eq

import dask_gpunumeric as gnp


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128])
def test_finfo_fields_are_python_numbers(dtype):
    ours, ref = gnp.finfo(dtype), np.finfo(dtype)
    for field in ("eps", "max", "min", "smallest_normal", "tiny", "resolution"):
        value = getattr(ours, field)
        assert type(value) is float and value == float(getattr(ref, field))
    assert type(ours.bits) is int and ours.bits == ref.bits and ours.dtype == ref.dtype
    assert gnp.finfo(gnp.ones(2, dtype=dtype)).eps == float(ref.eps)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64])
def test_iinfo_fields_are_python_ints(dtype):
    ours, ref = gnp.iinfo(dtype), np.iinfo(dtype)
    assert type(ours.max) is int and ours.max == ref.max and ours.min == ref.min and ours.bits == ref.bits


def test_pinv_with_one_rtol_per_matrix():
    stack = np.random.default_rng(1).standard_normal((3, 5, 4))
    stack[1, :, 0] = stack[1, :, 1]  # a rank-deficient matrix
    for rtol in (np.array([1e-12, 0.3, 0.8]), 0.3, None):
        ours = gnp.linalg.pinv(gnp.asarray(stack, chunks=(2, 5, 4)), rtol=rtol)
        assert_eq(ours, np.linalg.pinv(stack, rtol=rtol), rtol=1e-9, atol=1e-12)
    assert_eq(gnp.linalg.pinv(gnp.asarray(stack), rtol=gnp.asarray(np.array([0.1, 0.2, 0.3]))),
              np.linalg.pinv(stack, rtol=np.array([0.1, 0.2, 0.3])), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [str, "U3", object, "M8[s]", bytes])
def test_unsupported_dtypes_are_refused_clearly(dtype):
    x = gnp.arange(3)
    with pytest.raises(TypeError, match="not supported: gnp Arrays hold booleans and numbers"):
        x.astype(dtype)
    with pytest.raises(TypeError, match="not supported"):
        gnp.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match="not supported"):
        gnp.full((2,), 1, dtype=dtype)


@pytest.mark.parametrize("op", ["//", "%"])
def test_integer_division_by_zero_warns_like_numpy(op):
    ref = np.arange(1, 5, dtype=np.int32)
    x = gnp.asarray(ref, chunks=2)
    compute = {"//": lambda a: a // 0, "%": lambda a: a % 0}[op]
    with pytest.warns(RuntimeWarning, match="divide by zero") as ours:
        result = compute(x)
    with pytest.warns(RuntimeWarning, match="divide by zero") as numpys:
        expected = compute(ref)
    assert str(ours[0].message) == str(numpys[0].message)
    assert_eq(result, expected)
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compute(x)
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        compute(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compute(x.astype(np.float64))  # floats: inf/nan without a warning at build time
        x // 2


def test_coverage_tells_the_truth():
    status = gnp.coverage()
    counts = {k: sum(v == k for v in status.values()) for k in ("native", "fallback", "missing")}
    assert sum(counts.values()) == len(status) and counts["native"] > counts["fallback"] + counts["missing"]
    x = gnp.asarray(np.arange(1.0, 7.0).reshape(2, 3), chunks=1)
    for name in ("sum", "polyfit", "kron", "interp", "vstack", "trace", "isin", "lexsort", "partition", "zeros"):
        assert status[name] == "native", name
        assert callable(getattr(gnp, name))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        for name in ("kron", "trace", "vstack", "fliplr", "isin"):
            args = {"kron": (x, x), "vstack": ([x, x],), "isin": (x, [2.0])}.get(name, (x,))
            assert isinstance(getattr(np, name)(*args), gnp.Array), name
    for name in ("trim_zeros", "unwrap", "resize"):
        assert status[name] == "fallback"
    assert status["seterr"] == status["frombuffer"] == "missing"
    assert status["linalg.cond"] == "fallback" and status["linalg.qr"] == "native"


def test_floor_divide_special_cases_of_the_array_api():
    """Where NumPy gives NaN for ``inf // 2`` and -1 for ``1 // -inf``, the standard's ±inf and ±0."""
    x1 = np.array([np.inf, np.inf, -np.inf, -np.inf, 1.5, 1.5, -1.5, -1.5, 7.0, np.nan, np.inf])
    x2 = np.array([2.0, -2.0, 2.0, -2.0, np.inf, -np.inf, np.inf, -np.inf, 2.0, 2.0, np.inf])
    expected = np.array([np.inf, -np.inf, -np.inf, np.inf, 0.0, -0.0, -0.0, 0.0, 3.0, np.nan, np.nan])
    a, b = gnp.asarray(x1, chunks=4), gnp.asarray(x2, chunks=4)
    for result in (a // b, gnp.floor_divide(a, b), np.floor_divide(a, b)):
        got = gnp.fetch(result)
        np.testing.assert_array_equal(got, expected)
        zeros = expected == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]))
    c = gnp.asarray(x1, chunks=4)
    c //= 2.0
    np.testing.assert_array_equal(gnp.fetch(c), np.where(np.isinf(x1), x1, np.floor_divide(x1, 2.0)))
    f32 = gnp.asarray(x1.astype(np.float32))
    assert (f32 // np.float32(2)).dtype == np.float32
    assert_eq(gnp.asarray(np.arange(-5, 5)) // 3, np.arange(-5, 5) // 3)  # integers: NumPy's


def test_complex_expm1_special_cases_of_the_array_api():
    inf, nan = np.inf, np.nan
    cases = [  # (z, the standard's expm1(z)) where NumPy gives NaN parts or -0
        (complex(inf, 0.0), complex(inf, 0.0)), (complex(-inf, inf), complex(-1.0, 0.0)),
        (complex(-inf, nan), complex(-1.0, 0.0)), (complex(nan, 0.0), complex(nan, 0.0)),
        (complex(-0.0, 0.0), complex(0.0, 0.0)), (complex(-0.0, -0.0), complex(0.0, -0.0)),
    ]
    z = np.array([c[0] for c in cases], dtype=np.complex128)
    for dtype in (np.complex64, np.complex128):
        got = gnp.fetch(gnp.expm1(gnp.asarray(z.astype(dtype), chunks=2)))
        assert got.dtype == dtype
        want = np.array([c[1] for c in cases], dtype=dtype)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got.real), np.signbit(want.real))
        np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(want.imag))
    both_inf = gnp.fetch(gnp.expm1(gnp.asarray(np.array([complex(inf, inf), complex(inf, nan)]))))
    assert np.isinf(both_inf.real).all() and np.isnan(both_inf.imag).all()
    finite = np.array([0.5 + 1j, -2 - 0.25j, 1e-9 + 1e-9j])
    assert_eq(gnp.expm1(gnp.asarray(finite)), np.expm1(finite))


def test_special_cases_through_the_generated_cuda_kernels(monkeypatch):
    """The same corrections fused into the generated CUDA kernels (run on the CPU by the emulator)."""
    import _cuda_emulator

    _cuda_emulator.emulated_fused(monkeypatch)
    x1 = np.array([np.inf, -np.inf, 1.5, -1.5, 7.0, np.nan])
    x2 = np.array([-2.0, 2.0, -np.inf, np.inf, 2.0, 2.0])
    got = gnp.fetch(gnp.asarray(x1, chunks=4) // gnp.asarray(x2, chunks=4))
    np.testing.assert_array_equal(got, [-np.inf, -np.inf, -0.0, -0.0, 3.0, np.nan])
    assert np.signbit(got[2:4]).all()
    z = np.array([complex(np.inf, 0.0), complex(-np.inf, np.nan), complex(np.nan, 0.0), 0.5 + 1j])
    expected = np.array([complex(np.inf, 0.0), complex(-1.0, 0.0), complex(np.nan, 0.0), np.expm1(0.5 + 1j)])
    np.testing.assert_allclose(gnp.fetch(gnp.expm1(gnp.asarray(z, chunks=2))), expected, rtol=1e-12)
