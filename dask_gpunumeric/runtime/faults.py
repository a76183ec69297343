"""Failures inside block tasks, told in terms of the array: which block failed, and what to do when memory
runs out.

Every task of a lowered graph calls its function through a ``BlockFunction`` (``label_tasks``), which knows
its block: out of memory becomes ``gnp.OutOfMemoryError`` naming the block, its size and the fixes; any other
exception gets a note naming the block (``__notes__`` travel from cluster workers). A result that cannot fit
at all fails before any work starts (``check_result_fits``). An out-of-memory error holds no blocks, so that
keeping it (a notebook's last error) frees their memory (the default local schedulers clear the failed
computation's frames: ``release_blocks``). What users see: docs/reliability.md."""
from __future__ import annotations

import contextlib
import gc
import inspect
import math
import os
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from dask._task_spec import Task
from dask.utils import format_bytes

# CUDA errors (CuPy raises them as CUDARuntimeError or a library's error, not MemoryError) that mean an
# allocation failed
_CUDA_ALLOCATION_FAILURES = ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED",
                             "CUSOLVER_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED")


class OutOfMemoryError(MemoryError):
    """A block task ran out of GPU (or host) memory; the message names the block and what to change."""


class BlockFunction:
    """A task's function, with the block it computes: ``op`` (the key's operation words), ``index`` (the
    block index, or the task's place in a combine stage) and, for an Array's own blocks, ``shape`` and
    ``dtype``."""

    __slots__ = ("func", "op", "index", "shape", "dtype")

    def __init__(self, func: Callable[..., Any], op: str, index: tuple, shape: tuple[int, ...] | None,
                 dtype: str | None) -> None:
        self.func, self.op, self.index, self.shape, self.dtype = func, op, index, shape, dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every failure is told with its block, then raised again
            del args, kwargs  # (an out-of-memory error must hold no blocks: the inputs dropped)
            self.tell(exc)

    def tell(self, exc: Exception) -> None:
        """Raise ``exc`` told with this block: with a note naming it, or, out of memory, as a
        ``gnp.OutOfMemoryError`` that holds no blocks (the failed allocation's frames cleared)."""
        if not is_out_of_memory(exc):
            exc.add_note(f"dask_gpunumeric: raised while computing {self.describe()}")
            raise exc
        error = OutOfMemoryError(out_of_memory_message(self, exc))
        traceback.clear_frames(exc.__traceback__)
        raise error from exc

    def describe(self) -> str:
        """The block in words: "block (3, 0) of fused-exp-sum ((1000, 1000) float64, 7.63 MiB)"."""
        if self.shape is None:
            return f"task {self.index} of {self.op}"
        dtype = np.dtype(self.dtype)
        nbytes = int(np.prod(self.shape)) * dtype.itemsize
        return f"block {self.index} of {self.op} ({self.shape} {dtype}, {format_bytes(nbytes)})"

    def __reduce__(self) -> tuple:
        return BlockFunction, (self.func, self.op, self.index, self.shape, self.dtype)

    def __dask_tokenize__(self) -> tuple:
        # the scheduler compares tasks submitted twice under one key by token: deterministic, by content
        return ("gnp-block-function", self.func, self.op, self.index, self.shape, self.dtype)


class AwaitedTask(Task):
    """A coroutine function's task. Never fused into another task's subgraph (Dask's linear fusion, as for
    blocks whose one dependent is a concatenation): a subgraph calls its tasks without awaiting them."""

    __slots__ = ()

    @property
    def block_fusion(self) -> bool:
        return True


def label_tasks(node: Any, layer: Mapping) -> dict:
    """``layer`` (one expression node's tasks) with each Task's function wrapped in a ``BlockFunction``:
    keys ``(node name, *block index)`` are the node's blocks, of known shape and dtype; others (reduction
    and scan stages) are described by their key alone."""
    out = {}
    for key, task in layer.items():
        if type(task) is Task and not isinstance(task.func, BlockFunction):  # (an AwaitedTask is labelled)
            index = tuple(key[1:]) if isinstance(key, tuple) else ()
            own = isinstance(key, tuple) and key[0] == node._name and len(index) == node.ndim
            shape, dtype = (node.block_shape(index), node.dtype.str) if own else (None, None)
            label = BlockFunction(task.func, _op_words(key), index, shape, dtype)
            # (a coroutine function's task stays one: a distributed worker runs it in its event loop)
            kind, head = (AwaitedTask, (call_coroutine, label)) if inspect.iscoroutinefunction(task.func) else \
                (Task, (label,))
            task = kind(key, *head, *task.args, _data_producer=task.data_producer, **task.kwargs)
        out[key] = task
    return out


async def call_coroutine(label: BlockFunction, *args: Any, **kwargs: Any) -> Any:
    """The task function of a coroutine function's task: the coroutine awaited, its failures told as its
    ``label`` tells them."""
    try:
        return await label.func(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure is told with its block, then raised again
        del args, kwargs
        label.tell(exc)


def _op_words(key: Any) -> str:
    """The operation words of a key, its name "<op-words>-<token>" without the token (not dask's
    ``key_split``: its cache would keep every key of a long run)."""
    name = str(key[0] if isinstance(key, tuple) else key)
    return name.rpartition("-")[0] or name


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception means that an allocation failed (host or device)."""
    if isinstance(exc, MemoryError):
        return True
    return _from_cupy(exc) and any(marker in str(exc) for marker in _CUDA_ALLOCATION_FAILURES)


def _from_cupy(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("cupy", "cupy_backends", "cupyx")


def out_of_memory_message(block: BlockFunction, exc: BaseException) -> str:
    """What ran out of memory where, how much there is, and what to change."""
    on_gpu = _from_cupy(exc)
    where = "GPU" if on_gpu else "host"
    memory = _device_memory() if on_gpu else _host_memory()
    lines = [
        f"out of {where} memory while computing {block.describe()}{'; ' + memory if memory else ''}.",
        f"  ({type(exc).__name__}: {exc})",
        f"The blocks alive at once do not fit in {where} memory. To fix it:",
        "  - use smaller blocks: chunks=... when creating arrays, arr.rechunk(...), or "
        "gnp.config.set(chunk_size='256MiB') for 'auto' chunks;",
        "  - run on a cluster: gnp.cluster() spreads the blocks over every GPU, and dask-cuda spills them "
        "from GPU to host memory past its device-memory limit;" if on_gpu else
        "  - run on a cluster: gnp.cluster() spreads the blocks over several workers, and Dask spills them "
        "to disk past each worker's memory limit;",
        "  - persist less: del persisted Arrays you no longer need, and compute() reductions or slices "
        "rather than whole large arrays.",
    ]
    if block.op == "finalize":
        lines.append("  This task joins all blocks into the one array compute() returns: that array alone may "
                     "be too large; fetch a slice or a reduction of it instead.")
    return "\n".join(lines)


def _device_memory() -> str:
    try:
        import cupy

        _, total = cupy.cuda.Device().mem_info
        held = cupy.get_default_memory_pool().used_bytes()
    except Exception:  # noqa: BLE001 - only an addition to the message: no GPU to ask (a simulated error)
        return ""
    return f"the GPU has {format_bytes(total)}, of which {format_bytes(held)} is held by blocks alive now"


def _host_memory() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return ""
    return f"the host has {format_bytes(total)}"


# results smaller than this are not checked against free memory before computing: asking the system costs
# a file read on every call, and such a result fails (if at all) as soon as its first block does
_CHECKED_RESULT_BYTES = 2**26


def check_result_fits(arrays: Sequence[Any], *, to_host: bool, call: str) -> None:
    """Raise ``OutOfMemoryError`` before any work starts when the results (objects with ``shape``, ``dtype`` and
    ``backend``), each joined into one array, cannot fit: CuPy blocks in the GPU's free memory, NumPy blocks
    (or any result copied to the host, ``to_host``) in the host's available memory. ``call`` names what the
    user called, for the message."""
    nbytes = {"cupy": 0, "numpy": 0}
    for array in arrays:
        nbytes[array.backend] += math.prod(array.shape) * array.dtype.itemsize
    host = nbytes["numpy"] + (nbytes["cupy"] if to_host else 0)
    if max(host, nbytes["cupy"]) < _CHECKED_RESULT_BYTES:
        return
    for where, need, free in (("GPU", nbytes["cupy"], available_device_memory),
                              ("host", host, available_host_memory)):
        have = free() if need >= _CHECKED_RESULT_BYTES else None
        if have is not None and need > have:
            raise OutOfMemoryError(result_too_large_message(arrays, where, need, have, call))


def result_too_large_message(arrays: Sequence[Any], where: str, need: int, have: int, call: str) -> str:
    """Why a result cannot be computed at all, and what to do instead."""
    what = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in arrays[:3]) + (", ..." if len(arrays) > 3 else "")
    return "\n".join([
        f"{call}: the result ({what}) needs {format_bytes(need)} of {where} memory, and {format_bytes(have)} is "
        "available; nothing was computed. To fix it:",
        "  - reduce it first: compute a reduction (x.sum(), x.mean(axis=0)) or a slice (x[:1000]) instead of the "
        "whole array;",
        "  - go through it in pieces: compute x[i:i + n] for one piece at a time, or write its blocks out one "
        "at a time (x.to_dask_array().to_zarr(...));",
        "  - keep it in cluster memory: with gnp.cluster(), x = x.persist() holds its blocks on the workers "
        "(spilled past their memory limits) for the operations that follow.",
    ])


def available_host_memory() -> int | None:
    """Bytes of host memory available to this process (the system's available memory, within the limit of
    its cgroup), or None when the system does not say."""
    available = None
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/meminfo") as info:
            available = 1024 * int(next(line for line in info if line.startswith("MemAvailable:")).split()[1])
    if available is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as used:
            left = int(limit.read()) - int(used.read())  # "max" (no limit) is a ValueError
            available = left if available is None else min(available, left)
    return available


def available_device_memory() -> int | None:
    """Bytes the current GPU can still allocate for CuPy (free device memory plus what CuPy's pool holds
    unused), or None without one."""
    try:
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        return free + cupy.get_default_memory_pool().free_bytes()
    except Exception:  # noqa: BLE001 - no CuPy or no GPU to ask: nothing to check
        return None


def release_blocks(exc: BaseException) -> None:
    """Clear the locals of every finished frame an exception (or its causes) reaches, through its traceback
    and the callers of those frames, and empty the closures made by those calls: a failed local
    computation's frames (and the closure of its scheduler's loop) hold every block computed so far. Frames
    still running (the caller's) are left alone."""
    seen: set[int] = set()
    finished: list[types.FrameType] = []
    chain: BaseException | None = exc
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        tb = chain.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            while frame is not None and id(frame) not in seen:
                seen.add(id(frame))
                with contextlib.suppress(RuntimeError):  # a frame still running
                    frame.clear()
                    finished.append(frame)
                frame = frame.f_back
            tb = tb.tb_next
        chain = chain.__cause__ or chain.__context__
    made_inside = {c for frame in finished for c in frame.f_code.co_consts if isinstance(c, types.CodeType)}
    for frame in finished:
        for function in gc.get_referents(frame):  # the function a frame runs
            if isinstance(function, types.FunctionType) and function.__code__ in made_inside:
                for cell in function.__closure__ or ():
                    with contextlib.suppress(ValueError):  # already empty
                        del cell.cell_contents
