"""Owner-computes on a cluster that ``gnp.cluster`` started (the default client while this module's tests run):
every per-block task on the worker owning the block (no data moved before the combine stage), one block per worker
along the leading axis for "auto" chunks, persisted blocks kept on their owners, recovery from a worker killed
mid-computation, and an iterative loop with persist and a lazy scalar. (Apart from ``test_cluster.py``, whose
tests need no default client.)"""
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
from conftest import assert_eq, scheduler_runs, to_host
from dask_gpunumeric.runtime.cluster import active_workers, owner
from test_cluster import CLUSTER_KWARGS, _wait_for_workers, _worker_count

distributed = pytest.importorskip("distributed")

DIRECT_OFF = {"gpunumeric.cluster.direct-calls": False}


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
    # (through the scheduler, whose task stream shows where each task ran; the workers' direct runs of such calls,
    # which skip it, are test_direct_calls.py's)
    with distributed.get_task_stream(client=cluster_client) as ts, dask.config.set(DIRECT_OFF):
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
