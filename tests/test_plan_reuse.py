"""The plain path (no ``accelerate``) reuses plans by the shape of a tree: a tree built again on other inputs
(a loop persisting each step, a function called on new arrays) is optimized once; results stay NumPy's, keys
stay distinct, the cache stays bounded and keeps no data alive. Counted by calls of the optimizer."""
from __future__ import annotations

import gc
import pathlib
import sys
import weakref

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq, to_host
from dask_gpunumeric.optimize import pipeline as _optimizer
from dask_gpunumeric.runtime import reuse as _reuse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import rk4 as _rk4  # noqa: E402 - the benchmark's user code


@pytest.fixture
def optimized(monkeypatch):
    """The names of the trees the optimizer ran on, in order."""
    names: list[str] = []
    optimize = _optimizer.optimize
    monkeypatch.setattr(_optimizer, "optimize", lambda root: names.append(root._name) or optimize(root))
    return names


def step(xp, u):
    """A Jacobi sweep written as users write it (a copy, then an update of the interior)."""
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def test_a_loop_persisting_each_step_is_optimized_once(optimized):
    start = np.random.default_rng(0).random((12, 10))
    x, expected = gnp.asarray(start, chunks=(6, 5)).persist(), start
    optimized.clear()
    for _ in range(6):
        x = step(gnp, x).persist()
        expected = step(np, expected)
    assert len(optimized) == 1  # the first step's tree; the later ones reuse its plan
    assert_eq(x, expected)


def test_new_inputs_each_call_reuse_the_plan(optimized):
    def f(a, b):
        return gnp.sum(gnp.exp(a) * b + 1.5, axis=0), a - b

    rng = np.random.default_rng(1)
    for call in range(4):
        ha, hb = rng.random((8, 6)), rng.random((8, 6))
        s, d = f(gnp.asarray(ha, chunks=(4, 3)), gnp.asarray(hb, chunks=(4, 3)))
        assert_eq(s, (np.exp(ha) * hb + 1.5).sum(axis=0))
        s, d = dask.compute(*f(gnp.asarray(ha, chunks=(4, 3)), gnp.asarray(hb, chunks=(4, 3))))
        np.testing.assert_allclose(to_host(s), (np.exp(ha) * hb + 1.5).sum(axis=0), rtol=1e-12)
        np.testing.assert_array_equal(to_host(d), ha - hb)
        if call == 0:
            first = len(optimized)
    assert len(optimized) == first  # later calls: plans of the first call's trees


def test_another_chunking_dtype_or_kind_of_scalar_is_another_plan(optimized):
    h = np.arange(12.0)
    for scale, chunks, dtype, again in [(2.5, 4, np.float64, False), (3.5, 4, np.float64, True),
                                        (2.5, 6, np.float64, False), (2.5, 4, np.float32, False),
                                        (3, 4, np.float64, False), (2.5j, 4, np.float64, False),
                                        (np.float32(2.5), 4, np.float32, False), (np.float32(3.5), 4, np.float32, True)]:
        before = len(optimized)
        x = gnp.asarray(h.astype(dtype) + 1, chunks=chunks)
        assert_eq(gnp.fetch(gnp.sqrt(x) * scale), np.sqrt(h.astype(dtype) + 1) * scale)
        assert len(optimized) == before + (not again)


def rk4_steps(u, v, dt, steps=3):
    """``benchmarks/rk4.py``'s classical RK4 steps of size ``dt`` (Python floats computed from ``dt``)."""
    return _rk4.rk4(None, u, v, steps=steps, dt=dt)


def test_new_numbers_each_call_reuse_the_plan(optimized):
    """A function called with a new Python float each call (a time step): its trees differ only in numbers,
    so from the second call on nothing is optimized, and each call gives NumPy's results through every entry
    point (``assert_eq``: gnp.fetch, np.asarray, .compute(), dask.compute)."""
    rng = np.random.default_rng(3)
    hu, hv = (rng.uniform(0.5, 1.5, (12, 8)).astype(np.float32) for _ in range(2))
    u, v = gnp.asarray(hu, chunks=(6, 4)), gnp.asarray(hv, chunks=(6, 4))
    for call, dt in enumerate([0.05, 0.07, 0.011, 1e-3]):
        eu, ev = rk4_steps(hu, hv, dt)
        gu, gv = rk4_steps(u, v, dt)
        assert_eq(gu, eu)
        assert_eq(gnp.sum(gv * gu), np.sum(ev * eu))
        np.testing.assert_allclose([to_host(r) for r in dask.compute(gu, gv)], [eu, ev], rtol=1e-5)
        if call == 0:
            first = len(optimized)
    assert len(optimized) == first


def test_numbers_whose_values_shape_the_plan_are_kept_by_value(optimized):
    """A number whose value the plan depends on is part of its structure (another value, another plan), so each
    call gives NumPy's results: an integer exponent (``x ** 2`` is ``square``), a roll's shift, the 0 and 1 of
    ``x * 1`` and ``x + 0``; an integer out of an integer array's range gives NumPy's error."""
    h = np.linspace(-2.0, 3.0, 20).reshape(4, 5)
    x = gnp.asarray(h, chunks=(2, 5))
    for p in (2, 3, 2.0, 3.0, 0.5):
        assert_eq(gnp.fetch(gnp.abs(x) ** p + 0.25), np.abs(h) ** p + 0.25)
    for shift in (1, 2, -3):
        assert_eq(gnp.fetch(gnp.roll(x, shift, axis=1) * 1.5), np.roll(h, shift, axis=1) * 1.5)
    for c in (1.0, 2.5, 0.0, 3.5, -0.0, 4.5, 1, 0, float("nan"), float("inf")):
        assert_eq(gnp.fetch(gnp.exp(x * c) + c), np.exp(h * c) + c)
        assert_eq(gnp.fetch(gnp.exp(-x) + c), np.exp(-h) + c)
    small = gnp.asarray(np.arange(10, dtype=np.uint8), chunks=5)
    for c in (3, 200):
        assert_eq(gnp.fetch(small + c), np.arange(10, dtype=np.uint8) + c)
    with pytest.raises(OverflowError) as expected:
        np.arange(10, dtype=np.uint8) + 300
    with pytest.raises(OverflowError, match=str(expected.value)):
        gnp.fetch(small + 300)


def test_equal_numbers_and_numbers_met_elsewhere(optimized):
    """Trees whose numbers are equal in one call and not in the next, or whose number is also a constant's
    value (the same Python object twice), give NumPy's results on every call."""
    h = np.linspace(-1.0, 1.0, 12)
    x = gnp.asarray(h, chunks=4)
    for a, b in [(2.5, 2.5), (1.5, 3.5), (4.5, 4.5), (0.25, 0.75)]:
        assert_eq(gnp.fetch(x * a + gnp.exp(x * b)), h * a + np.exp(h * b))
    c = 2.5
    for fill, scale in [(c, c), (2.5, 3.5), (2.5, 2.5)]:
        assert_eq(gnp.fetch(gnp.full(12, fill, chunks=4) + x * scale), np.full(12, fill) + h * scale)


def test_the_same_input_twice_is_not_two_inputs(optimized):
    ha, hb = np.arange(6.0), np.arange(6.0) * 3
    a, b = gnp.asarray(ha, chunks=3), gnp.asarray(hb, chunks=3)
    assert_eq(gnp.fetch(a * b + a), ha * hb + ha)
    assert_eq(gnp.fetch(a * a + a), ha * ha + ha)  # another structure: not a*b's plan with b = a
    assert_eq(gnp.fetch(b * a + b), hb * ha + hb)  # a*b's structure, on swapped inputs


def test_reused_graphs_have_keys_of_their_own():
    """Two trees of one structure: their graphs, merged as HighLevelGraph users do, share no key but their
    common input's, and compute their own results."""
    ha, hb = np.arange(8.0), np.arange(8.0) + 10
    base = gnp.asarray(np.ones(8), chunks=4)
    a, b = gnp.asarray(ha, chunks=4), gnp.asarray(hb, chunks=4)
    x, y = gnp.sin(a) * base + 2, gnp.sin(b) * base + 2
    gx, gy = dict(x.__dask_graph__()), dict(y.__dask_graph__())
    shared = gx.keys() & gy.keys()
    assert {k[0] for k in shared} <= {base.name}
    merged = {**gx, **gy}
    rx, ry = dask.get(merged, [x.__dask_keys__(), y.__dask_keys__()])
    np.testing.assert_allclose(np.concatenate([to_host(r) for r in rx]), np.sin(ha) + 2, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([to_host(r) for r in ry]), np.sin(hb) + 2, rtol=1e-12)


def test_the_cache_keeps_no_input_blocks_and_stays_bounded():
    h = np.random.default_rng(2).random(2**18)  # over the size that graphs cached by name may hold
    x = gnp.asarray(h, chunks=2**16)
    assert_eq(gnp.fetch(gnp.cos(x) + 1), np.cos(h) + 1)
    block = weakref.ref(h)
    del x, h
    gc.collect()
    assert block() is None  # the plan of cos(x) + 1 holds nothing of x
    for k in range(_reuse._TEMPLATES_SIZE + 5):
        gnp.fetch(gnp.asarray(np.ones(4), chunks=2) + k)  # (an int: part of the structure)
    assert len(_reuse._TEMPLATES) <= _reuse._TEMPLATES_SIZE


def test_compute_and_persist_of_one_array_match_dask_compute():
    h = np.arange(24.0).reshape(4, 6)
    for x in (gnp.asarray(h), gnp.asarray(h, chunks=(2, 3)), gnp.sum(gnp.asarray(h, chunks=(2, 3)), axis=1)):
        y = gnp.exp(x) - 1
        np.testing.assert_array_equal(to_host(y.compute()), to_host(dask.compute(y)[0]))
        p, (q,) = y.persist(), dask.persist(y)
        assert p.name == q.name == y.name and p.chunks == q.chunks
        np.testing.assert_array_equal(to_host(p.compute()), to_host(q.compute()))


@pytest.mark.parametrize("chunks", [(6, 5), (4, 10), (12, 10)])
def test_repeated_slices_and_updates_as_numpy(chunks):
    """Slices repeated on arrays of several chunkings (their plans are made once per chunking) and interior
    updates whose value has the region's chunks, or other chunks, or another dtype, or broadcasts."""
    h = np.arange(120.0).reshape(12, 10)
    x = gnp.asarray(h, chunks=chunks)
    for index in [(slice(1, -1), slice(None, -2)), (slice(None), slice(None)), (slice(None, None, -2), slice(3, 4))]:
        for _ in range(2):
            assert_eq(x[index], h[index])
    for value, expected in [(x[2:, 1:-1] * 2, h[2:, 1:-1] * 2), (gnp.asarray(h[2:, 1:-1]), h[2:, 1:-1]),
                            (x[2:, 1:-1].astype(np.float32), h[2:, 1:-1].astype(np.float32)),
                            (x[0, 1:-1], h[0, 1:-1])]:
        y, e = x.copy(), h.copy()
        y[:-2, 1:-1] = value
        e[:-2, 1:-1] = expected
        assert_eq(y, e)


def test_numbers_beside_a_loop_body():
    """A tree holding a loop (whose body the structure sees only by its token) keeps its numbers by value:
    each call, with numbers in the body and around the loop, gives NumPy's results."""
    h = np.linspace(0.0, 1.0, 16)
    x = gnp.asarray(h, chunks=8)
    for c in (0.5, 0.25, 0.75):
        got = gnp.fori_loop(3, lambda i, u: (u + gnp.roll(u, 1)) * c, x * c) + c
        expected = h * c
        for _ in range(3):
            expected = (expected + np.roll(expected, 1)) * c
        assert_eq(gnp.fetch(got), expected + c)
