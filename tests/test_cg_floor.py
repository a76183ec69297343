"""CG at its floor: a pointwise field read at shifts is computed again by its readers instead of stored by a sweep
of its own (``stencil-recompute``), and a fori_loop ending with an elementwise state update (CG's
``p = r + beta * p``) starts with it instead (``loop-rotation``): the p update and the stencil that reads p are
one pass, 8 vectors moved per CG iteration instead of 9: on CuPy blocks one tile kernel (p on its tile and halo
in shared memory, stored, and the partials of p.Ap), with stencil-recompute one flat kernel. Results are unchanged: bit for bit on one NumPy block
(the same operations in the same order per element); on several blocks the partials of the reductions may be
summed in another order. Loops over several blocks are not rotated (the update's halo would be one more
exchange per iteration)."""
from __future__ import annotations

import shutil
from typing import Any

import _cuda_emulator
import dask
import numpy as np
import pytest
from _solvers import cg_step
from conftest import BACKEND, assert_eq, compile_check
from test_stencil import counted_tile_kernels, padded_laplacian

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.codegen.stencil import tile_source
from dask_gpunumeric.codegen.stencil_plan import tile_variant
from dask_gpunumeric.codegen.types import FILL
from dask_gpunumeric.expr import Bundle
from dask_gpunumeric.kernels import stencil as _stencil_kernels
from dask_gpunumeric.optimize import optimize
from dask_gpunumeric.optimize.dag import DAG
from dask_gpunumeric.runtime.regions.nodes import Loop
from dask_gpunumeric.runtime.regions.plan import Region

SETTINGS = [(rotation, recompute) for rotation in (False, True) for recompute in (False, True)]


def settings(rotation: bool, recompute: bool) -> Any:
    return dask.config.set({"gpunumeric.loop-rotation": rotation, "gpunumeric.stencil-recompute": recompute})


def cg_loop(b: gnp.Array, steps: int) -> tuple:
    state = (gnp.zeros_like(b), b, b, gnp.sum(b * b))
    return gnp.fori_loop(steps, lambda i, s: cg_step(s, gnp), state)


def numpy_cg(b: np.ndarray, steps: int) -> tuple:
    state: tuple = (np.zeros_like(b), b, b, np.sum(b * b))
    for _ in range(steps):
        state = cg_step(state, np)
    return state


def rhs(shape: tuple[int, int]) -> np.ndarray:
    b = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    b[0, 0], b[-1, 1] = -0.0, 0.0
    return b


def vectors_per_iteration(results: tuple, n: int) -> float:
    """Bytes the kernels of the fori_loop's body move per iteration, in vectors of ``n`` float32."""
    root = optimize(Bundle(*[r.expr for r in results]))
    loops = [m for node in DAG(root).order if isinstance(node, Region)
             for m in DAG(Bundle(*node.plan.optimized)).order if isinstance(m, Loop)]
    (loop,) = loops
    info = plan(Bundle(*loop.body.optimized))
    moved = sum(s["floor_bytes"] for s in info["stencils"])
    moved += sum(g["bytes_read_per_block"] + g["bytes_written_per_block"] for g in info["groups"])
    return moved / (n * 4)


def test_cg_iteration_moves_eight_vectors():
    """Rotated, 8 vectors per iteration: the p update and the p.Ap stencil one tile kernel (or, recomputing p,
    one flat kernel); 9 without rotation, or rotated without tile kernels."""
    b = gnp.from_array(rhs((64, 64)), chunks=64).persist()
    moved = {}
    for rotation, recompute in SETTINGS:
        with settings(rotation, recompute), gnp.config.set(dispatch="lazy"):
            moved[rotation, recompute] = vectors_per_iteration(gnp.accelerate(cg_loop)(b, 5), 64 * 64)
    assert round(moved[False, False]) == round(moved[False, True]) == 9
    assert round(moved[True, False]) == round(moved[True, True]) == 8
    with settings(True, False), gnp.config.set(dispatch="lazy", stencil_tiles=False):
        assert round(vectors_per_iteration(gnp.accelerate(cg_loop)(b, 5), 64 * 64)) == 9
    with gnp.config.set(dispatch="lazy"):  # the default: rotated where tile kernels run (CuPy blocks)
        text = str(gnp.explain(gnp.accelerate(cg_loop)(b, 5)))
    tiled = BACKEND == "cupy"
    assert f"its kernels move at least {8 if tiled else 9} vectors per iteration" in text
    assert tiled == ("2 sweeps per block part in 1 kernel(s) on CuPy blocks (sweeps per kernel: 2; 1 through "
                     "shared memory)" in text)
    with gnp.config.set(dispatch="lazy", stencil_tiles=False):  # no tile kernels: not rotated by default
        assert "its kernels move at least 9 vectors per iteration" in str(gnp.explain(gnp.accelerate(cg_loop)(b, 5)))
    with settings("always", False), pytest.raises(ValueError, match="loop-rotation must be 'auto', True or False"):
        gnp.accelerate(cg_loop)(b, 5)


needs_emulator = pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                                    reason="needs g++; CPU runs only")


def is_pair_with_sum(variant: tuple) -> bool:
    """Whether a tile kernel's variant is the rotated pair's form: an elementwise sweep whose outputs are also
    stored, read past the array's ends as a constant by a sweep with a full reduction."""
    codes, links, _, edges, stored, _ = variant
    (shared,) = links
    return (len(codes) == 2 and stored == (0,) and not any(any(offset) for _, offset in codes[0].loads)
            and len(codes[1].program.outputs) > len(codes[1].out_dtypes)
            and any(FILL in edges[1][slot] for slot, _ in shared))


@needs_emulator
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotated_cg_pair_in_one_tile_kernel(dtype: Any, monkeypatch: Any) -> None:
    """CG on CuPy blocks (emulated) is rotated by default: the p update and the p.Ap stencil reading it one
    tile kernel (p on its tile and halo in shared memory, zero past the grid's ends, stored; p.Ap's partials
    per thread block), on grids of partial tiles (70 x 133) and with thread blocks inside everything
    (130 x 200): NumPy's results, as without rotation."""
    launched = counted_tile_kernels(monkeypatch)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-13}
    for shape in [(70, 133), (130, 200)]:
        host = rhs(shape).astype(dtype)
        b = gnp.from_array(host, chunks=shape).persist()
        results = {}
        for rotation in (False, "auto"):
            launched.clear()
            with settings(rotation, False):
                results[rotation] = gnp.fetch(gnp.accelerate(cg_loop)(b, 4))
            assert bool(launched) == bool(rotation) and all(map(is_pair_with_sum, launched))
        for ours, plain, theirs in zip(results["auto"], results[False], numpy_cg(host, 4)):
            np.testing.assert_allclose(ours, theirs, **tolerance)
            np.testing.assert_allclose(ours, plain, **tolerance)


@needs_emulator
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_update_and_summed_stencil_in_one_tile_kernel(dtype: Any, monkeypatch: Any) -> None:
    """The rotated pair's form in general: an elementwise update, stored, and a stencil reading it through
    constant padding (0, 2.5) whose values are summed, one tile kernel per block part (emulated), 2-d and
    3-d, on one block and on several (interiors, bands, halos), of fewer tiles than a wave of thread blocks and
    of more (300 x 270: the emulator's wave is 32 blocks, each then walks several tiles): the update bit for
    bit NumPy's, the sum within its rounding."""
    launched = counted_tile_kernels(monkeypatch)

    def f(xp: Any, r: Any, q: Any, value: float) -> tuple:
        p = r + dtype(0.37) * q
        stencil = padded_laplacian(xp, p, ((1, 1),) * p.ndim, value)
        return p, xp.sum(p * stencil), xp.sum(abs(p * stencil))

    eps = np.finfo(dtype).eps
    for shape, chunks in [((70, 133), (70, 133)), ((70, 133), (35, 67)), ((100, 90), (50, 45)), ((300, 270), (300, 270)),
                          ((19, 21, 37), (19, 21, 37)), ((20, 22, 40), (10, 11, 40))]:
        r, q = np.random.default_rng(2).standard_normal((2, *shape)).astype(dtype)
        for value in (0.0, 2.5):
            p, total, _ = f(gnp, gnp.from_array(r, chunks=chunks), gnp.from_array(q, chunks=chunks), value)
            tiled = len(shape) == 2 or dtype == np.float32  # (float64 3-d tiles pass 48 KiB of shared memory)
            runs = [[2] if tiled else [1, 1]]
            assert [g["sweeps_per_kernel"] for g in plan(Bundle(p.expr, total.expr))["stencils"]] == runs
            launched.clear()
            ours = gnp.fetch((p, total))
            expected, scale = f(np, r, q, value)[:2], f(np, r, q, value)[2]
            np.testing.assert_array_equal(ours[0], expected[0])
            assert abs(float(ours[1]) - float(expected[1])) <= 64 * eps * float(scale)
            assert bool(launched) == tiled and all(map(is_pair_with_sum, launched))


@pytest.mark.parametrize("shape, chunks", [((64, 64), 64), ((20, 33), (20, 33)), ((40, 33), (16, 10)),
                                           ((9, 7), (3, 4))])
def test_cg_results_unchanged(shape, chunks):
    host = rhs(shape)
    b = gnp.from_array(host, chunks=chunks).persist()
    results = {}
    for rotation, recompute in SETTINGS:
        with settings(rotation, recompute):
            results[rotation, recompute] = gnp.accelerate(cg_loop)(b, 6)
    expected = numpy_cg(host, 6)
    one_block = len(b.chunks[0]) == len(b.chunks[1]) == 1
    for key, state in results.items():
        for ours, theirs, plain in zip(state, expected, results[False, False]):
            assert_eq(ours, np.asarray(theirs, np.float32), rtol=1e-5, atol=1e-6)
            if BACKEND == "numpy" and (one_block or not key[0]):  # recompute alone: every plan's order
                got, same = (np.asarray(gnp.fetch(a), dtype=a.dtype) for a in (ours, plain))
                assert got.tobytes() == same.tobytes(), key
                if one_block:
                    assert got.tobytes() == np.asarray(theirs, np.float32).tobytes(), key


def test_recompute_keeps_fill_values():
    """A field read past its ends (pad) gives the pad's value there, whatever the recomputed expression
    gives on the fill of its sources: here NaN (inf * 0) and 1 (a + 1)."""
    host = rhs((12, 10))
    u = gnp.from_array(host, chunks=(5, 4))

    def f(xp: Any, u: Any, s: Any) -> Any:
        v = u * s + 1
        p = xp.pad(v, 1, constant_values=2.5)
        return p[:-2, 1:-1] + p[2:, 1:-1] - p[1:-1, :-2] * p[1:-1, 2:] + v

    for s in (np.float32(np.inf), np.float32(3)):
        with np.errstate(invalid="ignore"):
            expected = f(np, host, s)
        for recompute in (False, True):
            with settings(False, recompute):
                out = f(gnp, u, s)
                assert_eq(out, expected, rtol=0 if BACKEND == "numpy" else None)  # (kernels may contract a*b+c)
                info = plan(out)  # v by a fused kernel of its own, or inside the stencil's
                assert [g["kernels"] for g in info["stencils"]] == [1]
                assert len(info["groups"]) == (0 if recompute else 1)


def test_loop_rotation_edge_cases():
    """Loops that are not rotated (an update read by another output, the iteration number, one step), and
    a rotated loop of two steps, give NumPy's results."""
    host = rhs((16, 12))
    b = gnp.from_array(host, chunks=(16, 12)).persist()

    def shifted(u: Any, xp: Any) -> Any:
        p = xp.pad(u, 1)
        return p[:-2, 1:-1] + p[2:, 1:-1]

    def uses_update(s: tuple, xp: Any, i: Any = 0) -> tuple:
        u, w = s
        w2 = u + 0.5 * w
        return shifted(w2, xp) * 0.25 + u * i, w2

    for steps in (1, 2, 3):
        expected: tuple = (host, host)
        for i in range(steps):
            expected = uses_update(expected, np, np.float32(i))
        out = gnp.accelerate(lambda b: gnp.fori_loop(steps, lambda i, s: uses_update(s, gnp, i.astype(np.float32)), (b, b)))(b)
        for ours, theirs in zip(out, expected):
            assert_eq(ours, theirs, rtol=1e-6)
        expected = (host, host)
        for i in range(steps):
            expected = uses_update(expected, np)
        out = gnp.accelerate(lambda b: gnp.fori_loop(steps, lambda i, s: uses_update(s, gnp), (b, b)))(b)
        for ours, theirs in zip(out, expected):
            assert_eq(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("unroll, unrotated, rotated", [(2, 16, 15), (3, 23, 22)])
def test_unrolled_cg_loop_rotates_through_its_stored_p(unroll: int, unrotated: int, rotated: int) -> None:
    """A fori_loop of CG steps unrolled ``unroll`` times: its last ``p`` update reads the ``p`` of the step before,
    carried to the next iteration (stored anyway), so the loop is rotated: each step's p update and p.Ap stencil one
    pass, and ``x`` updated once per iteration from the stored ``p`` of every step: 7 + 1/unroll vectors per step
    (unrotated, 8 - 1/unroll from the third step on); NumPy's values bit for bit on one block, through every entry
    point. On several blocks the carried ``p`` would need a halo: not rotated, the same values."""
    host = rhs((32, 32))
    expected = [np.asarray(v, np.float32) for v in numpy_cg(host, 2 * unroll + 1)]

    def loop(b: gnp.Array) -> tuple:
        state = (gnp.zeros_like(b), b, b, gnp.sum(b * b))
        return gnp.fori_loop(2 * unroll + 1, lambda i, s: cg_step(s, gnp), state, unroll=unroll)

    for chunks in (32, 16):
        b = gnp.from_array(host, chunks=chunks).persist()
        moved = {}
        for rotation in (False, True):
            with settings(rotation, False), gnp.config.set(dispatch="lazy"):
                moved[rotation] = round(vectors_per_iteration(gnp.accelerate(loop)(b), 32 * 32))
            with settings(rotation, False):
                state = gnp.accelerate(loop)(b)
                for ours, theirs in zip(state, expected):
                    assert_eq(ours, theirs, rtol=0 if BACKEND == "numpy" and chunks == 32 else 1e-4, atol=1e-6)
        assert moved == {False: unrotated, True: rotated} if chunks == 32 else moved[True] == moved[False], moved


def test_auto_unroll_of_accumulating_rotated_loops() -> None:
    """``fori_loop``'s default ``unroll="auto"``: a rotated loop with a state element that is only accumulated (CG's
    ``x``) runs ``AUTO_UNROLL`` steps per iteration (22 vectors per 3 steps), from ``2 * AUTO_UNROLL`` steps on; a
    loop that is not rotated, or has no such element, one step per iteration. NumPy's values, bit for bit on one
    block, through every entry point."""
    from dask_gpunumeric.api.loops import AUTO_UNROLL

    host = rhs((32, 32))
    b = gnp.from_array(host, chunks=32).persist()
    for steps in (2 * AUTO_UNROLL - 1, 2 * AUTO_UNROLL, 3 * AUTO_UNROLL + 1):
        expected = numpy_cg(host, steps)
        for rotation in (False, True):
            with settings(rotation, False), gnp.config.set(dispatch="lazy"):
                moved = round(vectors_per_iteration(gnp.accelerate(cg_loop)(b, steps), 32 * 32))
            assert moved == (9 if not rotation else 8 if steps < 2 * AUTO_UNROLL else 22), (steps, rotation)
            with settings(rotation, False):
                for ours, theirs in zip(gnp.accelerate(cg_loop)(b, steps), expected):
                    assert_eq(ours, np.asarray(theirs, np.float32), rtol=0 if BACKEND == "numpy" else 1e-4, atol=1e-6)

    def residuals(b: gnp.Array, unroll: Any) -> tuple:  # CG without x: rotated (p), nothing only accumulated
        def body(i: Any, s: tuple) -> tuple:
            r, p, rr = s
            q = gnp.pad(p, 1)
            ap = 4 * q[1:-1, 1:-1] - q[:-2, 1:-1] - q[2:, 1:-1] - q[1:-1, :-2] - q[1:-1, 2:]
            r = r - rr / gnp.sum(p * ap) * ap
            rr_new = gnp.sum(r * r)
            return r, r + rr_new / rr * p, rr_new
        return gnp.fori_loop(8, body, (b, b, gnp.sum(b * b)), unroll=unroll)

    with settings(True, False), gnp.config.set(dispatch="lazy"):
        texts = [[line.split(":")[0].strip() if "fori_loop (" in line else line.split(": ")[-1]
                  for line in str(gnp.explain(list(gnp.accelerate(residuals)(b, unroll)))).splitlines()
                  if "fori_loop (" in line or "vectors per iteration" in line] for unroll in ("auto", 1)]
    assert texts[0] == texts[1] == ["fori_loop (7 iterations), per iteration",
                                    "its kernels move at least 6 vectors per iteration"], texts


@pytest.mark.parametrize("chunks", [32, pytest.param((16, 10), marks=pytest.mark.slow)])
def test_unrolled_cg_stores_what_several_kernels_read(chunks):
    """CG in a Python loop (one expression for all iterations): ``r`` of each iteration, read by the kernels
    of the next, is stored once, not computed again from all earlier iterations by each of them, and the
    next ``p`` is computed again by the stencil reading it: about 7 vectors per iteration (they grew with
    the iterations); the results NumPy's, the same bits with recomputing on and off (through every entry
    point with it off; fetched with it on: the entry points' paths do not depend on the setting)."""
    host = rhs((32, 32))
    b = gnp.from_array(host, chunks=chunks).persist()
    expected = [np.asarray(v, np.float32) for v in numpy_cg(host, 12)]
    results = {}
    for recompute in (False, True):
        with settings(False, recompute):
            state: tuple = (gnp.zeros_like(b), b, b, gnp.sum(b * b))
            for _ in range(12):
                state = cg_step(state, gnp)
            info = plan(Bundle(*[s.expr for s in state]))
            moved = sum(s["floor_bytes"] for s in info["stencils"])
            moved += sum(g["bytes_read_per_block"] + g["bytes_written_per_block"] for g in info["groups"])
            if chunks == 32:
                assert moved / (32 * 32 * 4) / 12 < (7.5 if recompute else 8.5)
            results[recompute] = [np.asarray(v, dtype=s.dtype) for v, s in zip(gnp.fetch(state), state)]
            for ours, fetched, theirs in zip(state, results[recompute], expected):
                assert_eq(fetched if recompute else ours, theirs, rtol=1e-4, atol=1e-5)
    if BACKEND == "numpy":
        assert [a.tobytes() for a in results[False]] == [a.tobytes() for a in results[True]]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_pair_with_sum_sources_compile() -> None:
    """nvcc compiles the tile kernels of an update and a summed, constant-padded stencil reading it: float32 and
    float64, 2-d and 3-d, both index types, without edges and with every edge."""
    sources = set()
    for dtype, shape in [(np.float32, (6, 6)), (np.float64, (6, 6)), (np.float32, (6, 6, 6))]:
        r = gnp.from_array(np.zeros(shape, dtype=dtype))
        p = r + dtype(0.37) * r
        total = gnp.sum(p * padded_laplacian(gnp, p, ((1, 1),) * len(shape), 2.5))
        (group,) = plan(Bundle(p.expr, total.expr))["stencils"]
        assert group["plan"].tiles == ((0, 2),)
        sources |= {tile_source(*tile_variant(group["plan"], (0, 2), index, with_edges))[0]
                    for index in ("int", "long long") for with_edges in (False, True)}
    compile_check("\n".join(sorted(sources)))


@needs_emulator
@pytest.mark.parametrize("rotation", [False, True])
def test_quotients_computed_in_their_stencil_kernels(rotation: bool, monkeypatch: Any) -> None:
    """With ``stencil-quotients``, CG's alpha = rr / pAp and (rotated) beta = rr_new / rr are computed by the stencil
    kernels that read them, once per thread: no 0-d division of their own in the loop body; the default's bits,
    through the interpreter and (each against the default's) through the emulated kernels (the pair tile kernel and
    the flat update kernel)."""
    b = gnp.from_array(rhs((40, 72)), chunks=(40, 72)).persist()
    bodies, results, launched = [], [], []
    for emulated in (False, True):
        if emulated:
            launched = counted_tile_kernels(monkeypatch)
        for quotients in (False, True):
            with dask.config.set({"gpunumeric.loop-rotation": rotation, "gpunumeric.stencil-quotients": quotients}):
                state = gnp.accelerate(cg_loop)(b, 5)
                results.append([np.asarray(gnp.fetch(a)).tobytes() for a in state])
                with gnp.config.set(dispatch="lazy"):
                    root = optimize(Bundle(*[a.expr for a in gnp.accelerate(cg_loop)(b, 5)]))
            (loop,) = [m for node in DAG(root).order if isinstance(node, Region)
                       for m in DAG(Bundle(*node.plan.optimized)).order if isinstance(m, Loop)]
            bodies.append([n.operand("op") for n in DAG(Bundle(*loop.body.optimized)).order
                           if type(n).__name__ == "Elemwise" and not n.ndim])
    assert results[1] == results[0] and results[3] == results[2]  # (the emulated kernels sum in another order)
    left = ["true_divide"] * (not rotation)  # (unrotated, beta is read by the p update, a flat kernel)
    assert bodies == [["true_divide"] * 2, left] * 2
    if rotation:  # the pair kernel's beta: once per thread, before its loops
        source = tile_source(*launched[-1])[0]
        assert "float a_h" in source and source.count("/ (float)") == 1


@needs_emulator
@pytest.mark.parametrize("shape", [(70, 133), (130, 200)])
def test_late_reductions_join_the_tile_kernel(shape: tuple[int, int], monkeypatch: Any) -> None:
    """With ``stencil-late-reductions``, CG on a salted right-hand side (``b0 + salt``, as the benchmarks' calls):
    its first ``sum(b * b)`` is computed by the kernel of ``b . Ab`` (the kernel storing ``b`` then has no reduction, and
    the two run as one tile kernel): one launch less, the default's bits (emulated kernels), NumPy's results."""
    counted_tile_kernels(monkeypatch)
    launches: list[str] = []

    def counted(name: str) -> Any:
        run = getattr(_stencil_kernels, name)
        return lambda *args: (launches.append(name), run(*args))[1]

    for name in ("_run_cuda", "_run_tile"):
        monkeypatch.setattr(_stencil_kernels, name, counted(name))
    host, salt = rhs(shape), np.float32(1e-3)
    b0 = gnp.from_array(host, chunks=shape).persist()
    solve = gnp.accelerate(lambda b, s: cg_loop(b + s, 4))
    results, counts = [], []
    for late in (False, True):
        launches.clear()
        with gnp.config.set(stencil_late_reductions=late):
            results.append([np.asarray(a) for a in gnp.fetch(solve(b0, salt))])
        counts.append(len(launches))
    assert counts[1] == counts[0] - 1
    assert [a.tobytes() for a in results[1]] == [a.tobytes() for a in results[0]]
    for ours, theirs in zip(results[1], numpy_cg(host + salt, 4)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
