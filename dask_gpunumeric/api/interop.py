"""NumPy interoperability: ``__array_ufunc__``/``__array_function__`` dispatch to gnp functions, the
dask.array fallback for the rest (with a one-time warning naming the function)."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .array import Array
from .creation import _is_dask_array, from_dask_array
from .elementwise import FUNCTIONS

HANDLED_FUNCTIONS: dict[Callable, Callable] = {}
_WARNED: set[str] = set()

_UFUNC_REDUCE = {"add": "sum", "multiply": "prod", "minimum": "min", "maximum": "max",
                 "logical_and": "all", "logical_or": "any"}
_UFUNC_ACCUMULATE = {"add": "cumsum", "multiply": "cumprod"}


class FallbackWarning(UserWarning):
    """A NumPy function ran through dask.array on gnp blocks because gnp has no native version yet."""


def warn_fallback(name: str) -> None:
    """Warn, once per name, that ``name`` runs through the dask.array fallback."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    warnings.warn(
        f"dask_gpunumeric has no native {name}; it runs through dask.array on the same blocks "
        "(correct, but not fused and possibly slower).",
        FallbackWarning,
        stacklevel=5,  # the caller of the NumPy function (through Array.__array_function__/__array_ufunc__)
    )


def register(numpy_func: Callable, gnp_func: Callable) -> None:
    """Route ``numpy_func(gnp_array, ...)`` to ``gnp_func``."""
    HANDLED_FUNCTIONS[numpy_func] = gnp_func


def _map(obj: Any, f: Callable[[Any], Any]) -> Any:
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(o, f) for o in obj)
    if isinstance(obj, dict):
        return {k: _map(v, f) for k, v in obj.items()}
    return f(obj)


def _to_dask(obj: Any) -> Any:
    return obj.to_dask_array() if isinstance(obj, Array) else obj


def _from_dask(obj: Any) -> Any:
    return from_dask_array(obj) if _is_dask_array(obj) else obj


def run_fallback(name: str, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` on dask.arrays over the same blocks and wrap the results back as gnp Arrays."""
    warn_fallback(name)
    return _map(func(*_map(args, _to_dask), **_map(kwargs, _to_dask)), _from_dask)


def array_function(func: Callable, types: Any, args: tuple, kwargs: dict) -> Any:
    """``__array_function__``: our implementation of ``func`` if there is one, else the fallback."""
    if not all(issubclass(t, (Array, np.ndarray)) or t.__module__.startswith("cupy") for t in types):
        return NotImplemented
    impl = HANDLED_FUNCTIONS.get(func)
    if impl is not None:
        return impl(*args, **kwargs)
    return run_fallback(f"numpy.{func.__name__}", func, args, kwargs)


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``__array_ufunc__``: NumPy ufuncs (and their reduce/accumulate) on gnp Arrays."""
    gnp = Array._namespace
    name = ufunc.__name__
    if method == "__call__" and name == "matmul":
        return gnp.matmul(*inputs, **kwargs)
    if method == "__call__" and name in FUNCTIONS:  # out=, where=, dtype=, casting=: as the gnp function takes them
        return FUNCTIONS[name](*inputs, **kwargs)
    if method == "reduce" and name in _UFUNC_REDUCE and set(kwargs) <= {"axis", "dtype", "out", "keepdims", "initial",
                                                                        "where"}:
        (x,) = inputs
        if kwargs.get("dtype") is None or name not in ("add", "multiply"):
            kwargs.pop("dtype", None)
        return getattr(gnp, _UFUNC_REDUCE[name])(x, **{"axis": 0, **kwargs})
    if method == "accumulate" and name in _UFUNC_ACCUMULATE and set(kwargs) <= {"axis", "dtype", "out"}:
        (x,) = inputs
        return getattr(gnp, _UFUNC_ACCUMULATE[name])(x, **{"axis": 0, **kwargs})
    return run_fallback(f"numpy.{name}.{method}" if method != "__call__" else f"numpy.{name}",
                        getattr(ufunc, method) if method != "__call__" else ufunc, inputs, kwargs)
