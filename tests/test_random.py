"""The random Generator (``gnp.random.default_rng``): the same seed gives the same numbers for any chunking
(and any worker count), successive calls and seeds differ, values lie in range with the expected moments,
bad parameters fail at the call, and the Monte-Carlo example agrees with NumPy on the same samples."""
from __future__ import annotations

import math
from typing import Any

import dask
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, to_host
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp

# (method, arguments before size, dtypes)
DRAWS = [
    ("random", (), ["float32", "float64"]),
    ("uniform", (-2.0, 5.0), ["float32", "float64"]),
    ("standard_normal", (), ["float32", "float64"]),
    ("normal", (3.0, 0.5), ["float32", "float64"]),
    ("integers", (-7, 100), ["int64", "int32", "int16"]),
    ("integers", (0, 200), ["uint8", "uint64"]),
]


@st.composite
def shape_and_two_chunkings(draw: Any) -> tuple:
    shape = tuple(draw(st.lists(st.integers(0, 30), min_size=1, max_size=1)) if draw(st.booleans())
                  else draw(st.lists(st.integers(0, 12), min_size=2, max_size=2)))
    return shape, tuple(draw(axis_chunks(n, empty=True)) for n in shape), tuple(draw(axis_chunks(n, empty=True)) for n in shape)


def draw(seed: Any, method: str, args: tuple, size: Any, **kwargs: Any) -> gnp.Array:
    return getattr(gnp.random.default_rng(seed), method)(*args, size=size, **kwargs)


def host(a: gnp.Array) -> np.ndarray:
    return np.asarray(to_host(a.compute()))


# --- the same numbers for any chunking --------------------------------------------------------------


@pytest.mark.parametrize("method, args, dtypes", DRAWS)
@given(data=st.data(), seed=st.integers(0, 2**64 - 1))
def test_same_numbers_for_any_chunking(method: str, args: tuple, dtypes: list, data: Any, seed: int) -> None:
    """Exact equality, normals included (same backend): each element depends on (seed, call, flat index)."""
    shape, chunks1, chunks2 = data.draw(shape_and_two_chunkings())
    dtype = np.dtype(data.draw(st.sampled_from(dtypes)))
    a = draw(seed, method, args, shape, dtype=dtype, chunks=chunks1)
    b = draw(seed, method, args, shape, dtype=dtype, chunks=chunks2)
    assert a.chunks == chunks1 and b.chunks == chunks2
    assert a.shape == shape and a.dtype == dtype and a.backend == BACKEND
    one_block = host(draw(seed, method, args, shape, dtype=dtype, chunks=-1))
    assert one_block.shape == shape and one_block.dtype == dtype
    np.testing.assert_array_equal(host(a), one_block)
    np.testing.assert_array_equal(host(b), one_block)


@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_later_calls_independent_of_earlier_chunking(data: Any, seed: int) -> None:
    """The n-th call of a generator gives the same numbers whatever the chunks of the calls before it."""
    shape, chunks1, chunks2 = data.draw(shape_and_two_chunkings())
    g1, g2 = gnp.random.default_rng(seed), gnp.random.default_rng(seed)
    first1, first2 = g1.random(shape, chunks=chunks1), g2.random(shape, chunks=chunks2)
    second1, second2 = g1.standard_normal(shape, chunks=chunks2), g2.standard_normal(shape, chunks=chunks1)
    np.testing.assert_array_equal(host(first1), host(first2))
    np.testing.assert_array_equal(host(second1), host(second2))


def test_flat_index_contract() -> None:
    """An element's value depends on its flat (C-order) index, not on the shape around it."""
    flat = host(draw(7, "random", (), 24, chunks=5))
    cube = host(draw(7, "random", (), (2, 3, 4), chunks=(1, 2, 3)))
    np.testing.assert_array_equal(cube.ravel(), flat)


# --- seeds and successive calls ---------------------------------------------------------------------


def test_reproducible() -> None:
    for seed in (0, 1, 2**40, np.random.SeedSequence(5)):
        np.testing.assert_array_equal(host(draw(seed, "random", (), 100)), host(draw(seed, "random", (), 100)))


def test_successive_calls_differ() -> None:
    g = gnp.random.default_rng(3)
    a, b = host(g.random(1000, chunks=100)), host(g.random(1000, chunks=100))
    assert not np.any(a == b)
    c, d = host(g.integers(0, 2**62, size=200)), host(g.integers(0, 2**62, size=200))
    assert not np.any(c == d)


def test_different_seeds_differ() -> None:
    values = [host(draw(seed, "random", (), 1000)) for seed in (0, 1, 2, 12345)]
    for i in range(len(values)):
        for j in range(i):
            assert not np.any(values[i] == values[j])
    assert not np.any(host(gnp.random.default_rng().random(100)) == host(gnp.random.default_rng().random(100)))


def test_default_rng_of_a_generator_is_itself() -> None:
    reference = np.random.default_rng(1)
    assert np.random.default_rng(reference) is reference
    g = gnp.random.default_rng(1)
    assert gnp.random.default_rng(g) is g


def test_lazy_arrays_and_sizes() -> None:
    g = gnp.random.default_rng(0)
    scalar = g.random()
    assert isinstance(scalar, gnp.Array) and scalar.shape == ()
    assert 0.0 <= gnp.fetch(scalar) < 1.0
    for size, shape in [(5, (5,)), ((2, 3), (2, 3)), (np.int64(4), (4,)), ((), ()), (0, (0,))]:
        a = g.standard_normal(size)
        assert isinstance(a, gnp.Array) and a.shape == shape and a.dtype == np.float64
        assert host(a).shape == shape


# --- ranges and moments -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_and_uniform_ranges(dtype: str) -> None:
    g = gnp.random.default_rng(21)
    u = host(g.random(20_000, dtype=dtype, chunks=3000))
    assert u.dtype == dtype and u.min() >= 0.0 and u.max() < 1.0
    v = host(g.uniform(-3.0, 2.0, size=20_000, dtype=dtype, chunks=3000))
    assert v.dtype == dtype and v.min() >= -3.0 and v.max() <= 2.0  # NumPy too can round up to high
    assert v.min() < -2.99 and v.max() > 1.99
    assert_eq(g.uniform(4.0, 4.0, size=3, dtype=dtype), np.random.default_rng(0).uniform(4.0, 4.0, 3).astype(dtype))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "int8", "uint64", "bool"])
def test_integers_ranges(dtype: str) -> None:
    g = gnp.random.default_rng(8)
    info = np.iinfo(dtype) if dtype != "bool" else None
    lo, hi = (0, 2) if info is None else (max(int(info.min), -5), min(int(info.max), 12))
    a = host(g.integers(lo, hi, size=5000, dtype=dtype, chunks=700))
    assert a.dtype == dtype
    np.testing.assert_array_equal(np.unique(a), np.arange(lo, hi).astype(dtype))
    b = host(g.integers(lo, hi, size=5000, dtype=dtype, endpoint=True, chunks=700)) if dtype != "bool" else None
    if b is not None:
        np.testing.assert_array_equal(np.unique(b), np.arange(lo, hi + 1).astype(dtype))
    c = host(g.integers(7, size=5000, chunks=700))  # high=None: [0, low)
    assert c.dtype == np.int64
    np.testing.assert_array_equal(np.unique(c), np.arange(7))
    if info is not None:  # the full range of the dtype
        full = host(g.integers(int(info.min), int(info.max), size=1000, dtype=dtype, endpoint=True))
        assert full.dtype == dtype


def test_integers_single_value() -> None:
    g = gnp.random.default_rng(0)
    assert_eq(g.integers(5, 6, size=4), np.full(4, 5))
    assert_eq(g.integers(5, 5, size=4, endpoint=True), np.random.default_rng(0).integers(5, 5, size=4, endpoint=True))


N = 100_000


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_moments(dtype: str) -> None:
    """Means and standard deviations at 10^5 samples within ~5 standard errors (fixed seed: no flakes)."""
    g = gnp.random.default_rng(2024)
    cases = [
        (g.random(N, dtype=dtype, chunks=9000), 0.5, math.sqrt(1 / 12)),
        (g.uniform(-2.0, 6.0, size=N, dtype=dtype, chunks=9000), 2.0, 8 / math.sqrt(12)),
        (g.standard_normal(N, dtype=dtype, chunks=9000), 0.0, 1.0),
        (g.normal(3.0, 2.0, size=(N // 100, 100), dtype=dtype, chunks=(333, 40)), 3.0, 2.0),
        (g.integers(0, 10, size=N, chunks=9000), 4.5, math.sqrt(99 / 12)),
    ]
    for x, mean, std in cases:
        m, s = gnp.fetch((gnp.mean(x), gnp.std(x)))
        assert abs(m - mean) < 5 * std / math.sqrt(N), (m, mean)
        assert abs(s - std) < 5 * std / math.sqrt(2 * N) * 1.5, (s, std)


def test_normal_tails_and_histogram() -> None:
    """Normal samples: about 31.7% beyond one sigma, 4.55% beyond two; uniform bins evenly filled."""
    z = host(gnp.random.default_rng(5).standard_normal(N, chunks=10_000))
    assert abs(np.mean(np.abs(z) > 1) - 0.3173) < 0.01
    assert abs(np.mean(np.abs(z) > 2) - 0.0455) < 0.004
    counts = np.bincount(host(gnp.random.default_rng(6).integers(0, 20, size=N)), minlength=20)
    expected = N / 20
    assert np.all(np.abs(counts - expected) < 5 * math.sqrt(expected))


# --- bad input fails at the call --------------------------------------------------------------------


BAD = [
    ("integers", (5, 5), {}, ValueError),
    ("integers", (5, 3), {}, ValueError),
    ("integers", (5, 4), {"endpoint": True}, ValueError),
    ("integers", (0, 300), {"dtype": np.uint8}, ValueError),
    ("integers", (-1, 3), {"dtype": np.uint8}, ValueError),
    ("integers", (0, 3), {"dtype": np.float64}, TypeError),
    ("random", (), {"dtype": np.int32}, TypeError),
    ("random", (), {"dtype": np.float16}, TypeError),
    ("standard_normal", (), {"dtype": np.int64}, TypeError),
    ("normal", (0.0, -1.0), {}, ValueError),
    ("uniform", (3.0, 2.0), {}, ValueError),
]


@pytest.mark.parametrize("method, args, kwargs, error", BAD)
def test_bad_parameters_raise_at_call(method: str, args: tuple, kwargs: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        getattr(np.random.default_rng(0), method)(*args, size=3, **kwargs)
    with pytest.raises(error):
        getattr(gnp.random.default_rng(0), method)(*args, size=3, **kwargs)


@pytest.mark.parametrize("size, error", [(-1, ValueError), ((2, -1), ValueError), (2.5, TypeError)])
def test_bad_size(size: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        np.random.default_rng(0).random(size)
    with pytest.raises(error):
        gnp.random.default_rng(0).random(size)


# --- the Monte-Carlo example ------------------------------------------------------------------------


def monte_carlo(n: int, x_max: float, chunks: Any = "auto") -> gnp.Array:
    """The example's estimate of the integral of exp(-x**2) over [-x_max, x_max] (sqrt(pi))."""
    omega = 2 * x_max
    raw = gnp.random.default_rng(42).random(n, dtype=gnp.float32, chunks=chunks)
    samples = omega * raw - x_max
    return (omega / n) * gnp.sum(gnp.exp(-samples**2))


@pytest.mark.parametrize("chunks", ["auto", 2**17, 100_000])
def test_monte_carlo_example(chunks: Any) -> None:
    n, x_max = 10**6, 10.0
    estimate = monte_carlo(n, x_max, chunks)
    assert isinstance(estimate, gnp.Array) and estimate.shape == () and estimate.dtype == np.float32
    value = gnp.fetch(estimate)
    assert abs(value - math.sqrt(math.pi)) < 1e-2
    # the same formula in NumPy over the same samples, float32 throughout
    u = host(gnp.random.default_rng(42).random(n, dtype=np.float32))
    assert u.dtype == np.float32
    samples = np.float32(2 * x_max) * u - np.float32(x_max)
    reference = np.float32(2 * x_max / n) * np.sum(np.exp(-samples**2))
    assert reference.dtype == np.float32
    assert_eq(estimate, reference, rtol=4 * np.finfo(np.float32).eps * math.log2(n))


# --- on a cluster (last: the session's Client becomes the default scheduler) ------------------------


def test_same_numbers_on_a_cluster(client: Any) -> None:
    """Two worker processes compute the same numbers as the local scheduler."""
    a = draw(11, "normal", (1.0, 2.0), (40, 30), chunks=(7, 11))
    b = draw(11, "integers", (0, 1000), 500, chunks=37)
    local_a, local_b = (to_host(v) for v in dask.compute(a, b, scheduler="threads"))
    remote_a, remote_b = client.compute([a, b], sync=True)
    np.testing.assert_array_equal(to_host(remote_a), local_a)
    np.testing.assert_array_equal(to_host(remote_b), local_b)
