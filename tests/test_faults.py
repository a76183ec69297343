"""Faults: a task raising on one block surfaces the original exception with the block it computed (locally
and on a cluster); running out of memory is a ``gnp.OutOfMemoryError`` (a ``MemoryError``) naming the block,
its size and the fixes (CuPy's error is simulated here, ``benchmarks/out_of_memory.py`` makes a real one);
an interrupted computation (KeyboardInterrupt) leaves the local scheduler and the cluster usable; a cluster
that loses a worker holding persisted blocks recomputes them.

The tests that kill workers or leave tasks behind use a 2-worker cluster of their own (``own_client``)."""
from __future__ import annotations

import contextlib
import gc
import os
import re
import signal
import threading
import time
import weakref

import dask
import numpy as np
import pytest
from dask.core import flatten
from dask.utils import format_bytes

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, scheduler_runs, to_host
from dask_gpunumeric.runtime.faults import BlockFunction, is_out_of_memory, out_of_memory_message
from dask_gpunumeric.runtime.schedule import local_scheduler

distributed = pytest.importorskip("distributed")


# --- the functions the failing blocks run (top level: they travel to cluster workers) ----------------------


def _fail_at(block, bad_offset, block_offset, global_shape):
    """The block, or a ValueError for the block at ``bad_offset``."""
    if tuple(block_offset) == tuple(bad_offset):
        raise ValueError(f"bad value at {tuple(block_offset)}")
    return block * 1


class OutOfMemoryError(MemoryError):
    """Stands for ``cupy.cuda.memory.OutOfMemoryError`` (which needs a GPU to make)."""

    __module__ = "cupy.cuda.memory"


class CUDARuntimeError(RuntimeError):
    """Stands for ``cupy_backends.cuda.api.runtime.CUDARuntimeError``."""

    __module__ = "cupy_backends.cuda.api.runtime"


def _gpu_out_of_memory_at(block, bad_offset, block_offset, global_shape):
    if tuple(block_offset) == tuple(bad_offset):
        raise OutOfMemoryError("Out of memory allocating 8,388,608 bytes (allocated so far: 1,024 bytes).")
    return block * 1


def _host_out_of_memory(block):
    raise MemoryError("Unable to allocate 8.00 MiB for an array with shape (1048576,) and data type float64")


_kept: list[weakref.ref] = []


def _keep(block):
    """A copy of the block, remembered by a weak reference."""
    out = block * 1
    _kept.append(weakref.ref(out))
    return out


# --- a failing block names itself ----------------------------------------------------------------------------


def _check_names_block(exc: BaseException, index: tuple, shape: tuple, dtype: str) -> None:
    notes = getattr(exc, "__notes__", [])
    assert any(f"block {index} of fail-at ({shape} {dtype}" in n for n in notes), notes


@pytest.mark.parametrize("scheduler", [None, "sync", "threads"])
def test_failing_block_raises_its_exception_with_the_block(scheduler):
    ref = np.arange(60.0).reshape(12, 5)
    x = gnp.from_array(ref, chunks=((4, 4, 4), (3, 2))) * 2  # the failing block is (2, 1): offset (8, 3)
    y = gnp.sum(gnp.map_blocks(_fail_at, x, bad_offset=(8, 3), offsets=True) + 1, axis=0)
    with pytest.raises(ValueError, match=r"bad value at \(8, 3\)") as info:
        y.compute(scheduler=scheduler)
    _check_names_block(info.value, (2, 1), (4, 2), "float64")
    assert_eq(gnp.map_blocks(_fail_at, x, bad_offset=(1, 1), offsets=True), ref * 2)  # no such block: fine


def test_failing_block_on_a_cluster(client):
    x = gnp.from_array(np.arange(40.0), chunks=10)
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        with pytest.raises(ValueError, match=r"bad value at \(20,\)") as info:
            gnp.max(gnp.map_blocks(_fail_at, x, bad_offset=(20,), offsets=True)).compute()
        _check_names_block(info.value, (2,), (10,), "float64")  # the note came back from the worker
        assert_eq(gnp.max(x), np.float64(39.0))


def test_failing_block_in_a_region_on_a_cluster(client):
    """A block failing inside an accelerated call on a cluster (a region of one rank, whose output blocks are each
    a task the worker runs in its event loop) is told with the output task that ran it: a note on the error, and
    running out of memory a ``gnp.OutOfMemoryError`` naming it."""
    x = gnp.from_array(np.arange(10.0), chunks=10)

    def two_outputs(failing):
        @gnp.accelerate
        def f(a):
            b = gnp.map_blocks(failing, a, bad_offset=(0,), offsets=True)
            return b + 1, b * 2

        return f(x)

    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        with pytest.raises(ValueError, match=r"bad value at \(0,\)") as info:
            dask.compute(*two_outputs(_fail_at))
        assert any(re.match(r"dask_gpunumeric: raised while computing task \(0,\) of (add|multiply)$", note)
                   for note in info.value.__notes__), info.value.__notes__  # (the output task that ran the program)
        with pytest.raises(gnp.OutOfMemoryError, match=r"out of GPU memory while computing task \(0,\) of"):
            dask.compute(*two_outputs(_gpu_out_of_memory_at))


# --- out of memory -------------------------------------------------------------------------------------------


def test_out_of_gpu_memory_is_a_clear_memory_error():
    x = gnp.zeros((8, 6), chunks=(4, 3), dtype=np.float32) + 1
    y = gnp.map_blocks(_gpu_out_of_memory_at, x, bad_offset=(4, 0), offsets=True)
    with pytest.raises(MemoryError) as info:
        gnp.sum(y).compute()
    exc = info.value
    assert isinstance(exc, gnp.OutOfMemoryError)
    assert isinstance(exc.__cause__, OutOfMemoryError)  # CuPy's error, kept as the cause
    message = str(exc)
    assert "out of GPU memory while computing block (1, 0) of gpu-out-of-memory-at ((4, 3) float32, 48 B)" in message
    assert "Out of memory allocating 8,388,608 bytes" in message  # CuPy's own words
    for fix in ("smaller blocks", "chunk_size", "gnp.cluster()", "spills", "persist less"):
        assert fix in message, fix


@pytest.mark.gpu
@pytest.mark.skipif(BACKEND != "cupy", reason="CuPy blocks only (GNP_BACKEND=cupy on a GPU machine)")
def test_out_of_gpu_memory_for_real():
    """CuPy's memory pool limited to 64 MiB more than it holds: 16 MiB blocks of a 256 MiB array can be
    reduced one by one, but not persisted together."""
    import cupy

    pool = cupy.get_default_memory_pool()
    limit = pool.get_limit()
    pool.free_all_blocks()
    held = pool.used_bytes()
    pool.set_limit(size=held + 64 * 2**20)
    try:
        y = gnp.random.default_rng(0).random(2**26, dtype=np.float32, chunks=2**22) * 2 + 1
        assert abs(gnp.fetch(gnp.sum(y, dtype=np.float64)) / 2**26 - 2) < 1e-3
        with pytest.raises(gnp.OutOfMemoryError, match=r"out of GPU memory while computing block \(\d+,\) of "
                                                      r"fused-random-multiply-add \(\(4194304,\) float32, 16.00 MiB\)"):
            y.persist()
        gc.collect()
        assert pool.used_bytes() <= held + 2 * 16 * 2**20  # the error let the blocks go
        assert abs(gnp.fetch(gnp.mean(y[: 2**22], dtype=np.float64)) - 2) < 1e-2  # and the process computes
    finally:
        pool.set_limit(size=limit)


def test_out_of_host_memory():
    x = gnp.ones(300, chunks=100)
    with pytest.raises(gnp.OutOfMemoryError, match=r"out of host memory while computing block \([0-2],\) of "
                                                   r"host-out-of-memory \(\(100,\) float64, 800 B\)"):
        gnp.map_blocks(_host_out_of_memory, x).compute(scheduler="sync")


def test_a_result_beyond_memory_fails_before_any_work():
    """gnp.fetch, compute() and dask.compute of an array far beyond memory (8 TB) raise gnp.OutOfMemoryError (a
    MemoryError) at once, before any task runs, saying what to do instead."""
    from dask.callbacks import Callback

    x = gnp.zeros(10**12)
    ran: list = []
    for call in (lambda: gnp.fetch(x), lambda: gnp.fetch([x, gnp.ones(3)]), x.compute, lambda: dask.compute(x)):
        with Callback(pretask=lambda key, dsk, state: ran.append(key)):
            with pytest.raises(MemoryError) as info:
                call()
        assert isinstance(info.value, gnp.OutOfMemoryError)
        message = str(info.value)
        assert "7.28 TiB" in message and "nothing was computed" in message
        assert "x.sum()" in message and "x[:1000]" in message and "gnp.cluster()" in message
    assert not ran


def test_a_result_is_checked_against_the_memory_available(monkeypatch):
    """The check before computing compares the result's size with the memory available (here made 96 MiB):
    a result larger fails at once, a smaller one is computed."""
    from dask_gpunumeric.runtime import faults

    monkeypatch.setattr(faults, "available_host_memory", lambda: 96 * 2**20)
    monkeypatch.setattr(faults, "available_device_memory", lambda: 96 * 2**20)
    with pytest.raises(gnp.OutOfMemoryError, match=r"needs 128.00 MiB of (host|GPU) memory, and 96.00 MiB is available"):
        gnp.fetch(gnp.ones(2**24, chunks=2**22) + 1)
    assert gnp.fetch(gnp.ones(2**23, chunks=2**21) + 1).sum() == 2 * 2**23


def test_what_is_out_of_memory():
    assert is_out_of_memory(OutOfMemoryError("Out of memory allocating 512 bytes"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(CUDARuntimeError("cudaErrorMemoryAllocation: out of memory"))
    assert not is_out_of_memory(CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access"))
    assert not is_out_of_memory(RuntimeError("cudaErrorMemoryAllocation"))  # not CuPy's: not ours to judge
    assert not is_out_of_memory(ValueError("memory"))


def test_out_of_memory_message_parts():
    block = BlockFunction(np.concatenate, "finalize", (), (1 << 20, 4), np.dtype(np.float32).str)
    message = out_of_memory_message(block, OutOfMemoryError("Out of memory allocating 16,777,216 bytes"))
    assert f"block () of finalize ((1048576, 4) float32, {format_bytes(16 << 20)})" in message
    assert "fetch a slice or a reduction" in message  # compute() of a whole large array
    stage = BlockFunction(np.sum, "sum-partial", (1, 0, 2), None, None)
    assert "task (1, 0, 2) of sum-partial" in out_of_memory_message(stage, MemoryError())


@pytest.mark.parametrize("backend", ["cupy", "numpy"])  # the default local scheduler of each: sync, threads
def test_out_of_memory_error_holds_no_blocks(backend):
    """Catching the error (a notebook keeps the last one) must free the memory of the blocks computed so far
    and of the failed task's inputs."""
    # the threaded scheduler with NumPy blocks (their default), the synchronous one with this machine's blocks
    with gnp.config.set(backend="numpy" if backend == "numpy" else BACKEND):
        try:
            weakref.ref(gnp.zeros(1).compute())
        except TypeError:
            pytest.skip("this backend's blocks take no weak references")
        _kept.clear()
        kept = gnp.map_blocks(_keep, gnp.arange(400.0, chunks=100))
    with pytest.raises(gnp.OutOfMemoryError) as info:
        dask.compute(kept, gnp.map_blocks(_host_out_of_memory, kept), scheduler=local_scheduler(backend))
    assert _kept
    deadline = time.monotonic() + 5  # tasks other threads were already running finish first (many-core machines)
    while gc.collect() is not None and [r for r in _kept if r() is not None] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info.value is not None  # the error is alive here ...
    assert [r for r in _kept if r() is not None] == []  # ... but no block is


def test_out_of_memory_in_a_task_drops_its_inputs():
    block = np.ones(10)
    ref = weakref.ref(block)
    task = BlockFunction(_host_out_of_memory, "host-out-of-memory", (0,), (10,), block.dtype.str)
    with pytest.raises(gnp.OutOfMemoryError) as info:
        task(block)
    del block
    gc.collect()
    assert info.value.__cause__ is not None and ref() is None  # as on a cluster worker, which keeps the error


# --- interruptions and lost workers --------------------------------------------------------------------------

_release = threading.Event()
_started = threading.Event()


def _wait_for_release(block):
    _started.set()
    _release.wait(30)
    return block * 1


@contextlib.contextmanager
def _ctrl_c_when(started):
    """Press Ctrl-C once ``started(timeout)`` is true: SIGINT to the main thread, sent again until it lands (a
    signal arriving just before the main thread blocks on a lock is only seen when the lock is released);
    one KeyboardInterrupt only."""
    interrupted = threading.Event()

    def once(signum, frame):
        if not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt

    def press() -> None:
        if started(30):
            while not interrupted.is_set():
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                interrupted.wait(0.1)

    previous = signal.signal(signal.SIGINT, once)
    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    try:
        yield
    finally:
        interrupted.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)


def test_keyboard_interrupt_leaves_the_local_scheduler_usable():
    _release.clear()
    _started.clear()
    x = gnp.arange(40.0, chunks=10)
    try:
        with pytest.raises(KeyboardInterrupt), _ctrl_c_when(_started.wait):
            gnp.sum(gnp.map_blocks(_wait_for_release, x)).compute(scheduler="threads")
    finally:
        _release.set()
    assert_eq(gnp.sum(gnp.map_blocks(_wait_for_release, x) * 2), np.float64(2 * 780.0))


def _wait_for_cluster_release(block):
    distributed.Event("gnp-test-started").set()
    distributed.Event("gnp-test-release").wait(30)
    return block * 1


@pytest.fixture(scope="module")
def own_client():
    """A 2-worker cluster (worker processes under nannies) for the tests that disturb it; not the default."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        yield c


def _eventually(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_keyboard_interrupt_leaves_the_cluster_usable(own_client):
    x = gnp.arange(40.0, chunks=10)
    interrupted = gnp.sum(gnp.map_blocks(_wait_for_cluster_release, x))
    keys = set(interrupted.__dask_graph__())
    started = distributed.Event("gnp-test-started", client=own_client)
    release = distributed.Event("gnp-test-release", client=own_client)
    with own_client.as_current(), dask.config.set(scheduler="dask.distributed"):
        try:
            with pytest.raises(KeyboardInterrupt), _ctrl_c_when(started.wait):
                interrupted.compute()
        finally:
            release.set()

        def leftovers(dask_scheduler, keys=keys):
            return [k for k in keys if k in dask_scheduler.tasks]

        _eventually(lambda: not own_client.run_on_scheduler(leftovers))  # the interrupted work is forgotten
        assert len(own_client.scheduler_info(n_workers=-1)["workers"]) == 2
        assert_eq(gnp.sum(gnp.map_blocks(_wait_for_cluster_release, x) * 2), np.float64(2 * 780.0))


def _kill_worker_holding(client, future) -> str:
    """Kill the worker process holding ``future``'s data (its nanny starts a new one); its address."""
    victim = next(iter(client.who_has([future])[future.key]))
    with contextlib.suppress(OSError):  # the worker dies before it answers
        client.run(os._exit, 1, workers=[victim])
    _eventually(lambda: victim not in client.scheduler_info(n_workers=-1)["workers"])
    return victim


def test_lost_worker_holding_persisted_blocks(own_client):
    # kills a worker of the module's cluster (its nanny starts a new one)
    own_client.wait_for_workers(2, timeout=60)
    ref = np.random.default_rng(7).standard_normal((40, 6))
    with own_client.as_current(), dask.config.set(scheduler="dask.distributed"):
        p = (gnp.from_array(ref, chunks=(10, 6)) * 2 + 1).persist()
        distributed.wait(p)
        keys = list(flatten(p.__dask_keys__()))
        who_has = own_client.who_has(p)
        victim = _kill_worker_holding(own_client, p.expr.operand("layer")[keys[-1]])
        lost = [k for k in keys if victim in who_has[k]]
        expected = ref * 2 + 1
        assert_eq(gnp.sum(p * p, axis=0), (expected * expected).sum(axis=0))
        assert_eq(p, expected)
        runs = scheduler_runs(own_client, lost)
        assert all(n >= 2 for n in runs.values()), runs  # the lost blocks were computed again
        np.testing.assert_array_equal(to_host(p.compute()), expected)


def test_checkpoint_forgets_history(own_client):
    ref = np.arange(40.0)
    x = gnp.from_array(ref, chunks=10) * 2 + 1
    local = gnp.checkpoint(x)  # no cluster: persisted blocks, plain data
    assert all(type(v).__name__ == "DataNode" for v in local.__dask_graph__().values())
    assert_eq(local, ref * 2 + 1)
    with pytest.raises(TypeError, match="gnp Arrays"):
        gnp.checkpoint(ref)
    own_client.wait_for_workers(2, timeout=60)
    with own_client.as_current(), dask.config.set(scheduler="dask.distributed"):
        c, d = gnp.checkpoint(x, x - 1)
        keys = list(flatten(c.__dask_keys__()))

        def history(dask_scheduler, keys=keys):
            return [(dask_scheduler.tasks[k].run_spec, len(dask_scheduler.tasks[k].dependencies)) for k in keys]

        assert own_client.run_on_scheduler(history) == [(None, 0)] * len(keys)  # data without a history
        assert_eq(c * d, (ref * 2 + 1) * (ref * 2))
        # the price: a lost checkpointed block cannot be recomputed; what needs it fails at once
        _kill_worker_holding(own_client, c.expr.operand("layer")[keys[0]])
        with pytest.raises(distributed.client.FutureCancelledError, match="lost dependencies"):
            gnp.sum(c).compute()


async def _awaited_block(x):
    return x + 1


def test_coroutine_tasks_are_never_folded_into_a_subgraph():
    """A coroutine function's task (an output block of a region on a cluster) stays a task of its own: folded
    into its dependent (``schedule.fuse_chains``) or Dask's linear fusion, a subgraph would call it without
    awaiting it and hand the coroutine object on as the block."""
    from dask._task_spec import DataNode, Task, TaskRef, fuse_linear_task_spec

    from dask_gpunumeric.runtime.faults import AwaitedTask, label_tasks
    from dask_gpunumeric.runtime.schedule import fuse_chains

    x = gnp.asarray(np.arange(4.0))
    layer = label_tasks(x.expr, {("c", 0): Task(("c", 0), _awaited_block, TaskRef(("a", 0)))})
    assert type(layer[("c", 0)]) is AwaitedTask and layer[("c", 0)].is_coro
    graph = {("a", 0): DataNode(("a", 0), 1.0), **layer,
             ("d", 0): Task(("d", 0), np.negative, TaskRef(("c", 0))),
             ("e", 0): Task(("e", 0), np.negative, TaskRef(("d", 0)))}
    for fused in (fuse_chains(graph, {("e", 0)}, set()), fuse_linear_task_spec(graph, [("e", 0)])):
        assert fused[("c", 0)] is layer[("c", 0)]  # neither folded into ("d", 0) nor folding ("a", 0) in
