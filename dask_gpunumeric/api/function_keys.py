"""Keys of Python functions by what they compute: their code, the values they close over, their defaults and the
globals they name, followed into the functions those reach. Two functions with equal keys trace to the same
expressions, so a loop outside ``accelerate`` whose body is a function made anew on every call (a lambda) can
reuse the plan its first call traced. Only values known to stay what they are enter a key; anything else (a list,
a dict, an instance of an ordinary class, a NumPy array, an Array) makes the function keyless: traced again."""
from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Hashable
from typing import Any

import numpy as np

_VALUES = frozenset({int, float, complex, bool, str, bytes, type(None), np.dtype})
_LIBRARIES = frozenset({"builtins", "math", "cmath", "operator", "numpy", "cupy", "dask_gpunumeric"})
"""Packages whose modules, classes and functions are taken as they are (by identity): library code, not user
state. A user's module or class is not (its attributes may be set between calls)."""
_MAX_DEPTH = 12  # functions reaching functions: beyond this, keyless


def function_key(func: Any) -> Hashable | None:
    """A key of ``func`` (see the module docstring), or None where it has none."""
    try:
        return _key(func, {}, 0)
    except _Keyless:
        return None


class _Keyless(Exception):
    pass


def _key(value: Any, seen: dict[int, int], depth: int) -> Hashable:
    kind = type(value)
    if kind in _VALUES or isinstance(value, np.generic):
        return kind, value
    if kind is tuple or kind is frozenset:
        return kind, tuple(_key(v, seen, depth) for v in value)
    if _library(value):
        return "object", id(value), value  # (kept in the key: the id is not reused while the key lives)
    if depth > _MAX_DEPTH:
        raise _Keyless
    if kind is types.FunctionType:
        return _function_key(value, seen, depth + 1)
    if kind is types.MethodType:
        return "method", _key(value.__func__, seen, depth + 1), _key(value.__self__, seen, depth + 1)
    if kind is functools.partial:
        return ("partial", _key(value.func, seen, depth + 1), _key(value.args, seen, depth + 1),
                tuple(sorted((k, _key(v, seen, depth + 1)) for k, v in value.keywords.items())))
    if dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen:
        return kind, tuple(_key(getattr(value, f.name), seen, depth + 1) for f in dataclasses.fields(value))
    raise _Keyless


def _library(value: Any) -> bool:
    """Whether ``value`` is a module, class, ufunc or function (no closure) of a library (``_LIBRARIES``), or a
    builtin function bound to none of a user's objects."""
    if isinstance(value, types.ModuleType):
        return value.__name__.partition(".")[0] in _LIBRARIES
    if isinstance(value, types.BuiltinFunctionType):
        owner = value.__self__
        return owner is None or isinstance(owner, types.ModuleType) and _library(owner)
    if isinstance(value, types.FunctionType) and value.__closure__:
        return False  # (a closure made by a library, such as an unrolled loop's steps: by what it closes over)
    if isinstance(value, (type, np.ufunc, types.FunctionType)) or _dispatcher(value):
        return (getattr(value, "__module__", None) or "").partition(".")[0] in _LIBRARIES
    return False


def _dispatcher(value: Any) -> bool:
    """A library's function wrapped in an object of its own (NumPy's ``np.sum``, a ``_ArrayFunctionDispatcher``):
    callable, its class the library's, and no array."""
    kind = type(value)
    return (kind.__module__.partition(".")[0] in _LIBRARIES - {"builtins"} and callable(value)
            and not hasattr(value, "__array__") and not issubclass(kind, np.ndarray))


def _function_key(func: types.FunctionType, seen: dict[int, int], depth: int) -> Hashable:
    """A function's code, defaults, closure and the globals its code (and the code nested in it) names; a function
    met again (recursion) by its place in the walk."""
    if id(func) in seen:
        return "seen", seen[id(func)]
    seen[id(func)] = len(seen)
    code = func.__code__
    cells = tuple(_key(cell.cell_contents, seen, depth) if _filled(cell) else "empty" for cell in func.__closure__ or ())
    names = _global_names(code)
    scope = func.__globals__
    named = tuple((name, _key(scope[name], seen, depth)) for name in sorted(names) if name in scope)
    return ("function", code, _key(func.__defaults__, seen, depth),
            _key(tuple(sorted((func.__kwdefaults__ or {}).items())), seen, depth), cells, named)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _global_names(code: types.CodeType) -> frozenset[str]:
    """The names a code object and the code objects nested in it look up (globals, and attributes: a superset)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return frozenset(names)
