"""Linear algebra: the array API (2024.12) ``linalg`` extension with NumPy's ``numpy.linalg`` semantics.

Products, norms, ``diagonal``, ``trace`` and ``cross`` are built from layout operations, elementwise functions,
reductions and the blocked matrix product, so they keep the operands' chunking. Factorizations and solvers
need whole matrices: the last two axes become one block and the backend's ``linalg`` runs per block
(``_per_matrix``), except tall matrices in row blocks, factored without gathering them (``qr`` by TSQR;
``svd``, ``pinv``, ``lstsq`` from the SVD of TSQR's R). Value-dependent errors (a singular matrix) come from
``compute`` as NumPy's ``LinAlgError`` on either backend (docs/api/linalg.md)."""
from __future__ import annotations

import contextlib
import operator
from typing import Any, NamedTuple

import numpy as np

from . import guards as _guards
from . import reductions as _reductions
from .array import Array, ArrayLike
from .recipes import reused
from ..backend import namespace
from ..expr import MapBlocks
from ..kernels.checks import Check, check_later
from ..kernels.lapack import gesv
from .blockwise import map_blocks
from .creation import as_array, eye, zeros
from .elementwise import abs as _abs
from .elementwise import (
    conj,
    divide,
    greater,
    multiply,
    not_equal,
    real,
    sqrt,
    square,
    subtract,
    where,
)
from ..runtime.fetch import fetch
from .manipulation import (
    broadcast_to,
    concat,
    expand_dims,
    matrix_transpose,
    moveaxis,
    normalize_axes,
    normalize_axis,
    rechunk_expr,
    squeeze,
)
from .tensor import align_stacks, matmul, matmul_stacks, tensordot, vecdot
from .tensor import outer as _outer

__all__ = [
    "LinAlgError", "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "lstsq", "matmul",
    "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "norm", "outer", "pinv", "qr", "slogdet",
    "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
]

LinAlgError = np.linalg.LinAlgError


class SlogdetResult(NamedTuple):
    """``slogdet``'s result: ``sign * exp(logabsdet)`` is the determinant."""

    sign: Array
    logabsdet: Array


class EighResult(NamedTuple):
    """``eigh``'s result: eigenvalues in ascending order and the eigenvectors as columns."""

    eigenvalues: Array
    eigenvectors: Array


class QRResult(NamedTuple):
    """``qr``'s result: ``Q`` with orthonormal columns and upper-triangular ``R``."""

    Q: Array
    R: Array


class SVDResult(NamedTuple):
    """``svd``'s result: ``U @ (S[..., None] * Vh)`` is the matrix; ``S`` in descending order."""

    U: Array
    S: Array
    Vh: Array


class _NoValue:
    """Marks an argument that was not passed (``pinv``'s ``rtol``, where None means something else)."""


# --- dtypes and checks --------------------------------------------------------------------------------

_PRECISION = {np.dtype(np.float32): 32, np.dtype(np.float64): 64, np.dtype(np.complex64): 32,
              np.dtype(np.complex128): 64}
_COMPUTE = {(32, False): np.float32, (64, False): np.float64, (32, True): np.complex64, (64, True): np.complex128}


def _compute_dtype(*dtypes: np.dtype) -> np.dtype:
    """NumPy's linalg dtype for these operands: single or double precision, complex if any operand is;
    non-floating operands count as double; float16 and long double raise TypeError."""
    known = _COMPUTED.get(dtypes)
    if known is None:
        known = _COMPUTED[dtypes] = _linalg_dtype(dtypes)  # (a few dtypes: never large)
    return known


_COMPUTED: dict[tuple[np.dtype, ...], np.dtype] = {}


def _linalg_dtype(dtypes: tuple[np.dtype, ...]) -> np.dtype:
    bits, is_complex = 32, False
    for d in dtypes:
        if d.kind in "fc":
            if d not in _PRECISION:
                raise TypeError(f"array type {d.name} is unsupported in linalg")
            bits = max(bits, _PRECISION[d])
            is_complex |= d.kind == "c"
        else:
            bits = 64
    return np.dtype(_COMPUTE[bits, is_complex])


def _real_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.finfo(dtype).dtype)


def _matrices(x: ArrayLike, *, square: bool = False, cast: bool = True) -> Array:
    """An Array of at least 2 dimensions (square matrices if asked), cast to its linalg dtype (unless ``cast``
    is False: the dtype checked only), with NumPy's LinAlgError otherwise."""
    a = as_array(x)
    if a.ndim < 2:
        raise LinAlgError(f"{a.ndim}-dimensional array given. Array must be at least two-dimensional")
    if square and a.shape[-1] != a.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    dtype = _compute_dtype(a.dtype)
    return a.astype(dtype, copy=False) if cast else a


def _pair_dtype(name: str, a: np.dtype, b: np.dtype) -> np.dtype:
    """The common linalg dtype of two operands (with the promotion guard for their plain promotion)."""
    if (a, b) not in _NOT_WIDENED:
        common = np.result_type(a, b)
        _guards.check_promotion(name, [a, b], common)
        if not _guards.widened([a, b], common):  # (no guard to ask on the next call)
            _NOT_WIDENED.add((a, b))
    return _compute_dtype(a, b)


_NOT_WIDENED: set[tuple[np.dtype, np.dtype]] = set()  # pairs whose promotion widens neither


def _pair(name: str, a: Array, b: Array) -> tuple[Array, Array]:
    """Two operands cast to their common linalg dtype (``_pair_dtype``)."""
    dtype = _pair_dtype(name, a.dtype, b.dtype)
    return a.astype(dtype, copy=False), b.astype(dtype, copy=False)


def _ct(a: Array) -> Array:
    """The conjugate transpose of the last two axes."""
    t = matrix_transpose(a)
    return conj(t) if t.dtype.kind == "c" else t


def _max_or_zero(x: Array, axis: Any, keepdims: bool = False) -> Array:
    """The maximum of non-negative values over ``axis``, 0 over empty axes (NumPy's ``initial=0``)."""
    if any(x.shape[d] == 0 for d in normalize_axes(axis, x.ndim)):
        return _reductions.sum(x, axis=axis, keepdims=keepdims)
    return _reductions.max(x, axis=axis, keepdims=keepdims)


# --- per-matrix block functions -----------------------------------------------------------------------


def _solved(xp: Any, a: Any, b: Any, source: str) -> Any:
    """The solution of one system ``a @ x = b``. On CuPy blocks by ``gesv``: a singular ``a`` is told by
    getrf's status on the device, read when the result is delivered (``kernels.checks``), not here (NumPy raises
    at once)."""
    if xp is np or not a.size:
        return xp.linalg.solve(a, b)
    x, status = gesv(a, b)
    check_later(Check(status, LinAlgError, "Singular matrix", f"{source} (getrf's status)"))
    return x


def _op_solve(xp: Any, a: Any, b: Any) -> tuple:
    if a.ndim == 2 and b.ndim <= 2:  # one system (b a vector or a matrix)
        return (_solved(xp, a, b, "gnp.linalg.solve"),)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # CuPy's solve does not broadcast stacks
    return (xp.linalg.solve(xp.broadcast_to(a, batch + a.shape[-2:]), xp.broadcast_to(b, batch + b.shape[-2:])),)


def _op_inv(xp: Any, a: Any) -> tuple:
    if xp is np or a.ndim > 2 or not a.size:  # (CuPy's stacks: cuBLAS's batched inverse)
        return (xp.linalg.inv(a),)
    return (_solved(xp, a, xp.eye(a.shape[0], dtype=a.dtype), "gnp.linalg.inv"),)  # as CuPy's inv, gesv


def _op_cholesky(xp: Any, a: Any, upper: bool) -> tuple:
    lower = xp.linalg.cholesky(a)
    return (xp.conj(xp.swapaxes(lower, -1, -2)) if upper else lower,)


def _op_qr(xp: Any, a: Any, mode: str) -> tuple:
    out = xp.linalg.qr(a, mode=mode)
    return tuple(out) if isinstance(out, tuple) else (out,)  # mode "r" gives R alone


def _value_errors(xp: Any) -> Any:
    """A context in which the backend raises LinAlgError for singular or indefinite matrices, as NumPy
    does (CuPy otherwise returns inf/nan: cuSOLVER's status is checked only when asked)."""
    if xp.__name__ == "cupy":
        import cupyx

        return cupyx.errstate(linalg="raise")
    return contextlib.nullcontext()


_OPS: dict[str, Any] = {
    "inv": _op_inv,
    "solve": _op_solve,
    "det": lambda xp, a: (xp.linalg.det(a),),
    "slogdet": lambda xp, a: tuple(xp.linalg.slogdet(a)),
    "cholesky": _op_cholesky,
    "qr": _op_qr,
    "svd": lambda xp, a, full_matrices: tuple(xp.linalg.svd(a, full_matrices=full_matrices)),
    "svdvals": lambda xp, a: (xp.linalg.svd(a, compute_uv=False),),
    "eigh": lambda xp, a, UPLO: tuple(xp.linalg.eigh(a, UPLO=UPLO)),
    "eigvalsh": lambda xp, a, UPLO: (xp.linalg.eigvalsh(a, UPLO=UPLO),),
}

Shape = tuple[int, ...]


def _layout(shapes: tuple[Shape, ...]) -> tuple[list[tuple[int, int, int]], int, int]:
    """Where each per-matrix output lies in the packed block (its core axes become the last two): a matrix
    ``(r, c)`` at ``[..., :r, off:off + c]``, a vector ``(n,)`` at ``[..., :1, off:off + n]``, a scalar at
    ``[..., :1, off:off + 1]``. Returns ``(r, c, off)`` per output and the packed rows and columns."""
    places, off = [], 0
    for s in shapes:
        r, c = s if len(s) == 2 else (1, s[0]) if len(s) == 1 else (1, 1)
        places.append((r, c, off))
        off += c
    return places, max(r for r, _, _ in places), off


def _packed_block(*blocks: Any, op: str, shapes: tuple[Shape, ...], params: dict) -> Any:
    """Run ``op`` of the backend's linalg on one block of stacked matrices and pack its outputs side by
    side into one block (``_layout``)."""
    xp = namespace(*blocks)
    with _value_errors(xp):
        outs = _OPS[op](xp, *blocks, **params)
    places, rows, cols = _layout(shapes)
    batch = outs[0].shape[: outs[0].ndim - len(shapes[0])]
    if len(outs) == 1:
        return outs[0].reshape((*batch, rows, cols))
    out = xp.zeros((*batch, rows, cols), dtype=np.result_type(*[o.dtype for o in outs]))
    for o, (r, c, off) in zip(outs, places):
        out[..., :r, off : off + c] = o.reshape((*batch, r, c))
    return out


def _whole_block(*blocks: Any, op: str, dtype: np.dtype) -> Any:
    """The one output of ``op`` of the backend's linalg on whole operands cast to ``dtype``: one system's
    solve, whose status is left on the device (``_solved``; no ``_value_errors``, which would read it here)."""
    return _OPS[op](namespace(*blocks), *(b.astype(dtype, copy=False) for b in blocks))[0]


def _per_matrix(op: str, arrays: list[Array], outputs: list[tuple[Shape, np.dtype]], **params: Any) -> list[Array]:
    """``op`` (a key of ``_OPS``) run block by block on stacks of matrices: the matrix axes of ``arrays``
    in one block, their stack axes aligned and broadcast. ``outputs`` gives each result's per-matrix shape
    and dtype; the results come out of one packed block per stack block."""
    aligned, batch = align_stacks(op, arrays)
    shapes = tuple(tuple(s) for s, _ in outputs)
    places, rows, cols = _layout(shapes)
    dtype = np.result_type(*[d for _, d in outputs])
    packed = map_blocks(_packed_block, *aligned, dtype=dtype, chunks=(*batch, (rows,), (cols,)), name=op,
                        op=op, shapes=shapes, params=params)
    results = []
    for (shape, out_dtype), (r, c, off) in zip(outputs, places):
        part = packed[..., slice(None) if r == rows else slice(0, r), slice(None) if c == cols else slice(off, off + c)]
        if len(shape) < 2:
            part = squeeze(part, (-2,) if shape else (-2, -1))
        if out_dtype.kind != "c" and part.dtype.kind == "c":
            part = real(part)
        results.append(part.astype(out_dtype, copy=False))
    return results


# --- TSQR ---------------------------------------------------------------------------------------------


def _tall(a: Array) -> bool:
    """Whether ``a`` is a tall matrix cut into several row blocks (factored by TSQR)."""
    return a.ndim == 2 and a.numblocks[0] > 1 and a.shape[0] >= a.shape[1] > 0


def _wide(a: Array) -> bool:
    """Whether ``a`` is a wide matrix cut into several column blocks (its conjugate transpose is tall)."""
    return a.ndim == 2 and a.numblocks[1] > 1 and a.shape[1] >= a.shape[0] > 0


def _tsqr_local(block: Any) -> Any:
    """QR of one row block ``(m, n)``: ``[Q | R]`` in one ``(m, 2n)`` block, zero-padded (``Q`` has
    ``k = min(m, n)`` columns, ``R`` ``k`` rows)."""
    xp = namespace(block)
    m, n = block.shape
    q, r = xp.linalg.qr(block)
    k = q.shape[1]
    out = xp.zeros((m, 2 * n), dtype=q.dtype)
    out[:, :k] = q
    out[:k, n:] = r
    return out


def _tsqr_combine(local: Any, q2: Any) -> Any:
    """One row block of TSQR's Q: the block's own Q times its ``(k, n)`` piece of the second QR's Q."""
    return local[:, : q2.shape[0]] @ q2


def _tsqr(a: Array) -> tuple[Array, Array]:
    """Reduced QR of a tall matrix cut into row blocks, without gathering it (TSQR)."""
    n = a.shape[1]
    a = a.rechunk((a.chunks[0], (n,)))
    rows = a.chunks[0]
    ks = tuple(min(r, n) for r in rows)
    local = map_blocks(_tsqr_local, a, chunks=(rows, (2 * n,)), name="qr-local")
    starts = np.cumsum((0, *rows[:-1]))
    stacked_r = local[np.concatenate([s + np.arange(k) for s, k in zip(starts, ks)]), n:]
    q2, r = _per_matrix("qr", [stacked_r], [((sum(ks), n), a.dtype), ((n, n), a.dtype)], mode="reduced")
    q = map_blocks(_tsqr_combine, local, q2.rechunk((ks, (n,))), chunks=(rows, (n,)), name="qr-combine")
    return q, r


# --- products -----------------------------------------------------------------------------------------


@reused
def outer(x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """Outer product of two vectors, ``out[i, j] = x1[i] * x2[j]`` (lazy)."""
    a, b = as_array(x1), as_array(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are x1.ndim={a.ndim} and x2.ndim={b.ndim}.")
    return _outer(a, b)


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Array:
    """Cross product of 3-element vectors along ``axis`` (of each operand; the result's vectors lie along
    ``axis`` too), the other axes broadcast (lazy, elementwise)."""
    a, b = as_array(x1), as_array(x2)
    axis_a, axis_b = normalize_axis(axis, a.ndim), normalize_axis(axis, b.ndim)
    if a.shape[axis_a] != 3 or b.shape[axis_b] != 3:
        raise ValueError(
            f"Both input arrays must be (arrays of) 3-dimensional vectors, but they are {a.shape[axis_a]} and "
            f"{b.shape[axis_b]} dimensional instead."
        )
    a, b = moveaxis(a, axis_a, -1), moveaxis(b, axis_b, -1)
    a0, a1, a2 = (a[..., i : i + 1] for i in range(3))
    b0, b1, b2 = (b[..., i : i + 1] for i in range(3))
    parts = [subtract(multiply(a1, b2), multiply(a2, b1)), subtract(multiply(a2, b0), multiply(a0, b2)),
             subtract(multiply(a0, b1), multiply(a1, b0))]
    out = concat(parts, axis=-1)
    return moveaxis(out, -1, normalize_axis(axis, out.ndim))


def matrix_power(a: ArrayLike, n: int) -> Array:
    """A square matrix (or a stack) raised to the integer power ``n`` by repeated squaring with matrix
    products; ``n = 0`` gives the identity (in ``a``'s dtype), ``n < 0`` powers of the inverse (lazy)."""
    x = as_array(a)
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError("exponent must be an integer") from None
    if x.ndim < 2:
        raise LinAlgError(f"{x.ndim}-dimensional array given. Array must be at least two-dimensional")
    if x.shape[-1] != x.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if n == 0:
        identity = eye(x.shape[-1], dtype=x.dtype, chunks=x.chunks[-2:], backend=x.backend)
        return broadcast_to(identity, x.shape)
    if n < 0:
        x, n = inv(x), -n
    result = None
    while n:
        if n & 1:
            result = x if result is None else matmul_stacks(result, x)
        n >>= 1
        if n:
            x = matmul_stacks(x, x)
    return result


# --- per-matrix functions -----------------------------------------------------------------------------


@reused
def inv(a: ArrayLike) -> Array:
    """The inverse of a square matrix (or of each in a stack). A singular matrix raises LinAlgError on
    compute; for one matrix on CuPy blocks, when the result (or anything computed from it) is delivered."""
    a = _matrices(a, square=True)
    return _per_matrix("inv", [a], [(a.shape[-2:], a.dtype)])[0]


@reused
def det(a: ArrayLike) -> Array:
    """The determinant of a square matrix (a lazy 0-d Array), or of each in a stack."""
    a = _matrices(a, square=True)
    return _per_matrix("det", [a], [((), a.dtype)])[0]


def slogdet(a: ArrayLike) -> SlogdetResult:
    """Sign and natural log of the absolute value of the determinant, ``(sign, logabsdet)``, as NumPy's
    (sign 0 and logabsdet -inf for a singular matrix)."""
    a = _matrices(a, square=True)
    return SlogdetResult(*_per_matrix("slogdet", [a], [((), a.dtype), ((), _real_dtype(a.dtype))]))


@reused
def solve(a: ArrayLike, b: ArrayLike) -> Array:
    """The solution ``x`` of ``x1 @ x = x2`` for square ``x1``: ``x2`` of shape ``(M,)`` is one vector,
    otherwise a stack of ``(M, K)`` matrices; stack axes broadcast. A singular ``x1`` raises LinAlgError on
    compute; for one system on CuPy blocks, when the result (or anything computed from it) is delivered."""
    a = _matrices(a, square=True, cast=False)
    b = as_array(b)
    m = a.shape[-1]
    if b.ndim == 0:
        raise ValueError("solve: Input operand 1 does not have enough dimensions (has 0, gufunc core with "
                         "signature (m,m),(m,n)->(m,n) requires 2)")
    vector = b.ndim == 1
    core = b.shape[0] if vector else b.shape[-2]
    if core != m:
        signature = "solve1: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature (m,m),(m)->(m)" \
            if vector else "solve: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature (m,m),(m,n)->(m,n)"
        raise ValueError(f"{signature} (size {core} is different from {m})")
    if a.ndim == 2 and b.ndim <= 2:  # one system: the library's solve on the whole operands, cast there, one task
        dtype = _pair_dtype("solve", _compute_dtype(a.dtype), b.dtype)
        whole = [rechunk_expr(x.expr, tuple((n,) for n in x.shape)) for x in (a, b)]
        return Array(MapBlocks.made([_whole_block, "solve", whole[1].chunks, dtype, {"op": "solve", "dtype": dtype},
                                     False, *whole], whole[1].chunks, dtype, a.backend))
    a, b = _pair("solve", a.astype(_compute_dtype(a.dtype), copy=False), expand_dims(b, -1) if vector else b)
    (out,) = _per_matrix("solve", [a, b], [((m, b.shape[-1]), a.dtype)])
    return squeeze(out, -1) if vector else out


@reused
def cholesky(x: ArrayLike, /, *, upper: bool = False) -> Array:
    """The Cholesky factor of a Hermitian positive-definite matrix (or stack): lower ``L`` with
    ``x = L @ L^H``, or upper ``U = L^H`` with ``upper=True``. A matrix that is not positive definite raises
    LinAlgError on compute (NumPy blocks)."""
    a = _matrices(x, square=True)
    return _per_matrix("cholesky", [a], [(a.shape[-2:], a.dtype)], upper=bool(upper))[0]


def _check_uplo(UPLO: str) -> None:
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")


def eigh(a: ArrayLike, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of a Hermitian matrix (or stack), using its lower
    (``UPLO="L"``) or upper triangle."""
    _check_uplo(UPLO)
    a = _matrices(a, square=True)
    m = a.shape[-1]
    return EighResult(*_per_matrix("eigh", [a], [((m,), _real_dtype(a.dtype)), ((m, m), a.dtype)], UPLO=UPLO))


def eigvalsh(a: ArrayLike, UPLO: str = "L") -> Array:
    """Eigenvalues (ascending) of a Hermitian matrix (or stack)."""
    _check_uplo(UPLO)
    a = _matrices(a, square=True)
    return _per_matrix("eigvalsh", [a], [((a.shape[-1],), _real_dtype(a.dtype))], UPLO=UPLO)[0]


@reused
def qr(a: ArrayLike, mode: str = "reduced") -> QRResult | Array:
    """QR factorization ``x = Q @ R`` of a matrix (or stack) of shape ``(M, N)``, ``K = min(M, N)``:
    ``mode="reduced"`` gives Q ``(M, K)`` and R ``(K, N)``, ``"complete"`` Q ``(M, M)`` and R ``(M, N)``,
    ``"r"`` R alone. A tall matrix cut into row blocks is factored by TSQR (reduced and "r"), without
    gathering it; otherwise each matrix is factored in one block. Signs of Q's columns and R's rows may
    differ from NumPy's (any QR is valid)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"Unrecognized mode '{mode}'" if mode != "raw" else
                         "qr: mode 'raw' is not supported; use 'reduced', 'complete' or 'r'")
    a = _matrices(a)
    if mode != "complete" and _tall(a):
        q, r = _tsqr(a)
        return r if mode == "r" else QRResult(q, r)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        return _per_matrix("qr", [a], [((k, n), a.dtype)], mode="r")[0]
    q_shape, r_shape = ((m, m), (m, n)) if mode == "complete" else ((m, k), (k, n))
    return QRResult(*_per_matrix("qr", [a], [(q_shape, a.dtype), (r_shape, a.dtype)], mode=mode))


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False) -> SVDResult | Array:
    """Singular value decomposition ``x = U @ (S[..., None] * Vh)`` of a matrix (or stack), ``S``
    descending. With ``full_matrices=False`` a tall matrix cut into row blocks (or a wide one cut into
    column blocks) is decomposed from the SVD of its TSQR R factor, without gathering it; otherwise each
    matrix is decomposed in one block. ``compute_uv=False`` gives ``S`` alone (``svdvals``). ``hermitian``
    is accepted for NumPy compatibility; the general SVD is used. Singular vectors may differ from NumPy's
    by signs (phases)."""
    a = _matrices(a)
    if not compute_uv:
        return svdvals(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if not full_matrices and _tall(a):
        q, r = _tsqr(a)
        u, s, vh = svd(r, full_matrices=False)
        return SVDResult(matmul(q, u), s, vh)
    if not full_matrices and _wide(a):
        u, s, vh = svd(_ct(a), full_matrices=False)
        return SVDResult(_ct(vh), s, _ct(u))
    u_cols, vh_rows = (m, n) if full_matrices else (k, k)
    outputs = [((m, u_cols), a.dtype), ((k,), _real_dtype(a.dtype)), ((vh_rows, n), a.dtype)]
    return SVDResult(*_per_matrix("svd", [a], outputs, full_matrices=bool(full_matrices)))


def svdvals(x: ArrayLike, /) -> Array:
    """Singular values of a matrix (or stack), descending. A tall matrix cut into row blocks (or a wide one
    cut into column blocks) gives those of its TSQR R factor, without gathering it."""
    a = _matrices(x)
    if _tall(a):
        return svdvals(_tsqr(a)[1])
    if _wide(a):
        return svdvals(_ct(a))
    return _per_matrix("svdvals", [a], [((min(a.shape[-2:]),), _real_dtype(a.dtype))])[0]


def _inverse_values(s: Array, rcond: Any) -> Array:
    """``1 / s`` for singular values above ``rcond`` times the largest (of each matrix), 0 for the rest."""
    cutoff = multiply(_max_or_zero(s, -1, keepdims=True), rcond)
    return where(greater(s, cutoff), divide(1, s), 0)


def pinv(a: ArrayLike, rcond: float | None = None, hermitian: bool = False, *, rtol: Any = _NoValue) -> Array:
    """The Moore-Penrose pseudo-inverse of a matrix (or stack), from its SVD with singular values at most
    ``rcond`` (or ``rtol``) times the largest set to zero, as NumPy's: ``rcond`` defaults to 1e-15;
    ``rtol=None`` means ``max(M, N) * eps``. ``hermitian`` is accepted for NumPy compatibility (the general
    SVD is used). Lazy, and distributed like ``svd(x, full_matrices=False)``."""
    a = _matrices(a)
    if rcond is not None and rtol is not _NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    if rcond is None:
        rcond = rtol if rtol is not _NoValue else 1e-15
    if rcond is None:
        rcond = max(a.shape[-2:]) * np.finfo(a.dtype).eps
    if isinstance(rcond, Array) or np.ndim(rcond):  # one value per matrix of the stack, as NumPy
        rcond = expand_dims(as_array(rcond), -1)
    else:
        rcond = float(rcond)
    u, s, vh = svd(a, full_matrices=False)
    return matmul_stacks(multiply(_ct(vh), expand_dims(_inverse_values(s, rcond), -2)), _ct(u))


def matrix_rank(A: ArrayLike, tol: float | None = None, hermitian: bool = False, *, rtol: float | None = None) -> Array:
    """The number of singular values above a tolerance, per matrix (lazy integer Array): ``tol`` absolute,
    or ``rtol`` (default ``max(M, N) * eps``) relative to the largest singular value. Arrays of fewer than 2
    dimensions have rank 1 unless all zero, as in NumPy. ``hermitian`` is accepted for NumPy compatibility
    (the general SVD is used)."""
    if rtol is not None and tol is not None:
        raise ValueError("`tol` and `rtol` can't be both set.")
    a = as_array(A)
    if a.ndim < 2:
        return _reductions.any(not_equal(a, 0)).astype(np.intp)
    s = svdvals(a)
    if tol is None:
        factor = max(a.shape[-2:]) * np.finfo(s.dtype).eps if rtol is None else float(rtol)
        threshold: Any = multiply(_max_or_zero(s, -1, keepdims=True), factor)
    else:
        threshold = float(tol)
    return _reductions.sum(greater(s, threshold), axis=-1, dtype=np.intp)


def lstsq(a: ArrayLike, b: ArrayLike, rcond: float | None = None) -> tuple[Array, Array, int, Array]:
    """Least-squares solution of ``a @ x = b`` (``a`` of shape ``(M, N)``, ``b`` ``(M,)`` or ``(M, K)``) as
    NumPy's: ``(x, residuals, rank, s)``, the minimum-norm solution, sums of squared residuals per column
    (empty unless ``rank == N < M``), the rank (a Python int) and the singular values. Singular values at
    most ``rcond`` (default ``eps * max(M, N)`` of the computation dtype) times the largest count as zero.

    Built from ``svd(a, full_matrices=False)`` (distributed for a tall ``a`` cut into row blocks). The
    residuals' shape depends on the rank, so the rank is computed (from the singular values alone) when
    this is called; ``x``, ``residuals`` and ``s`` stay lazy."""

    x, y = as_array(a), as_array(b)
    vector = y.ndim == 1
    for arr in (x, expand_dims(y, -1) if vector else y):
        if arr.ndim != 2:
            raise LinAlgError(f"{arr.ndim}-dimensional array given. Array must be two-dimensional")
    m, n = x.shape
    if y.shape[0] != m:
        raise LinAlgError("Incompatible dimensions")
    x, y = _pair("lstsq", x, expand_dims(y, -1) if vector else y)
    if rcond is None:
        rcond = np.finfo(x.dtype).eps * max(m, n)
    u, s, vh = svd(x, full_matrices=False)
    s_inv = _inverse_values(s, float(rcond))
    solution = matmul(_ct(vh), multiply(expand_dims(s_inv, -1), matmul(_ct(u), y)))
    rank = int(fetch(_reductions.sum(greater(s_inv, 0), dtype=np.intp)))
    real_dtype = _real_dtype(x.dtype)
    if rank == n and m > n:
        residuals = _reductions.sum(square(_abs(subtract(y, matmul(x, solution)))), axis=0)
    else:
        residuals = zeros((0,), dtype=real_dtype, backend=x.backend)
    return (squeeze(solution, -1) if vector else solution), residuals, rank, s


# --- diagonal, trace, norms ---------------------------------------------------------------------------


def diagonal(x: ArrayLike, /, *, offset: int = 0) -> Array:
    """The diagonal ``offset`` (above the main one if positive) of the last two axes, as the last axis of
    the result (lazy: a gather of those elements)."""
    a = as_array(x)
    if a.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    offset = operator.index(offset)
    n, m = a.shape[-2:]
    rows = np.arange(max(0, -offset), max(0, min(n, m - offset)))
    return a[..., rows, rows + offset]


def trace(x: ArrayLike, /, *, offset: int = 0, dtype: Any = None) -> Array:
    """Sum of the diagonal ``offset`` of the last two axes; integer sums widen as in ``sum`` unless
    ``dtype`` (lazy)."""
    return _reductions.sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def _as_inexact(x: ArrayLike) -> Array:
    """Norms work on floating data: other dtypes become float64, as in NumPy."""
    a = as_array(x)
    return a if a.dtype.kind in "fc" else a.astype(np.float64)


def _vector_norm(a: Array, axes: tuple[int, ...], ord: Any, keepdims: bool) -> Array:
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")  # noqa: TRY004 - NumPy's ValueError
    absx = _abs(a)
    if ord == np.inf:
        return _max_or_zero(absx, axes, keepdims)
    if ord == -np.inf:
        return _reductions.min(absx, axis=axes, keepdims=keepdims)
    if ord == 0:
        return _reductions.sum(not_equal(a, 0), axis=axes, keepdims=keepdims, dtype=absx.dtype)
    if ord == 1:
        return _reductions.sum(absx, axis=axes, keepdims=keepdims)
    if ord == 2:
        return sqrt(_reductions.sum(square(absx), axis=axes, keepdims=keepdims))
    p = float(ord)
    return _reductions.sum(absx**p, axis=axes, keepdims=keepdims) ** (1 / p)


def _matrix_norm(a: Array, row: int, col: int, ord: Any, keepdims: bool) -> Array:
    """The matrix norm over axes ``row`` and ``col`` (non-negative, distinct), as ``numpy.linalg.norm``."""
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord in (2, -2, "nuc"):
        s = svdvals(moveaxis(a, (row, col), (-2, -1)))
        out = _max_or_zero(s, -1) if ord == 2 else _reductions.min(s, axis=-1) if ord == -2 else \
            _reductions.sum(s, axis=-1)
    elif ord in (None, "fro", "f"):
        out = sqrt(_reductions.sum(square(_abs(a)), axis=(row, col)))
    elif ord in (1, -1, np.inf, -np.inf):
        # 1: the largest column sum (sum over rows, then over columns); inf: the largest row sum
        inner, outer_ = (row, col) if ord in (1, -1) else (col, row)
        sums = _reductions.sum(_abs(a), axis=inner)
        outer_ -= outer_ > inner
        out = _max_or_zero(sums, outer_) if ord in (1, np.inf) else _reductions.min(sums, axis=outer_)
    else:
        raise ValueError("Invalid norm order for matrices.")
    return expand_dims(out, tuple(sorted((row, col)))) if keepdims else out


def vector_norm(x: ArrayLike, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Array:
    """The vector norm over ``axis`` (all axes by default, or several): ``ord`` a number p (sum of
    ``|x|**p``, to the power 1/p), ``inf``/``-inf`` (largest/smallest magnitude) or 0 (count of nonzeros)
    (lazy)."""
    a = _as_inexact(x)
    return _vector_norm(a, normalize_axes(axis, a.ndim), ord, keepdims)


def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: Any = "fro") -> Array:
    """The matrix norm of the last two axes: "fro", "nuc" (sum of singular values), 1/-1 (largest/smallest
    column sum of magnitudes), inf/-inf (row sums), 2/-2 (largest/smallest singular value) (lazy)."""
    a = _as_inexact(x)
    return _matrix_norm(a, normalize_axis(-2, a.ndim), normalize_axis(-1, a.ndim), ord, keepdims)


@reused
def norm(x: ArrayLike, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Array:
    """``numpy.linalg.norm``: without ``axis``, the 2-norm of all elements (``ord`` None), or the vector
    or matrix norm ``ord`` of a 1-d or 2-d array; an int ``axis`` gives vector norms, a pair of axes matrix
    norms (lazy)."""
    a = _as_inexact(x)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and a.ndim == 2) or (ord == 2 and a.ndim == 1):
            return _vector_norm(a, tuple(range(a.ndim)), 2, keepdims)
        axis = tuple(range(a.ndim))
    elif not isinstance(axis, tuple):
        try:
            axis = (operator.index(axis),)
        except TypeError:
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from None
    if len(axis) == 1:
        return _vector_norm(a, (normalize_axis(axis[0], a.ndim),), 2 if ord is None else ord, keepdims)
    if len(axis) == 2:
        return _matrix_norm(a, normalize_axis(axis[0], a.ndim), normalize_axis(axis[1], a.ndim), ord, keepdims)
    raise ValueError("Improper number of dimensions to norm.")
