"""NumPy interoperability: ``__array_ufunc__``/``__array_function__`` dispatch to gnp functions, the
fallback for the rest (dask.array, or NumPy on the host; a one-time warning naming the function)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import dask
import numpy as np

from ..backend import to_numpy
from . import guards as _guards
from .array import Array
from .creation import _is_dask_array, from_array, from_dask_array
from .elementwise import FUNCTIONS

HANDLED_FUNCTIONS: dict[Callable, Callable] = {}
# gnp's public namespaces by NumPy prefix ("", "linalg.", "fft."), set by the package (for coverage())
NAMESPACES: dict[str, Any] = {}
_WARNED: set[str] = set()

_UFUNC_REDUCE = {"add": "sum", "multiply": "prod", "minimum": "min", "maximum": "max",
                 "logical_and": "all", "logical_or": "any"}
_UFUNC_ACCUMULATE = {"add": "cumsum", "multiply": "cumprod"}


class FallbackWarning(UserWarning):
    """A NumPy function gnp has no native version of ran through dask.array, or on the host."""


def warn_fallback(name: str, how: str) -> None:
    """Warn, once per name, that ``name`` ran as ``how`` says, at the user's line."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    _guards.warn_at_user_site(f"dask_gpunumeric has no native {name}; {how}", FallbackWarning)


def register(numpy_func: Callable, gnp_func: Callable) -> None:
    """Route ``numpy_func(gnp_array, ...)`` to ``gnp_func``."""
    HANDLED_FUNCTIONS[numpy_func] = gnp_func


def _map(obj: Any, f: Callable[[Any], Any]) -> Any:
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_map(o, f) for o in obj)
    if isinstance(obj, tuple):  # a NamedTuple (NumPy's result types)
        return type(obj)(*(_map(o, f) for o in obj))
    if isinstance(obj, dict):
        return {k: _map(v, f) for k, v in obj.items()}
    return f(obj)


def _to_dask(obj: Any) -> Any:
    return obj.to_dask_array() if isinstance(obj, Array) else obj


def _arrays_in(obj: Any) -> list[Array]:
    found: list[Array] = []
    _map(obj, lambda o: found.append(o) if isinstance(o, Array) else None)
    return found


def dask_implements(func: Callable) -> bool:
    """Whether dask.array has its own lazy version of NumPy's ``func`` (a ufunc, or a function of the same
    name in the matching dask.array module); otherwise dask would compute and call NumPy itself."""
    import dask.array as da

    if isinstance(func, np.ufunc):
        return True
    module = {"numpy": da, "numpy.linalg": da.linalg, "numpy.fft": da.fft}.get(getattr(func, "__module__", None))
    return module is not None and callable(getattr(module, getattr(func, "__name__", ""), None))


def run_fallback(name: str, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Run NumPy's ``func`` without a native gnp version, with a ``FallbackWarning`` saying how, and give
    its array results back as gnp Arrays: lazily through dask.array on the same NumPy blocks where dask.array
    implements it, else (and on CuPy blocks) by computing the Array arguments, moving them to the host and
    calling NumPy."""
    arrays = _arrays_in((args, kwargs))
    backend = "cupy" if any(a.backend == "cupy" for a in arrays) else arrays[0].backend if arrays else None
    if dask_implements(func) and backend != "cupy":  # dask.array mixes NumPy constants into CuPy blocks
        warn_fallback(name, "it runs through dask.array on the same blocks (lazy and correct, but not fused, "
                            "and possibly slower); the result is a gnp Array.")
        result = func(*_map(args, _to_dask), **_map(kwargs, _to_dask))
    else:
        where = "the GPU" if backend == "cupy" else "NumPy blocks"
        warn_fallback(name, f"it computed its Array arguments, moved the data to the host and ran NumPy there "
                            f"(not lazy; one full copy); the result is wrapped back as a gnp Array on {where}.")
        values = iter(dask.compute(*arrays)) if arrays else iter(())
        computed = {id(a): to_numpy(next(values)) for a in arrays}
        host = _map((args, kwargs), lambda o: computed[id(o)] if isinstance(o, Array) else o)
        result = func(*host[0], **host[1])

    def wrap(value: Any) -> Any:
        if _is_dask_array(value):  # dask.array's meta may say NumPy for CuPy blocks: keep the inputs' backend
            return from_dask_array(value, backend=backend)
        if isinstance(value, (np.ndarray, np.generic)) or type(value).__module__.startswith("cupy"):
            return from_array(value, backend=backend)
        return value

    return _map(result, wrap)


def namespace_function(name: str) -> Callable:
    """``gnp.<name>`` for a NumPy function gnp has no native version of: NumPy's dispatch to ours when it
    has one, else the fallback (so that code with only the import changed runs). AttributeError when
    NumPy has no such overridable function."""
    func = getattr(np, name, None)
    if not (isinstance(func, np.ufunc) or hasattr(func, "_implementation")) or name.startswith("_"):
        raise AttributeError(f"module 'dask_gpunumeric' has no attribute {name!r}")

    @functools.wraps(func)
    def fallback(*args: Any, **kwargs: Any) -> Any:
        impl = HANDLED_FUNCTIONS.get(func)
        if impl is not None:
            return impl(*args, **kwargs)
        return run_fallback(f"numpy.{name}", func, args, kwargs)

    return fallback


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
