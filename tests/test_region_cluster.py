"""Accelerated regions on a 2-worker cluster: one task per worker, the workers exchanging halos and
reduction partials directly. Conjugate gradients, a stencil time loop with a periodic reduction and a
``while_loop`` with a data-dependent stop give NumPy's results; the scheduler sees the same tasks whatever
the number of iterations; outputs are ordinary blocks on their owners; a failing rank stops its peers at
once; peers that cannot meet fail with a clear error; a region whose peer dies, or whose output block is lost,
is run again.

On a GPU machine the same tests run with one worker per GPU (two GPUs needed; with one they are skipped)."""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import dask
import numpy as np
import pytest
from dask.core import flatten

import dask_gpunumeric as gnp
from _solvers import gnp_cg, gnp_simulation, numpy_cg, numpy_simulation
from conftest import assert_eq, scheduler_runs, to_host
from dask_gpunumeric.runtime.cluster import active_workers, owner
from dask_gpunumeric.api.explain import plan

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster_client():
    """The module's cluster (its own: a test kills one of its workers), the default client meanwhile. Without
    work stealing, tasks run where they are placed (tiny test arrays make moving a region's task cheap)."""
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            gnp.cluster(n_workers=2, dashboard_address=":0") as client:
        yield client


@pytest.fixture
def workers(cluster_client) -> list[str]:
    """The cluster's workers, all up, in the order that decides block owners (two CPU processes, or one
    per GPU: the tests need two)."""
    n = len(cluster_client.cluster.workers)
    if n < 2:
        pytest.skip("regions of several workers need two workers: a CPU run, or a machine with two GPUs")
    deadline = time.monotonic() + 120  # a loaded 2-core machine starts worker processes slowly
    while True:
        info = cluster_client.scheduler_info(n_workers=-1)["workers"]
        running = {address for address, worker in info.items() if worker["status"] == "running"}
        if len(running) == n == len(info) and set(active_workers()) == running:
            return active_workers()
        assert time.monotonic() < deadline, "the cluster's workers did not come up"
        time.sleep(0.2)


def _prefixes(records: list[dict]) -> list[str]:
    return sorted(dask.utils.key_split(r["key"]) for r in records)


def test_conjugate_gradient(cluster_client, workers) -> None:
    bn = np.random.default_rng(0).standard_normal((64, 48))
    b = gnp.asarray(bn)
    assert b.numblocks == (len(workers), 1)
    x = gnp_cg(b, 25)
    info = plan(x)
    (region,) = info["regions"]
    assert region["ranks"] == len(workers)
    for program in region["programs"]:
        (loop,) = program["loops"]
        assert loop["exchanges"] == 3  # a halo, then the partials of two reductions
        assert loop["all_reduces"] == 2  # the two dot products: NCCL all-reduces on GPUs
        assert 0 < loop["bytes_sent"] <= 2 * 48 * 8 + 16  # a halo row or two, and two partials
    with distributed.get_task_stream(client=cluster_client) as ts:
        result = x.compute()
    np.testing.assert_allclose(to_host(result), numpy_cg(bn, 25), rtol=1e-8, atol=1e-10)
    ran = {r["key"]: r["worker"] for r in ts.data if dask.utils.key_split(r["key"]) == "region"}
    assert sorted(k[1] for k in ran) == list(range(len(workers))) and set(ran.values()) == set(workers)
    with distributed.get_task_stream(client=cluster_client) as few:
        gnp_cg(b, 2).compute()
    assert _prefixes(few.data) == _prefixes(ts.data)  # the scheduler's tasks do not depend on the iterations


def test_stencil_time_loop_with_periodic_reduction(cluster_client, workers) -> None:
    rng = np.random.default_rng(1)
    un, cn = rng.random((40, 16)), rng.random((40, 16))
    u, energy = numpy_simulation(un, cn, 6, 4)
    v, e = gnp_simulation(gnp.asarray(un), gnp.asarray(cn), 6, 4)
    assert_eq(e, np.float64(energy), rtol=1e-10)
    assert_eq(v, u, rtol=1e-10)
    (region,) = plan(v)["regions"]
    (outer,) = region["programs"][0]["loops"]
    (inner,) = outer["loops"]
    assert inner["exchanges"] == 1 and 16 * 8 <= inner["bytes_sent"] <= 2 * 16 * 8  # a halo row per step
    # more steps: the same tasks on the scheduler
    with distributed.get_task_stream(client=cluster_client) as few:
        dask.compute(*gnp_simulation(gnp.asarray(un), gnp.asarray(cn), 2, 2))
    with distributed.get_task_stream(client=cluster_client) as many:
        dask.compute(*gnp_simulation(gnp.asarray(un), gnp.asarray(cn), 20, 10))
    assert _prefixes(few.data) == _prefixes(many.data)


def test_while_loop_data_dependent_stop(cluster_client, workers) -> None:
    """Jacobi sweeps until the update is small: the workers evaluate the condition themselves."""
    bn = np.random.default_rng(2).random((32, 8))

    def sweep(u: Any, xp: Any) -> Any:
        return 0.4 * u + 0.25 * (xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=0)) + 0.01 * bn_like(u, xp)

    def bn_like(u: Any, xp: Any) -> Any:
        return b if xp is gnp else bn

    b = gnp.asarray(bn)
    u, steps = np.zeros_like(bn), 0
    while np.max(np.abs(sweep(u, np) - u)) > 1e-6:  # a contraction (by 0.9): it stops
        u, steps = sweep(u, np), steps + 1

    def going(state: tuple) -> gnp.Array:
        u, _ = state
        return gnp.max(gnp.abs(sweep(u, gnp) - u)) > 1e-6

    def body(state: tuple) -> tuple:
        u, n = state
        return sweep(u, gnp), n + 1

    out, n = gnp.while_loop(going, body, (gnp.zeros_like(b), 0), max_iter=1000)
    assert steps > 20
    assert_eq(n, np.asarray(steps))
    assert_eq(out, u, rtol=1e-10)


def test_outputs_are_blocks_on_their_owners(cluster_client, workers) -> None:
    xn = np.random.default_rng(3).random((30, 5))

    @gnp.accelerate
    def f(a: gnp.Array) -> tuple:
        return gnp.sin(a) + gnp.roll(a, 1, axis=0), gnp.sum(a * a)

    field, total = f(gnp.asarray(xn))
    assert_eq(total, np.sum(xn * xn))  # computing one output runs every rank
    assert_eq(field[:3], (np.sin(xn) + np.roll(xn, 1, axis=0))[:3])  # and so does computing one block
    p = field.persist()
    distributed.wait(p)
    who_has = cluster_client.who_has(p)
    for i, key in enumerate(flatten(p.__dask_keys__())):
        assert list(who_has[key]) == [workers[owner((i, 0), p.numblocks, len(workers))]]
    assert_eq(p * 2, (np.sin(xn) + np.roll(xn, 1, axis=0)) * 2)


def _leave(rank_key: tuple, block: np.ndarray) -> str:
    from dask_gpunumeric.runtime.regions.collectives import leave

    return leave(rank_key, {"block": block})


async def _take(where: str, rank_key: tuple) -> Any:
    from dask_gpunumeric.runtime.regions.collectives import take

    return await take(where, rank_key, "block", 30)


def _left(dask_worker: Any) -> int:
    return len(dask_worker.plugins["gnp-region-channels"].channels.left)


def test_output_block_taken_from_its_ranks_worker(cluster_client, workers) -> None:
    """A rank's task leaves its output blocks on its worker, and the task of a block takes it there, or asks
    that worker for it when it runs on another (its owner busy, or lost and replaced); what no task takes is
    dropped once the rank's result leaves the worker's memory."""
    from dask_gpunumeric.runtime.regions.transport import install

    install()
    block = np.arange(6.0)
    rank_key = ("test-region-left", 0)
    where = cluster_client.submit(_leave, rank_key, block, workers=[workers[0]], pure=False).result()
    assert where == workers[0]
    taken = cluster_client.submit(_take, where, rank_key, workers=[workers[1]], pure=False).result()
    np.testing.assert_array_equal(taken, block)
    # a region's blocks that no task takes (one output computed alone) go with its ranks' results
    xn = np.random.default_rng(5).random((30, 5))

    @gnp.accelerate
    def f(a: gnp.Array) -> tuple:
        return gnp.sin(a) + gnp.roll(a, 1, axis=0), gnp.cos(a)

    field, _ = f(gnp.asarray(xn))
    assert_eq(field, np.sin(xn) + np.roll(xn, 1, axis=0))
    deadline = time.monotonic() + 30
    while set(cluster_client.run(_left).values()) != {0}:
        assert time.monotonic() < deadline, cluster_client.run(_left)
        time.sleep(0.1)


def _fails_on_second_block(block: Any, block_offset: tuple, global_shape: tuple) -> Any:
    if block_offset[0] > 0:
        raise ValueError("boom in the second block")
    return block


def test_a_failing_rank_stops_its_peers(cluster_client, workers) -> None:
    x = gnp.asarray(np.arange(20.0))
    out = gnp.fori_loop(3, lambda i, u: gnp.map_blocks(_fails_on_second_block, u + gnp.sum(u), offsets=True), x)
    start = time.monotonic()
    with pytest.raises(Exception, match="boom in the second block"):
        out.compute()
    assert time.monotonic() - start < 30  # not the 60 s a peer would wait for a message that never comes


def _lonely_rank() -> None:
    from dask_gpunumeric.runtime.regions.collectives import connect

    with connect("region-lonely", "plan", 0, 2, 1.0, "auto", "numpy"):
        pass


def test_peers_that_cannot_meet_fail_clearly(cluster_client, workers) -> None:
    from dask_gpunumeric.runtime.regions.transport import RegionTimeoutError

    gnp.fori_loop(1, lambda i, u: u, gnp.asarray(np.zeros(8)))  # a region: the cluster gets its plugins
    with pytest.raises(RegionTimeoutError, match=r"ranks \[1\] of 2 did not start within 1 s"):
        cluster_client.submit(_lonely_rank, pure=False).result(timeout=30)


@gnp.accelerate
def _smooth(a: gnp.Array, steps: int) -> gnp.Array:
    return gnp.fori_loop(steps, lambda i, u: 0.5 * (u + gnp.roll(u, 1, axis=0)) + gnp.mean(u), a)


def _numpy_smooth(xn: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        xn = 0.5 * (xn + np.roll(xn, 1, axis=0)) + xn.mean()
    return xn


def _lost_block_recomputed(client: Any, out: gnp.Array, expected: np.ndarray, meanwhile: Any = None) -> None:
    """Persist a region's output (then run ``meanwhile``), kill the worker holding its second block: the
    block is recomputed right, the region running again, all its ranks."""
    ranks = [k for k in out.__dask_graph__() if dask.utils.key_split(k) == "region"]
    p = out.persist()
    distributed.wait(p)
    if meanwhile is not None:
        meanwhile()
    (victim,) = client.who_has(p)[list(flatten(p.__dask_keys__()))[1]]
    with contextlib.suppress(OSError):
        client.run(os._exit, 1, workers=[victim])
    assert_eq(p * 2, expected * 2, rtol=1e-12)
    assert len(ranks) == 2 and all(n >= 2 for n in scheduler_runs(client, ranks).values())


def test_lost_output_block_runs_the_region_again(cluster_client, workers) -> None:
    """A persisted output block lost with its worker is recomputed: the region runs again, all its ranks."""
    xn = np.random.default_rng(5).random((24, 6))
    _lost_block_recomputed(cluster_client, _smooth(gnp.asarray(xn), 5), _numpy_smooth(xn, 5))


def _rendezvous_rounds(dask_scheduler: Any) -> int:
    """How many regions the scheduler's rendezvous holds (those still meeting)."""
    return len(dask_scheduler.plugins["gnp-region-rendezvous"].rounds)


def test_old_region_recovers(cluster_client, workers) -> None:
    """A region that ran long ago (newer regions since; the scheduler keeps no record of finished meetings)
    runs again when its output block is lost with its worker."""
    xn = np.random.default_rng(6).random((24, 6))

    def newer_regions() -> None:
        later = gnp.asarray(np.ones((24, 6)))
        for _ in range(5):
            later = _smooth(later, 3).persist()
        distributed.wait(later)
        assert cluster_client.run_on_scheduler(_rendezvous_rounds) == 0

    _lost_block_recomputed(cluster_client, _smooth(gnp.asarray(xn), 3), _numpy_smooth(xn, 3), newer_regions)


def _count_meetings(dask_scheduler: Any) -> None:
    """Count the region tasks that report to the scheduler's rendezvous, in ``dask_scheduler.gnp_meetings``."""
    meet = dask_scheduler.plugins["gnp-region-rendezvous"].meet
    dask_scheduler.gnp_meetings = 0

    async def counted(**kwargs: Any) -> dict:
        dask_scheduler.gnp_meetings += 1
        return await meet(**kwargs)

    dask_scheduler.handlers["gnp_region_meet"] = counted


def test_regions_meet_once_per_set_of_workers(cluster_client, workers) -> None:
    """Once a region's workers have met, later regions on them run without meeting at the scheduler, with
    NumPy's results (a region run again meets: each ``assert_eq`` entry point would run it again)."""
    xn = np.random.default_rng(8).random((24, 6))
    assert_eq(_smooth(gnp.asarray(xn), 3), _numpy_smooth(xn, 3), rtol=1e-12)
    cluster_client.run_on_scheduler(_count_meetings)
    for k in range(2, 5):
        out = _smooth(gnp.asarray(xn * k), 3)
        assert len([key for key in out.__dask_graph__() if dask.utils.key_split(key) == "region"]) == 2
        np.testing.assert_allclose(to_host(out.compute()), _numpy_smooth(xn * k, 3), rtol=1e-12)  # computed once
    assert cluster_client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.gnp_meetings) == 0


def test_a_run_again_or_on_new_workers_meets() -> None:
    """A worker's channels take a region's peers from an earlier meeting of the same workers only on the
    region's first run there, on the worker it was placed on; a lost peer's sets of workers meet again."""
    import asyncio
    from types import SimpleNamespace

    from distributed.comm.core import CommClosedError

    from dask_gpunumeric.runtime.regions.transport import Channels

    class Closed:
        async def read(self) -> None:
            raise CommClosedError("gone")

    channels = Channels(SimpleNamespace(address="tcp://a", loop=SimpleNamespace(asyncio_loop=None)))
    members = [{"address": "tcp://a", "id": "a"}, {"address": "tcp://b", "id": "b"}]
    assert channels.first_run("region-1", 0, ("tcp://a", "tcp://b")) is None  # never met
    channels.met(members)
    assert channels.first_run("region-2", 0, ("tcp://a", "tcp://b")) == members
    assert channels.first_run("region-2", 0, ("tcp://a", "tcp://b")) is None  # run again
    assert channels.first_run("region-3", 1, ("tcp://a", "tcp://b")) is None  # placed on another worker
    assert channels.first_run("region-4", 0, ("tcp://a", "tcp://c")) is None  # other workers
    asyncio.run(channels.serve(Closed(), "tcp://b"))  # b's connection closes: b is lost
    assert channels.first_run("region-5", 0, ("tcp://a", "tcp://b")) is None


def _slow_copy(block: Any, delay: float) -> Any:
    """A copy of the block, after ``delay`` seconds (to keep a region running while a worker dies)."""
    time.sleep(delay)
    return block * 1


def test_region_whose_peer_dies_is_recomputed(cluster_client, workers) -> None:
    # runs last: it kills a worker of the module's cluster (its nanny starts a new one)
    xn = np.random.default_rng(4).random(40)

    def body(i: Any, u: Any) -> Any:
        return 0.5 * (gnp.map_blocks(_slow_copy, u, delay=0.05) + gnp.roll(u, 1)) + 1e-3 * gnp.sum(u)

    out = gnp.fori_loop(60, body, gnp.asarray(xn))
    expected = xn.copy()
    for _ in range(60):
        expected = 0.5 * (expected + np.roll(expected, 1)) + 1e-3 * expected.sum()
    ranks = sorted(k for k in out.__dask_graph__() if dask.utils.key_split(k) == "region")
    future = cluster_client.compute(out)

    def running(dask_scheduler: Any, keys: list = ranks) -> dict:
        """Where the region's tasks run (they leave their worker's thread pool when they start)."""
        return {ts.key: address for address, ws in dask_scheduler.workers.items() for ts in ws.long_running
                if ts.key in keys}

    deadline = time.monotonic() + 30
    while len(where := cluster_client.run_on_scheduler(running)) < len(ranks):
        assert time.monotonic() < deadline, "the region never started"
        time.sleep(0.05)
    assert len(set(where.values())) == len(ranks), where  # one task per worker
    time.sleep(1.0)  # well into the loop
    assert not future.done()
    with contextlib.suppress(OSError):  # the worker dies before it answers
        cluster_client.run(os._exit, 1, workers=[where[ranks[1]]])
    np.testing.assert_allclose(to_host(future.result(timeout=120)), expected, rtol=1e-10)
    runs = scheduler_runs(cluster_client, ranks)
    assert all(n >= 2 for n in runs.values()), runs  # both ranks ran again: the survivor failed cleanly


# --- the choice of transport, and NCCL's code paths ----------------------------------------------------------


def _members(*devices: str | None) -> list[dict]:
    return [{"address": f"tcp://w{i}", "id": f"w{i}", "device": d} for i, d in enumerate(devices)]


def test_ranks_sharing_a_gpu_exchange_through_comms() -> None:
    """NCCL refuses two ranks on one device: with "auto" such regions use Dask's comms; "nccl" asked for
    explicitly says what to change; NumPy blocks and "comm" never use NCCL."""
    from dask_gpunumeric.runtime.regions.collectives import use_nccl
    from dask_gpunumeric.runtime.regions.transport import RegionError

    shared = _members("host/0000:3B:00.0", "host/0000:3B:00.0")
    assert not use_nccl("auto", "cupy", shared, exclusive=True)
    assert not use_nccl("comm", "cupy", _members("host/a", "host/b"), exclusive=True)
    assert not use_nccl("nccl", "numpy", shared, exclusive=True)
    assert not use_nccl("nccl", "cupy", _members("host/a", "host/b"), exclusive=False)
    assert use_nccl("nccl", "cupy", _members("host/a", "host/b"), exclusive=True)
    with pytest.raises(RegionError, match="share a GPU"):
        use_nccl("nccl", "cupy", shared, exclusive=True)


def _nccl() -> Any:
    cupy = pytest.importorskip("cupy")
    try:
        from cupy.cuda import nccl
        available = nccl.available and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no NCCL, or no device
        available = False
    if not available:
        pytest.skip("needs a GPU and CuPy's NCCL")
    return nccl


def test_single_rank_nccl_communicator_all_reduces() -> None:
    """A communicator of one rank made the way regions make theirs (with a timeout) sums in place."""
    from dask_gpunumeric.runtime.regions.collectives import nccl_communicator

    nccl = _nccl()
    import cupy

    communicator = nccl_communicator(1, nccl.get_unique_id(), 0, timeout=60)
    try:
        x = cupy.arange(10, dtype=cupy.float64)
        out = cupy.empty_like(x)
        communicator.allReduce(x.data.ptr, out.data.ptr, x.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM,
                               cupy.cuda.get_current_stream().ptr)
        cupy.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(out), np.arange(10.0))
    finally:
        communicator.destroy()


def test_single_rank_nccl_transport_all_reduces_a_reduction() -> None:
    """A reduction's combine in a region's ``Collective`` step through ``NcclTransport`` (the region code path)
    on a communicator of one rank: NCCL's all-reduce of the partial equals the combine it replaces, for
    sums and products of each dtype NCCL has; a dtype it has not (complex) takes the transport's exchange."""
    from dask._task_spec import List, Task, TaskRef

    from dask_gpunumeric.kernels import blocks
    from dask_gpunumeric.runtime.regions.collectives import NcclTransport, _Communicator, nccl_communicator
    from dask_gpunumeric.runtime.regions.program import AllReduce, Collective, Exchange, Run

    nccl = _nccl()
    import cupy

    communicator = nccl_communicator(1, nccl.get_unique_id(), 0, timeout=60)
    transport = NcclTransport.__new__(NcclTransport)  # what ``connect`` makes for one rank of one worker
    transport.rank, transport.size, transport.plan = 0, 1, "one rank"
    transport.communicator = _Communicator(communicator, ("this worker",))
    try:
        for kind, dtype in [("sum", np.float32), ("sum", np.float64), ("sum", np.int64), ("prod", np.float64),
                            ("sum", np.complex128)]:
            block = cupy.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (6, 5)).astype(dtype))
            partial = blocks.reduce_chunk(kind, block, (0,), np.dtype(dtype), (), (0,))
            combine = Task(("combined", 0), blocks.reduce_combine, kind, List(TaskRef(("partial", 0))), (1, 1),
                           (0,), ())
            env = {("partial", 0): partial}
            transport.collective(Collective(Exchange(1, (), ()), (AllReduce(Run(("combined", 0), combine),
                                                                            (("partial", 0),), kind),)), env)
            cupy.cuda.get_current_stream().synchronize()
            expected = blocks.reduce_combine(kind, [partial], (1, 1), (0,), ())
            assert env[("combined", 0)].keys() == expected.keys()
            for name in expected:
                assert env[("combined", 0)][name].dtype == expected[name].dtype
                np.testing.assert_allclose(cupy.asnumpy(env[("combined", 0)][name]), cupy.asnumpy(expected[name]),
                                           rtol=1e-6)
    finally:
        communicator.destroy()


def test_nccl_communicator_whose_peers_never_join_times_out() -> None:
    from dask_gpunumeric.runtime.regions.collectives import nccl_communicator
    from dask_gpunumeric.runtime.regions.transport import RegionTimeoutError

    nccl = _nccl()
    start = time.monotonic()
    with pytest.raises(RegionTimeoutError, match="did not join within 1 s"):
        nccl_communicator(2, nccl.get_unique_id(), 0, timeout=1.0)
    assert time.monotonic() - start < 10


def _communicators(dask_worker: Any) -> int:
    return len(dask_worker.plugins["gnp-region-channels"].channels.communicators)


def test_two_gpus_exchange_through_nccl_with_a_communicator_kept(cluster_client, workers) -> None:
    """On two GPUs, "nccl" regions are correct and keep one communicator per set of workers across calls."""
    devices = cluster_client.run(_device) if gnp.config.backend() == "cupy" else {}
    if len(set(devices.values())) < 2:
        pytest.skip("needs two workers on two GPUs")
    _nccl()
    bn = np.random.default_rng(7).standard_normal((64, 48))
    with gnp.config.set(region_transport="nccl"):
        for _ in range(2):
            result = gnp_cg(gnp.asarray(bn), 20).compute()
            np.testing.assert_allclose(to_host(result), numpy_cg(bn, 20), rtol=1e-8, atol=1e-10)
    assert set(cluster_client.run(_communicators).values()) == {1}


def _device() -> str:
    from dask_gpunumeric.runtime.regions.collectives import device_of_this_worker

    return device_of_this_worker()
