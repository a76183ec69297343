"""Contractions: ``matmul`` (and the ``@`` operator), ``tensordot``, ``dot``, ``outer``, ``vecdot`` and ``einsum``.

``matmul`` of matrices and vectors multiplies the operands block grid by block grid (``MatMul``, ``x.T`` read
as transposed views of ``x``), without gathering either operand. The others are built on layout operations
(transpose, reshape), that blocked product, elementwise products and reductions. Two operands are contracted
by moving the summed axes to the end of the first and the front of the second, merging them, and multiplying
the matrices (an operand with no other axes as a vector); axes that both keep (einsum's batch labels) make
stacks of matrices, multiplied block by block with the matrix axes whole (``matmul_stacks``). ``einsum`` is planned with ``opt_einsum.contract_path`` when opt_einsum is installed,
and left to right otherwise.
"""
from __future__ import annotations

import math
import operator
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import config
from ..expr import ArrayExpr, MatMul, Transpose
from ..backend import namespace
from . import guards as _guards
from . import reductions as _reductions
from .array import Array, ArrayLike
from .blockwise import map_blocks
from .creation import as_array, check_order
from .recipes import reused
from .elementwise import align_chunks, check_keywords, conj, multiply, store_where
from .manipulation import (
    broadcast_shape, expand_dims, normalize_axis, permute_dims, reshape, squeeze, store,
)

__all__ = ["dot", "einsum", "matmul", "outer", "tensordot", "vecdot"]

_LETTERS = string.ascii_letters


def _common_dtype(name: str, arrays: Sequence[Array]) -> np.dtype:
    """The result dtype of a product of the arrays, with the promotion guard."""
    dtypes = tuple(a.dtype for a in arrays)
    dtype = _NOT_WIDENED.get(dtypes)
    if dtype is None:
        dtype = np.result_type(*dtypes)
        _guards.check_promotion(name, list(dtypes), dtype)
        if not _guards.widened(list(dtypes), dtype):  # (no guard to ask on the next call)
            _NOT_WIDENED[dtypes] = dtype
    return dtype


# operand dtypes -> their product's dtype, where it widens none of them (a few dtypes: never large)
_NOT_WIDENED: dict[tuple[np.dtype, ...], np.dtype] = {}


# --- stacks of matrices -------------------------------------------------------------------------------


def align_stacks(name: str, arrays: Sequence[Array], core: int = 2) -> tuple[list[Array], tuple[tuple[int, ...], ...]]:
    """The arrays with their last ``core`` axes in one block each and their leading (batch) axes chunked
    alike where they broadcast together, ready for a per-block function; and the batch chunks of the result.
    Batch shapes that don't broadcast raise NumPy's ValueError."""
    batch = broadcast_shape(name, [a.shape[: a.ndim - core] for a in arrays])
    whole = [a.rechunk(a.chunks[: a.ndim - core] + tuple((n,) for n in a.shape[a.ndim - core :])) for a in arrays]
    # the core axes never match a length of -1, so align_chunks leaves them whole
    aligned = align_chunks([a.expr for a in whole], (*batch, *(-1,) * core))
    out = [Array(aligned[a.expr._name]) for a in whole]
    chunks = []
    for d, n in enumerate(batch):
        lead = len(batch) - d
        chunks.append(next(a.chunks[a.ndim - core - lead] for a in out if a.ndim - core >= lead and
                           a.shape[a.ndim - core - lead] == n))
    return out, tuple(chunks)


def _matmul_block(a: Any, b: Any) -> Any:
    return namespace(a, b).matmul(a, b)


def _oriented(x: Array) -> tuple[ArrayExpr, bool]:
    """The array a matrix or vector operand reads, and whether it reads it transposed: the product of ``x.T``
    reads ``x`` itself, its block tasks taking transposed views (no transpose task, no copy)."""
    e = x.expr
    if type(e) is Transpose and tuple(e.operands[1]) == (1, 0):  # (operands: array, axes)
        return e.operands[0], True
    return e, False


def _blocked_matmul(a: Array, b: Array, dtype: np.dtype) -> Array:
    """The product of matrices or vectors (a 1-d ``a`` a row, a 1-d ``b`` a column, removed from the result)
    block by block on their grids (``MatMul``)."""
    (ea, ta), (eb, tb) = _oriented(a), _oriented(b)
    return Array(MatMul.of(ea, eb, dtype, _FLAGS[ta, tb], config.get("split-every")))


# the transposition flags, one tuple each (the token texts of tuples are kept by identity)
_FLAGS = {(ta, tb): (ta, tb) for ta in (False, True) for tb in (False, True)}


def _check_core(a: Array, b: Array) -> None:
    """NumPy's ValueError where the summed axes of ``a @ b`` differ in length."""
    inner_a, inner_b = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    if inner_a != inner_b:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
            f"(n?,k),(k,m?)->(n?,m?) (size {inner_b} is different from {inner_a})"
        )


def matmul_stacks(a: Array, b: Array) -> Array:
    """``a @ b``: matrices and vectors (1-d operands as in NumPy) by the blocked matrix product, stacks (operands
    of at least 2 dimensions, batch axes broadcast as in NumPy) block by block with the matrix axes whole."""
    _check_core(a, b)
    dtype = _common_dtype("matmul", [a, b])
    if a.ndim <= 2 and b.ndim <= 2:
        return _blocked_matmul(a, b, dtype)
    (a, b), batch = align_stacks("matmul", [a, b])
    return map_blocks(_matmul_block, a, b, dtype=dtype, chunks=(*batch, (a.shape[-2],), (b.shape[-1],)),
                      name="matmul")


def _gufunc_keywords(name: str, inputs: list[Array], kwargs: dict) -> list[Array]:
    """A generalized ufunc's keywords (``casting``, ``order``, ``dtype``, ``subok``, ``signature``; ``axes``
    and ``axis`` only as their defaults): the inputs cast to ``dtype`` as ``casting`` allows."""
    if kwargs.get("axes") is not None or kwargs.get("axis") not in (None, -1):
        raise NotImplementedError(f"{name}: axes= and axis= are not supported; move the axes with gnp.moveaxis first")
    check_keywords(name, {k: v for k, v in kwargs.items() if k not in ("axes", "axis")},
                   ("casting", "order", "dtype", "subok", "signature"))
    dtype, casting = kwargs.get("dtype"), kwargs.get("casting", "same_kind")
    if dtype is None:
        return inputs
    for i, x in enumerate(inputs):
        if not np.can_cast(x.dtype, dtype, casting=casting):
            raise TypeError(f"Cannot cast ufunc '{name}' input {i} from {x.dtype!r} to {np.dtype(dtype)!r} with "
                            f"casting rule '{casting}'")
    return [x.astype(dtype, copy=False) for x in inputs]


@reused
def matmul(x1: ArrayLike, x2: ArrayLike, /, out: Any = None, **kwargs: Any) -> Array:
    """Matrix product with NumPy's rules (``numpy.matmul``, the ``@`` operator): a 1-d operand is a row
    (first) or column (second) vector, removed from the result; matrices are multiplied block by block on
    their grids, stacks of matrices (batch axes broadcast) block by block with the matrix axes whole (lazy).
    ``out`` and the keywords of NumPy's gufunc (``casting``, ``dtype``, ...) as ``numpy.matmul``'s."""
    a, b = as_array(x1), as_array(x2)
    if kwargs:
        a, b = _gufunc_keywords("matmul", [a, b], kwargs)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions (scalars are not allowed; use *)")
    if a.ndim <= 2 and b.ndim <= 2:
        product = matmul_stacks(a, b)
    else:
        product = matmul_stacks(expand_dims(a, 0) if a.ndim == 1 else a, expand_dims(b, 1) if b.ndim == 1 else b)
        drop = tuple(d for d, vector in ((product.ndim - 2, a.ndim == 1), (product.ndim - 1, b.ndim == 1)) if vector)
        product = squeeze(product, drop) if drop else product
    return product if out is None else store_where("matmul", product, out, kwargs.get("casting", "same_kind"))


# --- pairwise contraction -----------------------------------------------------------------------------


def _placed(a: Array, labels: str, order: Sequence[str]) -> Array:
    """``a`` (axes named by ``labels``) with its axes in ``order``, length-1 axes for labels it lacks."""
    present = [c for c in order if c in labels]
    moved = permute_dims(a, [labels.index(c) for c in present])
    missing = tuple(d for d, c in enumerate(order) if c not in labels)
    return expand_dims(moved, missing) if missing else moved


def _contract_pair(a: Array, la: str, b: Array, lb: str, keep: str) -> tuple[Array, str]:
    """Two operands with labelled axes (each label once per operand, equal lengths where shared)
    multiplied, labels shared and not in ``keep`` summed. Returns the result and its labels: the kept shared
    labels, then the others of ``a``, then those of ``b``. Without summed labels this is a broadcast
    product; otherwise the summed axes are merged and the product is a (stacked) matrix product, an operand
    without other labels (and no shared kept ones) a vector."""
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    free_a = [c for c in la if c not in lb]
    free_b = [c for c in lb if c not in la]
    out = "".join(batch + free_a + free_b)
    if not summed:
        return multiply(_placed(a, la, out), _placed(b, lb, out)), out
    size = dict(zip(la, a.shape)) | dict(zip(lb, b.shape))
    lead = tuple(size[c] for c in batch)
    k = math.prod(size[c] for c in summed)
    rows = (math.prod(size[c] for c in free_a),) if batch or free_a else ()
    cols = (math.prod(size[c] for c in free_b),) if batch or free_b else ()
    a2 = reshape(_placed(a, la, batch + free_a + summed), (*lead, *rows, k))
    b2 = reshape(_placed(b, lb, batch + summed + free_b), (*lead, k, *cols))
    return reshape(matmul_stacks(a2, b2), tuple(size[c] for c in out)), out


def _sum_labels(a: Array, labels: str, keep: str) -> tuple[Array, str]:
    """``a`` summed over the labels not in ``keep`` (in its own dtype, as einsum does)."""
    axes = tuple(d for d, c in enumerate(labels) if c not in keep)
    if not axes:
        return a, labels
    return _reductions.sum(a, axis=axes, dtype=a.dtype), "".join(c for c in labels if c in keep)


# --- tensordot, dot, outer, vecdot --------------------------------------------------------------------


def _axes_pair(axes: Any) -> tuple[list[int], list[int]]:
    """``tensordot``'s ``axes``: an int N (last N axes of a, first N of b) or two sequences (or ints)."""
    if isinstance(axes, (int, np.integer)):
        n = operator.index(axes)
        if n < 0:
            raise ValueError("tensordot: axes must be a non-negative integer or a pair of sequences")
        return list(range(-n, 0)), list(range(n))
    try:
        axes_a, axes_b = axes
    except (TypeError, ValueError):
        raise TypeError("tensordot: axes must be an integer or a pair of sequences of integers") from None

    def as_list(ax: Any) -> list[int]:
        return [operator.index(ax)] if isinstance(ax, (int, np.integer)) else [operator.index(i) for i in ax]

    return as_list(axes_a), as_list(axes_b)


@reused
def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2) -> Array:
    """Sum of products over the axes ``axes`` of ``x1`` and ``x2`` (``numpy.tensordot``): an int N pairs
    the last N axes of ``x1`` with the first N of ``x2``; a pair of sequences names them. The result has the
    remaining axes of ``x1`` then those of ``x2``. Lazy: the summed axes are merged and multiplied as
    matrices by the blocked matrix product."""
    a, b = as_array(a), as_array(b)
    axes_a, axes_b = _axes_pair(axes)
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    axes_a = [normalize_axis(i, a.ndim) for i in axes_a]
    axes_b = [normalize_axis(j, b.ndim) for j in axes_b]
    if any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError("shape-mismatch for sum")
    if len(set(axes_a)) != len(axes_a) or len(set(axes_b)) != len(axes_b):
        raise ValueError("duplicate axes are not allowed in tensordot")
    dtype = _common_dtype("tensordot", [a, b])
    la = _LETTERS[: a.ndim]
    summed = {j: la[i] for i, j in zip(axes_a, axes_b)}
    fresh = iter(_LETTERS[a.ndim :])
    lb = "".join(summed[j] if j in summed else next(fresh) for j in range(b.ndim))
    keep = "".join(c for c in la + lb if c not in summed.values())
    out, _ = _contract_pair(a.astype(dtype, copy=False), la, b.astype(dtype, copy=False), lb, keep)
    return out


@reused
def dot(a: ArrayLike, b: ArrayLike, out: Any = None) -> Array:
    """Dot product with ``numpy.dot``'s rules: a scalar operand multiplies, two vectors give their inner
    product, otherwise the sum runs over the last axis of ``a`` and the second-to-last of ``b`` (its only
    axis when ``b`` is 1-d) (lazy)."""
    x, y = as_array(a), as_array(b)
    if x.ndim == 0 or y.ndim == 0:
        return multiply(x, y, out)
    axis_b = max(y.ndim - 2, 0)
    if x.shape[-1] != y.shape[axis_b]:
        raise ValueError(
            f"shapes {x.shape} and {y.shape} not aligned: {x.shape[-1]} (dim {x.ndim - 1}) != "
            f"{y.shape[axis_b]} (dim {axis_b})"
        )
    return store("dot", tensordot(x, y, axes=([x.ndim - 1], [axis_b])), out)


@reused
def outer(a: ArrayLike, b: ArrayLike, out: Any = None) -> Array:
    """Outer product of the flattened inputs, ``out[i, j] = a[i] * b[j]`` (``numpy.outer``; lazy)."""
    a, b = as_array(a), as_array(b)
    return multiply(reshape(a, (a.size, 1)), reshape(b, (1, b.size)), out)


@reused
def vecdot(x1: ArrayLike, x2: ArrayLike, /, out: Any = None, *, axis: int = -1, **kwargs: Any) -> Array:
    """Vector dot product along ``axis`` of each operand, ``sum(conj(x1) * x2)``, the other axes broadcast
    (``numpy.vecdot``; lazy: one fused product and reduction); ``out`` and NumPy's gufunc keywords as in
    ``matmul``."""
    a, b = _gufunc_keywords("vecdot", [as_array(x1), as_array(x2)], kwargs)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"vecdot: Input operand {0 if a.ndim == 0 else 1} does not have enough dimensions (has 0, "
                         "gufunc core with signature (n),(n)->() requires 1)")
    axis_a, axis_b = normalize_axis(axis, a.ndim), normalize_axis(axis, b.ndim)
    if a.shape[axis_a] != b.shape[axis_b]:
        raise ValueError(
            f"vecdot: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
            f"(n),(n)->() (size {b.shape[axis_b]} is different from {a.shape[axis_a]})"
        )
    dtype = _common_dtype("vecdot", [a, b])
    a = permute_dims(a, [d for d in range(a.ndim) if d != axis_a] + [axis_a])
    b = permute_dims(b, [d for d in range(b.ndim) if d != axis_b] + [axis_b])
    if a.dtype.kind == "c":
        a = conj(a)
    return store_where("vecdot", _reductions.sum(multiply(a, b), axis=-1, dtype=dtype), out,
                       kwargs.get("casting", "same_kind"))


# --- einsum -------------------------------------------------------------------------------------------


def _parse_sublists(args: tuple) -> tuple[str, tuple]:
    """The interleaved form ``einsum(op0, sublist0, op1, sublist1, ..., [sublistout])``."""
    def term(sub: Any) -> str:
        out = []
        for s in sub:
            if s is Ellipsis:
                out.append("...")
                continue
            i = operator.index(s)
            if not 0 <= i < len(_LETTERS):
                raise ValueError(f"subscript is not within the valid range [0, {len(_LETTERS)})")
            out.append(_LETTERS[i])
        return "".join(out)

    n = len(args) // 2
    operands = args[0 : 2 * n : 2]
    subscripts = ",".join(term(s) for s in args[1 : 2 * n : 2])
    if len(args) % 2:
        subscripts += "->" + term(args[-1])
    return subscripts, operands


def _parse(subscripts: str, arrays: Sequence[Array]) -> tuple[list[str], str]:
    """One label string per operand (an ellipsis replaced by letters unused elsewhere, right-aligned
    across operands) and the output labels (implicit: the ellipsis axes, then the labels appearing once, in
    alphabetical order), with NumPy's ValueErrors for malformed subscripts."""
    text = subscripts.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) < len(arrays):
        raise ValueError("more operands provided to einstein sum function than specified in the subscripts string")
    if len(terms) > len(arrays):
        raise ValueError("fewer operands provided to einstein sum function than specified in the subscripts string")
    for c in text.replace("...", "").replace("->", "").replace(",", ""):
        if c not in _LETTERS:
            if c == ".":
                raise ValueError("einstein sum subscripts string contains a '.' that is not part of an ellipsis ('...')")
            raise ValueError(f"invalid subscript '{c}' in einstein sum subscripts string, subscripts must be letters")
    ellipsis_dims = []
    for i, (term, a) in enumerate(zip(terms, arrays)):
        if term.count("...") > 1:
            raise ValueError(f"einstein sum subscripts string contains more than one ellipsis in operand {i}")
        named = len(term.replace("...", ""))
        if named > a.ndim:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts for operand {i}")
        if "..." not in term and named < a.ndim:
            raise ValueError("operand has more dimensions than subscripts given in einstein sum, but no '...' "
                             "ellipsis provided to broadcast the extra dimensions.")
        ellipsis_dims.append(a.ndim - named)
    unused = [c for c in _LETTERS if c not in text]
    n_ellipsis = max(ellipsis_dims, default=0)
    if n_ellipsis > len(unused):
        raise ValueError("einsum: too many dimensions for the letters left to label them")
    ell = "".join(unused[:n_ellipsis])
    terms = [t.replace("...", ell[n_ellipsis - n :]) for t, n in zip(terms, ellipsis_dims)]
    if not arrow:
        labels = "".join(terms)
        return terms, ell + "".join(sorted(c for c in set(labels) if labels.count(c) == 1 and c not in ell))
    if "..." in output:
        output = output.replace("...", ell)
    elif n_ellipsis:
        raise ValueError("output has more dimensions than subscripts given in einstein sum, but no '...' "
                         "ellipsis provided to broadcast the extra dimensions.")
    for c in output:
        if output.count(c) > 1:
            raise ValueError(f"einstein sum subscripts string includes output subscript '{c}' multiple times")
        if not any(c in t for t in terms):
            raise ValueError(
                f"einstein sum subscripts string included output subscript '{c}' which never appeared in an input"
            )
    return terms, output


def _diagonals(a: Array, labels: str) -> tuple[Array, str]:
    """``a`` with each label repeated in ``labels`` reduced to the diagonal of its axes (moved last)."""
    for c in dict.fromkeys(labels):
        axes = [d for d, x in enumerate(labels) if x == c]
        if len(axes) < 2:
            continue
        n = a.shape[axes[0]]
        for d in axes[1:]:
            if a.shape[d] != n:
                raise ValueError(f"dimensions in single operand for collapsing index '{c}' don't match "
                                 f"({n} != {a.shape[d]})")
        rest = [d for d in range(a.ndim) if d not in axes]
        index = np.arange(n)
        a = permute_dims(a, rest + axes)[(Ellipsis, *[index] * len(axes))]
        labels = "".join(labels[d] for d in rest) + c
    return a, labels


def _unbroadcast(operands: list[tuple[Array, str]]) -> list[tuple[Array, str]]:
    """Length-1 axes whose label is longer in another operand removed (the operand doesn't vary along
    them), so that shared labels have equal lengths; NumPy's ValueError for lengths that don't broadcast."""
    sizes: dict[str, int] = {}
    for a, labels in operands:
        for c, n in zip(labels, a.shape):
            if n != 1 and sizes.get(c, 1) not in (1, n):
                raise ValueError(f"einsum: operands could not be broadcast together: label '{c}' has lengths "
                                 f"{sizes[c]} and {n}")
            if n != 1 or c not in sizes:
                sizes[c] = n
    out = []
    for a, labels in operands:
        drop = tuple(d for d, (c, n) in enumerate(zip(labels, a.shape)) if n == 1 and sizes[c] != 1)
        out.append((squeeze(a, drop) if drop else a, "".join(c for d, c in enumerate(labels) if d not in drop)))
    return out


def _plan(operands: list[tuple[Array, str]], output: str, optimize: bool | str) -> list[tuple[int, ...]]:
    """The contraction order, in opt_einsum's form: each step takes the operands at these positions out
    of the list and appends their product."""
    n = len(operands)
    if optimize is not False:
        try:
            import opt_einsum
        except ImportError:
            pass
        else:
            equation = ",".join(labels for _, labels in operands) + "->" + output
            strategy = "greedy" if optimize is True else optimize
            path, _ = opt_einsum.contract_path(equation, *[a.shape for a, _ in operands], shapes=True,
                                               optimize=strategy)
            return [tuple(step) for step in path]
    return [(0, 1)] + [(0, n - 1 - s) for s in range(1, n - 1)]


@reused
def einsum(subscripts: Any, /, *operands: Any, out: Any = None, optimize: bool | str = True, dtype: Any = None,
           order: str = "K", casting: str = "safe") -> Array:
    """Einstein summation (``numpy.einsum``): explicit (``"ij,jk->ik"``) and implicit (``"ij,jk"``) output,
    ellipses, repeated labels within an operand (diagonals and traces), broadcasting of length-1 axes, and
    the interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

    Lazy: repeated labels take diagonals by indexing, labels of one operand only are summed first, then
    the operands are contracted two at a time (a broadcast product, or a matrix product of the summed axes,
    stacked over shared kept axes). The order comes from ``opt_einsum.contract_path`` with strategy
    ``optimize`` (``True``: "greedy", or any opt_einsum strategy name) when opt_einsum is installed, and is
    left to right otherwise or with ``optimize=False``. ``dtype`` (the inputs cast by ``casting``) and
    ``out`` as ``numpy.einsum``'s.
    """
    check_order(order, "einsum")
    if not isinstance(subscripts, str):
        subscripts, operands = _parse_sublists((subscripts, *operands))
    if not operands:
        raise ValueError("einsum: at least one operand is needed")
    arrays = [as_array(o) for o in operands]
    if dtype is not None:
        arrays = _gufunc_keywords("einsum", arrays, {"dtype": dtype, "casting": casting})
    terms, output = _parse(subscripts, arrays)
    dtype = _common_dtype("einsum", arrays)
    ops = _unbroadcast([_diagonals(a.astype(dtype, copy=False), t) for a, t in zip(arrays, terms)])

    def kept(others: Sequence[tuple[Array, str]]) -> str:
        return output + "".join(labels for _, labels in others)

    ops = [_sum_labels(a, labels, kept(ops[:i] + ops[i + 1 :])) for i, (a, labels) in enumerate(ops)]
    if len(ops) > 1:
        for step in _plan(ops, output, optimize):
            group = [ops.pop(i) for i in sorted(step, reverse=True)][::-1]
            a, la = group[0]
            for k, (b, lb) in enumerate(group[1:], start=2):
                a, la = _contract_pair(a, la, b, lb, kept(ops + group[k:]))
            ops.append((a, la))
    (a, labels), = ops
    a, labels = _sum_labels(a, labels, output)
    return store("einsum", permute_dims(a, [labels.index(c) for c in output]), out, casting)
