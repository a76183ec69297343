"""``gnp.cluster()`` and owner-computes on a cluster: the Client it returns (default scheduler while it lives,
closing its cluster on exit), one block per worker along the leading axis for "auto" chunks, every
per-block task on the worker owning the block (no data moved before the combine stage), persisted blocks
kept on their owners, recovery from a worker killed mid-computation, and an iterative loop with persist
and a lazy scalar.

On a CPU machine ``gnp.cluster(n_workers=2)`` starts 2 worker processes; on a GPU machine one worker per
GPU, so the worker count is read from the cluster. The tests on a cluster that lives through several tests
(the default client meanwhile) are in ``test_cluster_owner.py``: a module's fixtures end before another
module's tests run, whatever order pytest-xdist gives them, and these tests need no default client.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import dask
import numpy as np
import pytest
from dask.array.core import normalize_chunks
from dask.core import flatten

import dask_gpunumeric as gnp
from conftest import assert_eq
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


# --- without a default client --------------------------------------------------------------------------


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
