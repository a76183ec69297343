"""Compiling generated CUDA C++: the one compile path of fused kernels, stencil kernels and Philox draws
(:func:`compile_function`), its per-process cache, the dump of every source for CI, and the ``nvcc`` check.

Every generated kernel is a full translation unit (no ``#include``), so that the same string compiles under
NVRTC (``cupy.RawModule``, on a GPU worker) and under ``nvcc`` (in CI, without a GPU). Tasks carry source
strings, never kernels: modules are memoized per process by the sha256 of their source. Launches are one full
wave of thread blocks (:func:`wave_blocks`, from the occupancy arithmetic of :func:`resident_blocks`)."""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import cupy

__all__ = ["compile_module", "compile_function", "compile_in_background", "wait_for_background_compiles", "record_source",
           "nvcc_compile_check", "source_digest", "resident_blocks", "wave_blocks", "takes_packed", "packed"]

#: Compile options shared by NVRTC and the nvcc check. NumPy rounds every operation: contracting ``a * b + c`` into
#: one fused multiply-add (NVRTC's and nvcc's default) changes the bits, and makes ``x * x - y * y`` nonzero where
#: ``x == y``; so no contraction (the CPU emulator compiles with ``-ffp-contract=off`` alike).
COMPILE_OPTIONS = ("--std=c++17", "--fmad=false")
#: How many compiled modules one process keeps.
MODULE_CACHE_SIZE = 256

_modules: OrderedDict[str, Any] = OrderedDict()
_modules_lock = threading.Lock()
_recorded: set[tuple[str, str]] = set()
_recorded_lock = threading.Lock()


def source_digest(source: str) -> str:
    """Return the hex sha256 of ``source`` (UTF-8), the key of every cache here."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def record_source(source: str) -> None:
    """Write ``source`` to ``$GNP_KERNEL_DUMP_DIR/<sha256[:16]>.cu`` if that variable is set.

    Each source is written once per directory (and not rewritten when the file exists, as
    another process may have written it). The write is atomic (temporary file + rename).
    Does nothing when ``GNP_KERNEL_DUMP_DIR`` is unset or empty.
    """
    dump_dir = os.environ.get("GNP_KERNEL_DUMP_DIR")
    if not dump_dir:
        return
    digest = source_digest(source)
    with _recorded_lock:
        if (dump_dir, digest) in _recorded:
            return
        os.makedirs(dump_dir, exist_ok=True)
        path = os.path.join(dump_dir, digest[:16] + ".cu")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=dump_dir, suffix=".cu.tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(source)
            os.replace(tmp, path)
        _recorded.add((dump_dir, digest))


_background = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gnp-compile")


def compile_function(source: str, name: str, threads: int) -> tuple[Any, int]:
    """The function ``name`` of ``source`` (``compile_module``), on the current device, and its grid of one
    full wave of ``threads``-thread blocks (``wave_blocks``)."""
    function = compile_module(source).get_function(name)
    return function, wave_blocks(function, threads)


def compile_in_background(source: str, name: str, threads: int) -> concurrent.futures.Future:
    """``compile_function`` in a background thread, on the current device (a future of its result)."""
    import cupy

    device = cupy.cuda.Device().id

    def compile_on_device() -> tuple[Any, int]:
        with cupy.cuda.Device(device):
            return compile_function(source, name, threads)

    return _background.submit(compile_on_device)


def takes_packed(function: Any) -> bool:
    """Whether ``function`` is a CuPy kernel (``cupy.cuda.function.Function``: not an emulated one), whose launches
    take ``packed`` arguments."""
    module = sys.modules.get("cupy.cuda.function")
    return module is not None and isinstance(function, module.Function)


def packed(values: Sequence[Any]) -> tuple:
    """Kernel arguments that stay the same from launch to launch (NumPy scalars: numbers, structs of them, device
    pointers as ``numpy.uintp``) converted once into what a CuPy launch converts each of them into on every call
    (``cupy._core._scalar.CScalar``, which a launch passes on as it is); other values as they are."""
    from cupy._core._scalar import CScalar

    return tuple(CScalar(v) if isinstance(v, np.generic) else v for v in values)


def wait_for_background_compiles() -> None:
    """Return once every compilation queued by ``compile_in_background`` so far has finished."""
    _background.submit(lambda: None).result()


def compile_module(source: str) -> "cupy.RawModule":
    """Compile a full CUDA C++ source with ``cupy.RawModule``, memoized by its sha256.

    The cache is a per-process LRU of :data:`MODULE_CACHE_SIZE` modules, safe to use from
    the threads of Dask's threaded scheduler. CuPy compiles lazily (on the first
    ``get_function``) and keeps its own on-disk cache, so a miss here is cheap when the
    kernel was compiled before on this machine.
    """
    import cupy

    record_source(source)
    digest = source_digest(source)
    with _modules_lock:
        module = _modules.get(digest)
        if module is not None:
            _modules.move_to_end(digest)
            return module
        module = cupy.RawModule(code=source, options=COMPILE_OPTIONS)
        _modules[digest] = module
        if len(_modules) > MODULE_CACHE_SIZE:
            _modules.popitem(last=False)
        return module


def nvcc_compile_check(source: str, arch: str = "sm_90") -> None:
    """Compile ``source`` to a cubin with ``nvcc`` under ``COMPILE_OPTIONS`` for ``arch``; needs no GPU.

    Raises ``RuntimeError`` if ``nvcc`` is not on ``PATH`` or if compilation fails (the
    message holds nvcc's output).
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc_compile_check: nvcc is not on PATH")
    with tempfile.TemporaryDirectory(prefix="gnp-nvcc-") as tmp:
        src_path = os.path.join(tmp, "kernel.cu")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(source)
        proc = subprocess.run(
            [nvcc, *COMPILE_OPTIONS, f"-arch={arch}", "--cubin",
             "-o", os.path.join(tmp, "kernel.cubin"), src_path],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"nvcc failed (exit {proc.returncode}) for source {source_digest(source)[:16]}:\n"
            f"{proc.stderr}{proc.stdout}"
        )


#: Registers are given to warps in units of this many (compute capability 5.0 and later).
REGISTER_UNIT = 256
#: A multiprocessor's register file is split evenly among this many warp schedulers (5.0 and later).
SUB_PARTITIONS = 4


def resident_blocks(num_regs: int, shared_bytes: int, threads: int, device: Mapping[str, int]) -> int:
    """Thread blocks of ``threads`` threads that one multiprocessor keeps resident at once, for a kernel of
    ``num_regs`` registers per thread and ``shared_bytes`` of shared memory per block, on a device described
    by ``device`` (CuPy's ``getDeviceProperties``: ``warpSize``, ``regsPerMultiprocessor``,
    ``maxThreadsPerMultiProcessor``, ``maxBlocksPerMultiProcessor``, ``sharedMemPerMultiprocessor``,
    ``reservedSharedMemPerBlock``): the smallest of the thread, block, register and shared-memory limits,
    as CUDA's occupancy calculator counts them (registers per warp rounded up to ``REGISTER_UNIT``, warps
    placed on ``SUB_PARTITIONS`` partitions of the register file). At least 1."""
    warp = device["warpSize"]
    warps = -(-threads // warp)
    limits = [device["maxThreadsPerMultiProcessor"] // (warps * warp), device["maxBlocksPerMultiProcessor"]]
    regs_per_warp = -(-num_regs * warp // REGISTER_UNIT) * REGISTER_UNIT
    if regs_per_warp:
        per_partition = device["regsPerMultiprocessor"] // SUB_PARTITIONS // regs_per_warp
        limits.append(per_partition * SUB_PARTITIONS // warps)
    if shared_bytes:
        limits.append(device["sharedMemPerMultiprocessor"] // (shared_bytes + device["reservedSharedMemPerBlock"]))
    return max(1, min(limits))


def wave_blocks(function: Any, threads: int, dynamic_shared: int = 0) -> int:
    """Thread blocks of one full wave of a compiled kernel (a CuPy ``Function``) launched with ``threads``
    threads per block (and ``dynamic_shared`` bytes of dynamic shared memory) on the current device:
    multiprocessors x resident blocks per multiprocessor. A grid-stride kernel launched with at most this many
    blocks runs them all at once."""
    import cupy

    device = _device_properties(cupy.cuda.Device().id)
    per_sm = resident_blocks(function.num_regs, function.shared_size_bytes + dynamic_shared, threads, device)
    return device["multiProcessorCount"] * per_sm


@functools.lru_cache(maxsize=None)
def _device_properties(device: int) -> dict[str, Any]:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device)
