"""LAPACK's routines on CuPy blocks through cuSOLVER, their status left on the device (``kernels.checks`` reads
it when the result is delivered): CuPy's own functions read it at once when asked to raise, a synchronization
in the middle of the call."""
from __future__ import annotations

from typing import Any

import numpy as np

_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}  # cuSOLVER's letter of each dtype


def gesv(a: Any, b: Any) -> tuple[Any, Any]:
    """The solution of ``a @ x = b`` (``a`` square and not empty, ``b`` a vector or a matrix, both of one float
    or complex dtype) by LU factorization with partial pivoting (cuSOLVER's getrf and getrs, as
    ``cupy.linalg.solve``), and the status on the device: two int32, getrf's ``info`` (positive where ``a``
    is singular: a zero pivot) and getrs's, both zero where the solution is good."""
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
