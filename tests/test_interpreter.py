"""Fused and stencil programs on blocks large enough for the NumPy interpreter to cut them into cache-sized
pieces and to reuse its buffers from one block to the next: the values are NumPy's, bit for bit on NumPy
blocks (the same operations in the same order), and results already computed never change afterwards."""
from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
from conftest import BACKEND, assert_eq

import dask_gpunumeric as gnp

N = 2**19  # elements of the large blocks: several of the interpreter's pieces (kernels/interpreter.py, CHUNK)
# CuPy's kernels may contract a*b+c into an FMA: NumPy's values to rounding (absolute near 0, where terms cancel)
EXACT = {"rtol": 0.0} if BACKEND == "numpy" else {"atol": 1e-6}


def _fields(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.uniform(0.5, 1.5, n).astype(np.float32), rng.uniform(-1.0, 1.0, n).astype(np.float32)


def _deep(xp: Any, u: Any, v: Any) -> tuple[Any, Any]:
    """Steps of elementwise work with shared subexpressions, comparisons, where, integer and bool values."""
    for _ in range(4):
        w = u * v / (1.0 + 0.5 * u)
        positive = v > 0
        k = (u * 3).astype(np.int32) % 5
        u = u + 0.05 * (xp.where(positive, w, -w) + k.astype(np.float32))
        v = v - 0.05 * xp.sqrt(xp.abs(w)) * (positive | (k == 2))
    return u, v


def test_deep_elementwise_on_large_blocks_gives_numpy_bits() -> None:
    u, v = _fields()
    expected = _deep(np, u, v)
    for chunks in (N, N // 2 + 4096):  # one block; two blocks of unequal sizes
        a, b = gnp.from_array(u, chunks=chunks), gnp.from_array(v, chunks=chunks)
        for actual, want in zip(_deep(gnp, a, b), expected):
            assert_eq(actual, want, **EXACT)
        accelerated = gnp.accelerate(lambda x, y: _deep(gnp, x, y))(a, b)
        for actual, want in zip(accelerated, expected):
            assert_eq(actual, want, **EXACT)


def test_rows_reduced_and_broadcast_back_on_a_large_block() -> None:
    x = 4 * np.random.default_rng(3).standard_normal((1024, 640), dtype=np.float32)

    def softmax(xp: Any, y: Any) -> tuple[Any, Any]:
        m = xp.max(y, axis=1, keepdims=True)
        e = xp.exp(y - m)
        s = xp.sum(e, axis=1, keepdims=True)
        z = xp.tanh(y) * 3 + y * 0.5 - xp.abs(y) / 4 + xp.sin(y) * xp.cos(y) - 1.0  # a longer program, summed
        return e / s, (m + xp.log(s))[:, 0], xp.sum(z * z - 2 * z, axis=1)

    for actual, want in zip(softmax(gnp, gnp.asarray(x)), softmax(np, x)):
        assert_eq(actual, want, **EXACT)


def test_roll_and_where_steps_on_a_large_periodic_block() -> None:
    q, c = _fields()

    def advect(xp: Any, q: Any, c: Any) -> Any:
        for _ in range(5):
            q = q - 0.4 * c * xp.where(c > 0, q - xp.roll(q, 1), xp.roll(q, -1) - q)
        return q

    expected = advect(np, q, c)
    assert_eq(advect(gnp, gnp.asarray(q), gnp.asarray(c)), expected, **EXACT)
    assert_eq(gnp.accelerate(lambda x, y: advect(gnp, x, y))(gnp.asarray(q), gnp.asarray(c)), expected, **EXACT)


def test_results_stay_unchanged_by_later_computations() -> None:
    u, v = _fields()
    a, b = dask.persist(gnp.asarray(u), gnp.asarray(v))
    first = [gnp.fetch(x) for x in _deep(gnp, a, b)]
    kept = [x.copy() for x in first]
    for _ in range(2):  # the interpreter's buffers are reused by these
        dask.compute(*_deep(gnp, b, a))
    for value, copy in zip(first, kept):
        np.testing.assert_array_equal(value, copy)


def test_conversions_to_the_same_dtype_keep_each_block_its_own() -> None:
    x = np.array([-4, 2, 7, -1], dtype=np.int32)
    a = gnp.from_array(x, chunks=1)  # blocks one after another through the same thread's buffers
    assert_eq(gnp.abs(a).astype(np.int32), np.abs(x).astype(np.int32))
    assert_eq((gnp.abs(a) + 1).astype(np.int32) * 2, (np.abs(x) + 1).astype(np.int32) * 2)


def _mixed(xp: Any, y: Any) -> tuple[Any, Any, Any, Any, Any]:
    """Views (a conversion to the value's own dtype, ``real`` of a temporary, used after later operations),
    conversions between kinds, ``where`` on its own operand, a full reduction inside the program, and one
    value returned twice."""
    a = y.astype(np.float32) * 1.5
    g = xp.real(a - 1.0)
    g = g + g * 0.5 * a
    b = (a * 3).astype(np.int16)
    c = xp.where(b > 0, a, -a)
    d = c - c.mean()
    e = xp.real(d) + b.astype(np.float32)
    f = (e * 2).astype(np.float64) / 3
    return e, f, d - 1, e, g


def test_views_conversions_and_totals_in_one_program_give_numpy_bits() -> None:
    y = np.random.default_rng(11).uniform(-2.0, 2.0, N).astype(np.float32)
    expected = _mixed(np, y)
    a = gnp.asarray(y)
    for _ in range(2):  # the second call runs the plans the first one made
        for actual, want in zip(_mixed(gnp, a), expected):
            assert_eq(actual, want, **EXACT)
    for actual, want in zip(gnp.accelerate(lambda x: _mixed(gnp, x))(a), expected):
        assert_eq(actual, want, **EXACT)


def _heat_3d(xp: Any, u: Any, steps: int = 3) -> tuple[Any, Any]:
    """Explicit 3-D heat steps by slices and setitem (fixed boundaries), and the largest change."""
    start = u
    for _ in range(steps):
        v = u.copy()
        c = u[1:-1, 1:-1, 1:-1]
        v[1:-1, 1:-1, 1:-1] = c + 0.1 * (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1]
                                         + u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] - 6 * c)
        u = v
    return u, xp.max(xp.abs(u - start))


def test_3d_stencil_sweeps_give_numpy_bits() -> None:
    x = np.random.default_rng(5).random((30, 26, 21), dtype=np.float32)
    expected = _heat_3d(np, x)
    for chunks in (x.shape, (16, 13, 21), (10, 26, 11)):  # one block; blocks extended by halos
        a = gnp.from_array(x, chunks=chunks)
        for actual, want in zip(_heat_3d(gnp, a), expected):
            assert_eq(actual, want, **EXACT)
        for actual, want in zip(gnp.accelerate(lambda y: _heat_3d(gnp, y))(a), expected):
            assert_eq(actual, want, **EXACT)


def _scaled_laplacian(xp: Any, u: Any, steps: int = 3) -> Any:
    """2-D Laplacian steps by setitem updates, scaled by a 0-d array computed from the field."""
    for _ in range(steps):
        w = 0.1 / xp.max(xp.abs(u))
        y = 4 * u
        y[1:, :] -= u[:-1, :]
        y[:-1, :] -= u[1:, :]
        y[:, 1:] -= u[:, :-1]
        y[:, :-1] -= u[:, 1:]
        u = u - w * y
    return u


def test_stencil_sweeps_with_array_coefficients_give_numpy_bits() -> None:
    x = np.random.default_rng(6).random((130, 120), dtype=np.float32)
    expected = _scaled_laplacian(np, x)
    for chunks in (x.shape, (65, 60)):
        a = gnp.from_array(x, chunks=chunks)
        assert_eq(_scaled_laplacian(gnp, a), expected, **EXACT)
        assert_eq(gnp.accelerate(lambda y: _scaled_laplacian(gnp, y))(a), expected, **EXACT)


def _with_scalar(xp: Any, x: Any, s: float) -> tuple[Any, ...]:
    """Ops of an array and a Python float on either side, and a chain of them long enough to run in pieces."""
    chain = x
    for _ in range(3):
        chain = (chain * s + 1.5) / s - s * chain
    return (x * s, s - x, x / s, s / x, xp.maximum(x, s), xp.minimum(s, x), x**s, xp.arctan2(s, x), x > s,
            xp.copysign(x, s), chain)


@pytest.mark.skipif(BACKEND != "numpy", reason="the NumPy interpreter's own reading of scalars")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_python_float_scalars_give_numpy_bits(dtype: type) -> None:
    """Python floats that round, overflow or underflow in the arrays' dtype, signed zeros, infinities and NaN,
    on blocks the interpreter runs whole and in pieces (a length no multiple of them); signs of zeros and
    NaNs compared too."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(4 * 2**16 + 37) * 50).astype(dtype)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dtype).tiny / 4]
    with np.errstate(all="ignore"):
        for s in (1 / 3, 0.1, -0.0, 0.0, 1e-40, 3.5e38, 1e300, -np.inf, np.nan, 2.0**-24):
            for n in (1000, x.size) if s in (1 / 3, -0.0) else (1000,):
                expected = _with_scalar(np, x[:n], s)
                a = gnp.from_array(x[:n], chunks=n if n > 1000 else 500)
                accelerated = gnp.accelerate(lambda y: _with_scalar(gnp, y, s))
                for got in (dask.compute(*_with_scalar(gnp, a, s)), gnp.fetch(accelerated(a))):
                    for actual, want in zip(got, expected):
                        assert actual.dtype == want.dtype, (s, n, actual.dtype, want.dtype)
                        np.testing.assert_array_equal(actual.view(np.uint8), want.view(np.uint8), err_msg=f"{s} {n}")


def _steps(xp: Any, u: Any, v: Any, steps: int, scale: float) -> tuple[Any, Any]:
    """A time-stepping loop whose steps have one structure and numbers of their own (each step's own step size)."""
    for k in range(steps):
        dt = scale * (k + 1)
        eaten = u * v / (1.0 + 0.5 * u)
        u, v = u + dt * (1.1 * u - 0.4 * eaten), v + dt * (0.3 * eaten - 0.4 * v)
    return u, v


def test_loop_steps_sharing_kernels_keep_their_own_numbers() -> None:
    """A loop cut into kernels of one program (a few steps each) with other numbers in each: every kernel reads
    its own numbers, computed once, again (the same graph) and with other numbers: NumPy's bits each time."""
    u, v = _fields(4096)
    a, b = gnp.asarray(u, chunks=1024), gnp.asarray(v, chunks=1024)
    with gnp.config.set(**{"kernel-size": 24}):  # (a step is 12 operations: two steps per kernel)
        for scale in (0.01, 0.01, 0.02):
            for actual, want in zip(dask.compute(*_steps(gnp, a, b, 12, scale)), _steps(np, u, v, 12, scale)):
                assert_eq(actual, want, **EXACT)
