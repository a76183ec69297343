"""``gnp.coverage()``: which NumPy functions run natively on gnp Arrays, which through the fallback, and
which are missing (what is counted: docs/namespace.md)."""
from __future__ import annotations

import types
from typing import Any

import numpy as np

from .elementwise import FUNCTIONS
from .interop import HANDLED_FUNCTIONS, NAMESPACES


def _public_functions(module: types.ModuleType) -> dict[str, Any]:
    return {
        name: obj for name in dir(module) if not name.startswith("_")
        and callable(obj := getattr(module, name)) and not isinstance(obj, type)
    }


def _dispatches(func: Any) -> bool:
    """Whether NumPy hands ``func(gnp_array, ...)`` to gnp (``__array_function__``/``__array_ufunc__``)."""
    return isinstance(func, np.ufunc) or hasattr(func, "_implementation")


def coverage() -> dict[str, str]:
    """Status of every public function of ``numpy``, ``numpy.linalg`` and ``numpy.fft`` (classes excluded):

    - "native": gnp has its own version (``gnp.<name>``, or NumPy's dispatch routes ``numpy.<name>`` on gnp
      Arrays to one);
    - "fallback": no native version, but ``numpy.<name>(gnp_array)`` (and ``gnp.<name>`` at the top level)
      runs through dask.array on the same blocks, or computes on the host and wraps the result back, with a
      ``FallbackWarning``;
    - "missing": neither (NumPy does not dispatch it: called on a gnp Array it converts it, or fails).
    """
    status: dict[str, str] = {}
    for prefix, module in (("", np), ("linalg.", np.linalg), ("fft.", np.fft)):
        ours = NAMESPACES[prefix]
        for name, func in sorted(_public_functions(module).items()):
            if func in HANDLED_FUNCTIONS or (not prefix and name in FUNCTIONS) or name in vars(ours):
                status[prefix + name] = "native"
            elif _dispatches(func):
                status[prefix + name] = "fallback"
            else:
                status[prefix + name] = "missing"
    return status
