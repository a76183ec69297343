"""Where the array API standard's special cases differ from NumPy's results, the standard's, as a fused
correction of the elementwise result: ``floor_divide`` of floats with an infinite operand (NumPy gives NaN
for ``inf // 2`` and -1 for ``1 // -inf``), and complex ``expm1`` at zero, infinite and NaN parts."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import guards as _guards
from .array import Array

Elementwise = Callable[..., Array]


def floor_divide(result: Array, x1: Any, x2: Any, elementwise: Elementwise) -> Array:
    """``x1 // x2`` of floats with the standard's values: an infinite dividend over a finite nonzero divisor,
    or a finite nonzero dividend over an infinite divisor, give the true quotient (±inf, ±0)."""
    with _guards.allowpromotion():  # the operation itself was checked; these steps stay in its dtype
        finite1, finite2 = elementwise("isfinite", x1), elementwise("isfinite", x2)
        infinite1, infinite2 = elementwise("isinf", x1), elementwise("isinf", x2)
        nonzero1, nonzero2 = elementwise("not_equal", x1, 0), elementwise("not_equal", x2, 0)
        exact = (infinite1 & finite2 & nonzero2) | (finite1 & nonzero1 & infinite2)
        return elementwise("where", exact, elementwise("true_divide", x1, x2), result, dtype=result.dtype)


def expm1(result: Array, z: Any, elementwise: Elementwise) -> Array:
    """Complex ``expm1(z)`` accurate near 0 for finite ``z`` (CuPy's is ``exp(z) - 1``, which loses the
    digits of a small ``z``), with the standard's values where the real part is ±0 (with a zero imaginary
    part: +0, where NumPy keeps -0), infinite or NaN."""
    re, im = elementwise("real", z), elementwise("imag", z)
    # expm1(x + iy) = expm1(x) cos(y) - 2 sin(y/2)^2 + i exp(x) sin(y): no cancellation for small x, y
    half = elementwise("sin", elementwise("multiply", im, 0.5))
    real_part = elementwise("subtract", elementwise("multiply", elementwise("expm1", re), elementwise("cos", im)),
                            elementwise("multiply", elementwise("multiply", half, half), 2))
    imag_part = elementwise("multiply", elementwise("exp", re), elementwise("sin", im))
    accurate = elementwise("add", real_part, elementwise("multiply", imag_part, 1j), dtype=result.dtype)
    finite = elementwise("isfinite", z) & elementwise("isfinite", accurate)
    result = elementwise("where", finite, accurate, result, dtype=result.dtype)
    zero, infinite_im = elementwise("equal", im, 0), ~elementwise("isfinite", im)
    positive_inf = elementwise("isinf", re) & ~elementwise("signbit", re)
    negative_inf = elementwise("isinf", re) & elementwise("signbit", re)
    nan_re, negative_zero = elementwise("isnan", re), elementwise("signbit", im)
    dtype = result.dtype

    def constant(real: float, imag: float) -> Any:
        return dtype.type(complex(real, imag))

    def signed_zero(real: float) -> Array:
        return elementwise("where", negative_zero, constant(real, -0.0), constant(real, 0.0), dtype=dtype)

    out = elementwise("where", elementwise("equal", re, 0) & zero, signed_zero(0.0), result, dtype=dtype)
    out = elementwise("where", positive_inf & zero, signed_zero(np.inf), out, dtype=dtype)
    out = elementwise("where", positive_inf & infinite_im, constant(np.inf, np.nan), out, dtype=dtype)
    out = elementwise("where", negative_inf & infinite_im, constant(-1.0, 0.0), out, dtype=dtype)
    return elementwise("where", nan_re & zero, signed_zero(np.nan), out, dtype=dtype)


# block function -> (dtype kinds it applies to, correction)
CORRECTIONS: dict[str, tuple[str, Callable[..., Array]]] = {"floor_divide": ("f", floor_divide), "expm1": ("c", expm1)}
