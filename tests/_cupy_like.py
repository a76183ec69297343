"""A stand-in for CuPy on the CPU, as far as code that mixes array kinds can tell: ``CupyLikeArray`` is NumPy
memory that, like a CuPy array, refuses NumPy arrays as operands of its functions and ufuncs (Python and
NumPy scalars are fine; index arrays of ``take`` and ``[]`` may be NumPy, which CuPy copies over), and whose
indexing and reductions give 0-d arrays where NumPy gives scalars. dask.array is told about it as about CuPy
(its ``register_cupy`` dispatches). The module itself is the array namespace: ``asarray``.

It checks on a machine without a GPU that a dask.array pipeline never hands a block a NumPy array, the mistake
that only shows on CuPy blocks (xarray's ``where``/``fillna`` on dask.arrays of CuPy blocks, pydata/xarray#7721).
It does not model CuPy's refusal of implicit conversion to NumPy (``np.asarray`` of a block works here)."""
from __future__ import annotations

from typing import Any

import numpy as np
from dask.array.backends import _nannumel, _numel_arraylike
from dask.array.dispatch import empty_lookup, nannumel_lookup, numel_lookup


class CupyLikeArray(np.ndarray):
    """NumPy memory with CuPy's rules for operands (see the module)."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, out: tuple | None = None,
                        **kwargs: Any) -> Any:
        refuse_numpy(ufunc.__name__, inputs + (out or ()))
        if out is not None:
            kwargs["out"] = plain(out)
        return wrap(getattr(ufunc, method)(*plain(inputs), **kwargs))

    def __array_function__(self, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        refuse_numpy(func.__name__, args[:1] if func is np.take else (args, tuple(kwargs.values())))
        return wrap(func(*plain(args), **{name: plain(value) for name, value in kwargs.items()}))

    def __getitem__(self, key: Any) -> Any:
        return wrap(super().__getitem__(key))


def refuse_numpy(what: str, operands: Any) -> None:
    """CuPy's TypeError for a NumPy array among ``operands`` (nested in tuples and lists)."""
    for operand in operands:
        if isinstance(operand, (list, tuple)):
            refuse_numpy(what, operand)
        elif isinstance(operand, np.ndarray) and not isinstance(operand, CupyLikeArray):
            raise TypeError(f"Unsupported type {type(operand)} (a {operand.shape} {operand.dtype} operand of {what})")


def plain(value: Any) -> Any:
    """``value`` with every CupyLikeArray in it (nested in tuples and lists) seen as a NumPy array."""
    if isinstance(value, CupyLikeArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def wrap(value: Any) -> Any:
    """NumPy's result as CuPy gives it: arrays (and scalars, as 0-d arrays) are CupyLikeArrays."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        return value.view(CupyLikeArray)
    if isinstance(value, (list, tuple)):
        return type(value)(wrap(v) for v in value)
    return value


def asarray(data: Any, dtype: Any = None) -> CupyLikeArray:
    """A CupyLikeArray holding a copy of ``data`` (``cupy.asarray`` of host data)."""
    return np.array(plain(data), dtype=dtype).view(CupyLikeArray)


def empty(shape: Any, dtype: Any = float, **kwargs: Any) -> CupyLikeArray:
    """An uninitialized CupyLikeArray (``cupy.empty``)."""
    return np.empty(shape, dtype, **kwargs).view(CupyLikeArray)


numel_lookup.register(CupyLikeArray, _numel_arraylike)
nannumel_lookup.register(CupyLikeArray, _nannumel)
empty_lookup.register(CupyLikeArray, empty)
