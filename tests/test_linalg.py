"""Linear algebra and contractions against NumPy (``numpy.linalg``, ``numpy.einsum`` and friends) on random
shapes and chunkings: products (tensordot, dot, outer, vecdot, einsum with both planners), factorizations
and solvers on well-conditioned matrices and stacks, TSQR on tall matrices cut into row blocks (Q
orthonormal, Q @ R == A, NumPy's singular values, no block holding the whole matrix), norms, diagonal,
trace, cross, and bad input raising what NumPy raises."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, to_host
from dask.utils import key_split
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric import linalg as la
from dask_gpunumeric.expr import walk

LinAlgError = np.linalg.LinAlgError
FLOATS = [np.float32, np.float64, np.complex128]


# --- strategies and helpers ---------------------------------------------------------------------------


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random data: small integers for integer dtypes, normal values (complex parts too) otherwise."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return rng.integers(-3, 4, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@st.composite
def chunked(draw: st.DrawFn, x: np.ndarray) -> gnp.Array:
    """``x`` as a gnp Array with random chunks."""
    return gnp.from_array(x, chunks=tuple(draw(axis_chunks(n)) for n in x.shape))


@st.composite
def arrays(draw: st.DrawFn, shape: tuple[int, ...], dtype: Any = np.float64) -> tuple[np.ndarray, gnp.Array]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = values(rng, shape, dtype)
    return x, draw(chunked(x))


def well_conditioned(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Hermitian positive-definite matrices ``B @ B^H + n I`` (a stack when ``shape`` has more axes)."""
    b = values(rng, shape, dtype)
    n = shape[-1]
    return (b @ np.conj(np.swapaxes(b, -1, -2)) + n * np.eye(n)).astype(dtype)


@st.composite
def spd(draw: st.DrawFn, batch_dims: int = 1, dtypes: list = FLOATS) -> tuple[np.ndarray, gnp.Array]:
    dtype = draw(st.sampled_from(dtypes))
    n = draw(st.integers(1, 5))
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=batch_dims)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = well_conditioned(rng, (*batch, n, n), dtype)
    return x, draw(chunked(x))


def tol(dtype: Any) -> dict[str, float]:
    """Tolerances for results of factorizations of well-conditioned matrices."""
    single = np.dtype(dtype) in (np.float32, np.complex64)
    return {"rtol": 2e-4, "atol": 2e-4} if single else {"rtol": 1e-9, "atol": 1e-10}


def close(actual: Any, expected: Any, dtype: Any) -> None:
    """Values (computed if lazy, on either backend) close to NumPy's, dtypes not compared."""
    if isinstance(actual, gnp.Array):
        actual = to_host(actual.compute())
    np.testing.assert_allclose(np.asarray(actual), expected, **tol(dtype))


def ct(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


# --- tensordot, dot, outer, vecdot --------------------------------------------------------------------


@given(st.data())
def test_tensordot(data: st.DataObject) -> None:
    n_free_a, n_free_b, n_sum = (data.draw(st.integers(0, 2)) for _ in range(3))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=n_free_a + n_free_b + n_sum, max_size=6))
    summed, free_a, free_b = sizes[:n_sum], sizes[n_sum : n_sum + n_free_a], sizes[n_sum + n_free_a :][:n_free_b]
    perm_a = data.draw(st.permutations(range(n_free_a + n_sum)))
    perm_b = data.draw(st.permutations(range(n_sum + len(free_b))))
    shape_a = tuple((free_a + summed)[p] for p in perm_a)
    shape_b = tuple((summed + free_b)[p] for p in perm_b)
    dtype = data.draw(st.sampled_from([np.int64, np.float64]))
    x, a = data.draw(arrays(shape_a, dtype))
    y, b = data.draw(arrays(shape_b, dtype))
    axes_a = [perm_a.index(n_free_a + i) for i in range(n_sum)]
    axes_b = [perm_b.index(i) for i in range(n_sum)]
    assert_eq(gnp.tensordot(a, b, axes=(axes_a, axes_b)), np.tensordot(x, y, axes=(axes_a, axes_b)))
    if perm_a == list(range(len(perm_a))) and perm_b == list(range(len(perm_b))):  # the int form
        assert_eq(la.tensordot(a, b, axes=n_sum), np.tensordot(x, y, axes=n_sum))


def test_tensordot_errors() -> None:
    a, b = gnp.ones((2, 3)), gnp.ones((4, 3))
    with pytest.raises(ValueError, match="shape-mismatch"):
        gnp.tensordot(a, b, axes=1)
    with pytest.raises(ValueError, match="shape-mismatch"):
        gnp.tensordot(a, b, axes=([1], [1, 0]))
    with pytest.raises(ValueError, match="duplicate"):
        gnp.tensordot(gnp.ones((3, 3)), gnp.ones((3, 3)), axes=([0, 0], [0, 1]))
    with pytest.raises(IndexError):  # NumPy: IndexError for axes beyond the array
        gnp.tensordot(gnp.ones(3), gnp.ones(3), axes=2)


@given(st.data())
def test_dot(data: st.DataObject) -> None:
    nd_a, nd_b = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    k = data.draw(st.integers(1, 4))
    shape_a = tuple(data.draw(st.lists(st.integers(1, 3), min_size=max(nd_a - 1, 0), max_size=max(nd_a - 1, 0))))
    shape_a = (*shape_a, k) if nd_a else ()
    shape_b = tuple(data.draw(st.lists(st.integers(1, 3), min_size=nd_b, max_size=nd_b)))
    if nd_b:
        shape_b = (*shape_b[: max(nd_b - 2, 0)], k, *shape_b[max(nd_b - 2, 0) + 1 :])
    x, a = data.draw(arrays(shape_a, np.int64))
    y, b = data.draw(arrays(shape_b, np.int64))
    assert_eq(gnp.dot(a, b), np.dot(x, y))


def test_dot_errors() -> None:
    with pytest.raises(ValueError, match="not aligned"):
        gnp.dot(gnp.ones((3, 3)), gnp.ones(4))


@given(st.data())
def test_outer(data: st.DataObject) -> None:
    x, a = data.draw(arrays(tuple(data.draw(st.lists(st.integers(0, 4), max_size=2))), np.float64))
    y, b = data.draw(arrays((data.draw(st.integers(0, 5)),), np.float64))
    assert_eq(gnp.outer(a, b), np.outer(x, y))
    if x.ndim == 1:
        assert_eq(la.outer(a, b), np.linalg.outer(x, y))
    else:
        with pytest.raises(ValueError, match="one-dimensional"):
            la.outer(a, b)


@given(st.data())
def test_vecdot(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 4))
    batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    other = tuple(data.draw(st.sampled_from([1, s])) for s in batch)[data.draw(st.integers(0, len(batch))) :]
    axis = data.draw(st.integers(-1, 0)) if not batch and not other else -1
    dtype = data.draw(st.sampled_from([np.int32, np.float64, np.complex128]))
    x, a = data.draw(arrays((*batch, n), dtype))
    y, b = data.draw(arrays((*other, n), dtype))
    assert_eq(la.vecdot(a, b, axis=axis), np.linalg.vecdot(x, y, axis=axis))


def test_vecdot_errors() -> None:
    with pytest.raises(ValueError, match="mismatch"):
        gnp.vecdot(gnp.ones((2, 3)), gnp.ones(4))
    with pytest.raises(ValueError):
        gnp.vecdot(gnp.ones(3), gnp.asarray(1.0))


def test_products_promotion_guard() -> None:
    a32, a64 = gnp.ones((2, 2), dtype=np.float32), gnp.ones((2, 2))
    for f in (gnp.tensordot, gnp.vecdot, lambda p, q: gnp.einsum("ij,jk", p, q), la.solve):
        with pytest.warns(gnp.PromotionWarning):
            f(a32, a64)
        with gnp.allowpromotion():
            assert f(a32, a64).dtype == np.float64


# --- einsum -------------------------------------------------------------------------------------------


@st.composite
def einsum_cases(draw: st.DrawFn) -> tuple[str, list[tuple[int, ...]]]:
    """Random subscripts over labels a-e (repeated labels within an operand included, implicit and
    explicit output) and operand shapes, some axes of length 1 broadcasting against longer ones."""
    sizes = {c: draw(st.integers(1, 3)) for c in "abcde"}
    terms = ["".join(draw(st.lists(st.sampled_from("abcde"), max_size=3))) for _ in range(draw(st.integers(1, 3)))]
    shapes = [tuple(1 if t.count(c) == 1 and draw(st.integers(0, 5)) == 0 else sizes[c] for c in t) for t in terms]
    subscripts = ",".join(terms)
    if draw(st.booleans()):
        labels = draw(st.permutations(sorted(set("".join(terms)))))
        subscripts += "->" + "".join(labels[: draw(st.integers(0, len(labels)))])
    return subscripts, shapes


@settings(max_examples=60)
@given(st.data())
def test_einsum(data: st.DataObject) -> None:
    subscripts, shapes = data.draw(einsum_cases())
    dtype = data.draw(st.sampled_from([np.int64, np.float64]))
    pairs = [data.draw(arrays(s, dtype)) for s in shapes]
    expected = np.einsum(subscripts, *[x for x, _ in pairs])
    optimize = data.draw(st.sampled_from([True, False, "optimal"]))
    assert_eq(gnp.einsum(subscripts, *[a for _, a in pairs], optimize=optimize), expected)


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ij,jk->ik", [(4, 3), (3, 5)]),
        ("bij,bjk->bik", [(3, 2, 4), (3, 4, 2)]),
        ("bij,jk->bik", [(3, 2, 4), (4, 2)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
        ("ii->i", [(4, 4)]),
        ("iii", [(3, 3, 3)]),
        ("ij,ij->", [(3, 4), (3, 4)]),
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
        ("i...,i...->...", [(3, 2, 2), (3, 1, 2)]),
        ("i,j->ij", [(3,), (4,)]),
        (",i->i", [(), (3,)]),
        ("ba", [(2, 3)]),
        ("aB,Bc", [(2, 3), (3, 2)]),
        ("ij,jk", [(2, 1), (3, 4)]),
        ("i->", [(0,)]),
    ],
)
def test_einsum_cases(subscripts: str, shapes: list, optimize: bool) -> None:
    rng = np.random.default_rng(0)
    xs = [values(rng, s, np.float64) for s in shapes]
    arrs = [gnp.from_array(x, chunks=2) for x in xs]
    assert_eq(gnp.einsum(subscripts, *arrs, optimize=optimize), np.einsum(subscripts, *xs))


def test_einsum_interleaved_and_dtypes() -> None:
    rng = np.random.default_rng(1)
    x, y = values(rng, (3, 4), np.int32), values(rng, (4, 2), np.int32)
    a, b = gnp.from_array(x, chunks=2), gnp.from_array(y, chunks=3)
    assert_eq(gnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(x, [0, 1], y, [1, 2], [0, 2]))
    assert_eq(gnp.einsum(a, [Ellipsis, 1], b, [1, 2]), np.einsum(x, [Ellipsis, 1], y, [1, 2]))
    assert_eq(gnp.einsum("ij,jk", a > 0, b > 0), np.einsum("ij,jk", x > 0, y > 0))
    c = values(rng, (3, 3), np.complex128)
    assert_eq(gnp.einsum("ij,jk", gnp.from_array(c, chunks=2), gnp.from_array(c, chunks=1)), np.einsum("ij,jk", c, c))


@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ij,jk", [(2, 3)]),
        ("ij", [(2, 3), (3,)]),
        ("ijk", [(2, 3)]),
        ("i", [(2, 3)]),
        ("i1", [(2, 3)]),
        ("i.j", [(2, 3)]),
        ("ii->i", [(2, 3)]),
        ("ij->k", [(2, 3)]),
        ("ij->ii", [(2, 3)]),
        ("i...->i", [(2, 3)]),
        ("i,i", [(3,), (4,)]),
    ],
)
def test_einsum_errors(subscripts: str, shapes: list) -> None:
    with pytest.raises(ValueError):
        np.einsum(subscripts, *[np.ones(s) for s in shapes])
    with pytest.raises(ValueError):
        gnp.einsum(subscripts, *[gnp.ones(s) for s in shapes])


# --- solvers and factorizations -----------------------------------------------------------------------


@settings(max_examples=25)
@given(st.data())
def test_inv_det_slogdet(data: st.DataObject) -> None:
    x, a = data.draw(spd())
    close(la.inv(a), np.linalg.inv(x), x.dtype)
    assert la.inv(a).dtype == np.linalg.inv(x).dtype and la.inv(a).shape == x.shape
    d = la.det(a)
    assert d.shape == x.shape[:-2] and d.dtype == x.dtype
    np.testing.assert_allclose(to_host(d.compute()), np.linalg.det(x), rtol=1e-3 if x.dtype == np.float32 else 1e-9)
    sign, logabs = la.slogdet(a)
    ref = np.linalg.slogdet(x)
    assert sign.dtype == ref.sign.dtype and logabs.dtype == ref.logabsdet.dtype
    close(sign, ref.sign, x.dtype)
    close(logabs, ref.logabsdet, x.dtype)


@settings(max_examples=25)
@given(st.data())
def test_solve(data: st.DataObject) -> None:
    x, a = data.draw(spd(batch_dims=2))
    n, batch = x.shape[-1], x.shape[:-2]
    form = data.draw(st.sampled_from(["vector", "matrix", "broadcast"]))
    if form == "vector":
        shape = (n,)
    else:
        k = data.draw(st.integers(1, 3))
        lead = batch if form == "matrix" else (data.draw(st.integers(1, 2)), *(1 for _ in batch))
        shape = (*lead, n, k)
    y, b = data.draw(arrays(shape, x.dtype))
    expected = np.linalg.solve(x, y)
    out = la.solve(a, b)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    close(out, expected, x.dtype)


def test_solve_errors() -> None:
    a = gnp.eye(3)
    with pytest.raises(ValueError, match="mismatch"):
        la.solve(a, gnp.ones(4))
    with pytest.raises(ValueError, match="mismatch"):
        la.solve(a, gnp.ones((4, 2)))
    with pytest.raises(ValueError):
        la.solve(a, gnp.asarray(1.0))
    with pytest.raises(ValueError, match="broadcast"):
        la.solve(gnp.ones((2, 3, 3)), gnp.ones((5, 3, 1)))
    with pytest.raises(LinAlgError, match="square"):
        la.solve(gnp.ones((2, 3)), gnp.ones(2))


LSTSQ_FORMS = {  # the normal equations as users write them (gnp.linalg, NumPy dispatch, functions, dot, einsum)
    "operators": lambda x, y: la.solve(x.T @ x, x.T @ y),
    "numpy": lambda x, y: np.linalg.solve(np.matmul(x.T, x), np.matmul(x.T, y)),
    "functions": lambda x, y: gnp.linalg.solve(gnp.matmul(gnp.transpose(x), x), gnp.matmul(x.mT, y)),
    "dot": lambda x, y: la.solve(x.T.dot(x), np.dot(x.T, y)),
    "einsum": lambda x, y: la.solve(gnp.einsum("ij,ik->jk", x, x), gnp.einsum("ij,i...->j...", x, y)),
}


@given(st.data())
def test_normal_equations(data: st.DataObject) -> None:
    """``solve(X.T @ X, X.T @ y)`` equals NumPy's through every entry point, for one block, row blocks and
    column blocks, vector and matrix right-hand sides, float and integer dtypes; its plan has no transpose,
    reshape or rechunk task, and X in one block is three tasks (two products and the solve)."""
    n, k = data.draw(st.integers(1, 40)), data.draw(st.integers(1, 5))
    n = max(n, 2 * k)  # well conditioned: X.T @ X of normal values, rows at least twice the columns
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int64]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    h = rng.integers(-3, 4, (n, k)).astype(dtype) if dtype == np.int64 else rng.standard_normal((n, k)).astype(dtype)
    h[np.arange(k), np.arange(k)] += 4 * max(1, n // k)  # full rank, integers included
    rhs = (n,) if data.draw(st.booleans()) else (n, data.draw(st.integers(1, 3)))
    v = values(rng, rhs, dtype)
    chunks = data.draw(st.sampled_from(["one", "rows", "random"]))
    rows = {"one": (n,), "rows": data.draw(axis_chunks(n))}.get(chunks) or data.draw(axis_chunks(n))
    cols = (k,) if chunks != "random" else data.draw(axis_chunks(k))
    x = gnp.asarray(h, chunks=(rows, cols))
    y = gnp.asarray(v, chunks=(rows, *((r,) for r in rhs[1:])) if chunks != "random" else
                    tuple(data.draw(axis_chunks(d)) for d in rhs))
    form = data.draw(st.sampled_from(sorted(LSTSQ_FORMS)))
    out = LSTSQ_FORMS[form](x, y)
    expected = np.linalg.solve(h.T @ h, h.T @ v)
    assert isinstance(out, gnp.Array)
    assert_eq(out, expected, **tol(np.float32 if dtype == np.float32 else np.float64))
    inputs = {x.expr._name, y.expr._name}
    tasks = Counter(key_split(key) for key in out.__dask_graph__() if key[0] not in inputs)
    assert not {"transpose", "blockreshape"} & set(tasks), tasks
    if x.numblocks[1] == 1 and y.numblocks[1:] in ((), (1,)):  # products of one block each: nothing gathered
        assert not {"getitem", "rechunk", "concatenate"} & set(tasks), tasks
    if x.numblocks == (1, 1) and y.numblocks == (1,) * y.ndim:
        assert tasks == Counter({"matmul": 2, "solve": 1})


@settings(max_examples=25)
@given(st.data())
def test_cholesky(data: st.DataObject) -> None:
    x, a = data.draw(spd())
    upper = data.draw(st.booleans())
    out = la.cholesky(a, upper=upper)
    assert out.dtype == x.dtype
    close(out, np.linalg.cholesky(x, upper=upper), x.dtype)


@settings(max_examples=25)
@given(st.data())
def test_eigh(data: st.DataObject) -> None:
    x, a = data.draw(spd())
    uplo = data.draw(st.sampled_from(["L", "U"]))
    w, v = la.eigh(a, UPLO=uplo)
    ref = np.linalg.eigh(x, UPLO=uplo)
    assert w.dtype == ref.eigenvalues.dtype and v.dtype == ref.eigenvectors.dtype
    wh, vh = to_host(w.compute()), to_host(v.compute())
    close(wh, ref.eigenvalues, x.dtype)
    close(x @ vh, vh * wh[..., None, :], x.dtype)  # eigenvectors up to phase
    close(la.eigvalsh(a, UPLO=uplo), np.linalg.eigvalsh(x, UPLO=uplo), x.dtype)


@st.composite
def general(draw: st.DrawFn, tall: bool = False) -> tuple[np.ndarray, gnp.Array]:
    """Random (M, N) matrices or stacks of them; ``tall``: 2-d with M >= N, cut into several row blocks."""
    dtype = draw(st.sampled_from(FLOATS))
    if tall:
        n = draw(st.integers(1, 4))
        shape = (draw(st.integers(max(n, 2), 16)), n)
        rows = draw(axis_chunks(shape[0]).filter(lambda c: len(c) > 1))
        x = values(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, dtype)
        return x, gnp.from_array(x, chunks=(rows, draw(axis_chunks(n))))
    shape = tuple(draw(st.lists(st.integers(1, 3), max_size=1))) + (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return draw(arrays(shape, dtype))


def check_qr(x: np.ndarray, q: gnp.Array, r: gnp.Array, mode: str) -> None:
    ref_q, ref_r = np.linalg.qr(x, mode=mode)
    assert q.shape == ref_q.shape and r.shape == ref_r.shape and q.dtype == ref_q.dtype and r.dtype == ref_r.dtype
    qh, rh = to_host(q.compute()), to_host(r.compute())
    close(qh @ rh, x, x.dtype)
    close(ct(qh) @ qh, np.broadcast_to(np.eye(qh.shape[-1]), ct(qh).shape[:-1] + (qh.shape[-1],)), x.dtype)
    close(np.triu(rh), rh, x.dtype)
    close(np.abs(rh), np.abs(ref_r), x.dtype)  # R is unique up to the signs of its rows


@settings(max_examples=25)
@given(st.data())
def test_qr(data: st.DataObject) -> None:
    x, a = data.draw(general())
    mode = data.draw(st.sampled_from(["reduced", "complete"]))
    check_qr(x, *la.qr(a, mode=mode), mode)
    assert la.qr(a, mode="r").shape == np.linalg.qr(x, mode="r").shape


def no_whole_matrix(out: gnp.Array, a: gnp.Array) -> None:
    """No block in the expression of ``out`` holds all rows of the row-blocked ``a`` (where TSQR's stacked R
    factors are fewer: row blocks taller than ``a`` is wide)."""
    m, n = a.shape
    if sum(min(r, n) for r in a.chunks[0]) == m:
        return
    for node in walk(out.expr):
        if getattr(node, "ndim", 0) == 2 and node.shape[0] == m:
            assert max(node.chunks[0]) < m, (type(node).__name__, node.chunks)


@settings(max_examples=30)
@given(st.data())
def test_tsqr(data: st.DataObject) -> None:
    x, a = data.draw(general(tall=True))
    q, r = la.qr(a)
    assert q.chunks[0] == a.chunks[0]
    check_qr(x, q, r, "reduced")
    no_whole_matrix(q, a)
    close(la.qr(a, mode="r"), to_host(r.compute()), x.dtype)
    s_ref = np.linalg.svd(x, compute_uv=False)
    close(la.svdvals(a), s_ref, x.dtype)
    close(la.svdvals(la.matrix_transpose(a)), s_ref, x.dtype)
    for arr, ref in ((a, x), (la.matrix_transpose(a), x.T)):  # tall by TSQR, wide through its transpose
        u, s, vh = la.svd(arr, full_matrices=False)
        uh, sh, vhh = (to_host(t.compute()) for t in (u, s, vh))
        close(sh, s_ref, x.dtype)
        close((uh * sh) @ vhh, ref, x.dtype)
        close(ct(uh) @ uh, np.eye(uh.shape[1]), x.dtype)
        no_whole_matrix(u if arr is a else la.matrix_transpose(vh), a)


@settings(max_examples=25)
@given(st.data())
def test_svd(data: st.DataObject) -> None:
    x, a = data.draw(general())
    full = data.draw(st.booleans())
    u, s, vh = la.svd(a, full_matrices=full)
    ref = np.linalg.svd(x, full_matrices=full)
    for got, want in zip((u, s, vh), ref):
        assert got.shape == want.shape and got.dtype == want.dtype
    uh, sh, vhh = (to_host(t.compute()) for t in (u, s, vh))
    k = sh.shape[-1]
    close(sh, ref.S, x.dtype)
    close((uh[..., :k] * sh[..., None, :]) @ vhh[..., :k, :], x, x.dtype)
    close(la.svd(a, compute_uv=False), ref.S, x.dtype)
    close(la.svdvals(a), ref.S, x.dtype)


@settings(max_examples=25)
@given(st.data())
def test_pinv_rank_lstsq(data: st.DataObject) -> None:
    x, a = data.draw(general(tall=data.draw(st.booleans())))
    close(la.pinv(a), np.linalg.pinv(x), x.dtype)
    close(la.pinv(a, rtol=None), np.linalg.pinv(x, rtol=None), x.dtype)
    assert_eq(la.matrix_rank(a), np.asarray(np.linalg.matrix_rank(x)).astype(np.intp))
    assert_eq(la.matrix_rank(a, tol=1e300), np.asarray(np.linalg.matrix_rank(x, tol=1e300)).astype(np.intp))
    if x.ndim != 2:
        return
    k = data.draw(st.sampled_from([None, 1, 2]))
    y, b = data.draw(arrays((x.shape[0],) if k is None else (x.shape[0], k), x.dtype))
    sol, res, rank, s = la.lstsq(a, b)
    ref = np.linalg.lstsq(x, y)
    assert sol.dtype == ref[0].dtype and res.dtype == ref[1].dtype and s.dtype == ref[3].dtype
    assert rank == ref[2] and res.shape == ref[1].shape
    close(sol, ref[0], x.dtype)
    close(s, ref[3], x.dtype)
    close(res, ref[1], x.dtype)


def test_rank_deficient() -> None:
    rng = np.random.default_rng(2)
    x = values(rng, (8, 2), np.float64) @ values(rng, (2, 4), np.float64)  # rank 2
    a = gnp.from_array(x, chunks=(3, 2))
    assert_eq(la.matrix_rank(a), np.asarray(np.linalg.matrix_rank(x)).astype(np.intp))
    close(la.pinv(a), np.linalg.pinv(x), x.dtype)
    y = values(rng, (8,), np.float64)
    sol, res, rank, _ = la.lstsq(a, y)
    ref = np.linalg.lstsq(x, y)
    assert rank == ref[2] == 2 and res.shape == (0,)
    close(sol, ref[0], x.dtype)
    assert_eq(la.matrix_rank(gnp.zeros(3)), np.asarray(0, dtype=np.intp))
    assert_eq(la.matrix_rank(gnp.ones(3)), np.asarray(1, dtype=np.intp))


@settings(max_examples=25)
@given(st.data())
def test_matrix_power(data: st.DataObject) -> None:
    n_pow = data.draw(st.integers(-3, 5))
    if n_pow < 0:
        x, a = data.draw(spd(dtypes=[np.float64]))
        x, a = x / x.shape[-1], a / x.shape[-1]
    else:
        n = data.draw(st.integers(1, 4))
        batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=1)))
        x, a = data.draw(arrays((*batch, n, n), np.int64))
    expected = np.linalg.matrix_power(x, n_pow)
    out = la.matrix_power(a, n_pow)
    assert out.dtype == expected.dtype
    if x.dtype.kind == "i":
        assert_eq(out, expected)
    else:
        close(out, expected, x.dtype)


def test_value_errors_on_compute() -> None:
    """Singular or indefinite matrices raise LinAlgError when computed, on either backend."""
    singular = gnp.zeros((3, 3), chunks=2)
    for f in (la.inv, lambda m: la.solve(m, gnp.ones(3)), la.cholesky):
        out = f(singular)
        with pytest.raises(LinAlgError):
            out.compute()
    assert la.slogdet(singular).sign.compute() == 0


@pytest.mark.parametrize("name", ["inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "qr", "svd", "svdvals",
                                  "pinv", "matrix_rank", "matrix_power"])
def test_shape_errors(name: str) -> None:
    f = getattr(la, name)
    call = (lambda x: f(x, 2)) if name == "matrix_power" else f
    for bad in (np.ones(3), np.ones((2, 3)), np.ones((3, 3), dtype=np.float16)):
        try:
            call(bad)
        except Exception as e:  # noqa: BLE001 - whatever NumPy raises, gnp must raise
            with pytest.raises(type(e)):
                call(gnp.asarray(bad))
        else:
            call(gnp.asarray(bad))


def test_argument_errors() -> None:
    a = gnp.eye(3)
    with pytest.raises(ValueError, match="Unrecognized mode"):
        la.qr(a, mode="foo")
    with pytest.raises(ValueError):
        la.qr(a, mode="raw")
    with pytest.raises(ValueError, match="UPLO"):
        la.eigh(a, UPLO="X")
    with pytest.raises(TypeError, match="integer"):
        la.matrix_power(a, 1.5)
    with pytest.raises(ValueError, match="both"):
        la.pinv(a, rcond=0.1, rtol=0.1)
    with pytest.raises(ValueError, match="both"):
        la.matrix_rank(a, tol=0.1, rtol=0.1)
    with pytest.raises(LinAlgError, match="two-dimensional"):
        la.lstsq(gnp.ones((2, 3, 3)), gnp.ones(3))
    with pytest.raises(LinAlgError, match="Incompatible"):
        la.lstsq(a, gnp.ones(4))


# --- norms, diagonal, trace, cross --------------------------------------------------------------------


@st.composite
def axis_choice(draw: st.DrawFn, ndim: int) -> Any:
    form = draw(st.sampled_from(["none", "int", "tuple"]))
    if form == "none" or ndim == 0:
        return None
    if form == "int":
        return draw(st.integers(-ndim, ndim - 1))
    return tuple(draw(st.permutations(range(ndim)))[: draw(st.integers(1, ndim))])


@given(st.data())
def test_vector_norm(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), max_size=3)))
    dtype = data.draw(st.sampled_from([np.int32, np.float32, np.float64, np.complex128]))
    x, a = data.draw(arrays(shape, dtype))
    axis = data.draw(axis_choice(len(shape)))
    ord_ = data.draw(st.sampled_from([2, 1, 0, 3, 0.5, -1, np.inf, -np.inf]))
    keepdims = data.draw(st.booleans())
    with np.errstate(divide="ignore"):  # negative orders of zero vectors
        expected = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord_)
    assert_eq(la.vector_norm(a, axis=axis, keepdims=keepdims, ord=ord_), expected, rtol=1e-4 if dtype == np.float32 else 1e-9)


@given(st.data())
def test_matrix_norm(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
    dtype = data.draw(st.sampled_from([np.int64, np.float64, np.complex128]))
    x, a = data.draw(arrays(shape, dtype))
    ord_ = data.draw(st.sampled_from(["fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]))
    keepdims = data.draw(st.booleans())
    assert_eq(la.matrix_norm(a, ord=ord_, keepdims=keepdims), np.linalg.matrix_norm(x, ord=ord_, keepdims=keepdims),
              rtol=1e-9)


@given(st.data())
def test_norm(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), max_size=3)))
    x, a = data.draw(arrays(shape, np.float64))
    form = data.draw(st.sampled_from(["all", "vector", "matrix"]))
    if form == "all":
        axis, ord_ = None, None if len(shape) not in (1, 2) else data.draw(st.sampled_from([None, 2 if len(shape) == 1 else "fro", 1]))
    elif form == "vector" and shape:
        axis, ord_ = data.draw(st.integers(-len(shape), len(shape) - 1)), data.draw(st.sampled_from([None, 1, 2, np.inf, 0]))
    elif len(shape) >= 2:
        axis = tuple(data.draw(st.permutations(range(len(shape))))[:2])
        ord_ = data.draw(st.sampled_from([None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]))
    else:
        return
    keepdims = data.draw(st.booleans())
    assert_eq(la.norm(a, ord_, axis, keepdims), np.linalg.norm(x, ord_, axis, keepdims), rtol=1e-9)


def test_norms_of_empty_and_errors() -> None:
    assert_eq(la.vector_norm(gnp.zeros((0, 3)), axis=0, ord=np.inf), np.linalg.vector_norm(np.zeros((0, 3)), axis=0, ord=np.inf))
    assert_eq(la.matrix_norm(gnp.zeros((0, 3)), ord=1), np.linalg.matrix_norm(np.zeros((0, 3)), ord=1))
    for f, args in [
        (la.vector_norm, {"ord": "fro"}), (la.matrix_norm, {"ord": 3}), (la.norm, {"axis": (0, 0)}),
        (la.norm, {"axis": (0, 1, 2)}), (la.norm, {"ord": 2, "axis": None}), (la.norm, {"ord": "fro", "axis": 0}),
    ]:
        x = np.ones((3, 3, 3))
        with pytest.raises(ValueError):
            getattr(np.linalg, f.__name__)(x, **args)
        with pytest.raises(ValueError):
            f(gnp.asarray(x), **args)
    with pytest.raises(np.exceptions.AxisError):
        la.matrix_norm(gnp.ones(3))


@given(st.data())
def test_diagonal_trace(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=2, max_size=3)))
    dtype = data.draw(st.sampled_from([np.int32, np.float64]))
    x, a = data.draw(arrays(shape, dtype))
    offset = data.draw(st.integers(-5, 5))
    assert_eq(la.diagonal(a, offset=offset), np.linalg.diagonal(x, offset=offset))
    assert_eq(la.trace(a, offset=offset), np.linalg.trace(x, offset=offset))
    assert_eq(la.trace(a, offset=offset, dtype=np.float32), np.linalg.trace(x, offset=offset, dtype=np.float32))


def test_diagonal_errors() -> None:
    with pytest.raises(ValueError, match="two dimensions"):
        la.diagonal(gnp.ones(3))
    with pytest.raises(ValueError, match="two dimensions"):
        la.trace(gnp.ones(3))


@given(st.data())
def test_cross(data: st.DataObject) -> None:
    batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    pos = data.draw(st.integers(0, len(batch)))
    shape = (*batch[:pos], 3, *batch[pos:])
    other = tuple(1 if data.draw(st.booleans()) else s for s in shape)
    other = other[: pos] + (3,) + other[pos + 1 :]
    dtype = data.draw(st.sampled_from([np.int64, np.float64]))
    x, a = data.draw(arrays(shape, dtype))
    y, b = data.draw(arrays(other, dtype))
    axis = pos - len(shape) if data.draw(st.booleans()) else pos
    expected = np.linalg.cross(x, y, axis=axis)
    # a GPU kernel contracts a*b - c*d into fma(a, b, -c*d): off by the rounding of c*d, where NumPy gives 0
    # for parallel vectors
    scale = float(np.max(np.abs(x), initial=0) * np.max(np.abs(y), initial=0))
    atol = 0.0 if BACKEND == "numpy" or dtype != np.float64 else 4 * np.finfo(np.float64).eps * scale
    assert_eq(la.cross(a, b, axis=axis), expected, atol=atol)


def test_cross_errors() -> None:
    with pytest.raises(ValueError, match="3-dimensional vectors"):
        la.cross(gnp.ones(2), gnp.ones(2))
    with pytest.raises(ValueError):
        la.cross(gnp.ones((2, 3)), gnp.ones((3, 3)))


def test_lazy_and_reexports() -> None:
    """Results are lazy Arrays (nothing computed to build them); matmul/matrix_transpose are re-exported."""
    a = gnp.from_array(well_conditioned(np.random.default_rng(3), (4, 4), np.float64), chunks=2)
    for out in (la.inv(a), la.det(a), la.solve(a, a), la.cholesky(a), la.qr(a).Q, la.svd(a).U, la.eigh(a)[1],
                la.pinv(a), la.matrix_rank(a), la.matrix_power(a, 3), la.norm(a, 2), gnp.einsum("ij,jk", a, a)):
        assert isinstance(out, gnp.Array)
    assert la.matmul is gnp.matmul and la.matrix_transpose is gnp.matrix_transpose
    assert set(la.__all__) <= set(dir(la))
    assert math.isclose(la.det(a).compute().item(), np.linalg.det(to_host(a.compute())))
