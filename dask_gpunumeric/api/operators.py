"""Operators and NumPy-style methods of ``Array``, each a one-line delegation to the gnp function."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import elementwise as _elementwise
from . import manipulation as _manipulation
from . import reductions as _reductions
from .array import Array
from ..kernels.backend import backend_of
from .creation import full_like

# operator -> elementwise function name
_BINARY_OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
_COMPARISONS = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                "ge": "greater_equal"}
_UNARY_OPERATORS = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}


# exact types that are always operands
_PLAIN_OPERANDS = frozenset({Array, int, float})


def _operand_ok(other: Any) -> bool:
    """Whether ``other`` can be an operand; if not, the operator returns NotImplemented (as NumPy's do, also
    for objects that opt out of NumPy's operators with ``__array_ufunc__ = None``)."""
    if type(other) in _PLAIN_OPERANDS:  # the usual operands, none of which opts out: at once
        return True
    if getattr(type(other), "__array_ufunc__", False) is None:
        return False
    return isinstance(other, (Array, bool, int, float, complex, np.generic, np.ndarray, list, tuple)) or \
        hasattr(other, "__array__") or backend_of(other) == "cupy"


def _binary(func: str) -> tuple:
    def forward(self: Array, other: Any) -> Any:
        if not _operand_ok(other):
            return NotImplemented
        return _elementwise.elementwise(func, self, other)

    def reflected(self: Array, other: Any) -> Any:
        if not _operand_ok(other):
            return NotImplemented
        return _elementwise.elementwise(func, other, self)

    def inplace(self: Array, other: Any) -> Any:
        # Arrays are immutable: ``x += y`` rebinds x to a new Array, with NumPy's in-place casting rule.
        if not _operand_ok(other):
            return NotImplemented
        out = _elementwise.elementwise(func, self, other)
        if out.dtype != self.dtype:
            if not np.can_cast(out.dtype, self.dtype, casting="same_kind"):
                raise TypeError(
                    f"Cannot cast ufunc '{func}' output from {out.dtype} to {self.dtype} with casting rule 'same_kind'"
                )
            out = out.astype(self.dtype)
        return out

    return forward, reflected, inplace


for _op, _func in _BINARY_OPERATORS.items():
    _f, _r, _i = _binary(_func)
    setattr(Array, f"__{_op}__", _f)
    setattr(Array, f"__r{_op}__", _r)
    setattr(Array, f"__i{_op}__", _i)
def _equality(func: str) -> Any:
    forward = _binary(func)[0]

    def compare(self: Array, other: Any) -> Any:
        out = forward(self, other)
        if out is NotImplemented and getattr(type(other), "__array_ufunc__", False) is not None:
            # as NumPy: == and != with an object that is no array operand (None, a str, ...) compare unequal
            return full_like(self, func == "not_equal", dtype=np.bool_)
        return out

    return compare


for _op, _func in _COMPARISONS.items():
    setattr(Array, f"__{_op}__", _equality(_func) if _op in ("eq", "ne") else _binary(_func)[0])
for _op, _func in _UNARY_OPERATORS.items():
    setattr(Array, f"__{_op}__", (lambda f: lambda self: _elementwise.elementwise(f, self))(_func))
def _matmul(self: Array, other: Any) -> Any:
    from .contraction import matmul

    return matmul(self, other) if _operand_ok(other) else NotImplemented


def _rmatmul(self: Array, other: Any) -> Any:
    from .contraction import matmul

    return matmul(other, self) if _operand_ok(other) else NotImplemented


Array.__matmul__ = _matmul
Array.__rmatmul__ = _rmatmul
Array.__hash__ = None  # type: ignore[assignment]  # __eq__ is elementwise


def _method(func: Any) -> Any:
    def method(self: Array, *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    method.__name__ = func.__name__
    method.__doc__ = func.__doc__
    return method


for _name in ("sum", "prod", "mean", "var", "std", "min", "max", "all", "any", "argmin", "argmax", "cumsum",
              "cumprod"):
    setattr(Array, _name, _method(getattr(_reductions, _name)))
for _name in ("squeeze", "swapaxes", "rechunk"):
    setattr(Array, _name, _method(getattr(_manipulation, _name)))
for _name in ("round", "clip", "astype"):
    setattr(Array, _name, _method(getattr(_elementwise, _name)))


def _transpose_method(self: Array, *axes: Any) -> Array:
    """Axes reversed, or reordered (``x.transpose(1, 0)`` or ``x.transpose((1, 0))``)."""
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0]) if axes[0] is not None else ()
    return _manipulation.transpose(self, axes or None)


def _reshape_method(self: Array, *shape: Any, **kwargs: Any) -> Array:
    """The array with a new shape (``x.reshape(2, 3)`` or ``x.reshape((2, 3))``)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return _manipulation.reshape(self, shape, **kwargs)


def _copy(self: Array) -> Array:
    """The same Array (Arrays are immutable, so no data need be copied)."""
    return Array(self.expr)


Array.transpose = _transpose_method
Array.reshape = _reshape_method
Array.copy = _copy
Array.flatten = Array.ravel = _method(_manipulation.ravel)
Array.T = property(lambda self: _manipulation.transpose(self))
Array.mT = property(lambda self: _manipulation.matrix_transpose(self))
Array.real = property(lambda self: _elementwise.real(self))
Array.imag = property(lambda self: _elementwise.imag(self))
Array.conj = Array.conjugate = _method(_elementwise.conj)


def _explain(self: Array, *, source: bool = False) -> str:
    """The optimized plan, as printable text (see ``gnp.explain``)."""
    from .explain import explain

    return explain(self, source=source)


Array.explain = _explain


def _map_blocks_method(self: Array, func: Any, *args: Any, **kwargs: Any) -> Array:
    """``func`` on every block of this Array (and of ``args``): ``gnp.map_blocks(func, self, *args, ...)``."""
    from .blockwise import map_blocks

    return map_blocks(func, self, *args, **kwargs)


Array.map_blocks = _map_blocks_method
