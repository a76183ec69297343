"""``gnp.matmul``, the ``@`` operator and ``np.matmul`` on gnp Arrays against NumPy: 2-d @ 2-d over random
shapes and random, misaligned chunkings (zero-size axes and zero-length blocks included), vector operands
(1-d @ 2-d, 2-d @ 1-d, 1-d @ 1-d), integer, float and complex dtypes, the block structure of the product
(``matmul-`` keys, one task per output block), products of transposed operands (``X.T @ X``: the library's
product on transposed views, no transpose, reshape or rechunk task; one task per output block where the
summed axis is one piece, a product per piece and a tree of sums otherwise), stacks of matrices block by
block, errors, the promotion guard, and a product on a distributed cluster."""
from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import numpy as np
import pytest
from dask.core import flatten
from dask.utils import key_split
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric import backend as _backend
from dask_gpunumeric.api import interop as _protocols
from conftest import BACKEND, assert_eq, axis_chunks, to_host

DTYPES = ["int32", "int64", "float32", "float64", "complex128"]
STYLES = ["function", "operator", "numpy"]


# --- strategies and helpers -------------------------------------------------------------------------


def data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Small values of ``dtype``: integers in [-5, 5] (no overflow), normal floats, complex with both parts."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    out = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        out = out + 1j * rng.standard_normal(shape)
    return out.astype(dtype)


def product(x: Any, y: Any, style: str) -> Any:
    if style == "function":
        return gnp.matmul(x, y)
    if style == "operator":
        return x @ y
    return np.matmul(x, y)


def check(actual: gnp.Array, expected: np.ndarray) -> None:
    """Equal to NumPy: exactly for integers; for floats to a tolerance relative to the operands' scale
    (entries of a product can cancel to near zero, where a relative tolerance alone fails)."""
    if expected.dtype.kind in "fc":
        single = expected.dtype in (np.float32, np.complex64)
        assert_eq(actual, expected, rtol=1e-4 if single else 1e-10, atol=1e-4 if single else 1e-10)
    else:
        assert_eq(actual, expected)


@pytest.fixture
def fresh_warnings(monkeypatch) -> set:
    """The fallback warns once per function: forget what it warned about (for this test)."""
    warned: set = set()
    monkeypatch.setattr(_protocols, "_WARNED", warned)
    return warned


def matmul_tasks(z: gnp.Array) -> list:
    """The keys of the (optimized) graph whose task prefix is ``matmul``."""
    return [k for k in z.__dask_graph__() if key_split(k) == "matmul"]


# --- 2-d @ 2-d over random shapes and chunkings ---------------------------------------------------------


@st.composite
def matrix_pair(draw: Any) -> tuple:
    n, k, m = (draw(st.integers(0, 7)) for _ in range(3))
    chunks_a = (draw(axis_chunks(n, empty=True)), draw(axis_chunks(k, empty=True)))
    chunks_b = (draw(axis_chunks(k, empty=True)), draw(axis_chunks(m, empty=True)))
    dtype = draw(st.sampled_from(DTYPES))
    style = draw(st.sampled_from(STYLES))
    return (n, k, m), chunks_a, chunks_b, dtype, style


@given(matrix_pair())
def test_matrix_matrix(case):
    (n, k, m), chunks_a, chunks_b, dtype, style = case
    a, b = data((n, k), dtype, 1), data((k, m), dtype, 2)
    x, y = gnp.asarray(a, chunks=chunks_a), gnp.asarray(b, chunks=chunks_b)
    z = product(x, y, style)
    assert isinstance(z, gnp.Array)
    assert z.chunks == (x.chunks[0], y.chunks[1])  # the operands' row and column blocks, nothing gathered
    assert z.expr._name.startswith("matmul-")
    assert all(key[0] == z.expr._name for key in flatten(z.__dask_keys__()))
    assert len(matmul_tasks(z)) == len(x.chunks[0]) * len(y.chunks[1])  # one task per output block
    check(z, a @ b)


def test_matrix_matrix_keys_and_blocks():
    a, b = data((9, 10), "float64", 3), data((10, 7), "float64", 4)
    x = gnp.asarray(a, chunks=(4, 3))  # inner chunks (3, 3, 3, 1) against (4, 4, 2): misaligned
    y = gnp.asarray(b, chunks=(4, 5))
    z = x @ y
    assert z.numblocks == (3, 2)
    keys = [k for row in z.__dask_keys__() for k in row]
    assert [k[1:] for k in keys] == [(i, j) for i in range(3) for j in range(2)]
    assert all(k[0].startswith("matmul-") and k[0] == z.expr._name for k in keys)
    assert len(matmul_tasks(z)) == 6
    check(z, a @ b)
    # the same product again is the same expression (deterministic names)
    assert (x @ y).expr._name == z.expr._name
    assert gnp.matmul(x, y).expr._name == z.expr._name == np.matmul(x, y).expr._name


# --- vector operands -------------------------------------------------------------------------------------


@st.composite
def vector_case(draw: Any) -> tuple:
    kind = draw(st.sampled_from(["vec@mat", "mat@vec", "vec@vec"]))
    n, k = draw(st.integers(0, 7)), draw(st.integers(0, 7))
    dtype = draw(st.sampled_from(DTYPES))
    style = draw(st.sampled_from(STYLES))
    if kind == "vec@mat":
        shapes = ((k,), (k, n))
        chunks = ((draw(axis_chunks(k, empty=True)),), (draw(axis_chunks(k, empty=True)), draw(axis_chunks(n, empty=True))))
    elif kind == "mat@vec":
        shapes = ((n, k), (k,))
        chunks = ((draw(axis_chunks(n, empty=True)), draw(axis_chunks(k, empty=True))), (draw(axis_chunks(k, empty=True)),))
    else:
        shapes = ((k,), (k,))
        chunks = ((draw(axis_chunks(k, empty=True)),), (draw(axis_chunks(k, empty=True)),))
    return shapes, chunks, dtype, style


@given(vector_case())
def test_vector_operands(case):
    (shape_a, shape_b), (chunks_a, chunks_b), dtype, style = case
    a, b = data(shape_a, dtype, 5), data(shape_b, dtype, 6)
    x, y = gnp.asarray(a, chunks=chunks_a), gnp.asarray(b, chunks=chunks_b)
    z = product(x, y, style)
    expected = np.asarray(a @ b)
    assert isinstance(z, gnp.Array)
    assert z.ndim == expected.ndim
    if len(shape_a) == 2:
        assert z.chunks == (x.chunks[0],)
    elif len(shape_b) == 2:
        assert z.chunks == (y.chunks[1],)
    assert matmul_tasks(z)  # the blocked product, whatever reshapes it
    check(z, expected)


def test_vector_dot_is_lazy_0d():
    a = np.arange(10.0)
    x = gnp.asarray(a, chunks=3)
    d = x @ x
    assert isinstance(d, gnp.Array) and d.shape == () and d.dtype == np.float64
    assert_eq(d, np.float64(a @ a))
    assert_eq(x / gnp.sqrt(d), a / np.sqrt(a @ a))  # used without a fetch
    assert float(to_host(d.compute())) == 285.0


def test_matrix_vector_on_many_blocks():
    a, v = data((40, 30), "float64", 7), data((30,), "float64", 8)
    x = gnp.asarray(a, chunks=(7, 4))
    y = gnp.asarray(v, chunks=6)
    check(x @ y, a @ v)
    check(y[:30] @ x.T, v @ a.T)
    check(gnp.exp(x) @ (y * 2), np.exp(a) @ (v * 2))  # products of derived arrays


# --- dtypes, mixed operands, other array-likes -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES + ["int8", "uint8", "bool"])
def test_dtypes(dtype):
    a = data((6, 5), dtype if dtype != "bool" else "int32", 9)
    b = data((5, 4), dtype if dtype != "bool" else "int32", 10)
    if dtype == "bool":
        a, b = a > 0, b > 0
    x, y = gnp.asarray(a, chunks=(2, 2)), gnp.asarray(b, chunks=(3, 2))
    z = x @ y
    assert z.dtype == (a @ b).dtype
    check(z, a @ b)


def test_int_and_float_operands():
    a, b = data((5, 4), "int64", 11), data((4, 3), "float64", 12)
    x, y = gnp.asarray(a, chunks=2), gnp.asarray(b, chunks=3)
    check(x @ y, a @ b)  # int64 with float64 is float64: no widening
    check(y.T @ x.T, b.T @ a.T)


def test_numpy_and_list_operands():
    a, b = data((5, 4), "float64", 13), data((4, 3), "float64", 14)
    x = gnp.asarray(a, chunks=2)
    for z, expected in [(x @ b, a @ b), (b.T @ x.T, b.T @ a.T), (np.matmul(a.T, x), a.T @ a),
                        (x @ b.tolist(), a @ b), (gnp.matmul(a, b), a @ b)]:
        assert isinstance(z, gnp.Array)
        check(z, expected)


# --- transposed operands, pieces of the summed axis: the plan ------------------------------------------------


def plan(z: gnp.Array, *inputs: gnp.Array) -> Counter:
    """The tasks of ``z``'s optimized graph by prefix, the inputs' blocks left out."""
    names = {x.expr._name for x in inputs}
    return Counter(key_split(k) for k in z.__dask_graph__() if k[0] not in names)


def piece_count(inner_a: tuple[int, ...], inner_b: tuple[int, ...]) -> int:
    """Pieces of the summed axis within one block of each operand (non-empty, or one for an empty axis)."""
    bounds = sorted({*np.cumsum((0, *inner_a)).tolist(), *np.cumsum((0, *inner_b)).tolist()})
    return max(1, sum(stop > start for start, stop in zip(bounds, bounds[1:])))


def tree_sums(pieces: int, split: int) -> int:
    """The sums of a tree over ``pieces`` products, ``split`` at a time (one left over passed on as it is), but
    the last (the output's)."""
    sums = 0
    while pieces > 1:
        sums += pieces // split + (pieces % split > 1)
        pieces = math.ceil(pieces / split)
    return sums - 1


@pytest.fixture
def library_products(monkeypatch) -> list:
    """The operands of every call of the backend's ``matmul`` (the block tasks' library product)."""
    xp = _backend.module(BACKEND)
    calls: list = []
    original = xp.matmul

    def counted(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(a, gnp.Array) and not isinstance(b, gnp.Array):  # (not ``np.matmul`` of gnp Arrays)
            calls.append((a, b))
        return original(a, b, *args, **kwargs)

    monkeypatch.setattr(xp, "matmul", counted)
    return calls


FORMS = {  # products of X (n, k), Z (n, m) and y (n,)
    "X.T @ X": lambda x, z, y, style: product(x.T, x, style),
    "X @ X.T": lambda x, z, y, style: product(x, x.T, style),
    "X.T @ y": lambda x, z, y, style: product(x.T, y, style),
    "y @ X": lambda x, z, y, style: product(y, x, style),
    "X.T @ Z": lambda x, z, y, style: product(x.T, z, style),
    "Z.T @ X": lambda x, z, y, style: product(z.T, x, style),
}


@st.composite
def gram_case(draw: Any) -> tuple:
    n, k, m = draw(st.integers(0, 12)), draw(st.integers(0, 5)), draw(st.integers(1, 3))
    chunks_x = (draw(axis_chunks(n, empty=True)), draw(axis_chunks(k, empty=True)))
    chunks_z = (draw(axis_chunks(n, empty=True)), draw(axis_chunks(m)))
    return ((n, k, m), chunks_x, chunks_z, draw(st.sampled_from(sorted(FORMS))),
            draw(st.sampled_from(DTYPES + ["float32", "bool"])), draw(st.sampled_from(STYLES)))


@given(gram_case())
def test_transposed_operands(case):
    """Products of ``X.T`` (and of vectors, rows of blocks chunked unlike the other operand's) equal NumPy's
    through every entry point, with no transpose, reshape or rechunk task: a ``matmul`` task per output block
    that multiplies the blocks where the summed axis is one piece, else a product per piece (``matmul-piece``)
    summed in a tree."""
    (n, k, m), chunks_x, chunks_z, form, dtype, style = case
    h, w, v = (data(shape, "int32", seed) > 0 if dtype == "bool" else data(shape, dtype, seed)
               for shape, seed in (((n, k), 27), ((n, m), 28), ((n,), 29)))
    x, z, y = gnp.asarray(h, chunks=chunks_x), gnp.asarray(w, chunks=chunks_z), gnp.asarray(v, chunks=chunks_z[:1])
    result = FORMS[form](x, z, y, style)
    check(result, np.asarray(FORMS[form](h, w, v, "operator")))
    summed = {"X.T @ X": (chunks_x[0], chunks_x[0]), "X @ X.T": (chunks_x[1], chunks_x[1]),
              "X.T @ y": (chunks_x[0], chunks_z[0]), "y @ X": (chunks_z[0], chunks_x[0]),
              "X.T @ Z": (chunks_x[0], chunks_z[0]), "Z.T @ X": (chunks_z[0], chunks_x[0])}[form]
    pieces, blocks = piece_count(*summed), math.prod(result.numblocks)
    tasks = plan(result, x, z, y)
    split = gnp.config.get("split-every")
    assert tasks == Counter({"matmul": blocks, **({"matmul-piece": blocks * (pieces + tree_sums(pieces, split))}
                                                   if pieces > 1 else {})})


def test_transposed_product_of_one_block_is_one_library_call(library_products):
    """``X.T @ X`` and ``X.T @ y`` with X in one block: one task each, one library product on views of the
    block (the transposed operand is no copy: both operands of the Gram product share the block's memory)."""
    h, v = data((50, 4), "float64", 29), data((50,), "float64", 30)
    x, y = gnp.asarray(h), gnp.asarray(v)
    gram, moment = x.T @ x, np.matmul(x.T, y)
    assert plan(gram, x) == Counter({"matmul": 1}) and plan(moment, x, y) == Counter({"matmul": 1})
    np.testing.assert_allclose(to_host(gnp.fetch(gram)), h.T @ h, rtol=1e-12)
    assert len(library_products) == 1
    a, b = library_products[0]
    assert a.shape == (4, 50) and b.shape == (50, 4)
    assert _backend.module(BACKEND).shares_memory(a, b)
    library_products.clear()
    np.testing.assert_allclose(to_host(gnp.fetch(moment)), h.T @ v, rtol=1e-12)
    assert len(library_products) == 1 and library_products[0][1].shape == (50,)


def test_row_blocks_are_summed_in_a_tree(library_products):
    """X in 20 row blocks: 20 products where the blocks are, then sums of ``split-every`` at a time: with 4,
    5 sums of 4, then one of 4 with the fifth passed on, then the output's sum of those two."""
    h = data((200, 3), "float64", 31)
    x = gnp.asarray(h, chunks=(10, 3))
    with gnp.config.set(**{"split-every": 4}):
        gram = gnp.matmul(x.T, x)
    assert plan(gram, x) == Counter({"matmul": 1, "matmul-piece": 20 + 5 + 1})
    np.testing.assert_allclose(to_host(gnp.fetch(gram)), h.T @ h, rtol=1e-12)
    assert len(library_products) == 20
    check(gram, h.T @ h)
    check(x.T @ x, h.T @ h)  # the default fan-in


# --- stacks of matrices: native, block by block -------------------------------------------------------------


@st.composite
def stack_operands(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of two matmul operands of which at least one is a stack (more than 2 dimensions): batch axes
    that broadcast (length 1 against n, missing against present), vector operands on either side."""
    n, k, m = (draw(st.integers(0, 4)) for _ in range(3))
    batch = draw(st.lists(st.integers(0, 3), min_size=1, max_size=2))
    a_batch = [b if draw(st.booleans()) else 1 for b in batch][draw(st.integers(0, len(batch))):]
    b_batch = [b if draw(st.booleans()) else 1 for b in batch][draw(st.integers(0, len(batch))):]
    a = (k,) if draw(st.integers(0, 4)) == 0 else (*a_batch, n, k)
    b = (k,) if draw(st.integers(0, 4)) == 0 else (*b_batch, k, m)
    if len(a) <= 2 and len(b) <= 2:
        a = (*batch, n, k)
    return a, b


@given(shapes=stack_operands(), dtype=st.sampled_from(DTYPES), style=st.sampled_from(STYLES), data_=st.data())
def test_stacks_against_numpy(shapes, dtype, style, data_):
    a, b = data(shapes[0], dtype, 15), data(shapes[1], dtype, 16)
    x = gnp.from_array(a, chunks=tuple(data_.draw(axis_chunks(s)) for s in a.shape))
    y = gnp.from_array(b, chunks=tuple(data_.draw(axis_chunks(s)) for s in b.shape))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        z = product(x, y, style)
    assert isinstance(z, gnp.Array) and z.backend == BACKEND and z.dtype == np.matmul(a, b).dtype
    check(z, np.matmul(a, b))


@pytest.mark.parametrize("shapes", [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 2)),
                                    ((4,), (3, 4, 2)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2))])
def test_stacks_run_natively(shapes, fresh_warnings):
    """Stacks of matrices run block by block (``matmul`` tasks, one per block of the batch axes) on the
    operands' backend, with no fallback, through every entry point."""
    a, b = data(shapes[0], "float64", 15), data(shapes[1], "float64", 16)
    x, y = gnp.asarray(a, chunks=2), gnp.asarray(b, chunks=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        for z in (x @ y, np.matmul(x, y), gnp.matmul(a, y)):
            assert isinstance(z, gnp.Array) and z.backend == BACKEND
            assert matmul_tasks(z)
            check(z, a @ b)
            np.testing.assert_allclose(gnp.fetch(z), a @ b)


def test_two_dimensional_products_do_not_fall_back(fresh_warnings):
    x = gnp.asarray(data((4, 3), "float64", 17), chunks=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.FallbackWarning)
        x @ x.T
        x[0] @ x.T
        x @ x[0]
        x[0] @ x[1]
        np.matmul(x, x.T)


# --- errors and the promotion guard ------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", [((3, 4), (5, 2)), ((4,), (5, 2)), ((3, 4), (3,)), ((4,), (5,)),
                                    ((2, 3), (2, 3))])
def test_mismatched_core_dimensions(shapes):
    a, b = data(shapes[0], "float64"), data(shapes[1], "float64")
    with pytest.raises(ValueError):
        a @ b  # NumPy agrees
    x, y = gnp.asarray(a), gnp.asarray(b)
    for style in STYLES:
        with pytest.raises(ValueError, match="mismatch in its core dimension"):
            product(x, y, style)


def test_zero_dimensional_operand():
    x = gnp.asarray(data((3, 3), "float64"))
    s = gnp.asarray(np.float64(2.0))
    for left, right in [(x, s), (s, x), (s, s), (x, 2.0), (2, x)]:
        with pytest.raises(ValueError, match="scalars are not allowed"):
            left @ right
        with pytest.raises(ValueError, match="scalars are not allowed"):
            gnp.matmul(left, right)
    with pytest.raises(ValueError):
        np.matmul(x, s)


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float64", "float32"), ("int32", "int64"),
                                    ("int32", "float32"), ("float32", "complex128")])
def test_promotion_guard(dtypes):
    a, b = data((4, 3), dtypes[0], 18), data((3, 2), dtypes[1], 19)
    x, y = gnp.asarray(a, chunks=2), gnp.asarray(b, chunks=2)
    for style in STYLES:
        with pytest.warns(gnp.PromotionWarning):
            product(x, y, style)
    with pytest.warns(gnp.PromotionWarning):
        x[0] @ y  # vectors too
    with gnp.allowpromotion():
        z = x @ y
        w = gnp.matmul(x[0], y)
    assert z.dtype == np.result_type(a, b)
    check(z, a @ b)
    check(w, a[0] @ b)
    common = np.result_type(a, b)
    check(x.astype(common) @ y.astype(common), a.astype(common) @ b.astype(common))  # explicit: allowed


def test_same_precision_is_no_promotion():
    a, b = data((4, 3), "float32", 20), data((3, 2), "complex64", 21)
    check(gnp.asarray(a) @ gnp.asarray(b), a @ b)  # complex64 holds float32s
    m = gnp.asarray(data((3, 3), "int64")) > 0
    check(m @ gnp.asarray(data((3, 2), "float32", 22)), (data((3, 3), "int64") > 0) @ data((3, 2), "float32", 22))


def test_operand_of_no_array_type():
    x = gnp.asarray(data((3, 3), "float64"))
    with pytest.raises(TypeError):
        x @ "abc"
    with pytest.raises(TypeError):
        "abc" @ x
    with pytest.raises(TypeError):
        x @ None
    with pytest.raises(TypeError):
        x @ {1: 2}


# --- on a distributed cluster --------------------------------------------------------------------------------


def test_on_cluster(client):
    a, b, v = data((30, 20), "float64", 23), data((20, 25), "float64", 24), data((20,), "float64", 25)
    x, y = gnp.asarray(a, chunks=(8, 6)), gnp.asarray(b, chunks=(5, 10))
    w = gnp.asarray(v, chunks=7)
    z = client.compute(x @ y).result()
    assert type(z).__module__.split(".")[0] == BACKEND
    np.testing.assert_allclose(to_host(z), a @ b, rtol=1e-10, atol=1e-10)
    f1, f2, f3 = client.compute([gnp.sum(x @ y, axis=0), x @ w, w @ w])
    np.testing.assert_allclose(to_host(f1.result()), (a @ b).sum(axis=0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(to_host(f2.result()), a @ v, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(to_host(f3.result()), v @ v, rtol=1e-10)
    ints = gnp.asarray(data((12, 9), "int64", 26), chunks=(5, 4))
    np.testing.assert_array_equal(to_host(client.compute(ints @ ints.T).result()),
                                  data((12, 9), "int64", 26) @ data((12, 9), "int64", 26).T)
    tall, col = data((40, 3), "float64", 27), data((40,), "float64", 28)
    t, c = gnp.asarray(tall, chunks=(7, 3)), gnp.asarray(col, chunks=9)  # products per piece, summed in a tree
    np.testing.assert_allclose(to_host(client.compute(gnp.linalg.solve(t.T @ t, t.T @ c)).result()),
                               np.linalg.solve(tall.T @ tall, tall.T @ col), rtol=1e-10)
