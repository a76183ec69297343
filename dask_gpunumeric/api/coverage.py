"""``gnp.coverage()``: which NumPy functions run natively on gnp Arrays, which go through the dask.array
fallback, and which are missing."""
from __future__ import annotations

import types
from typing import Any

import dask.array as da
import numpy as np

from .elementwise import FUNCTIONS
from .interop import HANDLED_FUNCTIONS


def _public_functions(module: types.ModuleType) -> dict[str, Any]:
    return {
        name: obj for name in dir(module) if not name.startswith("_")
        and callable(obj := getattr(module, name)) and not isinstance(obj, type)
    }


def coverage() -> dict[str, str]:
    """Status of every public NumPy function (``numpy``, ``numpy.linalg``, ``numpy.fft``) on gnp Arrays:
    "native" (a gnp implementation), "fallback" (dask.array runs it on the same blocks, with a
    ``FallbackWarning``) or "missing" (neither: calling it on a gnp Array computes or fails)."""
    status: dict[str, str] = {}
    for prefix, module, dask_module in (("", np, da), ("linalg.", np.linalg, da.linalg), ("fft.", np.fft, da.fft)):
        for name, func in sorted(_public_functions(module).items()):
            if func in HANDLED_FUNCTIONS or (not prefix and name in FUNCTIONS):
                status[prefix + name] = "native"
            elif hasattr(dask_module, name):
                status[prefix + name] = "fallback"
            else:
                status[prefix + name] = "missing"
    return status
