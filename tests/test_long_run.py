"""A long time-stepping loop on a 2-worker cluster stays bounded: a stencil update every step, persisted every
10 steps, checkpointed (history forgotten) and reduced every 50; the scheduler's tasks, the workers' blocks
and tasks, the client's futures and caches and the memory allocated in this process (the cluster's scheduler
runs here) stops growing but for Dask's own bookkeeping, and the result is NumPy's. (Dask's scheduler keeps
statistics of every task group it ran, for its dashboard's spans: that growth, a few hundred bytes a step,
is Dask's.) ``benchmarks/long_run.py`` runs the same loop for 10,000 steps (CPU or GPU) and plots memory."""
from __future__ import annotations

import gc
import linecache
import tracemalloc

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq
from dask_gpunumeric.expr import tokens as _tokens
from dask_gpunumeric.kernels import fused as _fused
from dask_gpunumeric.runtime import compile as _compile

distributed = pytest.importorskip("distributed")

STEPS, PERSIST_EVERY, CHECK_EVERY = 300, 10, 50


def heat_step(u, xp):
    """One explicit step of the 1-D heat equation on a periodic domain."""
    return u + 0.2 * (xp.roll(u, 1) + xp.roll(u, -1) - 2 * u)


# Dask's logs are bounded but long (the last 100 computations, the last 1000 messages to each worker...):
# shortened, they fill within the test, and the memory reaches its plateau
SHORT_LOGS = {"distributed.diagnostics.computations.max-history": 5, "distributed.admin.low-level-log-length": 50}


@pytest.fixture(scope="module")
def small_history_client():
    """A 2-worker cluster with short logs (``SHORT_LOGS``)."""
    with dask.config.set(SHORT_LOGS), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


def _ours() -> int:
    """Bytes allocated (and still alive) outside distributed's code: ours, dask's, NumPy's; after emptying
    dask's ``key_split`` cache (of the scheduler's keys: bounded, at 100,000 keys) and our cache of node tokens
    by their text (bounded at ``tokens._TOKENS_SIZE`` entries, which a loop fills). Not the source lines that
    distributed's profiler reads through ``linecache`` (the files of every frame it samples: on CuPy blocks
    they keep coming for a while, about 1 MB in 150 steps here)."""
    dask.utils.key_split.cache_clear()
    assert len(_tokens.TOKENS) <= _tokens._TOKENS_SIZE
    _tokens.TOKENS.clear()
    gc.collect()
    kept = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, "*/distributed/*"),
                                                      tracemalloc.Filter(False, linecache.__file__)])
    return sum(stat.size for stat in kept.statistics("filename"))


def _scheduler_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def _worker_state(dask_worker) -> tuple[int, int]:
    return len(dask_worker.data), len(dask_worker.state.tasks)


@pytest.mark.slow
def test_long_loop_on_a_cluster_stays_bounded(small_history_client):
    client = small_history_client
    ref = np.sin(np.linspace(0, 6, 256))
    expected = ref.copy()
    for _ in range(STEPS):
        expected = heat_step(expected, np)
    records = []
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        u = gnp.from_array(ref, chunks=128)
        tracemalloc.start()
        try:
            for step in range(1, STEPS + 1):
                u = heat_step(u, gnp)
                if step % CHECK_EVERY == 0:
                    u = gnp.checkpoint(u)
                    energy = gnp.fetch(gnp.sum(u * u))
                    workers = client.run(_worker_state)
                    records.append({
                        "step": step, "energy": energy, "traced": _ours(),
                        "scheduler_tasks": client.run_on_scheduler(_scheduler_tasks),
                        "worker_blocks": max(b for b, _ in workers.values()),
                        "worker_tasks": max(t for _, t in workers.values()),
                        "futures": len(client.futures), "graph": len(u.__dask_graph__()),
                        "graph_cache": len(_compile._GRAPH_CACHE), "kernels": _fused.kept_programs()[0],
                    })
                elif step % PERSIST_EVERY == 0:
                    u = u.persist()
        finally:
            tracemalloc.stop()
        assert_eq(u, expected, rtol=1e-12)
    assert [r["energy"] for r in records] == sorted((r["energy"] for r in records), reverse=True)  # it diffuses
    for r in records:
        assert r["graph"] == 2 and r["futures"] == 2, r  # the loop holds its two blocks, nothing else
        assert r["scheduler_tasks"] <= 8 and r["worker_blocks"] <= 4 and r["worker_tasks"] <= 8, r
        assert r["graph_cache"] <= _compile._GRAPH_CACHE_SIZE and r["kernels"] <= _fused.kept_programs()[1]
    # the second half adds no per-step leftovers of ours: a step's graph alone is several KiB (what remains is
    # Dask's bookkeeping of its task groups, under 1 KiB a step here)
    middle, last = records[len(records) // 2], records[-1]
    per_step = (last["traced"] - middle["traced"]) / (last["step"] - middle["step"])
    assert per_step < 2048, [r["traced"] for r in records]
