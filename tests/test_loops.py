"""``gnp.fori_loop`` and ``gnp.while_loop`` without a cluster: the same results as the NumPy loops they stand
for (states of several arrays and numbers, the iteration number, nested loops, loops inside accelerated
functions, data-dependent stops), the body traced once and its loop invariants computed once, a region as
one task, NumPy's and JAX's errors for bad loops, and ``gnp.explain``'s account of a loop."""
from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from _solvers import gnp_cg, gnp_simulation, laplacian, numpy_cg, numpy_simulation
from conftest import assert_eq, to_host
from dask_gpunumeric.api.explain import plan


def test_fori_loop_conjugate_gradient() -> None:
    bn = np.random.default_rng(0).standard_normal((24, 20))
    b = gnp.asarray(bn, chunks=(8, 10))
    x = gnp_cg(b, 12)
    assert_eq(x, numpy_cg(bn, 12), rtol=1e-9, atol=1e-12)
    residual = np.linalg.norm(laplacian(to_host(x.compute()), np) - bn) / np.linalg.norm(bn)
    assert residual < 0.2


def test_fori_loop_state_structures_and_index() -> None:
    un = np.linspace(0.0, 1.0, 30)

    def body(i: Any, state: dict) -> dict:
        u, (total, count) = state["u"], state["acc"]
        u = 0.5 * (u + gnp.roll(u, 1)) + i * 1e-3
        return {"u": u, "acc": (total + gnp.sum(u), count + 1)}

    out = gnp.fori_loop(6, body, {"u": gnp.asarray(un, chunks=7), "acc": (0.0, 0)})
    assert list(out) == ["u", "acc"] and isinstance(out["acc"], tuple)
    u, total, count = un.copy(), 0.0, 0
    for i in range(6):
        u = 0.5 * (u + np.roll(u, 1)) + np.int64(i) * 1e-3
        total, count = total + u.sum(), count + 1
    assert_eq(out["u"], u, rtol=1e-12)
    assert_eq(out["acc"][0], np.float64(total), rtol=1e-12)
    assert_eq(out["acc"][1], np.asarray(count))
    assert out["u"].chunks == ((7, 7, 7, 7, 2),)
    # no iterations: the initial state
    assert_eq(gnp.fori_loop(0, body, {"u": gnp.asarray(un), "acc": (0.0, 0)})["u"], un)


@pytest.mark.parametrize("n, unroll", [(6, 2), (7, 2), (7, 3), (2, 3), (0, 2), (5, 1)])
def test_fori_loop_unrolled_steps_give_the_same_state(n: int, unroll: int) -> None:
    """Unrolled loops (the remainder after the loop) give the plain loop's results, the index included."""
    un = np.random.default_rng(4).random((12, 10))

    def body(i: Any, state: tuple) -> tuple:
        u, total = state
        u = 0.25 * (gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=0) + gnp.roll(u, 1, axis=1)
                    + gnp.roll(u, -1, axis=1)) + i * 1e-3
        return u, total + gnp.sum(u) * i

    start = (gnp.asarray(un, chunks=(6, 10)), 0.0)
    u, total = gnp.fori_loop(n, body, start, unroll=unroll)
    ref, ref_total = un.copy(), 0.0
    for i in range(n):
        ref = 0.25 * (np.roll(ref, 1, 0) + np.roll(ref, -1, 0) + np.roll(ref, 1, 1) + np.roll(ref, -1, 1)) + i * 1e-3
        ref_total += ref.sum() * i
    assert_eq(u, ref, rtol=1e-12)
    assert_eq(total, np.float64(ref_total), rtol=1e-12)
    assert_eq(gnp.accelerate(lambda x: gnp.fori_loop(n, body, (x, 0.0), unroll=unroll)[0])(start[0]), ref,
              rtol=1e-12)


def test_unrolled_stencil_loop_groups_its_sweeps() -> None:
    """An unrolled loop over one periodic sweep of a one-block field: one stencil group of two sweeps per
    iteration (one kernel on CuPy blocks), half the iterations."""
    x = gnp.asarray(np.random.default_rng(5).random((16, 16)))

    def body(i: Any, u: Any) -> Any:
        return 0.25 * (gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=0) + gnp.roll(u, 1, axis=1) + gnp.roll(u, -1, axis=1))

    with gnp.config.set(dispatch="lazy"):
        text = gnp.explain(gnp.accelerate(lambda u: gnp.fori_loop(8, body, u, unroll=2))(x))
    assert "fori_loop (4 iterations)" in text and "2 sweeps per block part in 1 kernel(s)" in text, text


def test_while_loop_data_dependent_stop() -> None:
    """Smooth until the largest change is below a tolerance, counting the sweeps."""
    un = np.random.default_rng(1).random(40)

    def sweep(u: Any, xp: Any) -> Any:
        return 0.25 * xp.roll(u, 1) + 0.5 * u + 0.25 * xp.roll(u, -1)

    def changing(state: tuple) -> gnp.Array:
        u = state[0]
        return gnp.max(gnp.abs(sweep(u, gnp) - u)) > 1e-3

    def body(state: tuple) -> tuple:
        u, _, step = state
        new = sweep(u, gnp)
        return new, gnp.max(gnp.abs(new - u)), step + 1

    u, step = un.copy(), 0
    while np.max(np.abs(sweep(u, np) - u)) > 1e-3:
        new = sweep(u, np)
        u, step = new, step + 1
    out = gnp.while_loop(changing, body, (gnp.asarray(un, chunks=10), 0.0, 0))
    assert_eq(out[2], np.asarray(step))
    assert step > 5
    assert_eq(out[0], u, rtol=1e-12)
    # at most max_iter iterations; none when the condition is false at once
    bounded = gnp.while_loop(changing, body, (gnp.asarray(un, chunks=10), 0.0, 0), max_iter=3)
    assert_eq(bounded[2], np.asarray(3))
    done = gnp.while_loop(lambda s: gnp.sum(s[0]) < 0, body, (gnp.asarray(un), 0.0, 0))
    assert_eq(done[0], un)


def test_nested_loops_inside_accelerate_and_invariants_hoisted() -> None:
    """A time loop of stencil sweeps with a reduction every 5 steps, in an accelerated function; the
    coefficient computed from a captured array (``0.1 * exp(c)``) is computed once, outside both loops."""
    un = np.random.default_rng(2).random((12, 10))
    cn = np.random.default_rng(3).random((12, 10))
    u, energy = numpy_simulation(un, cn, 4, 5)
    with gnp.config.set(dispatch="lazy"):  # a region to look at, not its results
        v, e = gnp_simulation(gnp.asarray(un, chunks=(4, 10)), gnp.asarray(cn, chunks=(4, 10)), 4, 5)
    assert_eq(v, u, rtol=1e-10)
    assert_eq(e, np.float64(energy), rtol=1e-10)
    (region,) = plan(v)["regions"]
    assert region["ranks"] == 1 and len(region["programs"]) == 1
    (outer,) = region["programs"][0]["loops"]
    (inner,) = outer["loops"]
    assert outer["count"] == 4 and inner["count"] == 5 and inner["exchanges"] == 0
    assert region["programs"][0]["kernels"] >= 1  # the coefficient, before the loops
    (coefficient,) = [g for g in plan(v)["groups"] if "exp" in g["ops"]]
    assert coefficient["ops"] == ["exp", "multiply"]  # not fused into the loop's kernel


def test_region_is_one_task_and_loop_traced_once() -> None:
    traced = []

    def body(i: Any, u: Any) -> Any:
        traced.append(i)
        return gnp.sin(u) + 1

    x = gnp.asarray(np.arange(16.0), chunks=4)
    with gnp.config.set(dispatch="lazy"):  # a region to look at, not its results
        out = gnp.fori_loop(1000, body, x)
    assert len(traced) == 1
    graph = out.__dask_graph__()
    prefixes = sorted(dask.utils.key_split(k) for k in graph)
    assert prefixes.count("region") == 1 and len(graph) <= 1 + 2 * x.npartitions, prefixes
    expected = np.arange(16.0)
    for _ in range(1000):
        expected = np.sin(expected) + 1
    assert_eq(out, expected, rtol=1e-12)
    text = gnp.explain(out)
    assert "fori_loop (1000 iterations), per iteration: 4 operation(s) (4 with generated kernels), 0 exchange(s)" in text


def test_region_lowering_as_tasks() -> None:
    """Regions without loops can run as one task per block; with loops they run as programs regardless."""
    xn = np.arange(20.0)
    f = gnp.accelerate(lambda a: (gnp.exp(a) * 2, gnp.sum(a)))
    with gnp.config.set(region_lowering="tasks", dispatch="lazy"):
        y, s = f(gnp.asarray(xn, chunks=5))
        looped = gnp.fori_loop(3, lambda i, u: u * 2, gnp.asarray(xn, chunks=5))
    assert sum(dask.utils.key_split(k) == "region" for k in y.__dask_graph__()) == 0
    assert_eq(y, np.exp(xn) * 2)
    assert_eq(s, xn.sum())
    assert plan(looped)["regions"][0]["lowering"] == "programs"
    assert_eq(looped, xn * 8)
    with pytest.raises(ValueError, match="region-lowering"), gnp.config.set(region_lowering="blocks"):
        f(gnp.asarray(xn, chunks=5))


def test_bad_loops_raise() -> None:
    x = gnp.asarray(np.arange(6.0), chunks=3)
    with pytest.raises(TypeError, match="Python int"):
        gnp.fori_loop(2.0, lambda i, u: u, x)
    with pytest.raises(TypeError, match="Python int"):
        gnp.fori_loop(gnp.asarray(2), lambda i, u: u, x)
    with pytest.raises(ValueError, match="non-negative"):
        gnp.fori_loop(-1, lambda i, u: u, x)
    for unroll in (0, 1.5, True, "fast"):
        with pytest.raises(ValueError, match="unroll must be a positive int or .auto."):
            gnp.fori_loop(2, lambda i, u: u, x, unroll=unroll)
    with pytest.raises(TypeError, match="shape and dtype"):
        gnp.fori_loop(2, lambda i, u: u.astype(np.float32), x)
    with pytest.raises(TypeError, match="shape and dtype"):
        gnp.fori_loop(2, lambda i, u: u[:3], x)
    with pytest.raises(TypeError, match="structure"):
        gnp.fori_loop(2, lambda i, s: s[0], (x, x))
    with pytest.raises(TypeError, match="Arrays or numbers"):
        gnp.fori_loop(2, lambda i, s: s, (x, "label"))
    with pytest.raises(TypeError, match="0-d boolean"):
        gnp.while_loop(lambda u: gnp.sum(u), lambda u: u, x)
    with pytest.raises(TypeError, match="0-d boolean"):
        gnp.while_loop(lambda u: u > 0, lambda u: u, x)
    with pytest.raises(ValueError, match="max_iter"):
        gnp.while_loop(lambda u: gnp.sum(u) > 0, lambda u: u, x, max_iter=-2)
    with gnp.allowfetch(), pytest.raises(TypeError, match="not known while it is traced: compute that value before"):
        gnp.fori_loop(2, lambda i, u: u * float(gnp.sum(u)), x)  # the state's value, wanted inside the body
