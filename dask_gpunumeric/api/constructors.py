"""NumPy's remaining constructors and small predicates as thin layers: ``array`` and its relatives, index
grids (indices, tril/triu/diag_indices), window functions (hamming, hanning, blackman, bartlett), the
``is*`` predicates, nan_to_num, angle, ediff1d, rollaxis, inner, vdot, copy, diagflat; and NumPy's dtype
and shape utilities, which look at dtypes and shapes only and are re-exported as they are."""
from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .array import Array, ArrayLike
from .creation import arange, asarray, from_array, ones, zeros_like
from .elementwise import as_array, elementwise, imag, real, where
from .manipulation import broadcast_to, concat, normalize_axis, ravel, reshape, stack, store, transpose
from .tensor import tensordot, vecdot
from .matrices import diag

__all__ = [
    "angle", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "bartlett", "blackman",
    "broadcast_shapes", "common_type", "copy", "diag_indices", "diagflat", "ediff1d", "hamming", "hanning",
    "indices", "inner", "iscomplex", "iscomplexobj", "isneginf", "isposinf", "isreal", "isrealobj", "isscalar",
    "issubdtype", "iterable", "min_scalar_type", "mintypecode", "nan_to_num", "promote_types", "rollaxis",
    "tril_indices", "triu_indices", "typename", "vdot",
]

# dtype and shape utilities: they never look at an Array's data
broadcast_shapes, isscalar, issubdtype, iterable = np.broadcast_shapes, np.isscalar, np.issubdtype, np.iterable
min_scalar_type, mintypecode, promote_types, typename = np.min_scalar_type, np.mintypecode, np.promote_types, np.typename


def array(object: Any, dtype: Any = None, *, copy: bool | None = True, order: str = "K", subok: bool = False,  # noqa: A002
          ndmin: int = 0, ndmax: int = 0, like: Any = None, chunks: Any = "auto") -> Array:
    """An Array from ``object`` (as ``asarray``; Arrays are immutable, so a copy is never needed), with at
    least ``ndmin`` axes (and, from nested sequences, at most ``ndmax``, as NumPy's). ``order`` is accepted:
    blocks have no memory layout to choose."""
    if ndmax:
        object = np.array(object, dtype=dtype, ndmax=ndmax)  # noqa: A001  (NumPy decides where nesting stops)
    out = asarray(object, dtype=dtype, chunks=chunks)
    return out if out.ndim >= ndmin else reshape(out, (1,) * (ndmin - out.ndim) + out.shape)


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: bool | None = None,
               like: Any = None) -> Array:
    """``asarray`` (gnp has one array type)."""
    return asarray(a, dtype=dtype, device=device, copy=copy)


def ascontiguousarray(a: Any, dtype: Any = None, *, like: Any = None) -> Array:
    """``asarray`` with at least one axis (every block is C-contiguous when computed)."""
    return array(a, dtype, ndmin=1)


asfortranarray = ascontiguousarray


def common_type(*arrays: ArrayLike) -> type:
    """The inexact scalar type common to the arrays' dtypes (from their dtypes only)."""
    return np.common_type(*(np.empty(0, as_array(a).dtype) for a in arrays))


def copy(a: ArrayLike, order: str = "K", subok: bool = False) -> Array:
    """The same Array (Arrays are immutable: nothing needs copying)."""
    return Array(as_array(a).expr)


# --- index grids ------------------------------------------------------------------------------------------


def indices(dimensions: Any, dtype: Any = int, sparse: bool = False) -> Any:
    """The index grid of a shape: ``out[i]`` holds the index along axis ``i`` (``sparse``: a tuple of
    arrays with ones on the other axes), computed per block."""
    dims = tuple(operator.index(d) for d in dimensions)
    axes = [reshape(arange(d, dtype=dtype), (1,) * i + (d,) + (1,) * (len(dims) - i - 1)) for i, d in enumerate(dims)]
    if sparse:
        return tuple(axes)
    if not dims:
        return ones((0,), dtype=dtype)
    return stack([broadcast_to(a, dims) for a in axes], axis=0)


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple[Array, Array]:
    """Row and column indices of the lower triangle of an n x m array (as Arrays)."""
    return tuple(from_array(i) for i in np.tril_indices(n, k, m))  # type: ignore[return-value]


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple[Array, Array]:
    """Row and column indices of the upper triangle of an n x m array (as Arrays)."""
    return tuple(from_array(i) for i in np.triu_indices(n, k, m))  # type: ignore[return-value]


def diag_indices(n: int, ndim: int = 2) -> tuple[Array, ...]:
    """Indices of the main diagonal of an n x ... x n array: ``ndim`` times ``arange(n)``."""
    idx = arange(n)
    return (idx,) * ndim


# --- window functions (NumPy's formulas, in its order of operations) --------------------------------------


def _window(M: int, terms: Any) -> Array:  # noqa: N803
    if M < 1:
        return from_array(np.array([], dtype=np.float64))
    if M == 1:
        return ones((1,), dtype=np.float64)
    n = arange(1 - M, M, 2)
    return terms(n, float(M))


def _cos(n: Array, factor: float, M: float) -> Array:  # noqa: N803
    return elementwise("cos", elementwise("true_divide", elementwise("multiply", factor, n), M - 1))


def hamming(M: int) -> Array:  # noqa: N803
    """The Hamming window of ``M`` points."""
    return _window(M, lambda n, m: 0.54 + 0.46 * _cos(n, math.pi, m))


def hanning(M: int) -> Array:  # noqa: N803
    """The Hann window of ``M`` points."""
    return _window(M, lambda n, m: 0.5 + 0.5 * _cos(n, math.pi, m))


def blackman(M: int) -> Array:  # noqa: N803
    """The Blackman window of ``M`` points."""
    return _window(M, lambda n, m: 0.42 + 0.5 * _cos(n, math.pi, m) + 0.08 * _cos(n, 2.0 * math.pi, m))


def bartlett(M: int) -> Array:  # noqa: N803
    """The Bartlett (triangular) window of ``M`` points."""
    return _window(M, lambda n, m: where(n <= 0, 1 + n / (m - 1), 1 - n / (m - 1)))


# --- predicates and small elementwise helpers -------------------------------------------------------------


def _infinity(x: ArrayLike, negative: bool) -> Array:
    a = as_array(x)
    if a.dtype.kind == "c":
        raise TypeError("This operation is not supported for complex values because it would be ambiguous.")
    sign = elementwise("signbit", a)
    return elementwise("isinf", a) & (sign if negative else ~sign)


def isposinf(x: ArrayLike, out: Any = None) -> Array:
    """Elementwise: positive infinity (TypeError for complex input, as NumPy)."""
    return store("isposinf", _infinity(x, negative=False), out)


def isneginf(x: ArrayLike, out: Any = None) -> Array:
    """Elementwise: negative infinity (TypeError for complex input, as NumPy)."""
    return store("isneginf", _infinity(x, negative=True), out)


def iscomplex(x: ArrayLike) -> Array:
    """Elementwise: a nonzero imaginary part (all False for real dtypes)."""
    a = as_array(x)
    return imag(a) != 0 if a.dtype.kind == "c" else zeros_like(a, dtype=bool)


def isreal(x: ArrayLike) -> Array:
    """Elementwise: a zero imaginary part (all True for real dtypes)."""
    return ~iscomplex(x)


def iscomplexobj(x: Any) -> bool:
    """Whether the dtype is complex (from the dtype only)."""
    return as_array(x).dtype.kind == "c"


def isrealobj(x: Any) -> bool:
    """Whether the dtype is not complex."""
    return not iscomplexobj(x)


def nan_to_num(x: ArrayLike, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Array:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (default: the dtype's largest and
    smallest values), fused; integers and booleans unchanged; complex parts through the fallback."""
    a = as_array(x)
    if a.dtype.kind not in "fc":
        return a
    if a.dtype.kind == "c":
        from .interop import run_fallback

        return run_fallback("numpy.nan_to_num (complex)", np.nan_to_num, (a,),
                            {"nan": nan, "posinf": posinf, "neginf": neginf})
    info = np.finfo(a.dtype)
    big = a.dtype.type(info.max if posinf is None else posinf)
    small = a.dtype.type(info.min if neginf is None else neginf)
    out = where(elementwise("isnan", a), a.dtype.type(nan), a)
    return where(isposinf(a), big, where(isneginf(a), small, out))


def angle(z: ArrayLike, deg: bool = False) -> Array:
    """The counterclockwise angle from the positive real axis (radians, or degrees with ``deg``)."""
    a = as_array(z)
    out = elementwise("arctan2", imag(a), real(a)) if a.dtype.kind == "c" else elementwise("arctan2", 0, a)
    return out * (180 / np.pi) if deg else out


def ediff1d(ary: ArrayLike, to_end: Any = None, to_begin: Any = None) -> Array:
    """Differences of consecutive elements of the flattened array, with ``to_begin``/``to_end`` around."""
    flat = ravel(as_array(ary))
    parts = [elementwise("subtract", flat[1:], flat[:-1])]
    for extra, first in ((to_begin, True), (to_end, False)):
        if extra is None:
            continue
        values = np.asarray(extra).ravel() if not isinstance(extra, Array) else ravel(extra)
        if not np.can_cast(values.dtype, flat.dtype, casting="same_kind"):
            raise TypeError(f"dtype of `{'to_begin' if first else 'to_end'}` must be compatible with input "
                            "`ary` under the `same_kind` rule.")
        piece = as_array(values).astype(flat.dtype)
        parts = [piece, *parts] if first else [*parts, piece]
    return concat(parts, axis=0) if len(parts) > 1 else parts[0]


def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Array:
    """``axis`` moved to position ``start`` (NumPy's older form of ``moveaxis``)."""
    x = as_array(a)
    n = x.ndim
    axis = normalize_axis(axis, n)
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}, but {start} was passed in")
    if axis < start:
        start -= 1
    if axis == start:
        return x
    axes = list(range(n))
    axes.remove(axis)
    axes.insert(start, axis)
    return transpose(x, axes)


def inner(a: ArrayLike, b: ArrayLike) -> Array:
    """Sum of products over the last axes of ``a`` and ``b`` (a product for 0-d operands)."""
    x, y = as_array(a), as_array(b)
    if x.ndim == 0 or y.ndim == 0:
        return elementwise("multiply", x, y)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError("shapes not aligned: the last dimensions of a and b differ")
    return tensordot(x, y, axes=([x.ndim - 1], [y.ndim - 1]))


def vdot(a: ArrayLike, b: ArrayLike) -> Array:
    """Dot product of the flattened arrays, the first conjugated (a lazy 0-d Array)."""
    x, y = ravel(as_array(a)), ravel(as_array(b))
    if x.shape != y.shape:
        raise ValueError("cannot reshape: vdot needs arrays of the same size")
    return vecdot(x, y)


def diagflat(v: ArrayLike, k: int = 0) -> Array:
    """A 2-d array with the flattened input on its ``k``-th diagonal."""
    return diag(ravel(as_array(v)), k)
