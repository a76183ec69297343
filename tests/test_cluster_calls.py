"""Each way users compute gnp Arrays on a cluster, counted: ``dask.compute``, ``Client.compute`` and ``gnp.fetch``
of several Arrays on ``gnp.cluster``'s Client in one round trip, accelerated calls there in none (run by the workers
directly), and a one-block result of work on two workers (a
reduction's partials) combined by the client in one level of tasks, bit for bit the local call's."""
from __future__ import annotations

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq, to_host

distributed = pytest.importorskip("distributed")

from test_distributed import _count_round_trips, _Requests, data, one_worker  # noqa: E402,F401 - one_worker: a fixture

DIRECT_OFF = {"gpunumeric.cluster.direct-calls": False}  # (accelerated calls through the scheduler, as counted here)


def _computed_calls(c, ref: np.ndarray):
    """What users compute with ``gnp.cluster``'s Client besides ``.compute()``/``gnp.fetch`` of one Array, on one
    worker: (name, call, replies, levels, trees optimized again: any), each call checked against NumPy. Small
    results of one block come pushed; several blocks are gathered in one request and joined on the client."""
    one = gnp.asarray(ref).persist()
    blocks = gnp.asarray(ref, chunks=(ref.shape[0] // 4, ref.shape[1])).persist()  # four blocks on the worker
    distributed.wait([one, blocks])
    calls = iter(range(1, 10**6))

    @gnp.accelerate
    def two(x, r):
        return gnp.exp(x) * r, gnp.sum(x * r)

    def accelerated_computed() -> None:
        r = 1 + next(calls)
        scaled, total = dask.compute(*two(one, gnp.asarray(np.float32(r))))
        assert_eq(scaled, np.exp(ref) * np.float32(r), rtol=1e-6)
        assert float(total) == pytest.approx(float(np.sum(ref * np.float32(r))), rel=1e-5)

    def several_blocks_computed() -> None:
        k = next(calls)
        doubled, shifted = dask.compute(blocks * k, blocks + k)
        np.testing.assert_array_equal(to_host(doubled), ref * k)
        np.testing.assert_array_equal(to_host(shifted), ref + k)

    def client_computed() -> None:
        k = next(calls)
        assert float(to_host(c.compute(gnp.sum(one * k)).result())) == pytest.approx(float(np.sum(ref * k)), rel=1e-5)

    def fetched_together() -> None:
        k = next(calls)
        total, shifted = gnp.fetch((gnp.sum(one * k), one + k))
        assert total == pytest.approx(float(np.sum(ref * k)), rel=1e-5)
        np.testing.assert_array_equal(shifted, ref + k)

    yield "dask.compute of an accelerated call", accelerated_computed, 0, 1, None
    yield "dask.compute of several blocks", several_blocks_computed, 1, 1, None
    yield "Client.compute", client_computed, 1, 1, None
    yield "gnp.fetch of a tuple", fetched_together, 0, 1, None


def test_gnp_client_computes_in_one_round_trip(one_worker):
    """``dask.compute``, ``Client.compute`` and ``gnp.fetch`` of several Arrays on ``gnp.cluster``'s Client are one
    graph sent with its priorities (one trip through the scheduler's offload thread, no ordering), one level of
    tasks, and no reply asked for where every result is small and of one block (pushed); a result of several
    blocks is gathered in one request (``Client.compute``'s Future, as any, in one). Their values are NumPy's."""
    from dask_gpunumeric.runtime.cluster import _new_client_class

    ref = data(50, (40, 8)).astype(np.float32)
    with _new_client_class()(one_worker.scheduler.address, set_as_default=False) as c, dask.config.set(DIRECT_OFF):
        with c.as_current():
            calls = list(_computed_calls(c, ref))
        _count_round_trips(c, calls)


def _direct_calls_handled(dask_worker) -> int:
    """(On a worker) the direct calls its handler answered so far (counted from the first call of this function)."""
    handler = dask_worker.handlers["gnp_direct_call"]
    if not hasattr(dask_worker, "_gnp_direct_count"):
        dask_worker._gnp_direct_count = [0]

        async def counted(*args, **kwargs):
            dask_worker._gnp_direct_count[0] += 1
            return await handler(*args, **kwargs)

        dask_worker.handlers["gnp_direct_call"] = counted
    return dask_worker._gnp_direct_count[0]


def _requests_of_worker(dask_worker) -> int:
    """(On a worker) the requests it sent the scheduler so far but its heartbeats (counted from the first call of
    this function)."""
    if not hasattr(dask_worker, "_gnp_requests"):
        dask_worker._gnp_requests, scheduler = [0], dask_worker.scheduler

        class Counted:
            def __getattr__(self, name: str):
                if name != "heartbeat_worker" and not name.startswith("_"):
                    dask_worker._gnp_requests[0] += 1
                return getattr(scheduler, name)

        dask_worker.scheduler = Counted()
    return dask_worker._gnp_requests[0]


def test_accelerated_calls_on_the_gnp_client_skip_the_scheduler(one_worker):
    """On ``gnp.cluster``'s Client an accelerated call on blocks it persisted, persisted or fetched (the suite's
    Black-Scholes, heat and iterative workloads' shapes of call), sends its worker one request and the scheduler
    no graph and no request; the worker asks the scheduler nothing either. A persisted call's outputs are told to the
    scheduler in one message on the client's stream, none for a fetched one. Its values are NumPy's. The calls of
    ``test_gnp_client_computes_in_one_round_trip`` that are not accelerated still send one graph."""
    from dask_gpunumeric.runtime.cluster import _new_client_class

    ref = data(52, (40, 8))
    calls = iter(range(2, 10**6))

    @gnp.accelerate
    def priced(x, r):
        return gnp.exp(-x) * r, gnp.sqrt(x) * r

    @gnp.accelerate
    def relaxed(salt, u):
        return gnp.sum(gnp.fori_loop(3, lambda _, v: v + salt * (gnp.roll(v, 1, axis=0) - v), u))

    with _new_client_class()(one_worker.scheduler.address, set_as_default=False) as c, c.as_current():
        x = gnp.asarray(ref).persist()
        distributed.wait(x)

        def persisted():
            r = np.float64(next(calls))
            a, b = dask.persist(*priced(x, gnp.asarray(r)))
            distributed.wait([a, b])

            def check() -> None:
                assert_eq(a, np.exp(-ref) * r, rtol=1e-15)
                assert_eq(b, np.sqrt(ref) * r, rtol=1e-15)
            return check

        def fetched():
            salt = np.float64(1.0 / next(calls))
            got = gnp.fetch(relaxed(gnp.asarray(salt), x))

            def check() -> None:
                v = ref
                for _ in range(3):
                    v = v + salt * (np.roll(v, 1, axis=0) - v)
                assert got == pytest.approx(np.sum(v), rel=1e-13)
            return check

        for call, told in ((persisted, 1), (fetched, 0)):
            call()()  # (traced; the plan handed to the scheduler, the worker asks for its program)
            before = sum(c.run(_direct_calls_handled).values())
            asked_by_worker = sum(c.run(_requests_of_worker).values())
            with _Requests(c) as sent:
                check = call()
            asked = [op for op in sent if op == "update-graph" or op.startswith("request ")]
            assert asked == [], (call.__name__, sent)
            assert sent.count("gnp_direct_made") == told, (call.__name__, sent)
            assert sum(c.run(_direct_calls_handled).values()) - before == 1, call.__name__
            assert sum(c.run(_requests_of_worker).values()) == asked_by_worker, call.__name__
            check()


def test_reductions_over_two_workers_combined_by_the_client(client):
    """A one-block result of work on both workers (a reduction's partials, one per worker) is combined by the
    client from the pushed partials with the combining task's own function: the same bits as the local call's
    (which runs that function on the same partials), and NumPy's values; through ``gnp.fetch``, ``.compute()``
    and ``dask.compute``."""
    ref = data(51, (80, 6))
    refs = {"sum": np.sum(ref), "mean": np.mean(ref), "var": np.var(ref), "max": np.max(ref), "prod": np.prod(ref[:, :2]),
            "argmin": np.argmin(ref), "column sums": np.sum(ref, axis=0), "norm": np.sqrt(np.sum(ref * ref))}

    def reductions(x):
        return {"sum": gnp.sum(x), "mean": gnp.mean(x), "var": gnp.var(x), "max": gnp.max(x), "prod": gnp.prod(x[:, :2]),
                "argmin": gnp.argmin(x), "column sums": gnp.sum(x, axis=0), "norm": gnp.sqrt(gnp.sum(x * x))}

    local = {name: gnp.fetch(r) for name, r in reductions(gnp.asarray(ref, chunks=(40, 6))).items()}  # no client
    with client.as_current():
        x = gnp.asarray(ref).persist()  # one block per worker
        distributed.wait(x)
        assert x.npartitions == 2
        on_cluster = {name: gnp.fetch(r) for name, r in reductions(x).items()}
        computed = {name: to_host(r.compute()) for name, r in reductions(x).items()}
        together = dict(zip(refs, map(to_host, dask.compute(*reductions(x).values()))))
    for name, expected in refs.items():
        for got in (on_cluster[name], computed[name], together[name]):
            np.testing.assert_array_equal(got, local[name], err_msg=name)  # bit for bit
        np.testing.assert_allclose(on_cluster[name], expected, rtol=1e-12, err_msg=name)
