"""``gnp.cluster()`` and owner-computes on a cluster: the Client it returns (default scheduler while it lives,
closing its cluster on exit), one block per worker along the leading axis for "auto" chunks, every
per-block task on the worker owning the block (no data moved before the combine stage), persisted blocks
kept on their owners, recovery from a worker killed mid-computation, and an iterative loop with persist
and a lazy scalar.

On a CPU machine ``gnp.cluster(n_workers=2)`` starts 2 worker processes; on a GPU machine one worker per
GPU, so the worker count is read from the cluster. The tests that must run without a default client come
first: the module's cluster (``cluster_client``) is the default client from the first test using it on.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import dask
import numpy as np
import pytest
from dask.array.core import normalize_chunks
from dask.core import flatten

import dask_gpunumeric as gnp
from conftest import assert_eq, scheduler_runs, to_host
from dask_gpunumeric.backend import gpu_available
from dask_gpunumeric.runtime.cluster import active_workers, owner

distributed = pytest.importorskip("distributed")

CLUSTER_KWARGS = {"n_workers": 2, "dashboard_address": ":0"}


def _scheduler_gone(cluster: Any, address: str) -> bool:
    """Whether nothing answers at the scheduler's address any more (over TCP: a fresh connection is
    refused; over UCX, where connecting to a closed endpoint can crash UCXX, the in-process scheduler's
    own state says)."""
    if not address.startswith("tcp://"):
        return cluster.scheduler.status.name == "closed"

    async def probe() -> bool:
        try:
            comm = await distributed.comm.connect(address, timeout=2)
        except OSError:
            return True
        await comm.close()
        return False

    return asyncio.run(probe())


def _worker_count(client) -> int:
    return len(client.scheduler_info(n_workers=-1)["workers"])


def _wait_for_workers(client, n: int, timeout: float = 30.0) -> list[str]:
    """The default client's workers (as ``active_workers`` orders them) once ``n`` are up and the cache agrees."""
    client.wait_for_workers(n, timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        workers = active_workers()
        live = set(client.scheduler_info(n_workers=-1)["workers"])
        if set(workers) == live and len(workers) == n:
            return workers
        assert time.monotonic() < deadline, (workers, live)
        time.sleep(0.2)


# --- without a default client (these run before the module's cluster starts) ---------------------------


def test_no_client_keeps_auto_chunking(client):
    """A client that is not the default (the session's ``client`` fixture) changes nothing: "auto" chunks are
    the block-size ones, by which a small array is one block."""
    assert active_workers() == []
    with gnp.config.set(chunk_size="8KiB"):
        x = gnp.from_array(np.zeros((300, 7)))
        assert x.chunks == normalize_chunks("auto", (300, 7), limit=8192, dtype=np.float64)
        assert x.chunks == ((146, 146, 8), (7,))
        assert gnp.zeros(3000).chunks == ((1024, 1024, 952),)
    assert gnp.from_array(np.zeros((100, 7))).chunks == ((100,), (7,))
    assert gnp.random.default_rng(0).random(1000).chunks == ((1000,),)


def test_persisted_array_graph_is_its_blocks():
    """A persisted Array keeps its source expression's name; its graph (and that of expressions on it) must be
    the persisted blocks, not a cached graph of the source that recomputes them."""
    ref = np.arange(40.0)
    x = gnp.from_array(ref, chunks=10) * 3 + 1
    assert_eq(x, ref * 3 + 1)  # the source's graph is cached now
    assert_eq(x * 2, (ref * 3 + 1) * 2)
    p = x.persist()
    graph = p.__dask_graph__()
    assert set(graph) == set(flatten(p.__dask_keys__()))
    assert all(type(v).__name__ == "DataNode" for v in graph.values()), graph
    assert not [k for k in (p * 2).__dask_graph__() if dask.utils.key_split(k) == "array"]
    assert_eq(p * 2, (ref * 3 + 1) * 2)


@pytest.mark.slow
def test_cluster_lifecycle():
    with gnp.cluster(**CLUSTER_KWARGS) as client:
        assert isinstance(client, distributed.Client)
        assert client.status == "running"
        assert distributed.default_client() is client
        assert dask.config.get("scheduler") == "dask.distributed"
        cluster = client.cluster
        address = client.scheduler.address
        n = _worker_count(client)
        if not gpu_available():
            assert isinstance(cluster, distributed.LocalCluster)
            assert n == 2
            nthreads = client.nthreads()
            assert sorted(nthreads.values()) == [1, 1], nthreads
        assert n >= 1
        assert sorted(active_workers()) == sorted(client.scheduler_info(n_workers=-1)["workers"])
        assert gnp.cluster(client=client) is client
        with gnp.cluster(address=address) as other:
            assert other is not client and other.status == "running"
            assert other.scheduler.address == address
            assert set(other.scheduler_info(n_workers=-1)["workers"]) == set(active_workers())
            assert other.submit(sum, [1, 2, 3]).result() == 6
        assert distributed.default_client() is client
        assert not _scheduler_gone(cluster, address)  # closing a client that connected leaves the cluster alone
        ref = np.arange(40.0).reshape(20, 2)
        assert_eq(gnp.sum(gnp.from_array(ref) * 2, axis=0), (ref * 2).sum(axis=0))
    assert client.status == "closed"
    assert cluster.status.name == "closed"
    assert _scheduler_gone(cluster, address)
    with pytest.raises(ValueError):
        distributed.default_client()
    assert active_workers() == []
    assert gnp.from_array(np.zeros((20, 3))).chunks == ((20,), (3,))


class _Started(Exception):
    """What a cluster class was started with (raised instead of starting it)."""


class _RecordingCUDACluster:
    """dask-cuda's ``LocalCUDACluster`` as ``gnp.cluster`` sees it: its arguments, and its rule for naming
    and placing a new worker (the first device no worker has, devices rotated from it), without processes."""

    def __init__(self, CUDA_VISIBLE_DEVICES: str, n_workers: int | None = None, **kwargs: Any) -> None:
        self.cuda_visible_devices = CUDA_VISIBLE_DEVICES.split(",")
        self.worker_spec: dict = {}
        while len(self.worker_spec) < (n_workers or len(self.cuda_visible_devices)):
            self.worker_spec.update(self.new_worker_spec())
        raise _Started({"CUDA_VISIBLE_DEVICES": CUDA_VISIBLE_DEVICES, "n_workers": n_workers,
                        "protocol": kwargs.get("protocol"),
                        "workers": {k: v["env"] for k, v in self.worker_spec.items()}})

    def new_worker_spec(self) -> dict:
        name = min(set(self.cuda_visible_devices) - set(self.worker_spec))
        i = self.cuda_visible_devices.index(name)
        devices = self.cuda_visible_devices[i:] + self.cuda_visible_devices[:i]
        return {name: {"env": {"CUDA_VISIBLE_DEVICES": ",".join(devices)}}}


def _gpu_cluster_arguments(monkeypatch: Any, visible: str | None, **kwargs: Any) -> dict:
    """The arguments ``gnp.cluster(**kwargs)`` starts dask-cuda's cluster with on a machine with a GPU, under
    the parent's ``CUDA_VISIBLE_DEVICES`` ``visible``."""
    import sys
    import types

    from dask_gpunumeric.runtime import cluster as _cluster

    monkeypatch.setattr(_cluster, "gpu_available", lambda: True)
    monkeypatch.setitem(sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=_RecordingCUDACluster))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(_Started) as started:
        gnp.cluster(**kwargs)
    return started.value.args[0]


def test_gpu_cluster_respects_the_parents_visible_devices(monkeypatch: Any) -> None:
    """Under a job scheduler's ``CUDA_VISIBLE_DEVICES=2,3``, the cluster's GPUs are 2 and 3, counted or named
    as the parent process numbers them."""
    started = _gpu_cluster_arguments(monkeypatch, "2,3", n_gpus=2)
    assert started["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert started["workers"] == {"2": {"CUDA_VISIBLE_DEVICES": "2,3"}, "3": {"CUDA_VISIBLE_DEVICES": "3,2"}}
    assert _gpu_cluster_arguments(monkeypatch, "2,3", n_gpus=1)["CUDA_VISIBLE_DEVICES"] == "2"
    assert _gpu_cluster_arguments(monkeypatch, "2,3", n_gpus=[1])["CUDA_VISIBLE_DEVICES"] == "3"
    assert _gpu_cluster_arguments(monkeypatch, "4,5,6", n_gpus="2,0")["CUDA_VISIBLE_DEVICES"] == "6,4"
    assert _gpu_cluster_arguments(monkeypatch, "GPU-a1,GPU-b2")["CUDA_VISIBLE_DEVICES"] == "GPU-a1,GPU-b2"
    with pytest.raises(ValueError, match="sees 2 GPU"):
        _gpu_cluster_arguments(monkeypatch, "2,3", n_gpus=[2])


def test_gpu_cluster_honours_n_workers(monkeypatch: Any) -> None:
    """``n_workers`` on GPUs: fewer than the GPUs takes the first ones; more puts worker i on GPU i % n_gpus
    (two workers sharing one GPU, for tests), workers named by number, over TCP unless asked (UCX's CUDA IPC
    between processes on one GPU fails)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "distributed_ucxx" else find_spec(name))
    fewer = _gpu_cluster_arguments(monkeypatch, "0,1,2,3", n_workers=2)
    assert fewer["n_workers"] == 2 and sorted(fewer["workers"]) == ["0", "1"] and fewer["protocol"] == "ucx"
    shared = _gpu_cluster_arguments(monkeypatch, "5", n_workers=2)
    assert shared["workers"] == {0: {"CUDA_VISIBLE_DEVICES": "5"}, 1: {"CUDA_VISIBLE_DEVICES": "5"}}
    assert shared["protocol"] == "tcp"
    assert _gpu_cluster_arguments(monkeypatch, "5", n_workers=2, protocol="ucx")["protocol"] == "ucx"
    spread = _gpu_cluster_arguments(monkeypatch, "0,1", n_workers=3)
    assert spread["workers"] == {0: {"CUDA_VISIBLE_DEVICES": "0,1"}, 1: {"CUDA_VISIBLE_DEVICES": "1,0"},
                                 2: {"CUDA_VISIBLE_DEVICES": "0,1"}}


def test_workers_ordered_by_number():
    """From 11 workers on, the order is numeric (worker 10 after worker 9, not after worker 1): block owners
    follow it."""
    with distributed.LocalCluster(n_workers=12, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as local, distributed.Client(local) as client:
        client.wait_for_workers(12)
        names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        assert [names[a] for a in active_workers()] == list(range(12))


# --- on the module's cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_client():
    """The module's cluster, started by ``gnp.cluster``: the default client while the module's tests run."""
    with gnp.cluster(**CLUSTER_KWARGS) as c:
        yield c


@pytest.fixture
def workers(cluster_client) -> list[str]:
    """The cluster's workers in ``active_workers`` order (all of them up)."""
    assert distributed.default_client() is cluster_client
    return _wait_for_workers(cluster_client, _worker_count(cluster_client))


def _stream_intervals(dask_scheduler: Any) -> list[float]:
    return [s.interval for s in [*dask_scheduler.stream_comms.values(), *dask_scheduler.client_comms.values()]]


def test_messages_leave_at_once(cluster_client, workers):
    """A cluster ``gnp.cluster`` started sends its messages at once, not in distributed's batches of up to
    10 ms (a call's request would wait behind the release of the last call's result, and each report behind
    the message before it): the client's stream, the scheduler's to every worker and client, every worker's.
    Calls on it give NumPy's values."""
    ref = np.arange(48.0).reshape(12, 4)
    x = gnp.from_array(ref).persist()
    for i in range(3):
        assert gnp.fetch(gnp.sum(x * i)) == np.sum(ref * i)
        assert_eq((x + i).compute(), ref + i)
    assert cluster_client.scheduler_comm.interval == 0
    intervals = cluster_client.run_on_scheduler(_stream_intervals)
    assert len(intervals) >= len(workers) + 1 and set(intervals) == {0}, intervals
    assert set(cluster_client.run(lambda dask_worker: dask_worker.batched_stream.interval).values()) == {0}


def _even(chunks: tuple[int, ...], n: int, total: int) -> None:
    assert len(chunks) == n and sum(chunks) == total, (chunks, n, total)
    assert max(chunks) - min(chunks) <= 1, chunks


def test_one_block_per_worker(workers):
    n = len(workers)
    ref = np.arange(61 * 5, dtype=np.float64).reshape(61, 5)
    x = gnp.from_array(ref)
    _even(x.chunks[0], n, 61)
    assert x.chunks[1] == (5,)
    z = gnp.zeros((37, 4, 3), dtype=np.int32)
    _even(z.chunks[0], n, 37)
    assert z.chunks[1:] == ((4,), (3,))
    r = gnp.random.default_rng(0).random(1001)
    _even(r.chunks[0], n, 1001)
    r2 = gnp.random.default_rng(0).random((41, 6), dtype=np.float32)
    _even(r2.chunks[0], n, 41)
    assert r2.chunks[1] == (6,)
    # derived arrays keep the layout
    y = gnp.exp(x) * 2 - gnp.sqrt(x + 1)
    assert y.chunks == x.chunks
    assert (x + gnp.ones((61, 5))).chunks == x.chunks
    assert (r2 * 3 + gnp.zeros((41, 6), dtype=np.float32)).chunks == r2.chunks
    assert_eq(y, np.exp(ref) * 2 - np.sqrt(ref + 1))
    # the random stream does not depend on the chunking
    local = to_host(gnp.random.default_rng(0).random(1001, chunks=1001).compute(scheduler="threads"))
    np.testing.assert_array_equal(to_host(r.compute()), local)
    # explicit chunks are kept as given
    assert gnp.from_array(ref, chunks=(10, 5)).chunks == ((10,) * 6 + (1,), (5,))


def test_large_share_gets_several_blocks_per_worker(workers):
    n = len(workers)
    with gnp.config.set(chunk_size="8KiB"):
        x = gnp.zeros((n * 2048,))  # 16 KiB per worker: two blocks each
    assert x.chunks == ((1024,) * (2 * n),)
    assert {owner((i,), x.numblocks, n) for i in range(x.numblocks[0])} == set(range(n))
    assert [owner((i,), x.numblocks, n) for i in range(x.numblocks[0])] == sorted(
        owner((i,), x.numblocks, n) for i in range(x.numblocks[0]))  # contiguous runs


def _block_index(key: tuple, ndim: int) -> tuple | None:
    """The block index of a per-block task's key (data in, elementwise/fused blocks, reduction partials of the
    first stage), or None for a combine-stage task (later partials, the final reduction, aliases of it)."""
    name = key[0]
    if "-partial-" in name:
        return tuple(key[2:]) if key[1] == 0 else None
    if len(key) == 1 + ndim:
        return tuple(key[1:])
    return None


def _check_owner_computes(records: list[dict], workers: list[str], numblocks: tuple[int, ...],
                          combined_here: bool = False) -> dict:
    """Every per-block task ran on its owner without receiving data, and a task of no block combined them, but
    where they were ``combined_here`` (by the client: one level of tasks); the per-block tasks by key prefix."""
    per_block: dict[str, int] = {}
    combine = 0
    for rec in records:
        key = rec["key"]
        index = _block_index(key, len(numblocks))
        if index is None:
            combine += 1
            continue
        expected = workers[owner(index, numblocks, len(workers))]
        assert rec["worker"] == expected, (key, rec["worker"], expected)
        transfers = [s for s in rec["startstops"] if s["action"] == "transfer"]
        assert not transfers, (key, transfers)
        prefix = dask.utils.key_split(key)
        per_block[prefix] = per_block.get(prefix, 0) + 1
    assert (combine == 0) if combined_here else (combine >= 1)
    return per_block


def test_owner_computes_elementwise_and_reduction(cluster_client, workers):
    n = len(workers)
    ref = np.random.default_rng(1).standard_normal((48, 7))
    x = gnp.from_array(ref)
    u = gnp.random.default_rng(11).random((48, 7))
    assert x.chunks == u.chunks and x.numblocks == (n, 1)
    total = gnp.sum(gnp.exp(x) * u + gnp.abs(x) - 1)
    with distributed.get_task_stream(client=cluster_client) as ts:
        result = total.compute()
    u_ref = to_host(u.compute(scheduler="threads"))
    np.testing.assert_allclose(to_host(result), (np.exp(ref) * u_ref + np.abs(ref) - 1).sum(), rtol=1e-10)
    per_block = _check_owner_computes(ts.data, workers, x.numblocks)
    if n > 1:  # the data-in blocks, and the fused kernels giving the reduction's first stage (the aliases of
        # their partials are skipped on a cluster)
        assert per_block == {"array": n, "fused": n}, per_block
    else:  # one block: data in, its fused kernel finishing the sum and the finish are one task, of no block
        assert per_block == {} and len(ts.data) == 1, [rec["key"] for rec in ts.data]
    assert len({rec["worker"] for rec in ts.data}) == n  # all workers took part


def test_owner_computes_on_persisted_blocks(cluster_client, workers):
    n = len(workers)
    ref = np.random.default_rng(2).standard_normal((30, 4))
    p = (gnp.from_array(ref) * 3 + 1).persist()
    distributed.wait(p)
    keys = list(flatten(p.__dask_keys__()))
    assert len(keys) == n
    graph = p.__dask_graph__()
    assert set(graph) == set(keys) and all(isinstance(v, distributed.Future) for v in graph.values()), graph
    who_has = cluster_client.who_has(p)
    for i, key in enumerate(keys):
        assert list(who_has[key]) == [workers[owner((i, 0), p.numblocks, n)]], (key, who_has[key])
    with distributed.get_task_stream(client=cluster_client) as ts:
        result = gnp.max(gnp.sin(p) * p).compute()
    np.testing.assert_allclose(to_host(result), (np.sin(ref * 3 + 1) * (ref * 3 + 1)).max(), rtol=1e-12)
    # the fused kernels give the first stage of the max, which the client finishes from their pushed partials
    # (one block: finished in its kernel, a task of no block)
    per_block = _check_owner_computes(ts.data, workers, p.numblocks, combined_here=n > 1)
    assert per_block == ({"fused-sin-multiply-max": n} if n > 1 else {}), per_block
    assert not set(keys) & {rec["key"] for rec in ts.data}  # the persisted blocks were not recomputed
    # a persisted elementwise result stays on the owners too
    q = gnp.sqrt(gnp.abs(p)).persist()
    distributed.wait(q)
    who_has = cluster_client.who_has(q)
    for i, key in enumerate(flatten(q.__dask_keys__())):
        assert list(who_has[key]) == [workers[owner((i, 0), q.numblocks, n)]], (key, who_has[key])
    assert_eq(q, np.sqrt(np.abs(ref * 3 + 1)))


def test_iterative_loop_with_persist_and_lazy_scalar(cluster_client, workers):
    ref = np.random.default_rng(3).standard_normal(1000)
    u = gnp.from_array(ref)
    expected = ref.copy()
    for step in range(1, 21):
        u = 0.5 * (u + gnp.roll(u, 1))
        expected = 0.5 * (expected + np.roll(expected, 1))
        if step % 5 == 0:
            u = u.persist()
            assert all(isinstance(v, distributed.Future) for v in u.expr.operand("layer").values())
    assert u.chunks == gnp.from_array(ref).chunks  # one block per worker throughout
    energy = gnp.sum(u * u)  # a lazy 0-d Array: no fetch (allowfetch is off)
    assert isinstance(energy, gnp.Array) and energy.shape == ()
    normalized = u / gnp.sqrt(energy)
    graph = normalized.__dask_graph__()
    assert not [k for k in graph if dask.utils.key_split(k) == "array"]  # starts from the persisted blocks
    assert_eq(u @ u, np.float64(expected @ expected), rtol=1e-10)  # the same dot product as a matmul
    assert_eq(normalized, expected / np.sqrt(np.sum(expected * expected)), rtol=1e-10)
    assert_eq(gnp.sum(normalized * normalized), np.float64(1.0), rtol=1e-12)


def _slow_copy(block, delay):
    """A copy of the block, after ``delay`` seconds (to keep a computation running while a worker dies)."""
    time.sleep(delay)
    return block * 1


@pytest.mark.slow
def test_worker_killed_mid_computation(cluster_client, workers):
    # runs last: it kills a worker of the module's cluster (its nanny starts a new one)
    n = len(workers)
    if n < 2:
        pytest.skip("needs two workers (one GPU gives a one-worker cluster): the survivor redoes the lost work")
    victim = workers[-1]
    # 20 blocks per worker of 0.1 s each: about 2 s of work, in contiguous runs of blocks per worker
    x = gnp.random.default_rng(5).random(20_000 * n, chunks=1000)
    total = gnp.sum(gnp.sqrt(gnp.map_blocks(_slow_copy, x, delay=0.1)) * 2)
    keys = list(total.__dask_graph__())
    future = cluster_client.compute(total)

    def victim_keys(dask_scheduler, victim=victim):
        ws = dask_scheduler.workers.get(victim)
        return 0 if ws is None else len(ws.has_what)

    deadline = time.monotonic() + 30
    while cluster_client.run_on_scheduler(victim_keys) < 2:
        assert time.monotonic() < deadline, "the victim never computed anything"
        time.sleep(0.05)
    assert not future.done()  # most of the work is still to do
    with contextlib.suppress(OSError):  # the worker dies before it answers
        cluster_client.run(os._exit, 1, workers=[victim])
    result = to_host(future.result(timeout=60))
    samples = to_host(x.compute(scheduler="threads"))
    np.testing.assert_allclose(result, (np.sqrt(samples) * 2).sum(), rtol=1e-10)
    assert to_host(total.compute(scheduler="threads")) == pytest.approx(result, rel=1e-12)
    runs = scheduler_runs(cluster_client, keys)
    assert max(runs.values()) >= 2, runs  # the lost work was done again
    restarted = _wait_for_workers(cluster_client, n, timeout=60)
    assert victim not in restarted  # the nanny started a new worker process
    assert_eq(gnp.sum(gnp.from_array(np.arange(100.0))), np.float64(4950.0))


def test_gpu_clusters_share_one_allocator(monkeypatch: Any) -> None:
    """With RMM installed, a GPU cluster's workers have RMM (which distributed receives and unspills device
    buffers with) allocate from CuPy's pool, unless an rmm_* option is given; without RMM, nothing changes."""
    import importlib.util

    from dask_gpunumeric.runtime import allocator

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "rmm" else find_spec(name))
    assert allocator.shares_cupy_pool({"memory_limit": "8GiB"})
    assert not allocator.shares_cupy_pool({"rmm_pool_size": "1GB"})
    assert not allocator.shares_cupy_pool({"rmm_async": True})
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "rmm" else find_spec(name))
    assert not allocator.shares_cupy_pool({"memory_limit": "8GiB"})


def test_rmm_allocates_from_cupy_pool(monkeypatch: Any) -> None:
    """RMM's allocations come from CuPy's pool and hold its memory until RMM frees them (stand-ins for
    cupy and rmm: the real pair runs on the GPU, ci/gpu.sh)."""
    import sys
    import types

    from dask_gpunumeric.runtime import allocator

    class Memory:
        def __init__(self, ptr: int, size: int) -> None:
            self.ptr, self.size = ptr, size

    live: dict[int, Memory] = {}

    class Pool:
        def malloc(self, size: int) -> Memory:
            memory = Memory(0x1000 * (len(live) + 1), size)
            live[memory.ptr] = memory
            return memory

    resources: list[Any] = []
    fake_cupy = types.SimpleNamespace(get_default_memory_pool=lambda: Pool())
    fake_mr = types.SimpleNamespace(
        CallbackMemoryResource=lambda allocate, deallocate: (allocate, deallocate),
        set_current_device_resource=resources.append)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "rmm", types.SimpleNamespace(mr=fake_mr))
    allocator.rmm_from_cupy_pool()
    ((allocate, deallocate),) = resources
    a, b = allocate(256, None), allocate(1024, None)
    assert (a, b) == (0x1000, 0x2000) and live[b].size == 1024
    import gc
    import weakref

    held = weakref.ref(live.pop(a))
    gc.collect()
    assert held() is not None  # RMM has not freed it: CuPy's memory stays allocated
    deallocate(a, 256, None)
    gc.collect()
    assert held() is None  # freed by RMM: back to CuPy's pool
