"""gnp Arrays on a distributed cluster (the session's 2-worker LocalCluster): Client.compute/persist,
dask.compute with the client active, identical results and random streams on the cluster and locally,
persisted blocks reused without recomputation, and readable task prefixes on the scheduler."""
from __future__ import annotations

import collections

import logging
import re
import time
from typing import Any

import dask
import numpy as np
import pytest
from dask.core import flatten
from dask.utils import key_split

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, scheduler_runs, to_host

distributed = pytest.importorskip("distributed")

READABLE_PREFIX = re.compile(r"[a-z]+(?:-[a-z]+)*")


@pytest.fixture(autouse=True)
def on_cluster(client):
    """Every test here runs with the cluster's client as the current scheduler."""
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        yield


def data(seed: int, shape: tuple[int, ...] = (60, 40)) -> np.ndarray:
    """Test data unique to a test (so that its task keys are too)."""
    return np.random.default_rng(seed).standard_normal(shape)


class SchedulerWarnings(logging.Handler):
    """Collects the warnings of the (in-process) scheduler, e.g. about one key submitted with two tasks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> SchedulerWarnings:
        logging.getLogger("distributed.scheduler").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("distributed.scheduler").removeHandler(self)


def test_client_compute(client):
    ref = data(1)
    x = gnp.asarray(ref, chunks=(16, 16))
    out = client.compute(gnp.exp(x) * 2).result()
    assert type(out).__module__.split(".")[0] == BACKEND
    np.testing.assert_allclose(to_host(out), np.exp(ref) * 2, rtol=1e-12)
    s = client.compute(gnp.sum(x, axis=0)).result()
    np.testing.assert_allclose(to_host(s), ref.sum(axis=0), rtol=1e-10)
    f1, f2 = client.compute([gnp.max(x), x.T[::3]])
    np.testing.assert_array_equal(to_host(f1.result()), ref.max())
    np.testing.assert_array_equal(to_host(f2.result()), ref.T[::3])


def test_client_persist_then_compute(client):
    ref = data(2)
    x = gnp.asarray(ref, chunks=(16, 16))
    p = client.persist(gnp.sin(x) + 1)
    assert isinstance(p, gnp.Array)
    distributed.wait(p)
    assert p.chunks == x.chunks and p.dtype == x.dtype and p.backend == BACKEND
    assert_eq(p, np.sin(ref) + 1)
    assert_eq(gnp.mean(p, axis=1), (np.sin(ref) + 1).mean(axis=1))


def test_persisted_array_reused(client):
    ref = data(3)
    x = gnp.asarray(ref, chunks=(20, 20))
    p = client.persist(gnp.exp(x))
    distributed.wait(p)
    keys = list(flatten(p.__dask_keys__()))
    with SchedulerWarnings() as log:
        assert_eq(gnp.sum(p, axis=0), np.exp(ref).sum(axis=0))
        assert_eq(p * 2 - 1, np.exp(ref) * 2 - 1)
        total, top = dask.compute(gnp.sum(p), gnp.max(p))
    np.testing.assert_allclose(to_host(total), np.exp(ref).sum(), rtol=1e-10)
    np.testing.assert_array_equal(to_host(top), np.exp(ref).max())
    assert scheduler_runs(client, keys) == dict.fromkeys(keys, 1)  # computed once, by persist
    assert not [m for m in log.messages if "run_spec" in m], log.messages


def test_dask_persist_with_client(client):
    ref = data(4)
    x = gnp.asarray(ref, chunks=(16, 16))
    (p,) = dask.persist(gnp.abs(x))
    distributed.wait(p)
    assert_eq(p + x, np.abs(ref) + ref)


def test_dask_compute_with_client_shares_work(client):
    ref = data(5)
    x = gnp.asarray(ref, chunks=(16, 16))
    t = gnp.cumsum(x, axis=0)  # a scan: its blocks are tasks of their own, whatever the optimizer fuses
    a, b = t + 1, gnp.sum(gnp.exp(t), axis=1)
    with distributed.get_task_stream(client=client) as ts:
        ra, rb = dask.compute(a, b)
    np.testing.assert_allclose(to_host(ra), np.cumsum(ref, axis=0) + 1, rtol=1e-12)
    np.testing.assert_allclose(to_host(rb), np.exp(np.cumsum(ref, axis=0)).sum(axis=1), rtol=1e-10)
    keys = list(flatten(x.__dask_keys__()))
    assert scheduler_runs(client, keys) == dict.fromkeys(keys, 1)  # the shared blocks ran once
    ran = collections.Counter(rec["key"] for rec in ts.data)
    assert max(ran.values()) == 1 and any("cumsum" in str(key) for key in ran), ran  # and so did every task


def test_gnp_compute_and_persist_with_client_give_dasks_results(client):
    ref = data(6)
    x = gnp.asarray(ref, chunks=(16, 16))
    a, b, one = gnp.exp(x) + 1, gnp.sum(x, axis=1), gnp.asarray(ref[:8, :8]) * 2
    for got, expected in ((gnp.compute(a, b, 7), dask.compute(a, b, 7)), (gnp.compute(one), dask.compute(one))):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert type(g) is type(e)
            np.testing.assert_array_equal(to_host(g), to_host(e))
    pa, pb = gnp.persist(a, b)
    distributed.wait([pa, pb])
    assert_eq(pa, np.exp(ref) + 1)
    assert_eq(pb, ref.sum(axis=1))


def test_monte_carlo_same_on_cluster_and_locally(client):
    x = gnp.random.default_rng(42).random(10**6, dtype=gnp.float32)
    estimate = gnp.sum(gnp.exp(-x**2))
    assert estimate.dtype == np.float32
    on_cluster = to_host(estimate.compute())
    on_cluster_futures = to_host(client.compute(estimate).result())
    locally = to_host(estimate.compute(scheduler="threads"))
    assert on_cluster == locally == on_cluster_futures
    samples = to_host(x.compute(scheduler="threads"))
    np.testing.assert_allclose(on_cluster, np.exp(-samples**2).sum(dtype=np.float64), rtol=1e-5)
    assert abs(float(on_cluster) / 10**6 - 0.746824) < 2e-3  # the integral of exp(-x^2) over [0, 1)
    # the same over 8 blocks: a tree reduction, still identical on both schedulers
    y = gnp.random.default_rng(42).random(10**6, dtype=gnp.float32, chunks=125_000)
    blocked = gnp.sum(gnp.exp(-y**2))
    assert to_host(blocked.compute()) == to_host(blocked.compute(scheduler="threads"))
    np.testing.assert_allclose(to_host(blocked.compute()), on_cluster, rtol=1e-5)


@pytest.mark.parametrize("draw", [
    lambda g, chunks: g.random(1000, chunks=chunks),
    lambda g, chunks: g.standard_normal(1000, dtype=np.float32, chunks=chunks),
    lambda g, chunks: g.integers(0, 100, size=1000, chunks=chunks),
], ids=["random", "standard_normal", "integers"])
def test_random_streams_identical(client, draw):
    eight = draw(gnp.random.default_rng(2024), 125)
    assert eight.numblocks == (8,)
    on_cluster = to_host(client.compute(eight).result())
    locally = to_host(eight.compute(scheduler="threads"))
    one_block = to_host(draw(gnp.random.default_rng(2024), 1000).compute(scheduler="threads"))
    np.testing.assert_array_equal(on_cluster, locally)
    np.testing.assert_array_equal(on_cluster, one_block)
    assert on_cluster.dtype == eight.dtype


def test_reduction_over_many_blocks(client):
    ref = data(6, (400, 90))
    x = gnp.asarray(ref, chunks=(20, 30))
    assert x.npartitions == 60  # several levels of the reduction tree along axis 0
    total, col_mean, row_max, spread = dask.compute(
        gnp.sum(x), gnp.mean(x, axis=0), gnp.max(x, axis=1), gnp.std(x)
    )
    np.testing.assert_allclose(to_host(total), ref.sum(), rtol=1e-9)
    np.testing.assert_allclose(to_host(col_mean), ref.mean(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(to_host(row_max), ref.max(axis=1))
    np.testing.assert_allclose(to_host(spread), ref.std(), rtol=1e-9)


def test_scheduler_sees_readable_prefixes(client):
    ref = data(7)
    x = gnp.asarray(ref, chunks=(16, 16))
    y = gnp.sum(gnp.tanh(x) * 2, axis=0)
    graph_prefixes = {key_split(k) for k in y.__dask_graph__()}  # the optimized graph
    assert {"array", "fused-tanh-multiply-sum", "sum"} <= graph_prefixes

    def prefixes(dask_scheduler: Any) -> list[str]:
        return list(dask_scheduler.task_prefixes)

    before = set(client.run_on_scheduler(prefixes))
    np.testing.assert_allclose(to_host(client.compute(y).result()), (np.tanh(ref) * 2).sum(axis=0), rtol=1e-10)
    seen = set(client.run_on_scheduler(prefixes))
    # on a cluster the chains of the optimized graph run fused (the partial sums in the kernels' tasks), under
    # the graph's names; "finalize" is Dask's own
    assert "fused-tanh-multiply-sum" in seen and seen - before <= graph_prefixes | {"finalize"}, seen - before
    assert all(READABLE_PREFIX.fullmatch(p) for p in graph_prefixes), graph_prefixes
    # persisted blocks stay on the scheduler: their task states carry the op name as prefix
    p = client.persist(gnp.tanh(x) * 3)
    distributed.wait(p)
    keys = list(flatten(p.__dask_keys__()))

    def prefixes_of(dask_scheduler, keys=keys):
        return sorted({dask_scheduler.tasks[k].prefix.name for k in keys})

    assert client.run_on_scheduler(prefixes_of) == ["multiply"]
    assert all(key_split(k) == "multiply" for k in keys)


# --- round trips: what one call asks of the scheduler ---------------------------------------------------------


class _Submitted:
    """On the scheduler: the tasks of each graph submitted, by key prefix, with the length of the longest
    chain of new tasks (each level is a scheduler-to-worker cycle before the result exists)."""

    name = "gnp-test-submitted"

    def __init__(self) -> None:
        self.graphs: list[dict] = []

    def update_graph(self, scheduler, *, keys, tasks, **kwargs) -> None:
        new = {k for k in tasks if scheduler.tasks[k].state != "memory"}
        level: dict = {}
        for key in sorted(new, key=lambda k: len(scheduler.tasks[k].dependencies)):  # then fixed up below
            level[key] = 1
        changed = True
        while changed:  # longest chains (graphs here are small)
            changed = False
            for key in new:
                deps = [level[d.key] for d in scheduler.tasks[key].dependencies if d.key in new]
                if deps and level[key] < 1 + max(deps):
                    level[key], changed = 1 + max(deps), True
        self.graphs.append({"levels": max(level.values(), default=0),
                            "tasks": dict(collections.Counter(key_split(k) for k in new))})


def _start_counting(dask_scheduler) -> None:
    from distributed.diagnostics.plugin import SchedulerPlugin

    plugin = type("Submitted", (_Submitted, SchedulerPlugin), {})()
    dask_scheduler.add_plugin(plugin, name=_Submitted.name)


def _submitted(dask_scheduler) -> list[dict]:
    plugin = dask_scheduler.plugins[_Submitted.name]
    out, plugin.graphs = plugin.graphs, []
    return out


class _Requests:
    """What the client sends the scheduler: batched messages by op, and requests that wait for a reply."""

    def __init__(self, client) -> None:
        self.client, self.sent = client, []

    def __enter__(self) -> list[str]:
        client, sent = self.client, self.sent
        self.stream, self.rpc = client._send_to_scheduler, client.scheduler

        def send(msg: dict) -> None:
            sent.append(msg.get("op"))
            return self.stream(msg)

        class Requests:
            def __getattr__(_, name: str):
                attr = getattr(self.rpc, name)
                if name.startswith("_") or not callable(attr):
                    return attr

                def request(*args, **kwargs):
                    if name != "identity":  # (the client's own refresh of scheduler_info, every 2 s: not a call's)
                        sent.append(f"request {name}")
                    return attr(*args, **kwargs)

                return request

        client._send_to_scheduler, client.scheduler = send, Requests()
        return sent

    def __exit__(self, *exc: object) -> None:
        self.client._send_to_scheduler, self.client.scheduler = self.stream, self.rpc


def _round_trips(sent: list[str]) -> int:
    """Requests of the client that wait for the scheduler: a graph submitted, a reply asked for."""
    return sum(1 for op in sent if op == "update-graph" or op.startswith("request "))


class _Compiles:
    """Counts, while it is entered, the trees compiled (``runtime.compile.compile_tree``) in this thread (the
    client's) and in others (the in-process scheduler's), the trees the optimizer ran on, the graphs made
    from a kept graph of the same structure (``runtime.reuse``), and the graphs ``dask.order`` ordered in other
    threads (the scheduler's)."""

    def __enter__(self) -> _Compiles:
        import threading

        import dask.order

        from dask_gpunumeric.runtime import compile as _compile

        self.module, self.here, self.elsewhere, self.optimized, self.reused = _compile, 0, 0, 0, 0
        self.compile_tree, self.optimize, self.from_template = (_compile.compile_tree, _compile.optimize,
                                                                _compile._from_template)
        self.order, self.ordered = dask.order.order, 0
        me = threading.get_ident()

        def order(*args, **kwargs):
            self.ordered += threading.get_ident() != me
            return self.order(*args, **kwargs)

        def from_template(shape, local):
            made = self.from_template(shape, local)
            self.reused += made is not None
            return made

        def compile_tree(materialized):
            if threading.get_ident() == me:
                self.here += 1
            else:
                self.elsewhere += 1
            return self.compile_tree(materialized)

        def optimize(root):
            self.optimized += 1
            return self.optimize(root)

        _compile.compile_tree, _compile.optimize, _compile._from_template = compile_tree, optimize, from_template
        dask.order.order = order
        return self

    def __exit__(self, *exc: object) -> None:
        import dask.order

        self.module.compile_tree, self.module.optimize = self.compile_tree, self.optimize
        self.module._from_template = self.from_template
        dask.order.order = self.order


def _calls(xn: np.ndarray):
    """(name, call, replies it asks for, levels of tasks or None where the work needs several, trees the
    optimizer runs on again when the call is repeated: none, an accelerated call's second on the same inputs
    made from the first's graph too, and a loop outside ``accelerate``, whose body is a function made anew on
    every call, from the plan of the first)."""
    x = gnp.asarray(xn).persist()
    one = gnp.asarray(xn, chunks=xn.shape).persist()  # one block: a region of one rank
    distributed.wait([x, one])

    @gnp.accelerate
    def accelerated(a):
        return gnp.exp(a) * 2 + 1, gnp.sum(a * a)

    def smooth(a):
        return gnp.fori_loop(4, lambda i, u: 0.5 * (u + gnp.roll(u, 1, axis=0)), a)

    yield "compute", lambda: (gnp.exp(x) + 1).compute(), 1, 1, 0
    yield "compute of one block", lambda: (gnp.exp(one) + 1).compute(), 0, 1, 0
    yield "compute of a reduction", lambda: gnp.sum(gnp.exp(x) + 1).compute(), 0, 1, 0
    yield "compute of a reduction of one block", lambda: gnp.sum(gnp.exp(one) + 1).compute(), 0, 1, 0
    yield "persist", lambda: distributed.wait((x * 2).persist()), 0, 1, 0
    yield "gnp.compute of two", lambda: gnp.compute(gnp.exp(x) + 1, x * 3), 1, 1, 0
    yield "gnp.persist of two", lambda: distributed.wait(gnp.persist(x * 2, gnp.exp(x))), 0, 1, 0
    yield "gnp.fetch", lambda: gnp.fetch(gnp.sum(x, axis=0)), 0, 1, 0
    yield "np.asarray", lambda: np.asarray(x * 3), 1, 1, 0
    yield "accelerated call", lambda: dask.compute(*accelerated(x)), 1, None, 0
    yield "accelerated call, persisted", lambda: distributed.wait(dask.persist(*accelerated(x))), 0, 2, 0
    yield "fori_loop", lambda: smooth(x).compute(), 1, None, 0
    yield "fori_loop of one block", lambda: smooth(one).compute(), 0, 1, 0
    yield "while_loop", lambda: gnp.fetch(gnp.sum(gnp.while_loop(lambda s: gnp.sum(s) < 1e4, lambda s: s * 2, x))), \
        0, None, 0
    scales = iter(range(1, 10**6))
    yield "gnp.fetch, a new Python float", lambda: gnp.fetch(gnp.sum(gnp.exp(x) * (1.5 + 1e-3 * next(scales)))), \
        0, 1, 0


def _count_pool_trips(dask_worker) -> None:
    """On a worker: count in ``dask_worker.gnp_pool_trips`` the functions its thread pool is given (a task's,
    or the work a task running in the event loop sends there)."""
    if hasattr(dask_worker, "gnp_pool_trips"):  # (counting already)
        dask_worker.gnp_pool_trips = 0
        return
    pool = dask_worker.executors["default"]
    submit = pool.submit

    def counted(*args, **kwargs):
        dask_worker.gnp_pool_trips += 1
        return submit(*args, **kwargs)

    dask_worker.gnp_pool_trips, pool.submit = 0, counted


def _pool_trips(dask_worker) -> int:
    trips, dask_worker.gnp_pool_trips = dask_worker.gnp_pool_trips, 0
    return trips


def _count_offloads(dask_scheduler) -> None:
    """On the (in-process) scheduler: record in ``dask_scheduler.gnp_offloaded`` the functions its update-graph
    hands its offload thread (each a trip from its event loop to that thread and back)."""
    import distributed.scheduler as module

    offload = getattr(module.offload, "gnp_counted", module.offload)

    def counted(func, *args, **kwargs):
        dask_scheduler.gnp_offloaded.append(func.__name__)
        return offload(func, *args, **kwargs)

    counted.gnp_counted = offload
    dask_scheduler.gnp_offloaded, module.offload = [], counted


def _offloaded(dask_scheduler) -> list[str]:
    out, dask_scheduler.gnp_offloaded = dask_scheduler.gnp_offloaded, []
    return out


def _stop_counting_offloads(dask_scheduler) -> None:
    import distributed.scheduler as module

    module.offload = getattr(module.offload, "gnp_counted", module.offload)


def _count_round_trips(client, calls, pool_trips: int | None = None, ordered: frozenset[str] = frozenset(),
                       compiled_here: frozenset[str] = frozenset()) -> None:
    """Run each call twice (the first traces, compiles, learns the workers) and check what the second asked
    of the scheduler: one graph, at most ``gathers`` replies, and ``levels`` levels of tasks (None: any); and
    what it cost besides: the client compiles nothing (waiting on persisted results reads their blocks) but for
    the calls named in ``compiled_here`` (a one-block result of work on several workers: ``submit.combined_here``), the
    scheduler compiles the one tree it was sent once, optimizing ``optimized`` trees (0: the graph of a tree
    compiled before, or of one of the same structure on other inputs, is reused: a region's on new small
    arguments too; None: any), in one trip through its offload thread: the graph came with its priorities, so that the
    scheduler ran no ``dask.order`` of its own in a second trip, but for the calls named in ``ordered``
    (``dask.compute``, and ``dask.persist`` on a plain ``distributed.Client``: Dask's generic path), and none at
    all for a graph of one level; and,
    where ``pool_trips`` is given, the workers' thread pools
    were given that many functions in all (each a trip from a worker's event loop to a thread and back)."""
    client.run_on_scheduler(_start_counting)
    client.run_on_scheduler(_count_offloads)
    if pool_trips is not None:
        client.run(_count_pool_trips)
    refresh = client._periodic_callbacks["scheduler-info"]  # the client's own refresh, every 2 s, apart from calls
    refresh.stop()
    try:
        with gnp.allowfetch(), client.as_current():
            for name, call, gathers, levels, optimized in calls:
                call()
                client.run_on_scheduler(_submitted)
                client.run_on_scheduler(_offloaded)
                if pool_trips is not None:
                    client.run(_pool_trips)
                with _Requests(client) as sent, _Compiles() as compiles:
                    call()
                graphs = client.run_on_scheduler(_submitted)
                offloaded = client.run_on_scheduler(_offloaded)
                trips = sum(client.run(_pool_trips).values()) if pool_trips is not None else None
                print(f"{name}: {sent} {graphs} compiled {compiles.here} here, {compiles.elsewhere} on the "
                      f"scheduler, optimized {compiles.optimized}, offloaded {offloaded}")
                assert offloaded == ["_materialize_graph", *(["order"] if name in ordered else [])], name
                # one level: nothing to order (a combine done here is still in the graph made, in that same trip)
                assert levels != 1 or name in compiled_here or compiles.ordered == (name in ordered), name
                assert (compiles.here, compiles.elsewhere) == (int(name in compiled_here), 1), name
                assert optimized is None or compiles.optimized == optimized, name
                assert sent.count("update-graph") == 1, (name, sent, graphs)
                assert [op for op in sent if op.startswith("request ")] == ["request gather"] * gathers, (name, sent)
                assert _round_trips(sent) == 1 + gathers
                assert len(graphs) == 1 and graphs[0]["levels"] >= 1, (name, graphs)
                assert levels is None or graphs[0]["levels"] == levels, (name, graphs)
                assert pool_trips is None or trips == pool_trips, (name, trips)
    finally:
        refresh.start()
        client.run_on_scheduler(_stop_counting_offloads)
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.remove_plugin(_Submitted.name))


def test_one_round_trip_per_call(client):
    """Every kind of call submits one graph and asks the scheduler for at most one reply (the results it
    gathers): no second round trip (asking for the workers, waiting in between), whatever the expression.
    On one block, a call is one level of tasks (one scheduler-to-worker cycle): a fused kernel, a reduction
    finished in its kernel, a region of one rank computing its one output block itself. A region of several
    ranks is two: its ranks' tasks, then each output block's task taking it from its rank's worker once every
    rank is done. Over several blocks a compute (``.compute()``, ``np.asarray``) is one level too: the client
    gathers the blocks and joins them itself. A small result of one block (``gnp.fetch``, ``.compute()``) asks for no reply
    at all: its value comes pushed, beside the word that its task is done; a reduction over blocks on both workers
    is one level too: its partials come pushed and the client combines them with the combining task's own function
    (it compiles the call's graph to find that task: a graph-cache hit after the first call)."""
    _count_round_trips(client, _calls(data(41, (80, 6))),
                       ordered=frozenset({"accelerated call", "accelerated call, persisted"}),
                       compiled_here=frozenset({"compute of a reduction", "gnp.fetch", "while_loop",
                                                "gnp.fetch, a new Python float"}))


@pytest.fixture(scope="module")
def one_worker():
    """A one-worker LocalCluster (a worker process): the cluster of one GPU."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(1)
        yield c


def _laplacian(u):
    return gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=0) + gnp.roll(u, 1, axis=1) + gnp.roll(u, -1, axis=1) - 4 * u


def _workload_calls(seed: int):
    """The suite's workloads as users write them, small: (name, call, replies, levels, trees optimized again),
    each one level of tasks on one worker, each call on new arguments: a new Python float in a plain expression
    (Monte-Carlo's range) or an accelerated call's region on new small arguments (a 0-d rate, a salt) or new arrays
    is a tree of the same structure, its graph made from the first's; a new Python int in a plain expression makes
    a tree of another structure, optimized again (small trees). Each returns what the benchmark returns (its checks
    are in benchmarks/)."""
    rng = np.random.default_rng(seed)
    u0, v0 = (gnp.asarray(rng.random((32, 32), dtype=np.float32)).persist() for _ in range(2))
    S, K, T = (gnp.asarray(rng.uniform(lo, hi, 256).astype(np.float32)).persist() for lo, hi in
               ((5, 30), (1, 100), (0.25, 10)))
    a, b = (gnp.asarray(rng.random((24, 24), dtype=np.float32)).persist() for _ in range(2))
    distributed.wait([u0, v0, S, K, T, a, b])
    calls = iter(range(1, 10**6))

    @gnp.accelerate
    def monte_carlo(x_max):
        samples = 2 * x_max * gnp.random.default_rng(42).random(4096, dtype=np.float32) - x_max
        return 2 * x_max / 4096 * gnp.sum(gnp.exp(-samples**2))

    @gnp.accelerate
    def black_scholes(S, K, T, r):
        d1 = (gnp.log(S / K) + (r + 0.045) * T) / (0.3 * gnp.sqrt(T))
        d2 = d1 - 0.3 * gnp.sqrt(T)
        discount = K * gnp.exp(-r * T)
        return S * gnp.tanh(d1) - discount * gnp.tanh(d2), discount - S * gnp.tanh(d1)

    @gnp.accelerate
    def heat(u):
        return gnp.fori_loop(4, lambda i, u: u + 0.1 * _laplacian(u), u)

    @gnp.accelerate
    def gray_scott(salt, u, v):
        def step(i, state):
            u, v = state
            uvv = u * v * v
            return u + 0.16 * _laplacian(u) - uvv + 0.035 * (1 - u), v + 0.08 * _laplacian(v) + uvv - 0.1 * v
        u, v = gnp.fori_loop(3, step, (u + salt, v))
        return gnp.sum(u) + gnp.sum(v)

    @gnp.accelerate
    def conjugate_gradients(salt, b):
        def step(state):
            x, r, p, rr, k = state
            ap = 4 * p - gnp.roll(p, 1, axis=0) - gnp.roll(p, -1, axis=0)
            alpha = rr / gnp.sum(p * ap)
            x, r = x + alpha * p, r - alpha * ap
            rr_new = gnp.sum(r * r)
            return x, r, r + (rr_new / rr) * p, rr_new, k + 1
        b = b + salt
        x, *_ = gnp.while_loop(lambda s: (s[3] > 1e-6) & (s[4] < 10), step,
                               (gnp.zeros_like(b), b, b, gnp.sum(b * b), gnp.asarray(0)))
        return gnp.sum(x * x)

    @gnp.accelerate
    def conjugate_gradients_fori(salt, b):
        def step(i, state):
            x, r, p, rr = state
            ap = 4 * p - gnp.roll(p, 1, axis=0) - gnp.roll(p, -1, axis=0)
            alpha = rr / gnp.sum(p * ap)
            x, r = x + alpha * p, r - alpha * ap
            rr_new = gnp.sum(r * r)
            return x, r, r + (rr_new / rr) * p, rr_new
        b = b + salt
        x, *_ = gnp.fori_loop(5, step, (gnp.zeros_like(b), b, b, gnp.sum(b * b)))
        return gnp.sum(x * x)

    def rotated_cg() -> float:
        with dask.config.set({"gpunumeric.loop-rotation": True}):  # (the plan CuPy blocks get, on NumPy blocks)
            return gnp.fetch(conjugate_gradients_fori(salt(), u0))

    def salt() -> gnp.Array:
        return gnp.asarray(np.float32(1e-30 * next(calls)))

    def plain_monte_carlo(x_max: float) -> gnp.Array:  # (the example's function, not accelerated)
        omega = 2 * x_max
        samples = omega * gnp.random.default_rng(42).random(4096, dtype=np.float32) - x_max
        return (omega / 4096) * gnp.sum(gnp.exp(-samples**2))

    yield "compute", lambda: (gnp.exp(u0) + 1).compute(), 0, 1, 0
    yield "persist", lambda: distributed.wait((u0 * next(calls)).persist()), 0, 1, 1
    yield "gnp.fetch of a reduction", lambda: gnp.fetch(gnp.sum(u0 * next(calls))), 0, 1, 1
    yield "np.asarray", lambda: np.asarray(v0 * next(calls)), 0, 1, 1
    yield "np.asarray, a new Python float", lambda: np.asarray(v0 * (1 + 1e-3 * next(calls))), 0, 1, 0
    yield "plain Monte-Carlo", lambda: gnp.fetch(plain_monte_carlo(10.0 + 1e-7 * next(calls))), 0, 1, 0
    yield "accelerated Monte-Carlo", lambda: gnp.fetch(monte_carlo(gnp.asarray(np.float32(2 + 1e-5 * next(calls))))), 0, 1, 0
    yield "accelerated Black-Scholes, persisted", lambda: distributed.wait(dask.persist(
        *black_scholes(S, K, T, gnp.asarray(np.float32(0.02 + 1e-6 * next(calls)))))), 0, 1, 0
    yield "accelerated heat (fori_loop), persisted", lambda: distributed.wait(heat(u0 * next(calls)).persist()), 0, 1, 1
    yield "accelerated Gray-Scott (fori_loop)", lambda: gnp.fetch(gray_scott(salt(), u0, v0)), 0, 1, 0
    yield "accelerated CG (while_loop, reductions)", lambda: gnp.fetch(conjugate_gradients(salt(), u0)), 0, 1, 0
    yield "accelerated CG (fori_loop, rotated: a prologue and an epilogue)", rotated_cg, 0, 1, 0
    yield "matmul, persisted", lambda: distributed.wait(((a * np.float32(1 + 1e-5 * next(calls))) @ b).persist()), 0, 1, 0


def test_one_level_per_call_on_one_worker(one_worker):
    """On a one-worker cluster (one GPU's) every kind of call, the suite's workloads among them, is one graph,
    one level of tasks (one scheduler-to-worker cycle: small host arguments made inside the tasks reading
    them, a region's outputs each a task with the same inputs, chains and trees of tasks folded into one),
    and no reply asked for: its small result of one block comes pushed with the word that its task is done
    (persisted results stay on the worker): one round trip. On the worker, a call is one trip through its
    thread pool (Black-Scholes' second price, left by the first's task, is taken in the event loop)."""
    with one_worker.as_current():
        calls = list(_workload_calls(43))
    _count_round_trips(one_worker, calls, pool_trips=1, ordered=frozenset({"accelerated Black-Scholes, persisted"}))


def test_gnp_client_sends_calls_with_their_priorities(one_worker):
    """``gnp.cluster``'s Client persists gnp Arrays itself (``runtime.submit``): ``dask.persist``, ``.persist()``,
    ``Client.persist`` and every workload's call is one graph sent with its tasks' priorities, so the scheduler
    orders none (one trip through its offload thread per call, the graph's making); the persisted blocks are
    futures the scheduler knows (who has them), their values NumPy's; other arguments take distributed's path."""
    from dask_gpunumeric.runtime.cluster import _new_client_class

    ref = data(48, (40, 8)).astype(np.float32)
    with _new_client_class()(one_worker.scheduler.address, set_as_default=False) as c:
        with c.as_current():  # (trees optimized: any, the calls' structures are those of another test's)
            calls = [(name, call, gathers, levels, None) for name, call, gathers, levels, _ in _workload_calls(49)]
        with dask.config.set({"gpunumeric.cluster.direct-calls": False}):  # (the workers' own runs: test_cluster_calls)
            _count_round_trips(c, calls, pool_trips=1)
        with c.as_current():
            x = gnp.asarray(ref).persist()
            y, total = dask.persist(gnp.exp(x) * 2, gnp.sum(x * x))
            (z,) = c.persist([x - 1])
            retried = c.persist(x + 1, retries=1)
            distributed.wait([x, y, total, z, retried])
            held = c.who_has(distributed.futures_of([y, total, z, retried]))
            assert len(held) == 4 and all(held.values())
            assert_eq(y, np.exp(ref) * 2, rtol=1e-6)
            assert gnp.fetch(total) == pytest.approx(float(np.sum(ref * ref)), rel=1e-5)
            assert_eq(z, ref - 1)
            assert_eq(retried, ref + 1)


def _count_program_runs() -> None:
    """On a worker: count the runs of a region's programs (``lower.run_rank``) in ``lower.program_runs``."""
    from dask_gpunumeric.runtime.regions import lower

    def counted(*args, run=lower.run_rank):
        lower.program_runs += 1
        return run(*args)

    lower.program_runs, lower.run_rank = 0, counted


def test_region_outputs_share_one_run(one_worker):
    """The output blocks of a one-rank region are tasks of their own (one level of tasks), yet its program
    runs once: the first task leaves the other blocks for theirs; a block computed alone, later, runs it
    again by itself and leaves nothing behind."""
    from dask_gpunumeric.runtime.regions import lower

    ref = data(44, (50,))

    @gnp.accelerate
    def three(x, r):
        return gnp.exp(x) * r, x - r, gnp.sum(x * r)

    one_worker.run(_count_program_runs)
    with one_worker.as_current():
        x = gnp.asarray(ref).persist()
        outputs = three(x, gnp.asarray(np.float64(1.5)))
        computed = dask.compute(*outputs)
        assert one_worker.run(lambda: lower.program_runs) == dict.fromkeys(one_worker.scheduler_info()["workers"], 1)
        for got, expected in zip(computed, (np.exp(ref) * 1.5, ref - 1.5, np.sum(ref * 1.5))):
            np.testing.assert_allclose(to_host(got), expected, rtol=1e-12)
        later = three(x, gnp.asarray(np.float64(2.5)))
        np.testing.assert_allclose(to_host(later[1].compute()), ref - 2.5, rtol=1e-12)
        assert set(one_worker.run(lambda: lower.program_runs).values()) == {2}
        assert set(one_worker.run(lambda: len(lower._left)).values()) == {0}



def test_accelerated_outputs_named_as_the_scheduler_lowers_them(client):
    """A client names a region's outputs alone (``Region.output_names``), the scheduler every key of the plan
    (``Region.name_map``): the two agree, an argument returned as it is keeps its name, and each call's scalar
    gives its own outputs."""
    ref = data(45, (64,))

    @gnp.accelerate
    def scaled(x, r):
        return x, gnp.exp(x) * r

    x = gnp.asarray(ref, chunks=16).persist()
    distributed.wait(x)
    for rate in (1.5, 2.5):
        same, y = dask.persist(*scaled(x, gnp.asarray(np.float64(rate))))
        distributed.wait([same, y])
        assert same.name == x.name
        region = scaled(x, gnp.asarray(np.float64(rate)))[1].expr.region
        assert region.output_names == [region.name_map[name] for name, *_ in region.plan.outputs]
        assert_eq(same, ref)
        assert_eq(y, np.exp(ref) * rate)

@pytest.mark.parametrize("cluster", ["one_worker", "client"])
def test_new_small_arguments_reuse_the_scheduler_graph(cluster, request):
    """An accelerated call on new small arguments (a 0-d array, a Python number) is a tree of the structure of
    the first call's: the scheduler makes its graph from the first's (``runtime.reuse``), optimizing and
    lowering nothing, with this call's keys and its own values made inside the tasks reading them; each call
    gives its own values, on one worker (one rank, its outputs' tasks sharing one run) and on two (two ranks
    exchanging through their own channels)."""
    c = request.getfixturevalue(cluster)
    ref = data(47, (64,))

    @gnp.accelerate
    def priced(x, r, s):
        return gnp.exp(x) * r + s, gnp.sum(x * r) - s

    values = [(1.5, 0.25), (2.5, -1.0), (0.5, 3.0), (1.5, 3.0)]
    with c.as_current():
        x = gnp.asarray(ref, chunks=16).persist()
        distributed.wait(x)
        results = []
        for k, (r, s) in enumerate(values):  # (fetches come after: a fetch of a held key may return first)
            with _Compiles() as compiles:
                results.append(dask.persist(*priced(x, gnp.asarray(np.float64(r)), s)))
                distributed.wait(results[-1])
            assert (compiles.elsewhere, compiles.reused) == (1, 0 if k == 0 else 1), k
            assert k == 0 or compiles.optimized == 0
        for (r, s), (y, total) in zip(values, results):
            assert_eq(y, np.exp(ref) * r + s)
            assert gnp.fetch(total) == pytest.approx(np.sum(ref * r) - s)
            assert gnp.fetch(priced(x, gnp.asarray(np.float64(r)), s)[1]) == pytest.approx(np.sum(ref * r) - s)


@pytest.mark.parametrize("cluster", ["one_worker", "client"])
def test_new_numbers_reuse_the_scheduler_graph_of_plain_code(cluster, request):
    """Plain code (no ``accelerate``) called with new Python floats (a rate, a range): the scheduler makes each
    call's graph from the first's (``runtime.reuse``), optimizing nothing, with this call's numbers in the tasks
    holding them; each call gives NumPy's results, persisted and fetched, on one worker and on two."""
    c = request.getfixturevalue(cluster)
    ref = data(48, (64,))

    def priced(x, r, s):
        return gnp.exp(x * r) + s, gnp.sum(x * r) - s

    values = [(1.5, 0.25), (2.5, -1.5), (0.5, 3.0), (1.5, 3.0)]
    with c.as_current():
        x = gnp.asarray(ref, chunks=16).persist()
        distributed.wait(x)
        results = []
        for k, (r, s) in enumerate(values):
            with _Compiles() as compiles:
                results.append(dask.persist(*priced(x, r, s)))
                distributed.wait(results[-1])
            assert (compiles.here, compiles.elsewhere) == (0, 1), k
            assert k == 0 or (compiles.reused, compiles.optimized) == (1, 0), k  # (the first: another test's too)
        for (r, s), (y, total) in zip(values, results):
            assert_eq(y, np.exp(ref * r) + s)
            assert gnp.fetch(total) == pytest.approx(np.sum(ref * r) - s)
            assert gnp.fetch(priced(x, r, s)[1]) == pytest.approx(np.sum(ref * r) - s)


def _batches_of(log, op: str, keys: set) -> list[set]:
    """The keys among ``keys`` of the messages ``op`` in each batch of a batched stream's ``recent_message_log``
    (the batches with any)."""
    found = ({m["key"] for m in batch if isinstance(m, dict) and m.get("op") == op and m.get("key") in keys}
             for batch in log if batch != "large-message")
    return [batch for batch in found if batch]


def _worker_reports(dask_worker, keys) -> list[set]:
    return _batches_of(dask_worker.batched_stream.recent_message_log, "task-finished", set(keys))


def _client_reports(dask_scheduler, keys) -> list[set]:
    return [found for comm in dask_scheduler.client_comms.values()
            for found in _batches_of(comm.recent_message_log, "key-in-memory", set(keys))]


def test_region_outputs_reported_together(one_worker):
    """The output blocks of a one-rank region (Black-Scholes' prices) finish on the worker one after the other
    (the first in its thread pool, computing them all, the others taking theirs in its event loop: no trip
    through the pool each), yet reach the scheduler in one message and the client in one: the client's wait is
    one round trip, not one and two batching intervals. Persisted, their values are NumPy's through every entry point."""
    ref = np.random.default_rng(46).uniform(1, 2, 64)

    @gnp.accelerate
    def three(x, r):
        d = gnp.log(x) * r
        return gnp.exp(d), x - d, gnp.sqrt(x) + d

    one_worker.run(_count_pool_trips)
    with one_worker.as_current():
        x = gnp.asarray(ref).persist()
        for call in range(3):  # (the first traces and sets the cluster up)
            r = 1.5 + call
            time.sleep(0.05)  # the worker's stream idle: its next report would leave at once
            one_worker.run(_pool_trips)
            outputs = dask.persist(*three(x, gnp.asarray(np.float64(r))))
            distributed.wait(outputs)
            keys = [k for o in outputs for k in flatten(o.__dask_keys__())]
            workers = one_worker.scheduler_info()["workers"]
            assert one_worker.run(_worker_reports, keys=keys) == {w: [set(keys)] for w in workers}
            assert one_worker.run(_pool_trips) == dict.fromkeys(workers, 1)
            assert one_worker.run_on_scheduler(_client_reports, keys=keys) == [set(keys)]
            expected = (np.exp(np.log(ref) * r), ref - np.log(ref) * r, np.sqrt(ref) + np.log(ref) * r)
            for got, want in zip(dask.compute(*outputs), expected):
                np.testing.assert_allclose(to_host(got), want, rtol=1e-12)
            np.testing.assert_allclose(gnp.fetch(outputs[1]), expected[1], rtol=1e-12)
            np.testing.assert_allclose(to_host(outputs[2].compute()), expected[2], rtol=1e-12)


def _graph_bytes(client, call) -> int:
    """Bytes of the graph ``call`` submits (the pickled expression of its one update-graph message)."""
    sizes, send = [], client._send_to_scheduler

    def measured(msg: dict) -> None:
        if msg.get("op") == "update-graph":
            sizes.append(sum(memoryview(f).nbytes for f in msg["expr_ser"].frames))
        return send(msg)

    client._send_to_scheduler = measured
    try:
        call()
    finally:
        client._send_to_scheduler = send
    (size,) = sizes
    return size


def _task_bytes(dask_scheduler, keys) -> list[int]:
    """Bytes of the pickled tasks of ``keys``, as the scheduler sends them to a worker."""
    from distributed.protocol.pickle import dumps

    return [len(dumps(dask_scheduler.tasks[k].run_spec)) for k in keys]


def test_repeated_call_names_its_plan(one_worker):
    """An accelerated call submits its plan once: the scheduler keeps it, each worker asks for its program once,
    and a repeated call's graph and tasks name them. What a repeated call sends is then the same small size
    whatever its plan's (a long chain of kernels here, against one operation), and its results are right."""
    from dask_gpunumeric.runtime.regions import store

    ref = data(45, (64,))

    @gnp.accelerate
    def short(x, r):
        return gnp.exp(x) * r

    @gnp.accelerate
    def long(x, r):
        for k in range(1, 40):
            x = gnp.sin(x) * r + gnp.sum(x) / (k * x.size)  # a reduction a step: a kernel each
        return x

    def expected_long(r):
        x = ref
        for k in range(1, 40):
            x = np.sin(x) * r + np.sum(x) / (k * x.size)
        return x

    sizes = {}
    with one_worker.as_current(), dask.config.set(scheduler="dask.distributed"):
        x = gnp.asarray(ref).persist()
        distributed.wait(x)
        rates = (1.0, 1.25)  # of the first call, of the repeated one
        for name, f in (("short", short), ("long", long)):
            calls = []

            def call():
                out = f(x, gnp.asarray(rates[len(calls)])).persist()
                distributed.wait(out)
                calls.append(out)

            first = _graph_bytes(one_worker, call)
            ((plan, _),) = f.plans.values()
            deadline = time.monotonic() + 60
            while not store.published(plan.token):  # the scheduler's word arrives after the call's own
                assert time.monotonic() < deadline, "the scheduler never said it holds the plan"
                time.sleep(0.01)
            repeated = _graph_bytes(one_worker, call)
            tasks = one_worker.run_on_scheduler(_task_bytes, keys=list(flatten(calls[-1].__dask_keys__())))
            sizes[name] = first, repeated, max(tasks)
        np.testing.assert_allclose(to_host(calls[-1].compute()), expected_long(rates[1]), rtol=1e-10)
    print(sizes)
    (_, short_repeated, short_task), (long_first, long_repeated, long_task) = sizes["short"], sizes["long"]
    assert long_first > 4 * long_repeated  # the plan was the bulk of the first call
    assert long_repeated <= short_repeated + 256 and long_task <= short_task + 256  # names, not programs
    assert long_repeated <= 2048 and long_task <= 1024


def test_fetch_pushes_small_results_and_gathers_others(one_worker):
    """``gnp.fetch`` and ``compute()`` on a cluster: a small result comes with the word that its task is done
    (no gather asked for); a large one, a result already in memory and an error take the usual way (gathered,
    raised). (Each call is of a new expression: a key released by the call before may still be in memory.)"""
    small, large = data(46, (40,)), data(47, (300, 300))  # 720,000 bytes: over what is pushed
    with one_worker.as_current(), dask.config.set(scheduler="dask.distributed"), gnp.allowfetch():
        x, y = gnp.asarray(small).persist(), gnp.asarray(large, chunks=large.shape).persist()
        distributed.wait([x, y])
        calls = ((lambda r: gnp.fetch(gnp.sum(gnp.exp(x) * r)), lambda r: np.sum(np.exp(small) * r), 0),
                 (lambda r: gnp.fetch(gnp.exp(x) * r), lambda r: np.exp(small) * r, 0),
                 (lambda r: to_host((gnp.exp(x) * r).compute()), lambda r: np.exp(small) * r, 0),  # its backend's
                 (lambda r: gnp.fetch(y + r), lambda r: large + r, 1),
                 (lambda r: gnp.fetch(x), lambda r: small, 1))  # in memory already: no task runs
        for call, expected, gathers in calls:
            call(1.5)
            with _Requests(one_worker) as sent:
                got = call(2.5)
            np.testing.assert_allclose(got, expected(2.5), rtol=1e-12)
            assert [op for op in sent if op.startswith("request ")] == ["request gather"] * gathers, sent
        with pytest.raises(ValueError, match="a block refused"):
            gnp.fetch(gnp.map_blocks(_refuse, x))


def _refuse(block):
    raise ValueError("a block refused")
