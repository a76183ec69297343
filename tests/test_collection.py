"""The Dask collection protocol of gnp.Array: compute/persist/optimize, tokens, pickling, graphs and keys
(HLG-style use), metadata and repr, conversions to and from dask.array and between backends, and settings."""
from __future__ import annotations

import pickle
import re

import dask
import dask.array as da
import numpy as np
import pytest
from dask.base import compute_as_if_collection, is_dask_collection, tokenize
from dask.callbacks import Callback
from dask.core import flatten
from dask.utils import key_split

import dask_gpunumeric as gnp
from dask_gpunumeric.expr import FromGraph
from conftest import BACKEND, assert_eq, to_host

# a key name: lowercase words, then the token; no digits before the token (the dashboard's task prefix)
KEY_NAME = re.compile(r"[a-z]+(?:-[a-z]+)*-[0-9a-f]{8,}")


class RecordTasks(Callback):
    """Records the key of every task the local scheduler runs."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list = []

    def _pretask(self, key, dsk, state) -> None:
        self.keys.append(key)

    def count(self, prefix: str) -> int:
        """How many tasks with this dashboard prefix ran."""
        return sum(key_split(k) == prefix for k in self.keys)


@pytest.fixture(autouse=True)
def local_scheduler():
    """The local threaded scheduler (the single-device default), even after a distributed Client was made."""
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture
def data() -> np.ndarray:
    return np.arange(24.0).reshape(4, 6) / 7


def test_compute_returns_backend_ndarray(data):
    x = gnp.asarray(data, chunks=(2, 4))
    out = gnp.exp(x).compute()
    assert type(out).__module__.split(".")[0] == BACKEND
    assert type(out).__name__ == "ndarray"
    np.testing.assert_allclose(to_host(out), np.exp(data), rtol=1e-12)
    assert is_dask_collection(x)


def test_compute_zero_d(data):
    s = gnp.sum(gnp.asarray(data, chunks=2))
    out = s.compute()
    assert type(out).__module__.split(".")[0] == BACKEND
    assert out.shape == () and out.dtype == np.float64
    np.testing.assert_allclose(to_host(out), data.sum(), rtol=1e-12)


def test_dask_compute_shares_subexpression(data):
    x = gnp.asarray(data, chunks=(2, 3))
    t = gnp.cumsum(x, axis=1)  # a scan: its blocks are tasks of their own, whatever the optimizer fuses
    a, b = t + 1, gnp.sum(t, axis=0)
    shared = {k for k in a.__dask_graph__() if k[0] == t.name}
    assert shared == {k for k in b.__dask_graph__() if k[0] == t.name} == set(flatten(t.__dask_keys__()))
    with RecordTasks() as rec:
        ra, rb = dask.compute(a, b)
    assert len(rec.keys) == len(set(rec.keys))  # no key ran twice
    assert sum(k[0] == t.name for k in rec.keys) == x.npartitions  # the shared blocks ran once
    assert rec.count("array") == x.npartitions
    np.testing.assert_allclose(to_host(ra), np.cumsum(data, axis=1) + 1, rtol=1e-12)
    np.testing.assert_allclose(to_host(rb), np.cumsum(data, axis=1).sum(axis=0), rtol=1e-12)


def test_dask_compute_shares_input_blocks(data):
    x = gnp.asarray(data, chunks=(2, 3))
    e = gnp.exp(x)
    with RecordTasks() as rec:
        ra, rb = dask.compute(e + 1, e * 2)
    assert len(rec.keys) == len(set(rec.keys))
    assert rec.count("array") == x.npartitions  # the data blocks are read once for both results
    np.testing.assert_allclose(to_host(ra), np.exp(data) + 1, rtol=1e-12)
    np.testing.assert_allclose(to_host(rb), np.exp(data) * 2, rtol=1e-12)


def test_dask_compute_mixed_with_reductions(data):
    x = gnp.asarray(data, chunks=(2, 3))
    s, m, y = dask.compute(gnp.sum(x), gnp.mean(x, axis=0), x.T)
    np.testing.assert_allclose(to_host(s), data.sum(), rtol=1e-12)
    np.testing.assert_allclose(to_host(m), data.mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(to_host(y), data.T)


def test_persist_then_further_ops(data):
    x = gnp.asarray(data, chunks=(2, 3))
    e = gnp.exp(x)
    p = e.persist()
    assert isinstance(p, gnp.Array)
    assert p.name == e.name and p.chunks == e.chunks and p.dtype == e.dtype and p.backend == e.backend
    assert_eq(p, np.exp(data))
    with RecordTasks() as rec:
        assert_eq(gnp.sum(p * 2, axis=1), (np.exp(data) * 2).sum(axis=1))
    assert rec.count("exp") == 0 and rec.count("array") == 0  # persisted blocks are not recomputed


def test_graph_on_persisted_inputs_is_optimized_once_and_keeps_no_blocks(data, monkeypatch):
    """A tree on persisted Arrays, built again (as a repeated call does), reuses its optimized graph from its
    second build on; each computation reads the persisted blocks of its own call, the cached graph holds
    none of them (it keeps no data alive), and the same tree computing its inputs has a graph of its own."""
    import gc
    import weakref

    from dask_gpunumeric.runtime import compile as _compile
    from dask_gpunumeric.optimize import pipeline as _optimizer

    optimized = []
    optimize = _optimizer.optimize
    monkeypatch.setattr(_optimizer, "optimize", lambda root: optimized.append(root._name) or optimize(root))
    x = gnp.asarray(data, chunks=(2, 3))
    e = gnp.exp(x) * 2
    f = lambda a: gnp.sum(gnp.sin(a) + 1, axis=0)  # noqa: E731
    expected = (np.sin(np.exp(data) * 2) + 1).sum(axis=0)
    p = e.persist()
    for run in range(4):
        with RecordTasks() as rec:
            assert_eq(f(p), expected)
            assert_eq(dask.persist(f(p))[0], expected)
        assert rec.count("exp") == 0 and rec.count("array") == 0  # the persisted blocks, not recomputed
        if run == 1:
            first = len(optimized)
    assert len(optimized) == first  # the later runs reused the graphs cached at the second
    assert_eq(f(e), expected)  # the same tree on the unpersisted source: its own graph
    assert len(optimized) == first + 1
    block = weakref.ref(next(iter(p.expr.operand("layer").values())))
    del p
    gc.collect()
    assert block() is None  # freed: the cache holds no persisted block
    assert _compile._GRAPH_CACHE


@pytest.mark.parametrize("gnp_first", [True, False])
def test_dask_compute_and_persist_with_dask_array_by_default_scheduler(data, gnp_first):
    """``dask.compute``/``dask.persist`` of a gnp Array beside a dask.array, with no scheduler configured:
    Dask's default-scheduler check accepts the pair (ours stands in for Dask's threaded one)."""
    x = gnp.asarray(data, chunks=(2, 3)) * 2
    d = da.from_array(data, chunks=(3, 2)) + 1
    pair = (x, d) if gnp_first else (d, x)
    with dask.config.set(scheduler=None):
        computed = dict(zip(("x", "d") if gnp_first else ("d", "x"), dask.compute(*pair)))
        persisted = dict(zip(("x", "d") if gnp_first else ("d", "x"), dask.persist(*pair)))
    np.testing.assert_allclose(to_host(computed["x"]), data * 2, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(computed["d"]), data + 1, rtol=1e-12)
    assert isinstance(persisted["x"], gnp.Array) and isinstance(persisted["d"], da.Array)
    assert_eq(persisted["x"], data * 2)
    np.testing.assert_allclose(np.asarray(persisted["d"].compute()), data + 1, rtol=1e-12)


def test_dask_persist_several(data):
    x = gnp.asarray(data, chunks=(3, 2))
    a, b = dask.persist(gnp.sin(x), gnp.sum(x, axis=0))
    assert isinstance(a, gnp.Array) and isinstance(b, gnp.Array)
    assert_eq(a + b, np.sin(data) + data.sum(axis=0))
    assert_eq(b, data.sum(axis=0))


def test_dask_persist_nested_and_unoptimized(data):
    # Arrays persist through their scheduler's persist (one compiled graph for all of them), with Dask's
    # options (optimize_graph=False) left to Dask; either way the containers and other values come back as given
    x = gnp.asarray(data, chunks=(3, 2))
    y = gnp.exp(x)
    (a, [b, c], n), kept = dask.persist((y + 1, [gnp.sum(y, axis=1), y], 5), {"d": x * 2})
    d = kept["d"]
    assert n == 5 and list(kept) == ["d"]
    assert all(isinstance(v.expr, FromGraph) for v in (a, b, c, d))
    assert_eq(a, np.exp(data) + 1)
    assert_eq(b, np.exp(data).sum(axis=1))
    assert_eq(c, np.exp(data))
    assert_eq(d, data * 2)
    (e,) = dask.persist(y - 1, optimize_graph=False)
    assert_eq(e, np.exp(data) - 1)


def test_dask_optimize(data):
    x = gnp.asarray(data, chunks=(2, 3))
    a, b = dask.optimize(gnp.exp(x) + 1, gnp.max(x, axis=1))
    assert_eq(a, np.exp(data) + 1)
    assert_eq(b, data.max(axis=1))


def test_tokenize_deterministic(data):
    def build(values: np.ndarray, chunks=(2, 3)) -> gnp.Array:
        return gnp.exp(gnp.asarray(values, chunks=chunks)) + 1

    x = build(data)
    assert tokenize(x) == tokenize(x)
    assert tokenize(x) == tokenize(build(data.copy()))
    assert build(data).name == build(data.copy()).name
    assert tokenize(x) != tokenize(build(data + 1))
    assert tokenize(x) != tokenize(build(data, chunks=(4, 3)))
    assert tokenize(x) != tokenize(gnp.exp(gnp.asarray(data, chunks=(2, 3))) + 2)
    assert tokenize(gnp.sum(x)) != tokenize(gnp.prod(x))
    # random draws are functions of (seed, draw), so equal generators give equal tokens
    assert tokenize(gnp.random.default_rng(3).random(10)) == tokenize(gnp.random.default_rng(3).random(10))
    assert tokenize(gnp.random.default_rng(3).random(10)) != tokenize(gnp.random.default_rng(4).random(10))


@pytest.mark.parametrize("persisted", [False, True])
def test_pickle_roundtrip(data, persisted):
    x = gnp.cos(gnp.asarray(data, chunks=(2, 3))) * 3
    if persisted:
        x = x.persist()
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y, gnp.Array)
    assert y.name == x.name and tokenize(y) == tokenize(x)
    assert_eq(y, np.cos(data) * 3)
    assert_eq(gnp.sum(y), (np.cos(data) * 3).sum())


def test_visualize(data, tmp_path):
    pytest.importorskip("graphviz")
    x = gnp.sum(gnp.exp(gnp.asarray(data, chunks=2)), axis=0)
    target = tmp_path / "graph.png"
    x.visualize(filename=str(target))
    assert target.exists() and target.stat().st_size > 0


@pytest.mark.parametrize("op, ref", [
    (lambda x: gnp.exp(x), lambda a: np.exp(a)),
    (lambda x: gnp.sum(x), lambda a: a.sum()),
    (lambda x: gnp.mean(x, axis=1), lambda a: a.mean(axis=1)),
    (lambda x: x.T[1:, ::2], lambda a: a.T[1:, ::2]),
], ids=["exp", "sum", "mean", "slice"])
def test_hlg_style_compute(data, op, ref):
    x = op(gnp.asarray(data, chunks=(3, 4)))
    graph, keys = x.__dask_graph__(), x.__dask_keys__()
    assert set(flatten(keys)) <= set(graph)
    results = compute_as_if_collection(type(x), graph, keys)
    finalize, args = x.__dask_postcompute__()
    out = finalize(results, *args)
    np.testing.assert_allclose(to_host(out), ref(data), rtol=1e-12)
    # the same pieces through the persist protocol
    rebuild, rargs = x.__dask_postpersist__()
    rebuilt = rebuild(dict(zip(flatten(keys), flatten(results, container=(list, tuple)))), *rargs)
    assert_eq(rebuilt, ref(data))


def test_hlg_style_dask_array(data):
    from dask.highlevelgraph import HighLevelGraph

    x = gnp.exp(gnp.asarray(data, chunks=(3, 4)))
    graph = HighLevelGraph.from_collections(x.name, x.__dask_graph__(), dependencies=())
    d = da.Array(graph, x.name, x.chunks, meta=x._meta)
    np.testing.assert_allclose(to_host(d.compute()), np.exp(data), rtol=1e-12)
    np.testing.assert_allclose(to_host((d[1:] + 1).sum(axis=0).compute()), (np.exp(data)[1:] + 1).sum(axis=0),
                               rtol=1e-12)


@pytest.mark.parametrize("build, prefix", [
    (lambda x: gnp.exp(x), "exp"),
    (lambda x: gnp.sum(x), "sum"),
    (lambda x: gnp.mean(x, axis=0), "mean"),
    (lambda x: gnp.sqrt(x) + 1, "add"),
    (lambda x: x.astype(np.float32), "astype"),
    (lambda x: gnp.cumsum(x, axis=1), "cumsum"),
    (lambda x: x[1:3], "getitem"),
    (lambda x: gnp.transpose(x), "transpose"),
    (lambda x: gnp.where(x > 1, x, 0.0), "where"),
    (lambda x: gnp.random.default_rng(0).random(x.shape, chunks=2) * x, "multiply"),
])
def test_key_names_readable(data, build, prefix):
    y = build(gnp.asarray(data, chunks=2))
    keys = list(flatten(y.__dask_keys__()))
    assert y.name.startswith(prefix + "-")
    assert all(key_split(k) == prefix for k in keys)
    assert all(k[0] == y.name and len(k) == 1 + y.ndim for k in keys)
    names = {k[0] for k in y.__dask_graph__()}
    bad = [n for n in names if not KEY_NAME.fullmatch(n)]
    assert not bad, bad


def test_one_task_per_block_elementwise(data):
    x = gnp.asarray(data, chunks=(1, 4))
    y = gnp.exp(x)
    graph = y.__dask_graph__()
    out_tasks = [k for k in graph if k[0] == y.name]
    assert len(out_tasks) == x.npartitions == 8
    assert len(graph) <= 2 * x.npartitions  # the data blocks and one task per output block, nothing else


def test_repr_and_html(data):
    x = gnp.asarray(data.astype(np.float32), chunks=(2, 4))
    for text in (repr(x), x._repr_html_()):
        assert str(x.shape) in text
        assert "float32" in text
        assert str(x.chunksize) in text
        assert BACKEND in text
        assert x.device in text
    if BACKEND == "numpy":
        assert x.device == "cpu"
    else:
        assert x.device.startswith("cuda:")
    assert repr(x).startswith("gnp.Array<")
    assert "<table" in x._repr_html_()


def test_metadata_matches_numpy(data):
    x = gnp.asarray(data, chunks=(3, 4))
    assert len(x) == len(data)
    assert x.shape == data.shape and x.ndim == data.ndim and x.size == data.size
    assert x.dtype == data.dtype and x.itemsize == data.itemsize and x.nbytes == data.nbytes
    assert x.chunks == ((3, 1), (4, 2)) and x.chunksize == (3, 4) and x.numblocks == (2, 2)
    assert x.npartitions == 4
    assert x.backend == BACKEND
    assert_eq(x.T, data.T)
    assert_eq(x.mT, data.T)
    assert x.T.shape == data.T.shape and x.T.chunks == ((4, 2), (3, 1))
    with pytest.raises(TypeError, match="unsized"):
        len(gnp.sum(x))


def test_to_dask_array_and_back(data):
    x = gnp.exp(gnp.asarray(data, chunks=(3, 4)))
    d = x.to_dask_array()
    assert isinstance(d, da.Array)
    assert d.chunks == x.chunks and d.dtype == x.dtype and d.shape == x.shape
    np.testing.assert_allclose(to_host(d.compute()), np.exp(data), rtol=1e-12)
    np.testing.assert_allclose(to_host((d * 2).sum().compute()), (np.exp(data) * 2).sum(), rtol=1e-12)
    back = gnp.from_dask_array(d[::-1] + 1)
    assert isinstance(back, gnp.Array) and back.backend == BACKEND
    assert_eq(back, np.exp(data)[::-1] + 1)
    assert_eq(gnp.sum(back, axis=1), (np.exp(data)[::-1] + 1).sum(axis=1))


def test_from_dask_array_of_numpy(data):
    d = da.from_array(data, chunks=(2, 5))
    x = gnp.from_dask_array(d, backend=BACKEND)
    assert x.backend == BACKEND and x.chunks == d.chunks
    assert_eq(x * 3, data * 3)


def test_to_backend_numpy(data):
    x = gnp.asarray(data, chunks=(2, 4)) + 1
    y = x.to_backend("numpy")
    assert y.backend == "numpy" and y.chunks == x.chunks
    out = y.compute()
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, data + 1, rtol=1e-12)
    assert y.to_backend("numpy") is y
    with pytest.raises(ValueError, match="unknown backend"):
        x.to_backend("tpu")


def test_config_backend_context(data):
    with gnp.config.set(backend="numpy"):
        assert gnp.config.backend() == "numpy"
        x = gnp.asarray(data, chunks=2)
        assert x.backend == "numpy"
        assert type(gnp.exp(x).compute()) is np.ndarray
        assert_eq(gnp.exp(x), np.exp(data))
    assert gnp.config.backend() == BACKEND
    assert gnp.asarray(data).backend == BACKEND


def test_config_rejects_unknown():
    with pytest.raises(TypeError, match="bogus"):
        gnp.config.set(bogus=1)
    with pytest.raises(ValueError, match="unknown backend"):
        gnp.config.set(backend="tpu")


def test_config_chunk_size(data):
    with gnp.config.set(chunk_size="64B"):
        x = gnp.asarray(np.arange(40.0))
        assert max(x.chunks[0]) * 8 <= 64 and x.npartitions > 1
        assert_eq(gnp.sum(x), np.arange(40.0).sum())
