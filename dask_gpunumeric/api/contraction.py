"""Contractions: ``matmul`` (and the ``@`` operator) of distributed matrices, block grid by block grid,
without gathering either operand."""
from __future__ import annotations

import numpy as np
from dask.array.core import common_blockdim

from . import guards as _guards
from .array import Array, ArrayLike
from ..expr import MatMul
from .manipulation import expand_dims, rechunk_expr, squeeze


def matmul(x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """Matrix product with NumPy's rules for 1-d and 2-d operands (a 1-d operand is a row or column
    vector, removed from the result); 2-d products run block by block on the operands' grids. Stacks of
    matrices (more than 2 dimensions) go through the dask.array fallback."""
    from .elementwise import as_array

    a, b = as_array(x1), as_array(x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions (scalars are not allowed; use *)")
    if a.ndim > 2 or b.ndim > 2:
        from .interop import run_fallback

        return run_fallback("matmul of stacks of matrices", np.matmul, (a, b), {})
    core_a = a.shape[-1]
    core_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if core_a != core_b:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
            f"(n?,k),(k,m?)->(n?,m?) (size {core_b} is different from {core_a})"
        )
    dtype = np.result_type(a.dtype, b.dtype)
    _guards.check_promotion("matmul", [a.dtype, b.dtype], dtype)
    a2 = expand_dims(a, 0) if a.ndim == 1 else a
    b2 = expand_dims(b, 1) if b.ndim == 1 else b
    inner = common_blockdim({a2.chunks[1], b2.chunks[0]}) if a2.chunks[1] != b2.chunks[0] else a2.chunks[1]
    ea = rechunk_expr(a2.expr, (a2.chunks[0], inner))
    eb = rechunk_expr(b2.expr, (inner, b2.chunks[1]))
    out = Array(MatMul(ea, eb, dtype))
    drop = tuple(d for d, one_d in ((0, a.ndim == 1), (1, b.ndim == 1)) if one_d)
    return squeeze(out, drop) if drop else out
