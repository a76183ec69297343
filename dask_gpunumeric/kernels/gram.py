"""The products of a tall-skinny block's transpose over its rows, ``x.T @ x`` and ``x.T @ v`` for other operands
``v`` of the same rows, in one pass over ``x`` on CuPy blocks (``codegen.linalg.gram_source``: two launches, the
partials of each thread block summed in a fixed order); NumPy blocks keep the library's ``matmul``."""
from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import namespace
from ..codegen.linalg import SUM_ROWS, TILE, GramConfig, GramPlan, gram_plan, gram_source
from . import cuda as _cuda
from .faster import faster

MAX_COLUMNS = 128  # of x
MAX_WIDTHS = 32  # the other operands' columns, in all
ROWS_PER_COLUMN = 64  # x at least this many times taller than wide: below, cuBLAS's product is as good
CONFIG = GramConfig()  # the kernel's compile-time choices (benchmarks/gram_probe.py --variants compares them)


def fits(shape: tuple[int, ...], others: Sequence[tuple[int, ...]], dtype: np.dtype) -> bool:
    """Whether the kernel computes the products of an ``x`` of ``shape`` with operands of shapes ``others`` (its
    rows, vectors or matrices), all of ``dtype``."""
    n, k = shape
    widths = [1 if len(s) == 1 else s[1] for s in others]
    return (dtype in (np.float32, np.float64) and 1 <= k <= MAX_COLUMNS and n >= ROWS_PER_COLUMN * k
            and sum(widths) <= MAX_WIDTHS and all(widths))


def products(backend: str, dtype: np.dtype, x: Any, *others: Any) -> tuple:
    """``x.T @ x``, then ``x.T @ v`` for each operand ``v`` (a block function: ``x`` and the ``v`` of one block
    each): the gram kernel on CuPy blocks where it fits, the rows are contiguous and it was measured faster than the
    library's products for such calls (``kernels.faster``), else the library's products."""
    xp = namespace(x, *others)

    def library() -> tuple:
        return tuple(xp.asarray(xp.matmul(x.T, v), dtype=dtype) for v in (x, *others))

    found = _gram_call(xp, dtype, x, others) if backend == "cupy" else None
    if found is not None:
        plan, key = found
        return faster(key, lambda: _launch(plan, x, others), library)
    return library()


_CALLS: dict[tuple, tuple] = {}  # operands' layout -> (``CONFIG`` then, ``_gram_call``'s answer)


def _gram_call(xp: Any, dtype: np.dtype, x: Any, others: Sequence[Any]) -> tuple[GramPlan, tuple] | None:
    """The gram kernel's plan for these operands and the key of its ``faster`` choice, or None where the kernel does
    not take them (``fits``, rows contiguous); remembered by the operands' dtypes, shapes, strides and alignment and
    the device (asked on every call, before its first launch)."""
    device = xp.cuda.Device().id
    layout = (dtype, device, x.dtype, x.shape, x.strides, x.data.ptr % 16 == 0,
              *[(v.dtype, v.shape, v.strides) for v in others])
    known = _CALLS.get(layout)
    if known is not None and known[0] is CONFIG:
        return known[1]
    found = None
    if fits(x.shape, [v.shape for v in others], dtype) and all(_rows_contiguous(a) for a in (x, *others)):
        widths = tuple(1 if v.ndim == 1 else v.shape[1] for v in others)
        plan = gram_plan(dtype, x.shape[1], widths, configured(x, CONFIG))
        found = plan, ("gram", device, plan, x.shape[0].bit_length())  # rows within a factor of 2
    if len(_CALLS) >= 256:
        _CALLS.clear()
    _CALLS[layout] = (CONFIG, found)
    return found


@functools.lru_cache(maxsize=64)
def _kernels(plan: GramPlan) -> tuple[Any, int, Any]:
    """The compiled gram kernel of ``plan``, its full wave of thread blocks, and its sum kernel (on the worker's
    device; the emulated device of the tests has its own cache)."""
    source = gram_source(plan)
    partial, wave = _cuda.compile_function(source, plan.name, plan.threads)
    if plan.dynamic:
        partial.max_dynamic_shared_size_bytes = plan.shared_bytes
        wave = _cuda.wave_blocks(partial, plan.threads, plan.shared_bytes)
    return partial, wave, _cuda.compile_module(source).get_function(plan.name + "_sum")


def _room(size: int, dtype: np.dtype) -> Any:
    """At least ``size`` elements of ``dtype`` for the thread blocks' partials, in device memory kept per device and stream:
    the sum kernel reading a call's partials runs before the next call's first kernel writes them (a stream runs
    its kernels in order), so no allocation comes before a call's first launch."""
    import cupy

    rooms = _rooms(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, cupy)  # (an emulated device's apart)
    room = rooms.get(dtype)
    if room is None or room.size < size:
        room = rooms[dtype] = cupy.empty(size, dtype=dtype)  # (the old room freed in stream order)
    return room


@functools.lru_cache(maxsize=None)
def _rooms(device: int, stream: int, module: Any) -> dict:
    return {}


_ROOM_LOCK = threading.Lock()


def configured(x: Any, config: GramConfig) -> GramConfig:
    """``config`` for the kernel reading ``x``: its 16-byte copies of ``x`` only where ``x`` and its rows start
    16 bytes apart."""
    return config if x.data.ptr % 16 == 0 and x.strides[0] % 16 == 0 else config._replace(vectors=False)


def _rows_contiguous(a: Any) -> bool:
    """Whether the kernel reads ``a``: the elements of a row next to each other, rows any whole number apart."""
    items = a.itemsize
    return all(s % items == 0 for s in a.strides) and (a.ndim == 1 or a.shape[1] == 1 or a.strides[1] == items)


def _launch(plan: GramPlan, x: Any, others: Sequence[Any]) -> tuple:
    import cupy

    partial, wave, total = _kernels(plan)
    n, k = x.shape
    blocks = max(1, min(wave, -(-n // plan.chunk)))
    rows = -(-n // (blocks * plan.chunk)) * plan.chunk  # whole chunks but in the last block
    blocks = -(-n // rows)
    size = plan.tiles * TILE * TILE
    args: list[Any] = [x, np.int64(x.strides[0] // x.itemsize)]
    for v in others:
        args += [v, np.int64(v.strides[0] // v.itemsize)]
    with _ROOM_LOCK:  # (another thread's launches on this stream never come between these two, on one room)
        partials = _room(blocks * size, x.dtype)
        partial((blocks,), (plan.threads,), (*args, np.int64(n), np.int64(rows), partials),
                shared_mem=plan.shared_bytes if plan.dynamic else 0)
        # the outputs allocated while the first kernel runs (the host's time before it is what a call waits for)
        outputs = [cupy.empty((k, k), dtype=x.dtype), *(cupy.empty((k, *v.shape[1:]), dtype=x.dtype) for v in others)]
        total((-(-size // 32),), (32, SUM_ROWS), (partials, np.int32(blocks), *outputs))
    return tuple(outputs)
