"""Shared test helpers: the backend under test (NumPy blocks in CI, CuPy blocks with GNP_BACKEND=cupy on a
GPU machine), comparison against NumPy, hypothesis profiles and a 2-worker distributed cluster."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import dask_gpunumeric as gnp

BACKEND = gnp.config.backend()

settings.register_profile(
    "default", max_examples=int(os.environ.get("GNP_HYPOTHESIS_EXAMPLES", "25")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("default")


@st.composite
def axis_chunks(draw: st.DrawFn, n: int, empty: bool = False) -> tuple[int, ...]:
    """A random partition of an axis of length ``n`` into chunks; with ``empty``, now and then with
    zero-length blocks too."""
    if n == 0:
        return (0,)
    if empty and draw(st.integers(0, 4)) == 0:
        cuts = draw(st.lists(st.integers(0, n), max_size=5))
    elif n > 1:
        cuts = draw(st.lists(st.integers(1, n - 1), max_size=5, unique=True))
    else:
        cuts = []
    edges = [0, *sorted(cuts), n]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def to_host(value: Any) -> Any:
    """A NumPy array (or Python scalar) from a computed block of either backend."""
    if type(value).__module__.startswith("cupy"):
        return value.get()
    return value


def check_entry_points(actual: gnp.Array) -> Any:
    """The computed value of ``actual`` (a block of the backend under test), after checking that every way
    a user gets a result gives the same: ``.compute()``, ``gnp.fetch``, ``np.asarray`` (inside
    ``gnp.allowfetch``: it is an implicit fetch), ``dask.compute`` and ``dask.compute`` of it in a tuple."""
    computed = actual.compute()
    backend = "cupy" if type(computed).__module__.startswith("cupy") else "numpy"
    assert backend == actual.backend, (backend, actual.backend)
    assert computed.shape == actual.shape and computed.dtype == actual.dtype, (computed.shape, computed.dtype)
    host = np.asarray(to_host(computed))
    fetched = gnp.fetch(actual)
    if actual.ndim == 0:  # a Python scalar, as NumPy's .item()
        assert type(fetched) is type(host.item()), (type(fetched), host.dtype)
    with gnp.allowfetch():
        as_numpy = np.asarray(actual)
    (dasked,), (dasked_pair, _) = dask.compute(actual), dask.compute(actual, actual[...])
    for how, value in (("gnp.fetch", np.asarray(fetched)), ("np.asarray", as_numpy),
                       ("dask.compute", dasked), ("dask.compute of two", dasked_pair)):
        value = np.asarray(to_host(value))
        assert isinstance(value, np.ndarray) and value.shape == host.shape, (how, value.shape, host.shape)
        assert actual.ndim == 0 and how == "gnp.fetch" or value.dtype == host.dtype, (how, value.dtype, host.dtype)
        np.testing.assert_array_equal(value, host, err_msg=how)
    return computed


def compile_check(source: str) -> None:
    """Check that nvcc compiles ``source``: now, or, where ``GNP_KERNEL_DUMP_DIR`` is set (CI), with every
    other generated kernel after the tests, many per translation unit (``ci/compile_kernels.py``, which fails
    the run on any error): one nvcc call per test costs more than the whole batch step's share."""
    from dask_gpunumeric.kernels import cuda as _cuda

    if os.environ.get("GNP_KERNEL_DUMP_DIR"):
        _cuda.record_source(source)
    else:
        _cuda.nvcc_compile_check(source)


def assert_eq(actual: Any, expected: Any, *, rtol: float | None = None, atol: float = 0.0,
              check_dtype: bool = True) -> None:
    """Check a gnp result against NumPy's: metadata before computing, then the computed values.

    For an Array: its declared shape and dtype equal NumPy's, every user entry point gives the same values
    (``check_entry_points``), the computed block has that shape and dtype and lives on the backend under
    test, and the values match (exactly for integers and booleans, to ``rtol`` for floats, NaNs in the same
    places).
    """
    expected = np.asarray(expected)
    if isinstance(actual, gnp.Array):
        assert actual.shape == expected.shape, (actual.shape, expected.shape)
        if check_dtype:
            assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        actual = check_entry_points(actual)
    actual = np.asarray(to_host(actual))  # computed results (dask.compute) may be CuPy arrays
    if check_dtype:
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if expected.dtype.kind in "fc":
        if rtol is None:
            rtol = 1e-5 if expected.dtype in (np.float32, np.complex64) else 1e-10
            rtol = 1e-2 if expected.dtype == np.float16 else rtol
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def check_like_numpy(ours: Callable[[], Any], numpy: Callable[[], Any], **tolerance: Any) -> None:
    """Our result equals NumPy's, or we raise the exception NumPy raises (a subclass of it)."""
    try:
        expected = numpy()
    except Exception as e:  # noqa: BLE001 - whatever NumPy raises, we must raise too
        with pytest.raises(type(e)):
            ours()
        return
    result = ours()
    if isinstance(expected, tuple):
        assert isinstance(result, tuple) and len(result) == len(expected)
        for r, x in zip(result, expected):
            assert_eq(r, x, **tolerance)
    else:
        assert_eq(result, expected, **tolerance)


def scheduler_runs(client: Any, keys: Any) -> dict:
    """How many times the scheduler sent each key to a worker (from the scheduler's story of the keys)."""
    counts = dict.fromkeys(keys, 0)
    for entry in client.story(*keys):
        if entry[0] == "scheduler" and entry[3] == "processing":
            counts[entry[1]] += 1
    return counts


@pytest.fixture(scope="session")
def client():
    """A distributed Client on a 2-worker LocalCluster (worker processes), shared by the session."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster, set_as_default=False) as c:
        yield c


CLUSTER_FIXTURES = {"client", "cluster_client", "one_worker", "own_client", "small_history_client"}
"""Fixtures that start a cluster: the session's (``client``) and the test modules' own."""


def _uses_cluster_fixture(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    distributed = callspec is not None and callspec.params.get("scheduler") == "distributed"  # test_xarray's
    return distributed or not CLUSTER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on clusters first, in their modules' order: pytest-xdist's work stealing takes tests from the
    end of a process's queue, so a module's cluster then starts once, in one process, instead of again wherever
    stolen tests of its module land (and the session's ``client`` in one process, not in each)."""
    items.sort(key=lambda item: not _uses_cluster_fixture(item))
