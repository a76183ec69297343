"""``gnp.compute`` and ``gnp.persist``: the results and calling conventions of ``dask.compute`` and ``dask.persist``
(a tuple back, arguments that are no collection passed through, lists and dicts traversed, keywords honoured), the
Arrays computed together (shared work once), checked against NumPy and against Dask's own calls."""
from __future__ import annotations

import threading

import dask
import dask.array as da
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, to_host

_calls: list[int] = []
_lock = threading.Lock()


def _counted(block):
    with _lock:
        _calls.append(1)
    return block


def softmax(xp, x):
    m = xp.max(x, axis=1, keepdims=True)
    e = xp.exp(x - m)
    s = xp.sum(e, axis=1, keepdims=True)
    return e / s, (m + xp.log(s))[:, 0], xp.sum(e)  # two outputs sharing work and a 0-d reduction


@pytest.fixture(params=[(48, 40), (16, 15)], ids=["one block", "several blocks"])
def inputs(request):
    host = np.random.default_rng(3).standard_normal((48, 40))
    return host, dask.persist(gnp.asarray(host, chunks=request.param))[0]


def _same(got, expected):
    """Equal bit for bit, as the same type of block (CuPy on a GPU), value by value through lists and dicts."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(got, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)
    elif isinstance(got, dict):
        assert got.keys() == expected.keys()
        for k in got:
            _same(got[k], expected[k])
    elif hasattr(got, "dtype"):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(to_host(got), to_host(expected))
    else:
        assert got == expected


def test_compute_gives_dask_computes_results_and_numpys_values(inputs):
    host, x = inputs
    outputs = softmax(gnp, x)
    got = gnp.compute(*outputs, 3, "text", None, np.float32(2))
    _same(got, dask.compute(*outputs, 3, "text", None, np.float32(2)))
    assert got[3:] == (3, "text", None, np.float32(2))
    assert all(type(v).__module__.split(".")[0] == BACKEND for v in got[:3])  # left where the blocks are
    for value, expected in zip(got, softmax(np, host)):
        np.testing.assert_allclose(to_host(value), expected, rtol=1e-12)
    assert to_host(got[2]).ndim == 0 and to_host(got[2]).dtype == host.dtype


def test_compute_runs_shared_work_once(inputs):
    host, x = inputs
    y = gnp.map_blocks(_counted, x)
    for call in (gnp.compute, dask.compute):
        _calls.clear()
        a, b = call(*softmax(gnp, y)[:2])
        assert len(_calls) == x.npartitions, call
        np.testing.assert_allclose(to_host(a), softmax(np, host)[0], rtol=1e-12)


def test_compute_of_lists_dicts_and_other_collections_is_dasks(inputs):
    host, x = inputs
    a, b, total = softmax(gnp, x)
    d = da.from_array(host, chunks=16)
    for args in (([a, b],), ({"total": total, "a": a},), (a, d.sum(), b, total), ((total, [b]), 1)):
        _same(gnp.compute(*args), dask.compute(*args))
    assert gnp.compute() == dask.compute() == ()
    assert gnp.compute(1, "a") == (1, "a")


def test_compute_and_persist_honour_dasks_keywords(inputs):
    host, x = inputs
    ran: list[int] = []

    def scheduler(dsk, keys, **kwargs):
        ran.append(len(keys))
        return dask.local.get_sync(dsk, keys, **kwargs)

    a, b, total = softmax(gnp, x)
    for kwargs in ({"scheduler": "sync"}, {"scheduler": scheduler}, {"traverse": False}, {"optimize_graph": False}):
        _same(gnp.compute(a, total, **kwargs), dask.compute(a, total, **kwargs))
        persisted = gnp.persist(a, total, **kwargs)
        _same(gnp.compute(*persisted), dask.compute(a, total))
    assert ran, "the scheduler given was not used"


def test_persist_gives_arrays_of_dask_persists_values(inputs):
    host, x = inputs
    y = gnp.map_blocks(_counted, x)
    outputs = softmax(gnp, y)
    _calls.clear()
    persisted = gnp.persist(*outputs, "kept", 2.5)
    assert len(_calls) == x.npartitions  # computed together, the shared blocks once
    assert persisted[3:] == ("kept", 2.5)
    assert all(isinstance(p, gnp.Array) for p in persisted[:3])
    for p, o in zip(persisted, outputs):
        assert (p.shape, p.dtype, p.chunks, p.backend) == (o.shape, o.dtype, o.chunks, o.backend)
    _calls.clear()
    values = gnp.compute(*persisted[:3])
    assert not _calls  # held in memory: nothing computed again
    _same(values, dask.compute(*dask.persist(*outputs)))
    for value, expected in zip(values, softmax(np, host)):
        np.testing.assert_allclose(to_host(value), expected, rtol=1e-12)
    np.testing.assert_allclose(gnp.fetch(persisted[0] * 2), softmax(np, host)[0] * 2, rtol=1e-12)


def test_persist_of_lists_and_other_collections_is_dasks(inputs):
    host, x = inputs
    a, b, total = softmax(gnp, x)
    d = da.from_array(host, chunks=16)
    ([pa, pb],) = gnp.persist([a, b])
    pt, pd = gnp.persist(total, d)
    assert isinstance(pa, gnp.Array) and isinstance(pd, da.Array)
    _same(gnp.compute(pa, pb, pt, pd), dask.compute(a, b, total, d))
    assert gnp.persist() == dask.persist() == ()


def test_dask_persist_of_arrays_sharing_work_among_other_collections(inputs):
    """``dask.persist`` of Arrays that share a fused kernel beside a dask.array: each Array's values NumPy's and
    ``dask.compute``'s (Dask made each of ours a graph apart, whose tasks shared names: a KeyError)."""
    host, x = inputs
    a, b, total = softmax(gnp, x)
    d = da.from_array(host, chunks=16)
    pa, pb, pd, pt = dask.persist(a, b, d, total)
    assert isinstance(pa, gnp.Array) and isinstance(pd, da.Array)
    _same(dask.compute(pa, pb, pt), dask.compute(a, b, total))
    for got, expected in zip((pa, pb, pt), softmax(np, host)):
        np.testing.assert_allclose(np.asarray(gnp.fetch(got)), expected, rtol=1e-12)
    np.testing.assert_array_equal(pd.compute(), host)


@pytest.mark.parametrize("call", [gnp.compute, gnp.persist])
def test_bad_input_gives_numpys_error(call):
    """An error of the user's data raises what NumPy raises, before any result comes back."""
    x = gnp.asarray(np.ones((4, 4)), chunks=2)
    with pytest.raises(np.linalg.LinAlgError):
        result = call(gnp.linalg.inv(x * 0))[0]
        gnp.fetch(result)
