"""Compiling generated CUDA C++ sources: per-process cache, CI dump, ``nvcc`` check.

Every generated kernel is a *full* CUDA C++ translation unit (``extern "C" __global__``
kernels plus the ``__device__`` helpers they use, no ``#include``), so that the same
string compiles under NVRTC (``cupy.RawModule``, on a GPU worker) and under ``nvcc``
(in CI, on a machine without a GPU).

* :func:`compile_module` compiles a source with CuPy and memoizes the module per process,
  keyed by the sha256 of the source (tasks carry source strings, never kernels).
* :func:`record_source` writes every source it sees to ``$GNP_KERNEL_DUMP_DIR`` (when that
  environment variable is set) as ``<sha256[:16]>.cu``, so CI can compile all of them.
* :func:`nvcc_compile_check` compiles a source with ``nvcc`` and raises on failure; it needs
  no GPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import cupy

__all__ = ["compile_module", "record_source", "nvcc_compile_check", "source_digest"]

#: Compile options shared by NVRTC and the nvcc check.
CXX_STD = "--std=c++17"
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
        module = cupy.RawModule(code=source, options=(CXX_STD,))
        _modules[digest] = module
        if len(_modules) > MODULE_CACHE_SIZE:
            _modules.popitem(last=False)
        return module


def nvcc_compile_check(source: str, arch: str = "sm_90") -> None:
    """Compile ``source`` to a cubin with ``nvcc -std=c++17 -arch=<arch>``; needs no GPU.

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
            [nvcc, "-std=c++17", f"-arch={arch}", "--cubin",
             "-o", os.path.join(tmp, "kernel.cubin"), src_path],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"nvcc failed (exit {proc.returncode}) for source {source_digest(source)[:16]}:\n"
            f"{proc.stderr}{proc.stdout}"
        )
