"""Elementwise functions: validation, NumPy 2 / NEP 50 dtype rules, the promotion guard, broadcasting and
chunk alignment, all building one ``Elemwise`` expression.

Every array API (2024.12) elementwise function is here under its standard name, plus the NumPy names
users reach for. Each maps to the function of the same behaviour in NumPy and CuPy (``BLOCK_FUNCTION``).
"""
from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from . import guards as _guards
from . import special_values as _special_values
from .array import Array, ArrayLike
from .creation import SCALAR_OPERANDS, as_operand
from ..expr.nodes import ArrayExpr, Elemwise
from .manipulation import rechunk_expr
from .namespace import supported_dtype, warn_integer_division_by_zero

# standard name -> name of the function in NumPy and CuPy (both have these classic names)
_UNARY = {
    "abs": "absolute", "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh",
    "atan": "arctan", "atanh": "arctanh", "bitwise_invert": "invert", "ceil": "ceil", "conj": "conjugate",
    "cos": "cos", "cosh": "cosh", "exp": "exp", "expm1": "expm1", "floor": "floor", "imag": "imag",
    "isfinite": "isfinite", "isinf": "isinf", "isnan": "isnan", "log": "log", "log1p": "log1p",
    "log2": "log2", "log10": "log10", "logical_not": "logical_not", "negative": "negative",
    "positive": "positive", "real": "real", "reciprocal": "reciprocal", "sign": "sign", "signbit": "signbit",
    "sin": "sin", "sinh": "sinh", "square": "square", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh",
    "trunc": "trunc",
    # NumPy names beyond the standard
    "absolute": "absolute", "arccos": "arccos", "arccosh": "arccosh", "arcsin": "arcsin",
    "arcsinh": "arcsinh", "arctan": "arctan", "arctanh": "arctanh", "invert": "invert",
    "conjugate": "conjugate", "exp2": "exp2", "cbrt": "cbrt", "fabs": "fabs", "rint": "rint",
    "degrees": "degrees", "radians": "radians", "deg2rad": "deg2rad", "rad2deg": "rad2deg",
    "sinc": "sinc", "fix": "fix",
}
_BINARY = {
    "add": "add", "atan2": "arctan2", "bitwise_and": "bitwise_and", "bitwise_left_shift": "left_shift",
    "bitwise_or": "bitwise_or", "bitwise_right_shift": "right_shift", "bitwise_xor": "bitwise_xor",
    "copysign": "copysign", "divide": "true_divide", "equal": "equal", "floor_divide": "floor_divide",
    "greater": "greater", "greater_equal": "greater_equal", "hypot": "hypot", "less": "less",
    "less_equal": "less_equal", "logaddexp": "logaddexp", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "maximum": "maximum", "minimum": "minimum",
    "multiply": "multiply", "nextafter": "nextafter", "not_equal": "not_equal", "pow": "power",
    "remainder": "remainder", "subtract": "subtract",
    # NumPy names beyond the standard
    "arctan2": "arctan2", "left_shift": "left_shift", "right_shift": "right_shift",
    "true_divide": "true_divide", "power": "power", "mod": "remainder", "fmod": "fmod", "fmax": "fmax",
    "fmin": "fmin", "float_power": "float_power", "logaddexp2": "logaddexp2", "heaviside": "heaviside",
    "ldexp": "ldexp", "gcd": "gcd", "lcm": "lcm",
}
BLOCK_FUNCTION = {**_UNARY, **_BINARY, "where": "where", "clip": "clip", "round": "round", "astype": "astype"}

# the public functions (``from ._elementwise import *`` in the package): the helpers below stay internal
__all__ = [*_UNARY, *_BINARY, "where", "clip", "round", "astype"]


def _dtypes(op: str, operands: list[Any], kwargs: dict, skip: int) -> tuple[np.dtype, np.dtype | None]:
    """The dtype NumPy gives ``op`` on operands of these dtypes (NEP 50: Python scalars are weak), and the
    common dtype of the operands the promotion guard looks at (after ``skip`` leading ones) where it is
    wider than one of their arrays' dtypes (else None)."""
    key = tuple([a.dtype if isinstance(a, ArrayExpr) else (type(a), a) for a in operands])
    args = (op, key, tuple(sorted(kwargs.items())) if kwargs else (), skip)
    try:
        return _operation_dtypes(*args)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _operation_dtypes.__wrapped__(*args)


# ops whose trailing operands keep their own dtype (ldexp's integer exponent): how many leading ones are promoted
_PROMOTED_OPERANDS = {"ldexp": 1}


@functools.lru_cache(maxsize=4096)
def _operation_dtypes(op: str, operands: tuple, kwargs: tuple, skip: int) -> tuple[np.dtype, np.dtype | None]:
    def probe(o: Any) -> Any:
        return np.empty((0,), dtype=o) if isinstance(o, np.dtype) else o[1]

    func = getattr(np, BLOCK_FUNCTION[op])
    with np.errstate(all="ignore"):
        out = np.asarray(func(*[probe(o) for o in operands], **dict(kwargs))).dtype
    promoted = operands[skip:][: _PROMOTED_OPERANDS.get(op)]
    arrays = [o for o in promoted if isinstance(o, np.dtype)]
    if len(promoted) < 2 or not arrays:
        return out, None
    common = np.result_type(*[probe(o) for o in promoted])
    return out, common if _guards.widened(arrays, common) else None


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of operand shapes, with NumPy's error for shapes that don't broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            f"{op}: operands could not be broadcast together with shapes "
            + " ".join(str(s) for s in shapes)
        ) from None


def align_chunks(arrays: list[ArrayExpr], shape: tuple[int, ...]) -> dict[str, ArrayExpr]:
    """Rechunk arrays so that every non-broadcast axis shares the same chunks: where operands disagree,
    the chunking with the fewest blocks (the first such operand's on a tie). Unlike the common refinement
    of all chunkings, this keeps the block count of repeated misaligned operations (stencils written with
    shifted slices) from growing step after step."""
    if len(arrays) == 1:  # nothing to agree with
        return {arrays[0]._name: arrays[0]}
    ndim = len(shape)
    target: list[tuple[int, ...] | None] = []
    for d in range(ndim):
        dims = [a.chunks[d - ndim + a.ndim] for a in arrays
                if d - ndim + a.ndim >= 0 and a.shape[d - ndim + a.ndim] == shape[d]]
        target.append(min(dims, key=len) if dims else None)
    out = {}
    for a in arrays:
        lead = ndim - a.ndim
        want = tuple(
            target[lead + d] if a.shape[d] == shape[lead + d] and target[lead + d] is not None
            else (1,) if a.shape[d] == 1  # a broadcast axis is one block (not, say, chunks (0, 1))
            else a.chunks[d]
            for d in range(a.ndim)
        )
        out[a._name] = a if want == a.chunks else rechunk_expr(a, want)
    return out


# operands that as_operand keeps as they are (no conversion to an array on some backend)
_KEPT_OPERANDS = (Array, ArrayExpr, *SCALAR_OPERANDS)


def elementwise(op: str, *args: Any, dtype: Any = None, skip_promotion: int = 0, **kwargs: Any) -> Array:
    """Build the lazy elementwise application of ``op`` (a key of ``BLOCK_FUNCTION``) to the operands.

    ``skip_promotion`` leading operands (``where``'s condition) are left out of the promotion guard.
    """
    # where array-likes are converted: to CuPy if an Array operand is on CuPy (asked only when there are
    # array-likes, as a new node's backend is otherwise not needed until its graph is made)
    backend = None
    if not all(isinstance(a, _KEPT_OPERANDS) for a in args):
        backend = "cupy" if any(isinstance(a, Array) and a.backend == "cupy" for a in args) else None
    operands = [as_operand(a, backend) for a in args]
    arrays = [a for a in operands if isinstance(a, ArrayExpr)]
    if not arrays:
        operands[0] = as_operand(np.asarray(operands[0]), backend, force_array=True)
        arrays = [operands[0]]
    ufunc_dtype = dtype is not None and isinstance(getattr(np, BLOCK_FUNCTION[op]), np.ufunc)
    if ufunc_dtype:  # a ufunc's dtype= (numpy.add(x, y, dtype=...)): the loop's dtype, checked by NumPy here
        kwargs = {**kwargs, "dtype": np.dtype(dtype)}
    if dtype is not None and not ufunc_dtype:
        out_dtype, common = np.dtype(dtype), None
    else:
        out_dtype, common = _dtypes(op, operands, kwargs, skip_promotion)
    if dtype is None and common is not None:
        promoted = operands[skip_promotion:][: _PROMOTED_OPERANDS.get(op)]
        _guards.check_promotion(op, [a.dtype for a in promoted if isinstance(a, ArrayExpr)], common,
                                [a for a in promoted if not isinstance(a, ArrayExpr)])
    if len(arrays) > 1:
        shape = broadcast_shape(op, [a.shape for a in arrays])
        aligned = align_chunks(arrays, shape)
        operands = [aligned[a._name] if isinstance(a, ArrayExpr) else a for a in operands]
    func = BLOCK_FUNCTION[op]
    if func in ("floor_divide", "remainder", "fmod"):
        warn_integer_division_by_zero(func, operands[1], out_dtype)
    if func == "power" and type(operands[1]) is int and operands[1] == 2 and out_dtype.kind in "iuf":
        # x ** 2 is x * x, bit for bit (NumPy takes the same shortcut); kernels skip a pow() call
        func, operands = "square", operands[:1]
    elif func == "true_divide" and type(operands[0]) in (int, float) and operands[0] == 1 and out_dtype.kind == "f" \
            and isinstance(operands[1], ArrayExpr) and operands[1].dtype == out_dtype:
        # 1 / x is NumPy's reciprocal of a float x, bit for bit (both round 1/x once); kernels take the
        # reciprocal's path instead of a division by a value they do not know
        func, operands = "reciprocal", operands[1:]
    result = Array(Elemwise(func, out_dtype, kwargs, *operands))
    kinds, correct = _special_values.CORRECTIONS.get(func, ("", None))
    return correct(result, *args, elementwise) if out_dtype.kind in kinds and not kwargs else result


def _make_unary(name: str) -> Any:
    def func(x: ArrayLike, /) -> Array:
        return elementwise(name, x)

    func.__name__ = func.__qualname__ = name
    func.__doc__ = f"Elementwise ``{name}`` of an array, as ``numpy.{_UNARY[name]}`` (lazy)."
    return func


def _make_binary(name: str) -> Any:
    def func(x1: ArrayLike, x2: ArrayLike, /) -> Array:
        return elementwise(name, x1, x2)

    func.__name__ = func.__qualname__ = name
    func.__doc__ = f"Elementwise ``{name}`` of two arrays with broadcasting, as ``numpy.{_BINARY[name]}`` (lazy)."
    return func


_module = sys.modules[__name__]
for _name in _UNARY:
    setattr(_module, _name, _make_unary(_name))
for _name in _BINARY:
    setattr(_module, _name, _make_binary(_name))
FUNCTIONS = {name: getattr(_module, name) for name in (*_UNARY, *_BINARY)}


def where(condition: ArrayLike, x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """Elements of ``x1`` where ``condition`` is true, else of ``x2``, with broadcasting (lazy)."""
    return elementwise("where", condition, x1, x2, skip_promotion=1)


def clip(x: ArrayLike, /, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Array:  # noqa: A002
    """Values of ``x`` limited to ``[min, max]`` (either bound may be None), as ``numpy.clip``: the result
    dtype is that of ``x`` and the bounds together, and a Python int beyond an integer ``x``'s range is no bound.
    """
    out = as_array(x)
    if out.dtype.kind in "iu":
        info = np.iinfo(out.dtype)
        min = None if type(min) is int and min <= info.min else min  # noqa: A001
        max = None if type(max) is int and max >= info.max else max  # noqa: A001
    if min is not None:
        out = elementwise("maximum", out, min)
    if max is not None:
        out = elementwise("minimum", out, max)
    return out


def round(x: ArrayLike, /, decimals: int = 0) -> Array:  # noqa: A001
    """Round to ``decimals`` decimal places (half to even), as ``numpy.round``."""
    return elementwise("round", x, decimals=decimals)


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = True, device: Any = None, casting: str = "unsafe") -> Array:
    """The array converted to ``dtype`` (explicit: never guarded), on ``device`` if given."""
    from .creation import device_backend

    arr = as_array(x)
    if device is not None:
        arr = arr.to_backend(device_backend(device))
    dtype = supported_dtype(dtype, "astype")
    if not np.can_cast(arr.dtype, dtype, casting=casting):
        raise TypeError(f"Cannot cast array data from {arr.dtype} to {dtype} according to the rule {casting!r}")
    if dtype == arr.dtype and not copy:
        return arr
    return Array(Elemwise("astype", dtype, {}, arr.expr))


def as_array(x: ArrayLike) -> Array:
    """An Array from an Array or anything ``asarray`` takes."""
    if isinstance(x, Array):
        return x
    from .creation import asarray

    return asarray(x)
