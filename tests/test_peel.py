"""Loop peeling (``runtime.regions.peel``): a fori_loop's first iteration runs before it where an elementwise
producer of its initial state (a salt added to an input) is folded into that iteration's first kernel, and its
last iteration after it where its final state is only reduced (the reductions in that iteration's last kernel,
the state never stored), where stencil tile kernels run: CuPy blocks, emulated on the CPU. The same values as
NumPy's; where peeling removes no pass, or on NumPy blocks, the loop is left whole."""
from __future__ import annotations

from typing import Any

import _cuda_emulator
import numpy as np
import pytest
from _solvers import cg_step, heat_step
from conftest import BACKEND, assert_eq

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from test_stencil import counted_tile_kernels, jacobi


needs_emulator = pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                                    reason="needs g++; CPU runs only")


@pytest.fixture
def tiled(monkeypatch: Any) -> None:
    """Stencil tile kernels: CuPy blocks, or on the CPU NumPy blocks through the emulated CUDA paths."""
    if BACKEND == "numpy":
        if _cuda_emulator.HOST_COMPILER is None:
            pytest.skip("needs g++")
        _cuda_emulator.emulated_cupy(monkeypatch)


def step(state: tuple, xp: Any) -> tuple:
    """A Gray-Scott step on a periodic grid (rolls)."""
    u, v = state

    def laplacian(a: Any) -> Any:
        return xp.roll(a, 1, axis=0) + xp.roll(a, -1, axis=0) + xp.roll(a, 1, axis=1) + xp.roll(a, -1, axis=1) - 4 * a

    uvv = u * v * v
    return u + (0.16 * laplacian(u) - uvv + 0.035 * (1 - u)), v + (0.08 * laplacian(v) + uvv - 0.1 * v)


def fields(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.random(shape, dtype=np.float32), 0.25 * rng.random(shape, dtype=np.float32)


def numpy_loop(salt: np.float32, u: np.ndarray, v: np.ndarray, steps: int) -> tuple:
    state = (u + salt, v)
    for _ in range(steps):
        state = step(state, np)
    return state


def summed(salt: Any, u: Any, v: Any, steps: int = 6) -> Any:
    """The loop's final fields summed: the salt add before it and the sums after it fold into its kernels."""
    w, z = gnp.fori_loop(steps, lambda i, s: step(s, gnp), (u + salt, v), unroll=2)
    return gnp.sum(w) + gnp.sum(z)


def final(salt: Any, u: Any, v: Any, steps: int = 6) -> tuple:
    """The loop's final fields, stored: only the salt add folds in."""
    return gnp.fori_loop(steps, lambda i, s: step(s, gnp), (u + salt, v), unroll=2)


def outside(info: dict) -> tuple[list, list]:
    """The stencil groups and fused kernels of an accelerated call outside its loop."""
    return ([s for s in info["stencils"] if s["loop"] is None], [g for g in info["groups"] if g["loop"] is None])


def lazy_plan(f: Any, *args: Any) -> tuple[dict, str]:
    with gnp.config.set(dispatch="lazy"):
        out = gnp.accelerate(f)(*args)
        return plan(out[0] if isinstance(out, tuple) else out), gnp.explain(out)


@pytest.mark.parametrize("shape, chunks", [((24, 20), (24, 20)), ((48, 20), (24, 20))])
def test_salt_and_checksum_fold_into_the_peeled_iterations(shape: tuple, chunks: tuple, tiled: None) -> None:
    """Gray-Scott's benchmark shape: 3 iterations of 2 steps; the first and the last run outside the loop as
    stencil groups of their own, the first reading the salt and the unsalted input (no pass adding it), the last
    storing nothing (its sums are its outputs); no other kernel outside the loop."""
    host_u, host_v = fields(shape)
    salt = np.float32(0.5)
    u, v = (gnp.from_array(h, chunks=chunks).persist() for h in (host_u, host_v))
    expected_u, expected_v = numpy_loop(salt, host_u, host_v, 6)
    expected = np.float32(expected_u.sum(dtype=np.float64) + expected_v.sum(dtype=np.float64))
    assert_eq(gnp.accelerate(summed)(gnp.asarray(salt), u, v), expected, rtol=1e-5)  # (every entry point)
    info, text = lazy_plan(summed, gnp.asarray(salt), u, v)
    assert "fori_loop (1 iterations)" in text, text
    stencils, fused = outside(info)
    assert fused == [] and len(stencils) == 2, text
    first, last = stencils
    assert first["inputs"] == 3 and len(first["outputs"]) == 2 and first["kernels"] == 2, text  # u, salt, v
    assert all(o.endswith("-partial") for o in last["outputs"]) and len(last["outputs"]) == 2, text


def test_stored_final_state_peels_only_the_first_iteration(tiled: None) -> None:
    """Fields returned as they are: the last iteration stays in the loop; the first, with the salt folded in,
    gives NumPy's fields bit for bit on one NumPy block."""
    host_u, host_v = fields((20, 16))
    salt = np.float32(0.25)
    u, v = (gnp.from_array(h).persist() for h in (host_u, host_v))
    got = gnp.fetch(gnp.accelerate(final)(gnp.asarray(salt), u, v))
    for ours, theirs in zip(got, numpy_loop(salt, host_u, host_v, 6)):
        assert_eq(ours, theirs, rtol=0 if BACKEND == "numpy" else 1e-6)
    info, text = lazy_plan(final, gnp.asarray(salt), u, v)
    stencils, fused = outside(info)
    assert "fori_loop (2 iterations)" in text and fused == [] and len(stencils) == 1, text
    assert stencils[0]["inputs"] == 3, text


@needs_emulator
def test_peeled_iterations_are_tile_kernels(monkeypatch: Any) -> None:
    """On CuPy blocks (emulated): every iteration, the peeled ones too, one tile kernel of its two sweeps, the
    first computing the salted field where it reads it, the last its sums in its last sweep."""
    launched = counted_tile_kernels(monkeypatch)
    host_u, host_v = fields((40, 36))
    salt = np.float32(0.125)
    u, v = (gnp.from_array(h).persist() for h in (host_u, host_v))
    expected_u, expected_v = numpy_loop(salt, host_u, host_v, 8)
    got = gnp.fetch(gnp.accelerate(lambda s, a, b: summed(s, a, b, 8))(gnp.asarray(salt), u, v))
    np.testing.assert_allclose(got, expected_u.sum(dtype=np.float64) + expected_v.sum(dtype=np.float64), rtol=1e-5)
    assert len(launched) == 4 and all(len(variant[0]) == 2 for variant in launched), launched


def test_reduced_cg_solution_peels_the_last_iteration(tiled: None) -> None:
    """CG (rotated where tile kernels run) whose solution is only summed, ``sum(x * x)``: its last iteration
    after the loop, NumPy's value."""
    host = np.random.default_rng(0).standard_normal((24, 24)).astype(np.float32)
    b = gnp.from_array(host).persist()

    def checksum(b: Any) -> Any:
        state = (gnp.zeros_like(b), b, b, gnp.sum(b * b))
        x = gnp.fori_loop(6, lambda i, s: cg_step(s, gnp), state, unroll=1)[0]  # ("auto" would unroll it)
        return gnp.sum(x * x)

    state: tuple = (np.zeros_like(host), host, host, np.sum(host * host))
    for _ in range(6):
        state = cg_step(state, np)
    np.testing.assert_allclose(gnp.fetch(gnp.accelerate(checksum)(b)), np.sum(state[0] * state[0]), rtol=1e-4)
    _, text = lazy_plan(checksum, b)
    assert "fori_loop (4 iterations)" in text or "fori_loop (5 iterations)" in text, text


def test_loops_that_peeling_would_not_shorten_stay_whole(tiled: None) -> None:
    """A state returned as it is, from arguments not computed, or a body reading its iteration number: no
    iteration peeled."""
    host = np.arange(12.0)
    x = gnp.from_array(host).persist()

    def indexed(x: Any) -> Any:
        return gnp.sum(gnp.fori_loop(4, lambda i, s: s + i, x + 1.0))

    def returned(x: Any) -> Any:
        return gnp.fori_loop(4, lambda i, s: 0.5 * (gnp.roll(s, 1) + s), x)

    assert_eq(gnp.accelerate(indexed)(x), np.sum(host + 1.0 + 6.0))
    expected = host
    for _ in range(4):
        expected = 0.5 * (np.roll(expected, 1) + expected)
    assert_eq(gnp.accelerate(returned)(x), expected)
    for f in (indexed, returned):
        _, text = lazy_plan(f, x)
        assert "fori_loop (4 iterations)" in text, text


def _loop_lines(text: str) -> list[str]:
    """What ``gnp.explain`` says of a call's loop: its iterations, and the sweeps per tile kernel of each group."""
    lines = [line for line in text.splitlines() if "fori_loop (" in line or "sweeps per kernel" in line]
    return [line.split(",")[0].strip() if "fori_loop (" in line
            else "sweeps per kernel" + line.split("(sweeps per kernel")[-1].split(";")[0] for line in lines]


@pytest.mark.parametrize("steps", [8, 10])
def test_auto_unroll_gives_one_sweep_bodies_the_tile_depth(steps: int, tiled: None) -> None:
    """``fori_loop``'s default ``unroll="auto"`` where tile kernels run: a body of one stencil sweep (a Gray-Scott
    step) is unrolled to the tile kernels' depth (4 sweeps in 2-d), the plan of ``unroll=4`` (with ``steps`` not a
    multiple of 4, its last steps after the loop); NumPy's fields through every entry point."""
    host_u, host_v = fields((24, 20))
    u, v = (gnp.from_array(h).persist() for h in (host_u, host_v))
    expected = numpy_loop(np.float32(0), host_u, host_v, steps)
    lines = {}
    for unroll in ("auto", 4, 1):
        def loop(u: Any, v: Any, unroll: Any = unroll) -> tuple:
            return gnp.fori_loop(steps, lambda i, s: step(s, gnp), (u, v), unroll=unroll)

        for ours, theirs in zip(gnp.accelerate(loop)(u, v), expected):
            assert_eq(ours, theirs, rtol=1e-5)
        lines[unroll] = _loop_lines(lazy_plan(loop, u, v)[1])
    assert lines["auto"] == lines[4] != lines[1], lines
    assert "sweeps per kernel: 4" in lines["auto"], lines


def test_auto_unroll_of_sweeps_reading_a_captured_field(tiled: None) -> None:
    """A heat step whose coefficient field is captured from outside the loop (``0.1 * exp(c)``, the same every
    iteration) is one stencil sweep of the state too: "auto" gives it the plan of ``unroll=4``, 4-sweep tile
    kernels reading the field; NumPy's values through every entry point."""
    rng = np.random.default_rng(5)
    host_u, host_c = rng.random((24, 20), dtype=np.float32), rng.random((24, 20), dtype=np.float32)
    u, c = (gnp.from_array(h).persist() for h in (host_u, host_c))
    expected = host_u
    for _ in range(8):
        expected = heat_step(expected, host_c, np)
    lines = {}
    for unroll in ("auto", 4, 1):
        def loop(u: Any, c: Any, unroll: Any = unroll) -> Any:
            return gnp.fori_loop(8, lambda i, w: heat_step(w, c, gnp), u, unroll=unroll)

        assert_eq(gnp.accelerate(loop)(u, c), expected, rtol=1e-5)
        lines[unroll] = _loop_lines(lazy_plan(loop, u, c)[1])
    assert lines["auto"] == lines[4] == ["fori_loop (2 iterations)", "sweeps per kernel: 4"], lines
    assert lines[1] == ["fori_loop (8 iterations)"], lines


def test_auto_unroll_of_setitem_sweeps(tiled: None) -> None:
    """A sweep written as a copy and a setitem of its interior is one stencil sweep too: "auto" gives it the plan of
    ``unroll=4``; NumPy's values through every entry point."""
    host = np.random.default_rng(6).random((24, 20), dtype=np.float32)
    u = gnp.from_array(host).persist()
    expected = host
    for _ in range(8):
        expected = jacobi(np, expected)
    lines = {}
    for unroll in ("auto", 4, 1):
        def loop(u: Any, unroll: Any = unroll) -> Any:
            return gnp.fori_loop(8, lambda i, w: jacobi(gnp, w), u, unroll=unroll)

        assert_eq(gnp.accelerate(loop)(u), expected, rtol=1e-6)
        lines[unroll] = _loop_lines(lazy_plan(loop, u)[1])
    assert lines["auto"] == lines[4] == ["fori_loop (2 iterations)", "sweeps per kernel: 4"], lines
    assert lines[1] == ["fori_loop (8 iterations)"], lines


def test_auto_unroll_on_numpy_blocks_is_one_step() -> None:
    """Without tile kernels (NumPy blocks) ``unroll="auto"`` leaves a one-sweep body one step per iteration."""
    if BACKEND != "numpy":
        pytest.skip("CuPy blocks run tile kernels")
    u, v = (gnp.from_array(h).persist() for h in fields((24, 20)))
    lines = {}
    for unroll in ("auto", 1):
        def loop(u: Any, v: Any, unroll: Any = unroll) -> tuple:
            return gnp.fori_loop(8, lambda i, s: step(s, gnp), (u, v), unroll=unroll)

        lines[unroll] = _loop_lines(lazy_plan(loop, u, v)[1])
    assert lines["auto"] == lines[1] == ["fori_loop (8 iterations)"], lines


@pytest.mark.skipif(BACKEND != "numpy", reason="NumPy blocks")
def test_numpy_blocks_peel_nothing() -> None:
    """On NumPy blocks (no tile kernels) the loop is left whole: NumPy's values."""
    host_u, host_v = fields((24, 20))
    salt = np.float32(0.5)
    u, v = (gnp.from_array(h).persist() for h in (host_u, host_v))
    expected_u, expected_v = numpy_loop(salt, host_u, host_v, 6)
    assert_eq(gnp.accelerate(summed)(gnp.asarray(salt), u, v),
              np.float32(expected_u.sum(dtype=np.float64) + expected_v.sum(dtype=np.float64)), rtol=1e-5)
    info, text = lazy_plan(summed, gnp.asarray(salt), u, v)
    assert "fori_loop (3 iterations)" in text and outside(info)[0] == [], text


def test_salted_input_computed_again_where_read() -> None:
    """What folds the salt into a peeled first kernel, on the plain path too: a field of sources alone
    (``u + c``) that only a stencil reads, at shifts and periodically, is computed again at each read instead
    of stored by a sweep of its own: one stencil group, no other kernel, NumPy's values."""
    host = np.random.default_rng(4).random((16, 12), dtype=np.float32)
    u = gnp.from_array(host).persist()

    def f(xp: Any, u: Any, c: Any) -> Any:
        w = u + c
        return xp.roll(w, 1, axis=0) + xp.roll(w, -1, axis=0) + xp.roll(w, 1, axis=1) - 3 * w

    out = f(gnp, u, np.float32(0.5))
    # on CuPy blocks nvcc contracts `x - 3 * w` into one FMA (as in every stencil kernel): an ulp of the terms
    assert_eq(out, f(np, host, np.float32(0.5)), **({"rtol": 0} if BACKEND == "numpy" else {"rtol": 1e-5, "atol": 1e-6}))
    info = plan(out)
    assert len(info["stencils"]) == 1 and info["stencils"][0]["kernels"] == 1 and info["groups"] == [], info
