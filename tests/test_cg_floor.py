"""CG at its floor: a pointwise field read at shifts is computed again by its readers instead of stored by a sweep
of its own (``stencil-recompute``), and a fori_loop ending with an elementwise state update (CG's
``p = r + beta * p``) starts with it instead (``loop-rotation``): the p update and the stencil that reads p are
one pass, 8 vectors moved per CG iteration instead of 9. Results are unchanged: bit for bit on one NumPy block
(the same operations in the same order per element); on several blocks the partials of the reductions may be
summed in another order. Loops over several blocks are not rotated (the update's halo would be one more
exchange per iteration)."""
from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
from _solvers import cg_step
from conftest import BACKEND, assert_eq

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.expr import Bundle
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
    b = gnp.from_array(rhs((64, 64)), chunks=64).persist()
    moved = {}
    for rotation, recompute in SETTINGS:
        with settings(rotation, recompute), gnp.config.set(dispatch="lazy"):
            moved[rotation, recompute] = vectors_per_iteration(gnp.accelerate(cg_loop)(b, 5), 64 * 64)
    assert round(moved[False, False]) == round(moved[True, False]) == round(moved[False, True]) == 9
    assert round(moved[True, True]) == 8


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


@pytest.mark.parametrize("chunks", [32, (16, 10)])
def test_unrolled_cg_stores_what_several_kernels_read(chunks):
    """CG in a Python loop (one expression for all iterations): ``r`` of each iteration, read by the kernels
    of the next, is stored once, not computed again from all earlier iterations by each of them, and the
    next ``p`` is computed again by the stencil reading it: about 7 vectors per iteration (they grew with
    the iterations); the results NumPy's, the same bits with recomputing on and off."""
    host = rhs((32, 32))
    b = gnp.from_array(host, chunks=chunks).persist()
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
            results[recompute] = [np.asarray(gnp.fetch(s), dtype=s.dtype) for s in state]
            for ours, theirs in zip(state, numpy_cg(host, 12)):
                assert_eq(ours, np.asarray(theirs, np.float32), rtol=1e-4, atol=1e-5)
    if BACKEND == "numpy":
        assert [a.tobytes() for a in results[False]] == [a.tobytes() for a in results[True]]
