"""Stencils written as setitem updates of a fresh array (``y = 4 * g; y[1:, :] -= g[:-1, :]; ...``) are planned
as the shifted-slice form of the same stencil (one CG iteration in both forms: the same kernels, sweeps and
bytes), and give NumPy's results bit for bit on NumPy blocks: borders, overlapping updates applied in order,
signed zeros, NaNs and dtype casts included."""
from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _solvers import cg_step
from _solvers import laplacian as shifted_laplacian
from conftest import BACKEND, assert_eq, to_host

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.expr import Bundle, SetItem
from dask_gpunumeric.optimize.dag import DAG

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import cg  # noqa: E402  (the benchmarks' CG, both forms; benchmarks/ is not a package)
import cg_setitem  # noqa: E402
from cg_setitem import laplacian as setitem_laplacian  # noqa: E402

SHAPES = [((64, 64), 64), ((64, 48), (16, 24)), ((33, 17), (10, 5)), ((7, 9), (3, 4))]


def assert_bitwise(actual: gnp.Array, expected: np.ndarray) -> None:
    """NumPy's values through every entry point; on NumPy blocks the same bits (NaNs: NaN in the same places)."""
    if BACKEND != "numpy":  # generated kernels may contract a * b - c into one rounding: NumPy's values, to rounding
        assert_eq(actual, expected)
        return
    assert_eq(actual, expected, rtol=0)
    got = np.asarray(gnp.fetch(actual))
    assert got.dtype == expected.dtype
    bits = f"u{expected.dtype.itemsize}"
    same = got.view(bits) == expected.view(bits)
    if expected.dtype.kind == "f":
        same |= np.isnan(got) & np.isnan(expected)
    assert same.all(), np.argwhere(~same)[:5]


def signature(outputs: list[gnp.Array]) -> tuple:
    """What the optimizer plans for ``outputs`` computed together: stencil groups (plan, kernels, sweeps,
    floor bytes, tasks), fused groups (program, bytes) and tasks by kind."""
    info = plan(Bundle(*[o.expr for o in outputs]))
    return ([(s["kernel"], s["kernels"], s["sweeps_per_kernel"], s["floor_bytes"], s["plan"], s["tasks"], s["halo"])
             for s in info["stencils"]],
            [(g["kernel"], g["ops"], g["bytes_read_per_block"], g["bytes_written_per_block"], g["program"],
              g["scalars"]) for g in info["groups"]],
            info["tasks_by_prefix"])


def cg_state(shape: tuple[int, int], chunks: Any) -> tuple[np.ndarray, tuple]:
    b = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    g = gnp.from_array(b, chunks=chunks).persist()
    return b, (gnp.zeros_like(g).persist(), g, g, gnp.sum(g * g).persist())


def cg_iteration(state: tuple, laplacian: Callable[[Any, Any], Any]) -> tuple:
    return cg.step(state, gnp, laplacian)


@pytest.mark.parametrize("shape, chunks", SHAPES)
def test_cg_iteration_plans_like_shifted_slices(shape, chunks):
    _, state = cg_state(shape, chunks)
    shifted = cg_iteration(state, shifted_laplacian)
    updated = cg_iteration(state, setitem_laplacian)
    assert not any(isinstance(n, SetItem) for n in DAG(Bundle(*[o.expr for o in updated])).order)
    assert signature(list(updated)) == signature(list(shifted))
    for a, b in zip(updated, shifted):  # what users read: explain's text, but for the array's name
        assert gnp.explain(a).splitlines()[1:] == gnp.explain(b).splitlines()[1:]


@pytest.mark.parametrize("shape, chunks", SHAPES)
def test_setitem_laplacian_equals_numpy(shape, chunks):
    host = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    host[0, :2] = [-0.0, np.nan]
    assert_bitwise(setitem_laplacian(gnp.from_array(host, chunks=chunks), gnp), setitem_laplacian(host, np))
    assert_bitwise(setitem_laplacian(gnp.from_array(host, chunks=chunks), gnp),
                   np.asarray(shifted_laplacian(host, np)))


@pytest.mark.parametrize("shape, chunks", SHAPES[1:3])
def test_cg_with_setitem_laplacian_equals_numpy(shape, chunks):
    b, state = cg_state(shape, chunks)
    expected: tuple = (np.zeros_like(b), b, b, np.sum(b * b))
    for _ in range(3):
        state = cg_iteration(state, setitem_laplacian)
        expected = cg_step(expected, np)
    for ours, theirs in zip(state, expected):
        assert_eq(ours, np.asarray(theirs, dtype=np.float32), rtol=1e-4, atol=1e-4)


def borders(xp: Any, g: Any, h: Any) -> Any:
    y = 2 * g
    y[0:, 3:] -= h[:, :-3]  # touches three borders
    y[:2] += h[-2:]  # fewer indices than axes
    y[1:-1, 1:-1] *= h[:-2, 2:]
    y[:, :] -= h  # the whole array
    return y


def overlapping(xp: Any, g: Any, h: Any) -> Any:
    y = g - h
    y[2:5] -= h[0:3]
    y[3:6] *= g[1:4]
    y[1:] -= y[:-1]  # the value reads the array it updates (before the update, as NumPy)
    y[:-1] += y[1:]
    return y


def explicit_value(xp: Any, g: Any, h: Any) -> Any:
    y = g * 3
    y[1:, :] = y[1:, :] - h[:-1, :]
    y[:, 1:] = y[:, 1:] + h[:, :-1]
    return y


def reversed_operands(xp: Any, g: Any, h: Any) -> Any:
    y = g + 1
    y[1:] = h[:-1] - y[1:]  # not an update of y by h: a SetItem, as before
    y[:, 1:] = h[:, :-1] + y[:, 1:]
    return y


UPDATES = [borders, overlapping, explicit_value, reversed_operands]
DTYPES = [  # (y's, h's): casts back to y's dtype on setitem
    (np.float32, np.float32), (np.float64, np.float32), (np.float32, np.float64), (np.float32, np.int16),
    (np.int32, np.int64), (np.int64, np.int32), (np.int32, np.float64), (np.int64, np.float64),
]


def _values(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        out = rng.standard_normal(shape).astype(dtype)
        out.flat[:4] = [-0.0, np.nan, np.inf, -np.inf][: out.size]
        return out
    return rng.integers(-2**40 if np.dtype(dtype).itemsize == 8 else -1000, 2**40 if np.dtype(dtype).itemsize == 8
                        else 1000, shape).astype(dtype)


@pytest.mark.parametrize("update", UPDATES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtypes", DTYPES, ids=lambda d: f"{np.dtype(d[0])}-{np.dtype(d[1])}")
@pytest.mark.parametrize("shape, chunks", [((9, 11), (4, 5)), ((12, 8), 12), ((6, 7), (1, 3))])
def test_setitem_updates_equal_numpy(update, dtypes, shape, chunks):
    g_host, h_host = _values(shape, dtypes[0], 3), _values(shape, dtypes[1], 4)
    if BACKEND != "numpy" and np.dtype(dtypes[0]).kind == "i" and np.dtype(dtypes[1]).kind == "f":
        # NaN and infinities cast to an integer are undefined (NumPy warns; x86 gives INT_MIN, CUDA saturates)
        h_host = np.nan_to_num(h_host, nan=0.0, posinf=1.0, neginf=-1.0)
    g, h = gnp.from_array(g_host, chunks=chunks), gnp.from_array(h_host, chunks=chunks)
    with np.errstate(all="ignore"):
        try:
            expected = update(np, g_host, h_host)
        except TypeError as e:  # in-place casts NumPy refuses (float into int): refused alike
            with pytest.raises(TypeError), gnp.allowpromotion():
                update(gnp, g, h)
            return
        with gnp.allowpromotion():  # (NumPy's promotions, as the scripts write them)
            actual = update(gnp, g, h)
        assert_bitwise(actual, expected)


@pytest.mark.parametrize("chunks", [(3, 4), (1, 9), 7])
def test_reads_wholly_past_the_ends(chunks):
    """A block whose reads of a source all fall past its ends (filled) gets the fill, not a missing buffer."""
    host = _values((7, 9), np.float32, 5)
    g = gnp.from_array(host, chunks=chunks)
    for f in (lambda xp, g: g * 2 - xp.pad(g[1:], ((0, 1), (0, 0))),
              lambda xp, g: g * 2 - xp.pad(g[:-2, 3:], ((2, 0), (0, 3)), constant_values=1.5)):
        assert_bitwise(f(gnp, g), f(np, host))


def test_updates_by_views_are_elementwise():
    """The updates the optimizer can plan as stencils are elementwise nodes; those it can't stay SetItems."""
    g = gnp.from_array(np.arange(20.0).reshape(4, 5), chunks=2)
    y = 4 * g
    y[1:, :] -= g[:-1, :]
    assert not isinstance(y.expr, SetItem)
    y[::2] -= g[::2]  # a step: not a box
    assert isinstance(y.expr, SetItem)
    z = 4 * g
    z[1:] = z[1:] / g[:-1]  # no identity taken
    assert isinstance(z.expr, SetItem)
    w = gnp.from_array(np.arange(20, dtype=np.int64).reshape(4, 5), chunks=2)
    w[1:] = w[1:] - g[:-1]  # int64 -> float64 -> int64 is not exact: a SetItem
    assert isinstance(w.expr, SetItem)


@pytest.mark.parametrize("chunks", [(33, 17), (10, 5)])
@pytest.mark.parametrize("form", ["setitem", "shifted slices"])
def test_repeated_plain_cg_rebuilds_its_stencil_from_kept_nodes_and_compiles_nothing(monkeypatch, form, chunks):
    """The plain CG of setitem updates (or of shifted slices of a pad) called again and again, as the suite's
    ``gnp-auto`` row calls it: from its third call on, every update (every subtraction of shifted slices, whose
    chunks differ) is made again from the nodes kept for its names (none worked out anew), each node named as its
    constructor names it; from its second call on, the graph is found cached (no tree compiled); NumPy's values
    through every entry point (bit for bit on one block of NumPy blocks)."""
    import dask

    from dask_gpunumeric.api import elementwise, indexing
    from dask_gpunumeric.expr.base import walk
    from dask_gpunumeric.runtime import compile as _compile

    host = cg.inputs(33, 17)[0]
    b = dask.persist(gnp.from_array(host, chunks=chunks))[0]
    laplacian = setitem_laplacian if form == "setitem" else cg.laplacian
    expected = cg_setitem.cg(np, host, 3)
    entries = {"fetch": gnp.fetch, "asarray": gnp.allowfetch(np.asarray), "compute": lambda a: a.compute(),
               "dask.compute": lambda a: dask.compute(a)[0]}
    built, compiled = [], []
    module, builder = (indexing, "_shifted_update") if form == "setitem" else (elementwise, "align_chunks")
    build, compile_tree = getattr(module, builder), _compile.compile_tree
    monkeypatch.setattr(module, builder, lambda *a: built.append(1) or build(*a))
    monkeypatch.setattr(_compile, "compile_tree", lambda tree: compiled.append(tree) or compile_tree(tree))
    for call in range(3):
        for name, entry in entries.items():
            built.clear()
            compiled.clear()
            x = cg_setitem.cg(gnp, b, 3, laplacian=laplacian)
            for node in walk(x.expr):
                assert node._name == type(node)(*node.operands)._name
            got = to_host(entry(x))
            assert compiled == [] or call == 0, name  # the graph found cached from the second call on
            assert built == [] or call < 2, name
            if BACKEND == "numpy" and chunks == (33, 17):
                np.testing.assert_array_equal(got, expected)
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("update", UPDATES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtypes", DTYPES[:4], ids=lambda d: f"{np.dtype(d[0])}-{np.dtype(d[1])}")
def test_updates_made_again_are_their_constructors_nodes(update, dtypes):
    """Updates built again on inputs of the same names (made from the nodes kept for them from the third time on)
    are the nodes their constructors make, names and metadata alike, and give NumPy's values bit for bit."""
    from dask_gpunumeric.expr.base import walk

    g_host, h_host = _values((9, 11), dtypes[0], 6), _values((9, 11), dtypes[1], 7)
    g, h = gnp.from_array(g_host, chunks=(4, 5)), gnp.from_array(h_host, chunks=(4, 5))
    with np.errstate(all="ignore"):
        expected = update(np, g_host, h_host)
    names = set()
    for _ in range(4):
        with gnp.allowpromotion():
            actual = update(gnp, g, h)
        names.add(actual.name)
        for node in walk(actual.expr):
            generic = type(node)(*node.operands)
            assert (generic._name, generic.chunks, generic.dtype, generic.backend) == \
                (node._name, node.chunks, node.dtype, node.backend)
        assert_bitwise(actual, expected)
    assert len(names) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_pads_and_shifted_slices_made_again_are_their_constructors_nodes(dtype):
    """Constant pads and the shifted-slice Laplacian built again on inputs of the same names (made from the nodes
    kept for them from the third time on) are the nodes their constructors make, and give NumPy's values bit for
    bit: signed zeros, NaN and casts of the pad values included."""
    from dask_gpunumeric.expr.base import walk

    host = _values((9, 11), dtype, 8)
    g = gnp.from_array(host, chunks=(4, 5))
    pads = [lambda xp, a: xp.pad(a, 1), lambda xp, a: xp.pad(a, ((2, 0), (0, 3)), constant_values=-0.0),
            lambda xp, a: xp.pad(a, ((0, 1), (1, 1)), constant_values=((1.5, np.nan), (7, -2))),
            lambda xp, a: xp.pad(a[1:], ((1, 0), (0, 0))) + a,
            lambda xp, a: shifted_laplacian(a, xp)]
    for f in pads:
        with np.errstate(invalid="ignore"):
            try:
                expected = f(np, host)
            except ValueError:  # NaN into an integer: refused alike
                with pytest.raises(ValueError):
                    f(gnp, g)
                continue
        names = set()
        for _ in range(4):
            actual = f(gnp, g)
            names.add(actual.name)
            for node in walk(actual.expr):
                generic = type(node)(*node.operands)
                assert (generic._name, generic.chunks, generic.dtype, generic.backend) == \
                    (node._name, node.chunks, node.dtype, node.backend)
            assert_bitwise(actual, np.asarray(expected))
        assert len(names) == 1


@pytest.mark.parametrize("chunks", [(4, 5), 9])
def test_shifted_slices_on_the_short_path_are_the_full_paths_nodes(monkeypatch, chunks):
    """Operations on shifted slices, whose chunks differ (rechunked to agree), give the nodes of the full elementwise
    path, names alike, on their first build and when made again from kept nodes."""
    from dask_gpunumeric.api import elementwise
    from dask_gpunumeric.api.array import Array

    host = _values((9, 11), np.float32, 9)
    g = gnp.from_array(host, chunks=chunks)

    def build():
        return [shifted_laplacian(g, gnp), gnp.where(g[1:] > 0, g[:-1], 2.0), 2.5 * g[:, 1:] - g[:, :-1] / 3]

    names = [[a.name for a in build()] for _ in range(4)]
    with monkeypatch.context() as patched:
        patched.setattr(elementwise, "_short_path", lambda *args: None)
        patched.setattr(Array, "_elementwise", staticmethod(lambda *args: None))
        full = [a.name for a in build()]
    assert all(n == full for n in names)
    assert_bitwise(build()[0], shifted_laplacian(host, np))


def _widening_update(y: Any, g: Any) -> Any:
    y[1:, :] -= g[:-1, :]  # float32 -= float64: the subtraction widens (the promotion guard), the update casts back
    return y


def _widened_value_assigned(y: Any, g: Any) -> Any:
    with gnp.allowpromotion():
        t = y[1:, :] - g[:-1, :]
    y[1:, :] = t  # an assignment casts, as NumPy's does: no promotion of the user's
    return y


@pytest.mark.parametrize("mode", ["warn", "error"])
@pytest.mark.parametrize("update", [_widening_update, _widened_value_assigned], ids=lambda f: f.__name__)
def test_updates_made_again_ask_the_guards_their_first_build_asks(monkeypatch, update, mode):
    """Updates of a float32 array by float64 views, called again and again (made from kept nodes from the third call
    on): on every call, the promotion guard asks exactly what the user's own operations ask, at the user's line and
    naming the fix (a warning per call, or in strict mode the error), and nothing for the update itself; NumPy's
    values bit for bit through every entry point."""
    import warnings

    from dask_gpunumeric.api import indexing, recipes

    y_host = _values((9, 11), np.float32, 10)
    g_host = _values((9, 11), np.float64, 11)
    expected = update(y_host.copy(), g_host)
    entries = {"fetch": gnp.fetch, "asarray": gnp.allowfetch(np.asarray), "compute": lambda a: a.compute()}
    monkeypatch.setattr(indexing, "_UPDATES", recipes.Templates())
    widening = update is _widening_update
    line = update.__code__.co_firstlineno + 1
    with gnp.config.set(guards=mode):
        for call in range(4):
            for entry in entries.values():
                y, g = gnp.from_array(y_host, chunks=(4, 5)), gnp.from_array(g_host, chunks=(4, 5))
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    if widening and mode == "error":
                        with pytest.raises(gnp.PromotionError, match="allowpromotion"):
                            update(y, g)
                        continue
                    got = to_host(entry(update(y, g)))
                guards = [(w.category, w.filename, w.lineno) for w in caught if issubclass(w.category, gnp.GuardWarning)]
                assert guards == ([(gnp.PromotionWarning, __file__, line)] if widening else [])
                assert all("allowpromotion" in str(w.message) for w in caught if w.category is gnp.PromotionWarning)
                assert got.dtype == expected.dtype
                if BACKEND == "numpy":
                    np.testing.assert_array_equal(got, expected)
                    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
                else:
                    np.testing.assert_allclose(got, expected, rtol=1e-6)
    kept = list(indexing._UPDATES._kept.values())  # (the updates' nodes, made again from the second call on)
    assert kept == [] if widening and mode == "error" else len(kept) == 1 and kept[0] is not None
