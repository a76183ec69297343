"""A CuPy stand-in whose arrays are NumPy arrays on an emulated device, for tests of what the CuPy path reads
back: every copy to the host (``get``, ``item``, ``bool``, ...) is recorded in ``reads``, since on a GPU each
waits for the device. ``fake_device(monkeypatch)`` installs it: blocks of ``backend="cupy"`` Arrays are
``DeviceArray``s, CuPy's functions are NumPy's (results kept on the device), and cuSOLVER's getrf/getrs
(``cupy_backends.cuda.libs.cusolver``) work in place on the buffers their pointers name, as on a GPU, their
status written to the device (LAPACK's algorithm: partial pivoting, ``info = k`` at the first zero pivot). Our own
kernels (the small solve's) run on the CPU through ``_cuda_emulator``."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
import types
from typing import Any

import numpy as np

reads: list[tuple[str, tuple[int, ...]]] = []  # (what read, shape) of each copy to the host, in order


class DeviceArray(np.ndarray):
    """A block on the emulated device (a NumPy array that CuPy's type checks take for a CuPy array)."""

    __module__ = "cupy._core.core"

    @property
    def data(self) -> Any:  # CuPy's memory pointer
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def _read(self, what: str) -> np.ndarray:
        reads.append((what, self.shape))
        return self.view(np.ndarray).copy()

    def get(self) -> np.ndarray:
        return self._read("get")

    def item(self, *args: Any) -> Any:
        return self._read("item").item(*args)

    def tolist(self) -> Any:
        return self._read("tolist").tolist()

    def __bool__(self) -> bool:
        return bool(self._read("bool"))

    def __float__(self) -> float:
        return float(self._read("float"))

    def __int__(self) -> int:
        return int(self._read("int"))


def _on_device(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)) and not isinstance(value, DeviceArray):
        return np.asarray(value).view(DeviceArray)  # (CuPy's reductions give 0-d arrays, not scalars)
    if isinstance(value, tuple):
        return tuple(_on_device(v) for v in value)
    return value


def _device_function(function: Any) -> Any:
    def on_device(*args: Any, **kwargs: Any) -> Any:
        return _on_device(function(*args, **kwargs))

    return on_device


def _module(name: str, source: Any) -> types.ModuleType:
    """A module whose functions are ``source``'s, their array results on the device."""
    module = types.ModuleType(name)

    def attribute(attr: str) -> Any:
        value = getattr(source, attr)
        return _device_function(value) if callable(value) and not isinstance(value, type) else value

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def _buffer(address: int, dtype: np.dtype, rows: int, columns: int) -> np.ndarray:
    """The column-major ``(rows, columns)`` matrix at ``address`` (a leading dimension of ``rows``)."""
    raw = (ctypes.c_char * (rows * columns * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype=dtype).reshape(columns, rows).T


def _getrf(dtype: np.dtype) -> Any:
    def getrf(handle: int, m: int, n: int, a: int, lda: int, work: int, pivots: int, info: int) -> None:
        lu = _buffer(a, dtype, lda, n)[:m]
        piv = _buffer(pivots, np.dtype(np.int32), min(m, n), 1)[:, 0]
        first_zero = 0
        for k in range(min(m, n)):
            p = k + int(np.argmax(np.abs(lu[k:, k])))
            piv[k] = p + 1
            lu[[k, p]] = lu[[p, k]]
            if lu[k, k] == 0:
                first_zero = first_zero or k + 1
                continue
            lu[k + 1 :, k] /= lu[k, k]
            lu[k + 1 :, k + 1 :] -= np.outer(lu[k + 1 :, k], lu[k, k + 1 :])
        _buffer(info, np.dtype(np.int32), 1, 1)[0, 0] = first_zero

    return getrf


def _getrs(dtype: np.dtype) -> Any:
    def getrs(handle: int, trans: int, n: int, nrhs: int, a: int, lda: int, pivots: int, b: int, ldb: int,
              info: int) -> None:
        assert trans == 0
        lu, x = _buffer(a, dtype, lda, n)[:n], _buffer(b, dtype, ldb, nrhs)[:n]
        for k, p in enumerate(_buffer(pivots, np.dtype(np.int32), n, 1)[:, 0] - 1):
            x[[k, p]] = x[[p, k]]
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero pivot gives inf/nan, as cuBLAS's solves
            for k in range(n):
                x[k] -= lu[k, :k] @ x[:k]
            for k in reversed(range(n)):
                x[k] = (x[k] - lu[k, k + 1 :] @ x[k + 1 :]) / lu[k, k]
        _buffer(info, np.dtype(np.int32), 1, 1)[0, 0] = 0

    return getrs


def _cusolver() -> types.ModuleType:
    cusolver = types.ModuleType("cupy_backends.cuda.libs.cusolver")
    for letter, dtype in zip("sdcz", (np.float32, np.float64, np.complex64, np.complex128)):
        setattr(cusolver, f"{letter}getrf_bufferSize", lambda handle, m, n, a, lda: 1)
        setattr(cusolver, f"{letter}getrf", _getrf(np.dtype(dtype)))
        setattr(cusolver, f"{letter}getrs", _getrs(np.dtype(dtype)))
    return cusolver


def _compile_emulated(record: Any, source: str) -> Any:
    """``kernels.cuda.compile_module`` on the emulated device: the source recorded as there (with
    ``GNP_KERNEL_DUMP_DIR`` set, CI's nvcc check compiles it), its kernels compiled for the CPU."""
    from _cuda_emulator import EmulatedKernel

    record(source)
    return types.SimpleNamespace(get_function=functools.partial(EmulatedKernel, source, strided=True))


def fake_device(monkeypatch: Any) -> list[tuple[str, tuple[int, ...]]]:
    """Install the emulated device for this test: ``backend="cupy"`` available, ``cupy``, ``cupyx`` (its
    ``errstate``) and the cuSOLVER bindings above in ``sys.modules``. Returns ``reads``, emptied."""
    from dask_gpunumeric import backend
    from dask_gpunumeric.kernels import cuda as _cuda
    from dask_gpunumeric.kernels import faster as _faster
    from dask_gpunumeric.kernels import gram as _gram
    from dask_gpunumeric.kernels import lapack as _lapack

    cupy = _module("cupy", np)
    cupy.ndarray = DeviceArray
    cupy.linalg = _module("cupy.linalg", np.linalg)
    cupy.cuda = types.SimpleNamespace(
        device=types.SimpleNamespace(get_cusolver_handle=lambda: 0),
        Device=lambda *a: types.SimpleNamespace(id=0, synchronize=lambda: None),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    cupyx = types.ModuleType("cupyx")
    cupyx.errstate = lambda **modes: contextlib.nullcontext()  # (NumPy's functions raise at once anyway)
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cusolver = _cusolver()
    libs.cublas = types.SimpleNamespace(CUBLAS_OP_N=0)
    for name, module in {"cupy": cupy, "cupy.linalg": cupy.linalg, "cupyx": cupyx,
                         "cupy_backends": types.ModuleType("cupy_backends"),
                         "cupy_backends.cuda": types.ModuleType("cupy_backends.cuda"),
                         "cupy_backends.cuda.libs": libs, "cupy_backends.cuda.libs.cusolver": libs.cusolver}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    monkeypatch.setattr(_cuda, "compile_module", functools.partial(_compile_emulated, _cuda.record_source))
    for module, name in ((_gram, "_kernels"), (_lapack, "_small_kernel")):  # caches of the emulated kernels
        monkeypatch.setattr(module, name, functools.lru_cache(maxsize=None)(getattr(module, name).__wrapped__))
    monkeypatch.setattr(_cuda, "wave_blocks", lambda function, threads, dynamic_shared=0: 4)
    monkeypatch.setattr(_faster, "_ours_won", {})
    monkeypatch.setattr(_faster, "ours_faster", lambda ours, library: True)  # no timer here: our kernels
    reads.clear()
    return reads
