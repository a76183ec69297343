"""The three switches of cuNumeric semantics: allowscalar, allowpromotion, allowfetch.

Each is off by default. It is turned on by a context manager or a decorator (``with gnp.allowscalar():``,
``@gnp.allowscalar``), which reaches into code of other libraries called inside because the state lives in
a ``contextvars.ContextVar``, or globally through Dask config (``gpunumeric.allow-scalar`` etc.).
"""
from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .. import config

F = TypeVar("F", bound=Callable[..., Any])


class ScalarIndexingError(IndexError):
    """Indexing selected a single element of an Array (slow on a GPU) outside ``gnp.allowscalar``."""


class PromotionError(TypeError):
    """An operation would implicitly widen an operand's dtype outside ``gnp.allowpromotion``."""


class FetchError(TypeError):
    """A lazy device value was implicitly turned into a Python object outside ``gnp.allowfetch``."""


class _Switch:
    """A switch usable as ``with switch():``, as ``@switch`` and as ``@switch()``."""

    def __init__(self, name: str, config_key: str) -> None:
        self.__name__ = name
        self._config_key = config_key
        self._var: contextvars.ContextVar[bool | None] = contextvars.ContextVar(name, default=None)

    def enabled(self) -> bool:
        """True when allowed here: inside the context manager or decorator, or by Dask config."""
        value = self._var.get()
        return bool(config.get(self._config_key)) if value is None else value

    def __call__(self, func: F | None = None, *, enabled: bool = True) -> Any:
        if func is None:
            return _SwitchContext(self._var, enabled)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _SwitchContext(self._var, enabled):
                return func(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"<gnp.{self.__name__}: {'on' if self.enabled() else 'off'}>"


class _SwitchContext:
    def __init__(self, var: contextvars.ContextVar[bool | None], enabled: bool) -> None:
        self._var = var
        self._enabled = enabled
        self._tokens: list[contextvars.Token[bool | None]] = []

    def __enter__(self) -> None:
        self._tokens.append(self._var.set(self._enabled))

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._tokens.pop())

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _SwitchContext(self._var, self._enabled):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


allowscalar = _Switch("allowscalar", "allow-scalar")
allowscalar.__doc__ = "Allow indexing single elements of Arrays (and iterating over them): ``with gnp.allowscalar():``."
allowpromotion = _Switch("allowpromotion", "allow-promotion")
allowpromotion.__doc__ = "Allow operations that implicitly widen an operand's dtype: ``with gnp.allowpromotion():``."
allowfetch = _Switch("allowfetch", "allow-fetch")
allowfetch.__doc__ = "Allow implicit conversion of lazy device values to Python numbers: ``with gnp.allowfetch():``."


def check_scalar_index(shape: tuple[int, ...], index: tuple[Any, ...], action: str) -> None:
    """Raise ScalarIndexingError when ``index`` selects one element of an array of ``shape``."""
    if allowscalar.enabled():
        return
    ints = [i for i in index if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))]
    if shape and len(ints) == len(shape) and len(index) == len(ints):
        raise ScalarIndexingError(
            f"{action} a single element (index {tuple(int(i) for i in index)}) of an Array of shape {shape} "
            "moves one value between host and device per call; use slices or whole-array operations, "
            "or allow it with `with gnp.allowscalar():` (or the @gnp.allowscalar decorator)."
        )


def check_iteration(shape: tuple[int, ...]) -> None:
    """Raise ScalarIndexingError for iteration over an Array outside allowscalar."""
    if not allowscalar.enabled():
        raise ScalarIndexingError(
            f"iterating over an Array of shape {shape} indexes it one element (or row) at a time; "
            "use whole-array operations, or allow it with `with gnp.allowscalar():`."
        )


def _precision(dtype: np.dtype) -> int:
    """Bytes per real number (a complex number holds two): float32 -> complex64 is no widening."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def widened(operand_dtypes: list[np.dtype], common: np.dtype) -> list[np.dtype]:
    """The (non-boolean) operand dtypes that ``common`` is wider than."""
    return [d for d in operand_dtypes if d.kind != "b" and _precision(common) > _precision(d)]


def check_promotion(op: str, operand_dtypes: list[np.dtype], common: np.dtype) -> None:
    """Raise PromotionError when ``common`` is wider than one of the (non-boolean) array operands' dtypes."""
    widened_dtypes = widened(operand_dtypes, common)
    if widened_dtypes and not allowpromotion.enabled():
        names = ", ".join(str(d) for d in operand_dtypes)
        raise PromotionError(
            f"{op}: operands of dtypes ({names}) are implicitly promoted to {common}, which widens "
            f"{', '.join(str(d) for d in widened_dtypes)}; convert explicitly with .astype({str(common)!r}) "
            "(or to the narrower dtype), or allow it with `with gnp.allowpromotion():`."
        )


def check_fetch(what: str) -> None:
    """Raise FetchError for an implicit conversion of a lazy value outside allowfetch."""
    if not allowfetch.enabled():
        raise FetchError(
            f"{what} would wait for the computation and copy its result from the device; "
            "use gnp.fetch(x) (or x.item()) to fetch explicitly, or allow it with `with gnp.allowfetch():`."
        )
