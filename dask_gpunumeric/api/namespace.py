"""The array API namespace's inspection and dtype functions (2024.12): ``__array_namespace_info__``,
``isdtype``, ``result_type``, ``can_cast``, ``finfo``, ``iinfo``. They take gnp Arrays by their dtype,
never by their data (NumPy's versions would compute an Array to look at it)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array
from ..backend import gpu_available


def _dtype_of(x: Any) -> Any:
    return x.dtype if isinstance(x, Array) else x


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype NumPy's promotion rules give these arrays (by dtype) and dtypes (Python scalars weak)."""
    return np.result_type(*[_dtype_of(a) for a in arrays_and_dtypes])


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """Whether ``from_`` (an Array or a dtype) can be cast to ``to`` under ``casting`` (default: safe)."""
    return bool(np.can_cast(_dtype_of(from_), to, casting=casting))


class MachineLimits:
    """NumPy's ``finfo``/``iinfo`` with its numbers as Python ``float``/``int`` (as the array API asks)."""

    def __init__(self, info: Any) -> None:
        self._info = info

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._info, name)
        return value.item() if isinstance(value, np.generic) else value

    def __repr__(self) -> str:
        return repr(self._info)


def finfo(type: Any, /) -> MachineLimits:  # noqa: A002
    """Machine limits of a floating dtype (or of an Array's dtype): ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal``, ``dtype`` and NumPy's other fields, as Python numbers."""
    return MachineLimits(np.finfo(_dtype_of(type)))


def iinfo(type: Any, /) -> MachineLimits:  # noqa: A002
    """Machine limits of an integer dtype (or of an Array's dtype): ``bits``, ``max``, ``min``, ``dtype``."""
    return MachineLimits(np.iinfo(_dtype_of(type)))


def supported_dtype(dtype: Any, what: str) -> np.dtype:
    """``dtype`` as a NumPy dtype, or a TypeError saying gnp Arrays hold only booleans and numbers."""
    dt = np.dtype(dtype)
    if dt.kind not in "biufc":
        raise TypeError(f"{what}: dtype {dt} ({dt.kind!r} kind) is not supported: gnp Arrays hold booleans and "
                        "numbers (bool, int*, uint*, float*, complex*); keep strings, objects and dates in NumPy "
                        "arrays")
    return dt


def warn_integer_division_by_zero(op: str, divisor: Any, dtype: np.dtype) -> None:
    """NumPy's RuntimeWarning (or what ``np.seterr``/``np.errstate`` asks) for an integer ``//`` or ``%``
    by a scalar zero, when the expression is built (a zero inside a divisor Array is not looked at)."""
    if dtype.kind not in "iu" or isinstance(divisor, Array) or not np.isscalar(divisor) or divisor != 0:
        return
    mode = np.geterr()["divide"]
    message = f"divide by zero encountered in {op}"
    if mode == "raise":
        raise FloatingPointError(message)
    if mode in ("warn", "print", "log"):
        from .guards import warn_at_user_site

        warn_at_user_site(message, RuntimeWarning)


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind`` ("bool", "signed integer", "real floating", ..., a dtype, or a tuple)."""
    return bool(np.isdtype(np.dtype(dtype), kind))


_DTYPES = {
    "bool": np.dtype(bool), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64), "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64), "complex64": np.dtype(np.complex64), "complex128": np.dtype(np.complex128),
}


class Info:
    """What ``__array_namespace_info__()`` returns: the namespace's capabilities, devices and dtypes."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean indexing and data-dependent shapes are supported (they compute what decides the shape)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> str:
        """"gpu" when CuPy sees a GPU (blocks are CuPy arrays by default), else "cpu"."""
        return "gpu" if gpu_available() else "cpu"

    def devices(self) -> list[str]:
        """The devices blocks can live on."""
        return ["cpu", "gpu"] if gpu_available() else ["cpu"]

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """Default dtypes of new arrays: float64, complex128, int64 (and int64 for indexing)."""
        return {"real floating": np.dtype(np.float64), "complex floating": np.dtype(np.complex128),
                "integral": np.dtype(np.int64), "indexing": np.dtype(np.int64)}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        """The supported dtypes, optionally only those of ``kind`` (as in ``isdtype``)."""
        return {name: dt for name, dt in _DTYPES.items() if kind is None or np.isdtype(dt, kind)}


def __array_namespace_info__() -> Info:
    """The array API inspection object."""
    return Info()
