"""Block backends: which array module holds the blocks (NumPy or CuPy), and moving blocks between them."""
from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

import numpy as np

BACKENDS = ("numpy", "cupy")


@functools.cache
def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means "no usable GPU"
        return False


def resolve(name: str | None) -> str:
    """Turn a backend setting ("auto", "numpy", "cupy" or None) into "numpy" or "cupy"."""
    if name in (None, "auto"):
        env = os.environ.get("GNP_BACKEND", "auto")
        if env != "auto":
            return resolve(env)
        return "cupy" if gpu_available() else "numpy"
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: expected one of 'auto', 'numpy', 'cupy'")
    if name == "cupy" and not gpu_available():
        raise RuntimeError("backend 'cupy' was asked for, but CuPy cannot see a CUDA device; use backend='numpy'")
    return name


def module(backend: str) -> ModuleType:
    """The array module (``numpy`` or ``cupy``) of a backend name."""
    if backend == "cupy":
        import cupy

        return cupy
    return np


def backend_of(block: Any) -> str:
    """The backend name of a concrete block (a CuPy array is "cupy", anything else "numpy")."""
    return "cupy" if type(block).__module__.startswith("cupy") else "numpy"


def namespace(*blocks: Any) -> ModuleType:
    """The array module to use for an operation on these blocks (CuPy if any block is a CuPy array)."""
    for b in blocks:
        if backend_of(b) == "cupy":
            return module("cupy")
    return np


def to_backend(block: Any, backend: str) -> Any:
    """Move one block to a backend (host to device or device to host); no copy when it is already there."""
    if backend == "cupy":
        return module("cupy").asarray(block)
    if backend_of(block) == "cupy":
        return block.get()
    return np.asarray(block)


def to_numpy(block: Any) -> np.ndarray:
    """A NumPy copy (or view) of a block of either backend."""
    return to_backend(block, "numpy")


def empty_meta(dtype: np.dtype, ndim: int, backend: str) -> Any:
    """A zero-size block with this dtype and ndim, standing for the block type in Dask metadata."""
    return module(backend).empty((0,) * ndim, dtype=dtype)


def device_name(backend: str) -> str:
    """A short description of where blocks of this backend live."""
    if backend == "cupy":
        import cupy

        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return f"cuda:{dev.id} ({name.decode() if isinstance(name, bytes) else name})"
    return "cpu"
