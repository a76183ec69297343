"""NumPy interoperability: ``__array_ufunc__`` and ``__array_function__`` route NumPy calls on gnp Arrays to
gnp (results stay gnp Arrays), ``__array_priority__`` wins over ndarray operators, ``__array_namespace__``,
``np.asarray``, and the dask.array fallback for NumPy functions gnp has no native version of."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq

REF = np.arange(1.0, 25.0).reshape(4, 6) / 5


@pytest.fixture
def x() -> gnp.Array:
    return gnp.asarray(REF, chunks=(3, 4))


@pytest.mark.parametrize("call", [
    lambda m, a: m.exp(a),
    lambda m, a: m.add(a, 1),
    lambda m, a: m.multiply(a, a),
    lambda m, a: m.sqrt(a, dtype=np.float64),
    lambda m, a: m.sum(a),
    lambda m, a: m.sum(a, axis=1, keepdims=True),
    lambda m, a: m.mean(a, axis=0),
    lambda m, a: m.max(a, axis=1),
    lambda m, a: m.concatenate([a, a]),
    lambda m, a: m.concatenate([a, a], axis=1),
    lambda m, a: m.transpose(a),
    lambda m, a: m.where(a > 2, a, 0.0),
    lambda m, a: m.add.reduce(a),
    lambda m, a: m.add.reduce(a, axis=1),
    lambda m, a: m.multiply.reduce(a, axis=0),
    lambda m, a: m.maximum.reduce(a, axis=1),
    lambda m, a: m.add.accumulate(a),
    lambda m, a: m.add.accumulate(a, axis=1),
    lambda m, a: m.multiply.accumulate(a),
], ids=["exp", "add", "multiply", "sqrt-dtype", "sum", "sum-keepdims", "mean-axis0", "max", "concatenate",
        "concatenate-axis1", "transpose", "where", "add.reduce", "add.reduce-axis1", "multiply.reduce",
        "maximum.reduce", "add.accumulate", "add.accumulate-axis1", "multiply.accumulate"])
def test_numpy_calls_return_gnp_arrays(x, call):
    out = call(np, x)
    assert isinstance(out, gnp.Array), type(out)
    assert_eq(out, call(np, REF))


@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b, lambda a, b: a ** b,
    lambda a, b: a > b, lambda a, b: a == b,
], ids=["add", "sub", "mul", "div", "pow", "gt", "eq"])
def test_mixed_with_ndarray_gives_gnp_array(x, op):
    other = np.linspace(0.5, 2.0, 24).reshape(4, 6)
    for out, ref in ((op(x, other), op(REF, other)), (op(other, x), op(other, REF))):
        assert isinstance(out, gnp.Array), type(out)
        assert_eq(out, ref)


def test_ndarray_scalar_and_broadcasting(x):
    row = np.arange(6.0)
    assert isinstance(row + x, gnp.Array)
    assert_eq(row + x, row + REF)
    assert_eq(x * np.float64(2), REF * np.float64(2))
    assert_eq(np.float64(2) * x, np.float64(2) * REF)


def test_array_priority():
    assert gnp.Array.__array_priority__ > np.ndarray([]).__array_priority__


@pytest.mark.parametrize("call, shape", [
    (lambda x, o: np.exp(x, out=o), REF.shape),
    (lambda x, o: np.add(x, 1, out=(o,)), REF.shape),
    (lambda x, o: np.add.reduce(x, axis=0, out=o), REF.shape[1:]),
    (lambda x, o: np.add.accumulate(x, out=o), REF.shape),
], ids=["exp", "add", "reduce", "accumulate"])
def test_out_through_numpy_dispatch(x, call, shape):
    """NumPy's out=: a NumPy array is written with the result (and returned), a gnp Array is rebound to it."""
    expected = call(REF, np.empty(shape))
    host = np.empty(shape)
    with gnp.allowfetch():
        result = call(x, host)
    np.testing.assert_allclose(host, expected)
    assert (result[0] if isinstance(result, tuple) else result) is host
    target = gnp.zeros(shape)
    returned = call(x, target)
    assert (returned[0] if isinstance(returned, tuple) else returned) is target
    assert_eq(target, expected)


def test_array_namespace(x):
    assert x.__array_namespace__() is gnp
    assert x.__array_namespace__(api_version="2024.12") is gnp
    assert x.__array_namespace__(api_version="2023.12") is gnp
    with pytest.raises(ValueError, match="2099.01"):
        x.__array_namespace__(api_version="2099.01")
    assert gnp.__array_api_version__ == "2024.12"
    xp = x.__array_namespace__()
    assert_eq(xp.sum(xp.exp(x), axis=0), np.exp(REF).sum(axis=0))


def test_np_asarray_gives_numpy_data(x):
    out = np.asarray(x)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, REF)
    out32 = np.asarray(gnp.exp(x), dtype=np.float32)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, np.exp(REF).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(np.array(gnp.sum(x)), np.array(REF.sum()), rtol=1e-12)


@pytest.fixture
def fresh_fallback_warnings(monkeypatch):
    """Forget which fallbacks have warned already in this process (other tests may have used them)."""
    from dask_gpunumeric.api import interop as _protocols

    monkeypatch.setattr(_protocols, "_WARNED", set())


@pytest.mark.parametrize("name, call", [
    ("delete", lambda m, a: m.delete(a, 1, axis=1)),
    ("insert", lambda m, a: m.insert(a, 2, 7.5, axis=1)),
    ("i0", lambda m, a: m.i0(a)),
    ("unwrap", lambda m, a: m.unwrap(a)),  # not in dask.array: computed on the host, wrapped back
], ids=["delete", "insert", "i0", "unwrap"])
def test_fallback_returns_gnp_array_and_warns_once(x, name, call, fresh_fallback_warnings):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call(np, x)
        again = call(np, x)
    assert isinstance(out, gnp.Array) and isinstance(again, gnp.Array)
    assert_eq(out, call(np, REF))
    assert_eq(again, call(np, REF))
    ours = [w for w in caught if issubclass(w.category, gnp.FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert f"numpy.{name}" in str(ours[0].message)
    assert ours[0].filename == __file__  # points at the caller, not into gnp


def test_fallback_warns_once_per_function(x, fresh_fallback_warnings):
    with pytest.warns(gnp.FallbackWarning, match="numpy.delete") as first:
        np.delete(x, 1, axis=1)
    assert len([w for w in first if issubclass(w.category, gnp.FallbackWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        assert_eq(np.delete(x * 2, 1, axis=1), np.delete(REF * 2, 1, axis=1))  # no second warning for delete
    with pytest.warns(gnp.FallbackWarning, match="numpy.i0"):
        assert_eq(np.i0(x), np.i0(REF))  # another function warns on its own
    assert issubclass(gnp.FallbackWarning, UserWarning)


def test_fallback_result_composes(x, fresh_fallback_warnings):
    with pytest.warns(gnp.FallbackWarning):
        d = np.delete(x, 1, axis=1)
    assert_eq(gnp.sum(d * 2, axis=0), (np.delete(REF, 1, axis=1) * 2).sum(axis=0))
    assert_eq(np.exp(d), np.exp(np.delete(REF, 1, axis=1)))


@pytest.mark.parametrize("how", ["dispatch", "namespace"])
def test_fallback_on_the_host_says_so_and_keeps_the_backend(x, how, fresh_fallback_warnings):
    """A function dask.array lacks is computed on the host and wrapped back as a gnp Array on x's backend
    (through NumPy's dispatch, and as gnp.<name> for code with only the import changed)."""
    table = np.array([0.0, 1.0, 3.0])
    with pytest.warns(gnp.FallbackWarning, match="moved the data to the host") as record:
        out = np.trim_zeros(x[0]) if how == "dispatch" else gnp.trim_zeros(x[0])
    assert record[0].filename == __file__
    assert isinstance(out, gnp.Array) and out.backend == x.backend
    assert_eq(out, np.trim_zeros(REF[0]))
    with pytest.raises(AttributeError):
        gnp.no_such_function  # noqa: B018
    assert gnp.interp(gnp.asarray(table), table, table).backend == x.backend


def test_ufunc_fallback(fresh_fallback_warnings):
    ref = np.arange(5.0) / 2
    v = gnp.asarray(ref, chunks=2)
    with pytest.warns(gnp.FallbackWarning, match=r"numpy\.add\.outer"):
        outer = np.add.outer(v, v)
    assert isinstance(outer, gnp.Array)
    assert_eq(outer, np.add.outer(ref, ref))
    with pytest.warns(gnp.FallbackWarning, match=r"numpy\.modf"):
        frac, whole = np.modf(v)
    ref_frac, ref_whole = np.modf(ref)
    assert isinstance(frac, gnp.Array) and isinstance(whole, gnp.Array)
    assert_eq(frac, ref_frac)
    assert_eq(whole, ref_whole)


def test_fetch_runs_small_graphs_in_order_freeing_intermediates() -> None:
    """gnp.fetch runs a small graph in this thread in dask.order's order, freeing each intermediate after
    its last use; with Dask callbacks active (a progress bar) it goes through Dask's local scheduler,
    which calls them."""
    from dask.callbacks import Callback

    from dask_gpunumeric.expr import Materialized

    host = np.linspace(-1, 1, 12)
    y = (gnp.asarray(host, chunks=4) * 2 + 1).sum()
    expected = float((host * 2 + 1).sum())
    assert gnp.fetch(y) == pytest.approx(expected)
    materialized = Materialized((y.expr.finalize_compute(),))
    schedule = materialized.schedule()
    keys = [k for k, _ in schedule]
    assert sorted(keys, key=str) == sorted(materialized._graph, key=str)
    position = {k: i for i, k in enumerate(keys)}
    released = [d for _, done in schedule for d in done]
    (out,) = y.__dask_keys__()
    assert sorted(released + [out], key=str) == sorted(keys, key=str)  # every intermediate freed once
    for i, (key, _) in enumerate(schedule):
        for dep in materialized._graph[key].dependencies:
            assert position[dep] < i  # dependencies first
    seen: list = []
    with Callback(pretask=lambda key, dsk, state: seen.append(key)):
        assert gnp.fetch(y) == pytest.approx(expected)
    assert set(seen) == set(keys)


def test_fetch_leaves_no_reference_cycles() -> None:
    """Building and fetching an expression (a random draw through elementwise ops into a sum, a 2-d array's
    keys) makes no reference cycles: the tree is freed when the last reference goes, not by the cyclic
    garbage collector (a cycle through a node holds the whole tree, and collections cost time). In a fresh
    process: what other tests leave behind (a scheduler setting, an active client) is not under test."""
    script = """
import gc
import dask_gpunumeric as gnp

def estimate():
    raw = gnp.random.default_rng(42).random(64, dtype=gnp.float32)
    return gnp.fetch((20.0 / 64) * gnp.sum(gnp.exp(-(20.0 * raw - 10.0) ** 2)))

grid = gnp.ones((4, 6), chunks=(2, 3))
estimate(), grid.__dask_keys__()  # first runs fill caches (compiled graphs, dtypes) that live on
gc.collect()
gc.disable()
for _ in range(5):
    estimate()
    assert len(grid.__dask_keys__()) == 2
print(gc.collect())
"""
    env = {**os.environ, "GNP_BACKEND": BACKEND}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "0", done.stdout


@pytest.mark.parametrize("shape, chunks", [
    ((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((2, 3, 4), (2, 3, 4)), ((4, 6), (2, 3)), ((5, 2, 3), (2, 1, 3)),
])
def test_fetch_every_shape_and_chunking(shape: tuple[int, ...], chunks: tuple[int, ...]) -> None:
    """gnp.fetch gives NumPy's shape and values whether the array has one block (keys nested per dimension)
    or several, as np.asarray and .compute() do."""
    expected = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    x = gnp.from_array(expected, chunks=chunks) + 0
    fetched = gnp.fetch(x)
    if shape == ():
        assert fetched == expected
    else:
        assert isinstance(fetched, np.ndarray)
        np.testing.assert_array_equal(fetched, expected)
    np.testing.assert_allclose(gnp.fetch(gnp.linalg.pinv(gnp.ones((2, 3)))), np.linalg.pinv(np.ones((2, 3))))
