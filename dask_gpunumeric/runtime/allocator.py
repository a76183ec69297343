"""One device allocator per GPU worker: CuPy's memory pool, which RMM allocates from too.

CuPy blocks allocate through CuPy's pool; distributed allocates the device buffers it receives and brings
back from host memory (unspills) through RMM once RMM imports. Two pools on one GPU strand memory: freed
blocks held by one cannot serve the other, and unspilling runs out of device memory. RMM's pools as CuPy's
allocator (dask-cuda's ``rmm_async``/``rmm_pool_size`` with ``rmm_allocator_external_lib_list``) share one
pool but slow every call of a worker (docs/benchmarks.md, "One allocator"), so RMM allocates from CuPy's
pool instead (``rmm.mr.CallbackMemoryResource``: a Python call per RMM allocation, which only transfers
and unspills make).
"""
from __future__ import annotations

import importlib.util
from typing import Any

from distributed import WorkerPlugin


def shares_cupy_pool(cluster_kwargs: dict[str, Any]) -> bool:
    """Whether a GPU cluster started with ``cluster_kwargs`` gets RMM allocating from CuPy's pool: where RMM
    imports and no ``rmm_*`` option chooses another allocator."""
    return (not any(key.startswith("rmm_") for key in cluster_kwargs)
            and importlib.util.find_spec("rmm") is not None)


def rmm_from_cupy_pool() -> None:
    """Make RMM's current device resource allocate from CuPy's default memory pool (this process, the
    current device): each allocation's CuPy memory is held until RMM frees it."""
    import cupy
    import rmm

    pool = cupy.get_default_memory_pool()
    held: dict[int, Any] = {}

    def allocate(size: int, stream: Any) -> int:
        memory = pool.malloc(size)
        held[memory.ptr] = memory
        return memory.ptr

    def deallocate(ptr: int, size: int, stream: Any) -> None:
        held.pop(ptr, None)

    rmm.mr.set_current_device_resource(rmm.mr.CallbackMemoryResource(allocate, deallocate))


class CupyPoolForRmm(WorkerPlugin):
    """On each GPU worker (and each joining later): ``rmm_from_cupy_pool``."""

    name = "gnp-cupy-pool-for-rmm"

    def setup(self, worker: Any) -> None:
        rmm_from_cupy_pool()
