"""Accelerated calls (and fetches of one level of plain tasks) on ``gnp.cluster``'s Client run by the workers
directly (``runtime/direct.py``), on a cluster of two worker processes that ``gnp.cluster`` started: values bit for
bit those of the scheduler's path (and NumPy's) through every user entry point, outputs known to the scheduler (who has them, their bytes, the client's desire,
their lineage: recomputed after their worker dies), and the calls that go the scheduler's way instead."""
from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
import socket
import time
from typing import Any

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import to_host
from test_cluster import _wait_for_workers

distributed = pytest.importorskip("distributed")

from test_distributed import _Requests  # noqa: E402

OFF = {"gpunumeric.cluster.direct-calls": False}


@pytest.fixture(scope="module")
def cluster_client():
    """The module's cluster of two workers, started by ``gnp.cluster``: the default client meanwhile."""
    with gnp.cluster(n_workers=2, dashboard_address=":0") as c:
        _wait_for_workers(c, 2)
        yield c


@gnp.accelerate
def _priced(x, r):
    return gnp.exp(-x * x) * r + 1, gnp.sqrt(x) * r


@gnp.accelerate
def _summed(x, r):
    return gnp.exp(-x * x) * r + 1, gnp.sum(gnp.sqrt(x) * r)


@gnp.accelerate
def _relaxed(u, w):
    def sweep(_, v):
        return v + w * (gnp.roll(v, 1, axis=0) + gnp.roll(v, -1, axis=0) - 2 * v)
    return gnp.fori_loop(5, sweep, u)


@gnp.accelerate
def _halved(u):
    return gnp.while_loop(lambda v: gnp.max(v) > 0.01, lambda v: v * 0.5, u)


@gnp.accelerate
def _inverted(a):
    return gnp.linalg.inv(a)


def _data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape)


def _held(*arrays):
    out = gnp.persist(*arrays)
    distributed.wait(out)
    return out


def _sent(client, call):
    """What ``client`` sent the scheduler during ``call()`` (run once before, to trace and hand the plan over), and
    the call's result."""
    call()
    with _Requests(client) as sent:
        result = call()
    return sent, result


def _kill(client: Any, worker: str) -> None:
    """Ends ``worker``'s process and waits until the scheduler has heard of it."""
    with contextlib.suppress(OSError):  # the worker dies before it answers
        client.run(os._exit, 1, workers=[worker])
    deadline = time.monotonic() + 30
    while worker in client.scheduler_info(n_workers=-1)["workers"]:
        assert time.monotonic() < deadline, "the scheduler never heard that the worker died"
        time.sleep(0.05)


def test_direct_calls_give_the_scheduler_paths_bits(cluster_client):
    """An accelerated call's outputs, persisted (``dask.persist``, ``gnp.persist``, ``.persist()``) or fetched
    (``gnp.fetch``, ``np.asarray``, ``.compute()``, ``dask.compute``), on blocks held on both workers (a call of two
    ranks, one request each) and a loop on one block: the scheduler's path's bits, and NumPy's values."""
    ref, grid = _data((40, 6)), _data((16, 16), 1)
    x, one, u = _held(gnp.asarray(ref), gnp.asarray(ref, chunks=ref.shape), gnp.asarray(grid, chunks=grid.shape))
    assert x.npartitions == 2
    rate = gnp.asarray(np.float64(1.5))
    calls = {"two ranks": lambda: _priced(x, rate), "one rank with a sum": lambda: _summed(one, rate),
             "loop": lambda: (_relaxed(u, 0.25),), "while loop": lambda: (_halved(u),)}
    with dask.config.set(OFF):
        scheduled = {name: gnp.fetch(call()) for name, call in calls.items()}
    with gnp.allowfetch():
        for name, call in calls.items():
            got = {
                "fetch": gnp.fetch(call()),
                "persist": gnp.fetch(dask.persist(*call())),
                "gnp.persist": gnp.fetch(gnp.persist(*call())),
                ".persist()": tuple(gnp.fetch(o.persist()) for o in call()),
                "asarray": tuple(np.asarray(o) for o in call()),
                "compute": tuple(to_host(o.compute()) for o in call()),
                "dask.compute": tuple(map(to_host, dask.compute(*call()))),
            }
            for how, value in got.items():
                for a, b in zip(value, scheduled[name], strict=True):
                    np.testing.assert_array_equal(a, b, err_msg=f"{name}, {how}")
    np.testing.assert_allclose(scheduled["two ranks"][0], np.exp(-ref * ref) * 1.5 + 1, rtol=1e-14)
    np.testing.assert_allclose(scheduled["two ranks"][1], np.sqrt(ref) * 1.5, rtol=1e-14)
    assert scheduled["one rank with a sum"][1] == pytest.approx(np.sum(np.sqrt(ref) * 1.5), rel=1e-13)
    v = grid
    for _ in range(5):
        v = v + 0.25 * (np.roll(v, 1, axis=0) + np.roll(v, -1, axis=0) - 2 * v)
    np.testing.assert_allclose(scheduled["loop"][0], v, rtol=1e-13)
    halved = grid
    while halved.max() > 0.01:
        halved = halved * 0.5
    np.testing.assert_array_equal(scheduled["while loop"][0], halved)


def test_direct_calls_send_the_scheduler_nothing(cluster_client):
    """A direct call, persisted or fetched, sends the scheduler no graph and asks it nothing (a persisted call's
    outputs told in one message per worker on the client's stream); with ``gpunumeric.cluster.direct-calls`` off, the
    same call is one graph."""
    ref = _data((40, 6))
    x, one = _held(gnp.asarray(ref), gnp.asarray(ref, chunks=ref.shape))
    rates = iter(range(2, 10**6))

    def persisted():  # (two ranks: a request to each worker)
        return _held(*_priced(x, gnp.asarray(np.float64(next(rates)))))

    def fetched():
        return gnp.fetch(_summed(one, gnp.asarray(np.float64(next(rates))))[1])

    for call, told in ((persisted, 2), (fetched, 0)):  # (persisted: two ranks, one worker each)
        sent, _ = _sent(cluster_client, call)
        assert [op for op in sent if op == "update-graph" or op.startswith("request ")] == [], (call.__name__, sent)
        assert sent.count("gnp_direct_made") == told, (call.__name__, sent)
        with dask.config.set(OFF):
            sent, _ = _sent(cluster_client, call)
        assert sent.count("update-graph") == 1, (call.__name__, sent)


def test_the_same_call_persisted_again_as_its_outputs_are_released(cluster_client):
    """The same call (the same output keys) persisted again and again while the last one's outputs are released:
    each time its values (an output still on its way out is the scheduler's to order: that call goes its way)."""
    ref = _data((40, 6), 5)
    x, = _held(gnp.asarray(ref))
    rate = gnp.asarray(np.float64(2.0))
    first = None
    for _ in range(20):
        out = _priced(x, rate)[0].persist()
        value = gnp.fetch(out)
        first = value if first is None else first
        np.testing.assert_array_equal(value, first)  # the same program: the same bits every time
        np.testing.assert_allclose(value, np.exp(-ref * ref) * 2.0 + 1, rtol=1e-14)  # (a GPU's exp: NumPy's to an ulp)
        del out


def test_plain_fetches_of_one_level_run_directly(cluster_client):
    """A fetch of a plain expression of one level of tasks (each reading persisted blocks on its worker, or nothing:
    Monte-Carlo's draws; a sum's partials on both workers, combined here) sends the scheduler nothing and gives the
    scheduler's path's bits; tasks reading a block held on another worker (a shift across blocks) go through the
    scheduler."""
    ref = _data((40, 6), 4)
    x, = _held(gnp.asarray(ref))
    shifts = iter(range(1, 10**6))

    def monte_carlo(x_max):
        samples = 2 * x_max * gnp.random.default_rng(42).random(4096, chunks=4096) - x_max
        return (2 * x_max / 4096) * gnp.sum(gnp.exp(-samples ** 2))

    calls = {"Monte-Carlo": lambda k: gnp.fetch(monte_carlo(10.0 + k)),
             "blocks on both workers": lambda k: gnp.fetch(gnp.exp(-x) + k),
             "dask.compute": lambda k: dask.compute(x * k, x - k),
             "sum over both workers": lambda k: gnp.fetch(gnp.sum(x * k)),
             "reductions .compute()": lambda k: (gnp.sum(x - k).compute(), gnp.max(x * k).compute())}
    for name, call in calls.items():
        k = next(shifts)
        sent, got = _sent(cluster_client, lambda: call(k))
        assert [op for op in sent if op == "update-graph" or op.startswith("request ")] == [], (name, sent)
        with dask.config.set(OFF):
            expected = call(k)
        for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple)
                        else (expected,), strict=True):
            np.testing.assert_array_equal(to_host(a), to_host(b), err_msg=name)
    np.testing.assert_allclose(gnp.fetch(gnp.exp(-x) + 1), np.exp(-ref) + 1, rtol=1e-15)
    assert gnp.fetch(gnp.sum(x)) == pytest.approx(np.sum(ref), rel=1e-14)
    sent, shifted = _sent(cluster_client, lambda: gnp.fetch(gnp.roll(x, 3, axis=0) - x))
    assert sent.count("update-graph") == 1, sent
    np.testing.assert_array_equal(shifted, np.roll(ref, 3, axis=0) - ref)


def _known(dask_scheduler, key) -> tuple:
    ts = dask_scheduler.tasks.get(key)
    if ts is None:
        return None
    return (ts.state, [ws.address for ws in ts.who_has], ts.nbytes, ts.run_spec is not None,
            sorted(map(str, (d.key for d in ts.dependencies))), sorted(cs.client_key for cs in ts.who_wants))


def test_the_scheduler_knows_direct_outputs(cluster_client):
    """A persisted output of a direct call is the scheduler's as any task's: in memory on its block's owner, its
    bytes, the task computing it again from its input, this client's desire; releasing the Array frees it."""
    ref = _data((40, 6))
    x, = _held(gnp.asarray(ref))
    out, _ = _held(*_priced(x, gnp.asarray(np.float64(3.0))))
    held = {f.key: f for f in distributed.futures_of(x)}
    for future, block in zip(distributed.futures_of(out), distributed.futures_of(x)):
        state, who_has, nbytes, has_spec, dependencies, clients = cluster_client.run_on_scheduler(_known, key=future.key)
        owner = cluster_client.who_has([block])[block.key]
        assert (state, who_has, has_spec, clients) == ("memory", list(owner), True, [cluster_client.id])
        assert nbytes == 20 * 6 * 8
        assert dependencies == [str(block.key)] and block.key in held
    keys = [f.key for f in distributed.futures_of(out)]
    del out, future
    gc.collect()
    deadline = time.monotonic() + 10
    while any(cluster_client.run_on_scheduler(_known, key=k) is not None for k in keys):
        assert time.monotonic() < deadline, "the released outputs were not freed"
        time.sleep(0.05)


def test_calls_the_workers_cannot_run_alone_go_through_the_scheduler(cluster_client):
    """A region whose ranks exchange halos, an argument not persisted, the setting off and an error on the worker
    go the scheduler's way: one graph, NumPy's values, NumPy's exception."""
    grid = _data((16, 16), 2)
    u, = _held(gnp.asarray(grid, chunks=(8, 16)))  # a block on each worker: the loop's ranks exchange halos
    v = grid
    for _ in range(5):
        v = v + 0.25 * (np.roll(v, 1, axis=0) + np.roll(v, -1, axis=0) - 2 * v)
    sent, got = _sent(cluster_client, lambda: gnp.fetch(_relaxed(u, 0.25)))
    assert sent.count("update-graph") == 1, sent
    np.testing.assert_allclose(got, v, rtol=1e-13)
    sent, got = _sent(cluster_client, lambda: gnp.fetch(_summed(u, gnp.asarray(np.float64(2.0)))[1]))
    assert sent.count("update-graph") == 1, sent  # (a sum over both workers' blocks: its ranks combine)
    assert got == pytest.approx(np.sum(np.sqrt(grid) * 2), rel=1e-13)
    lazy = gnp.asarray(grid, chunks=(8, 16)) * 1.0  # (not persisted: its blocks are tasks of the call's graph)
    sent, got = _sent(cluster_client, lambda: gnp.fetch(_priced(lazy, gnp.asarray(np.float64(2.0)))[0]))
    assert sent.count("update-graph") == 1, sent
    np.testing.assert_allclose(got, np.exp(-grid * grid) * 2 + 1, rtol=1e-14)
    singular, = _held(gnp.asarray(np.ones((4, 4)), chunks=(4, 4)))
    with pytest.raises(np.linalg.LinAlgError):
        gnp.fetch(_inverted(singular))
    with pytest.raises(np.linalg.LinAlgError), dask.config.set(OFF):
        gnp.fetch(_inverted(singular))
    with pytest.raises(np.linalg.LinAlgError):  # (persisted: the error met when the result is read, as always)
        gnp.fetch(_held(_inverted(singular))[0])


def test_a_worker_that_cannot_be_reached_leaves_the_call_to_the_scheduler(cluster_client, monkeypatch):
    """A worker the client still lists but that is gone (its port closed; the client hears of the loss later) is
    given up after ``direct.CONNECT_TIMEOUT``, not the client's connect timeout (made 600 s here): the requests
    answer None, and the call takes the scheduler's path."""
    from dask_gpunumeric.runtime import direct

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gone = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(direct, "CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(cluster_client.rpc, "timeout", 600)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        answer = pool.submit(direct._send, cluster_client, [(gone, {"tasks": b""})], "gnp_direct_tasks", {"host": True})
        assert answer.result(timeout=120) is None
    finally:
        pool.shutdown(wait=False)


def test_direct_output_recomputed_after_its_worker_dies(cluster_client):
    # runs last: it kills a worker of the module's cluster (its nanny starts a new one)
    """When the worker holding a direct call's output dies, the scheduler computes it again from its lineage (its
    input, then the call's program), with the same values."""
    workers = _wait_for_workers(cluster_client, 2)
    ref = _data((40, 6), 3)
    x, = _held(gnp.asarray(ref))
    out, _ = _held(*_priced(x, gnp.asarray(np.float64(2.0))))
    before = gnp.fetch(out)
    victim = workers[-1]
    assert set(cluster_client.who_has(distributed.futures_of(out)[-1]).popitem()[1]) == {victim}
    _kill(cluster_client, victim)
    np.testing.assert_array_equal(to_host(out.compute()), before)
    np.testing.assert_allclose(before, np.exp(-ref * ref) * 2 + 1, rtol=1e-14)
    # (the nanny's new worker, before the module's cluster closes: a CUDA worker started while 16 test processes
    # share the GPU took over 60 s on the H200 machine)
    _wait_for_workers(cluster_client, 2, timeout=180)


def test_direct_output_recomputed_when_its_worker_dies_before_the_scheduler_hears_of_it(cluster_client):
    # runs last: it kills a worker of the module's cluster (its nanny starts a new one)
    """A worker that dies after answering a persisted direct call, before the client's message telling the scheduler
    of its outputs arrives: the scheduler computes them from their lineage, with the call's values."""
    workers = _wait_for_workers(cluster_client, 2)
    ref = _data((40, 6), 6)
    x, = _held(gnp.asarray(ref))
    victim, send = workers[-1], cluster_client._send_to_scheduler

    def dying_first(msg: dict) -> None:
        if msg.get("op") == "gnp_direct_made" and msg["worker"] == victim:
            _kill(cluster_client, victim)
        send(msg)

    cluster_client._send_to_scheduler = dying_first
    try:
        out, _ = _held(*_priced(x, gnp.asarray(np.float64(4.0))))
    finally:
        del cluster_client._send_to_scheduler
    np.testing.assert_allclose(to_host(out.compute()), np.exp(-ref * ref) * 4 + 1, rtol=1e-14)
    # (the nanny's new worker, before the module's cluster closes: a CUDA worker started while 16 test processes
    # share the GPU took over 60 s on the H200 machine)
    _wait_for_workers(cluster_client, 2, timeout=180)
