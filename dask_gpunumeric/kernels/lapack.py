"""LAPACK's routines on CuPy blocks, their status left on the device (``kernels.checks`` reads it when the result
is delivered): CuPy's own functions read it at once when asked to raise, a synchronization in the middle of the
call. Small systems are solved by one thread block of our own (``codegen.linalg.small_solve_source``), larger
ones through cuSOLVER."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..codegen.linalg import (SOLVE_BYTES, SOLVE_LARGEST, SolveConfig, register_solve_source,
                              small_solve_source)
from . import cuda as _cuda
from .faster import faster

_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}  # cuSOLVER's letter of each dtype
SOLVE = SolveConfig()  # the small solve's compile-time choices (benchmarks/gram_probe.py --variants compares them)


def gesv(a: Any, b: Any) -> tuple[Any, Any]:
    """The solution of ``a @ x = b`` (``a`` square and not empty, ``b`` a vector or a matrix, both of one float
    or complex dtype) by LU factorization with partial pivoting (cuSOLVER's getrf and getrs, as
    ``cupy.linalg.solve``), and the status on the device: two int32, getrf's ``info`` (positive where ``a``
    is singular: a zero pivot) and getrs's, both zero where the solution is good. A small real system
    (``small_fits``) is solved in one launch of our kernel, in getf2's order, with the same status, where that
    was measured faster than cuSOLVER for such systems (``kernels.faster``)."""
    if not small_fits(a, b):
        return cusolver_gesv(a, b)
    import cupy

    key = ("gesv", cupy.cuda.Device().id, a.dtype, a.shape, b.shape)
    return faster(key, lambda: small_gesv(a, b), lambda: cusolver_gesv(a, b))


def cusolver_gesv(a: Any, b: Any) -> tuple[Any, Any]:
    """``gesv`` through cuSOLVER's getrf and getrs, whatever the size."""
    import cupy
    from cupy_backends.cuda.libs import cublas, cusolver

    letter = _PREFIX[a.dtype.char]
    n = a.shape[0]
    lu = a.astype(a.dtype, copy=True, order="F")  # getrf factors in place, getrs solves in place
    x = b.astype(b.dtype, copy=True, order="F")
    handle = cupy.cuda.device.get_cusolver_handle()
    pivots = cupy.empty(n, dtype=np.int32)
    status = cupy.empty(2, dtype=np.int32)  # getrs writes its own: getrf's must not be overwritten
    work_size = getattr(cusolver, f"{letter}getrf_bufferSize")(handle, n, n, lu.data.ptr, n)
    work = cupy.empty(work_size, dtype=a.dtype)
    getattr(cusolver, f"{letter}getrf")(handle, n, n, lu.data.ptr, n, work.data.ptr, pivots.data.ptr,
                                       status.data.ptr)
    getattr(cusolver, f"{letter}getrs")(handle, cublas.CUBLAS_OP_N, n, x.shape[1] if x.ndim == 2 else 1,
                                       lu.data.ptr, n, pivots.data.ptr, x.data.ptr, n,
                                       status.data.ptr + status.itemsize)
    return x, status


def small_fits(a: Any, b: Any) -> bool:
    """Whether the one-block kernel solves ``a @ x = b``: float32 or float64, at most ``SOLVE_LARGEST`` equations,
    ``a`` and ``b`` in the shared memory the device gives the kernel."""
    n, rhs = a.shape[0], 1 if b.ndim == 1 else b.shape[1]
    return (a.dtype in (np.float32, np.float64) and b.dtype == a.dtype and n <= SOLVE_LARGEST
            and n * (n + rhs) * a.itemsize <= _small_kernel(a.dtype, SOLVE, (0, 0))[1]
            and all(s % a.itemsize == 0 for s in (*a.strides, *b.strides)))


PORTABLE_SHARED = 48 * 1024  # the dynamic shared memory every device gives a kernel without opting in


@functools.lru_cache(maxsize=256)
def _small_kernel(dtype: np.dtype, config: SolveConfig, size: tuple[int, int]) -> tuple[Any, int, int]:
    """The compiled small solve of ``dtype`` (of systems of ``size`` where ``config.kernel_size`` says so), the
    dynamic shared memory its launches may take (``SOLVE_BYTES`` where the device allows it, else the portable
    48 KB) and its threads (on the worker's device; the emulated device of the tests has its own cache)."""
    import cupy

    if config.in_registers(*size):
        source, name = register_solve_source(dtype, size)
        threads = -(-size[0] // 32) * 32
        return _cuda.compile_function(source, name, threads)[0], 0, threads
    function = _cuda.compile_function(*small_solve_source(dtype, config, size), config.threads)[0]
    try:
        function.max_dynamic_shared_size_bytes = SOLVE_BYTES
    except cupy.cuda.driver.CUDADriverError:  # a device with less shared memory per block
        return function, PORTABLE_SHARED, config.threads
    return function, SOLVE_BYTES, config.threads


def small_gesv(a: Any, b: Any, config: SolveConfig | None = None) -> tuple[Any, Any]:
    """``gesv`` by the one-block kernel compiled as ``config`` says (``SOLVE`` by default; ``small_fits`` must
    hold): one launch."""
    import cupy

    config = config or SOLVE
    n, items, rhs = a.shape[0], a.itemsize, 1 if b.ndim == 1 else b.shape[1]
    function, shared, threads = _small_kernel(a.dtype, config, config.kernel_size(n, rhs))
    x = cupy.empty(b.shape, dtype=a.dtype)
    status = cupy.empty(2, dtype=np.int32)
    b_col = b.strides[1] // items if b.ndim == 2 else 0
    function((1,), (threads,), (a, np.int64(a.strides[0] // items), np.int64(a.strides[1] // items), b,
                                np.int64(b.strides[0] // items), np.int64(b_col), np.int32(n), np.int32(rhs), x,
                                status), shared_mem=n * (n + rhs) * items if shared else 0)
    return x, status
