"""Loops on the plain path (no ``accelerate``), as the suite's ``gnp-auto`` rows run them: a ``fori_loop`` whose body
is a function made anew on every call is traced on every call but optimized once (its plan is found again by what
it traces to); arrays its body captures are the region's arguments, so new data reuses the plan too. Results are
NumPy's, and the plain and accelerated calls give the same values (bit for bit on NumPy blocks, the same plan per
iteration; on CuPy blocks the accelerated call's peeled iterations may sum reductions in another order), through
every entry point."""
from __future__ import annotations

import functools
import pathlib
import sys
import types
import warnings
from typing import Any

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, to_host
from dask_gpunumeric.api import loops as _loops
from dask_gpunumeric.optimize import pipeline as _optimizer
from dask_gpunumeric.runtime.regions import plan as _plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import _iterative  # noqa: E402  (benchmarks/ is not a package)
import cg  # noqa: E402
import cg_setitem  # noqa: E402
import gray_scott  # noqa: E402


@pytest.fixture
def optimized(monkeypatch: Any) -> list[str]:
    """The names of the trees the optimizer ran on, in order (compiled graphs and plans)."""
    names: list[str] = []
    optimize = _optimizer.optimize
    counted = lambda root: names.append(root._name) or optimize(root)  # noqa: E731
    monkeypatch.setattr(_optimizer, "optimize", counted)
    monkeypatch.setattr(_plan, "optimize", counted)
    return names


@pytest.fixture
def traces(monkeypatch: Any) -> list[str]:
    """The loops traced (outside ``accelerate``: each call that did not skip its trace), by kind (a trace that traces
    its loop again, unrolled by ``unroll="auto"``, once)."""
    traced: list[str] = []
    depth = [0]
    trace = _loops._traced_loop

    def counted(kind: str, *args: Any) -> Any:
        if not depth[0]:
            traced.append(kind)
        depth[0] += 1
        try:
            return trace(kind, *args)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(_loops, "_traced_loop", counted)
    return traced


def assert_same(plain: Any, accelerated: Any) -> None:
    """Plain and accelerated values: equal bit for bit on NumPy blocks, within float32 rounding on CuPy's."""
    plain, accelerated = to_host(plain), to_host(accelerated)
    if BACKEND == "numpy":
        np.testing.assert_array_equal(plain, accelerated)
    else:
        np.testing.assert_allclose(plain, accelerated, rtol=1e-5)


def test_a_new_loop_body_each_call_is_optimized_once(optimized: list[str]) -> None:
    """CG's fori_loop with a lambda made on every call, on new right-hand sides: from the second call on no plan is
    optimized again; each call gives NumPy's solution."""
    rng = np.random.default_rng(0)
    for call in range(4):
        hb = rng.standard_normal((24, 24)).astype(np.float32)
        b = gnp.asarray(hb).persist()
        x = gnp.fori_loop(6, lambda i, s: cg.step(s, gnp), cg.initial((b,), gnp))[0]
        expected = functools.reduce(lambda s, _: cg.step(s, np), range(6), cg.initial((hb,), np))[0]
        # (atol: CG's entries near 0 are differences of float32 terms of order 1, rounded otherwise on a GPU)
        assert_eq(x, expected, rtol=1e-4, atol=1e-6)
        if call == 0:
            first = len(optimized)
    assert len(optimized) == first


def test_captured_arrays_are_arguments(optimized: list[str]) -> None:
    """A body that captures an array given anew on each call (a forcing): the plan of the first call serves the
    later ones, each with its own data (NumPy's results, also through ``dask.compute`` of several)."""
    rng = np.random.default_rng(1)
    hx = rng.random(40)
    x = gnp.asarray(hx, chunks=10).persist()
    for call in range(3):
        hf = rng.random(40)
        forcing = gnp.asarray(hf, chunks=10).persist()
        out = gnp.fori_loop(5, lambda i, u: 0.5 * u + forcing, x)
        expected = functools.reduce(lambda u, _: 0.5 * u + hf, range(5), hx)
        assert_eq(out, expected, rtol=1e-12)
        total, same = dask.compute(gnp.sum(out), out)
        np.testing.assert_allclose([float(to_host(total))], [expected.sum()], rtol=1e-12)
        np.testing.assert_allclose(to_host(same), expected, rtol=1e-12)
        if call == 0:
            first = len(optimized)
    assert len(optimized) == first


@pytest.mark.parametrize("iteration", [cg.CG, gray_scott.GRAY_SCOTT], ids=["cg", "gray_scott"])
def test_plain_loop_as_accelerated(iteration: _iterative.Iteration, traces: list[str]) -> None:
    """The suite's CG and Gray-Scott (their ``fori_loop``, unrolled as the suite unrolls it) undecorated and under
    ``accelerate``: the same checksum, NumPy's (its Python loop), through gnp.fetch, gnp.compute and dask.compute;
    the plain calls' bodies, made anew each call, traced once."""
    host = iteration.inputs(32, 32)
    arrays = list(dask.persist(*(gnp.asarray(h) for h in host)))
    steps = 9
    salt = gnp.asarray(np.float32(0))
    loop = functools.partial(gnp.fori_loop, unroll=iteration.unroll)

    def run(salt: Any, *arrays: Any) -> Any:
        return _iterative._run(iteration, gnp, loop, salt, arrays, steps)

    accelerated = gnp.fetch(gnp.accelerate(run)(salt, *arrays))
    expected = _iterative.loop_runner(iteration, steps, np, list(host))(0)
    np.testing.assert_allclose(accelerated, expected, rtol=1e-5)
    traces.clear()
    for value in (gnp.fetch(run(salt, *arrays)), gnp.compute(run(salt, *arrays))[0],
                  dask.compute(run(salt, *arrays))[0]):
        assert_same(value, accelerated)
    assert traces == ["fori"]


def test_python_loop_cg_as_accelerated() -> None:
    """The setitem-written CG in a Python loop (``cg_setitem.py``) plain and accelerated: the same solution,
    NumPy's, through every entry point."""
    (hb,) = cg.inputs(20, 24)
    b = gnp.asarray(hb).persist()
    plain = cg_setitem.cg(gnp, b, steps=5)
    accelerated = gnp.accelerate(lambda b: cg_setitem.cg(gnp, b, steps=5))(b)
    expected = cg_setitem.cg(np, hb, steps=5)
    assert_eq(plain, expected, rtol=1e-4, atol=1e-6)
    with gnp.allowfetch():
        assert_same(np.asarray(plain), gnp.fetch(accelerated))
    assert_same(dask.compute(plain)[0], gnp.compute(accelerated)[0])


SCALE = 0.5  # read by a loop body below, changed between its calls


def test_a_body_traced_again_when_what_it_reads_changes(traces: list[str]) -> None:
    """Calls whose bodies are made anew but read the same values reuse the first call's trace; a body reading a
    module global changed since, a value closed over that differs, a mutable container or a module of the user's
    (whose contents may have changed) is traced again: each call gives NumPy's results."""
    global SCALE
    traced = traces
    hx = np.arange(12.0)
    x = gnp.asarray(hx, chunks=4).persist()

    def scaled(shift: float) -> Any:
        return lambda i, u: u * SCALE + shift

    def expected(scale: float, shift: float) -> np.ndarray:
        return functools.reduce(lambda u, _: u * scale + shift, range(3), hx)

    try:
        for scale, shift, traces in [(0.5, 1.0, 1), (0.5, 1.0, 0), (0.25, 1.0, 1), (0.25, 2.0, 1), (0.25, 2.0, 0)]:
            SCALE = scale
            traced.clear()
            assert_eq(gnp.fori_loop(3, scaled(shift), x), expected(scale, shift), rtol=1e-12)
            assert len(traced) == traces
    finally:
        SCALE = 0.5
    settings = {"shift": 1.0}
    for shift in (1.0, 1.0, 3.0):
        settings["shift"] = shift  # the same dict, its contents changed
        traced.clear()
        assert_eq(gnp.fori_loop(3, lambda i, u: u * SCALE + settings["shift"], x), expected(SCALE, shift), rtol=1e-12)
        assert len(traced) == 1
    params = types.ModuleType("params")
    for shift in (1.0, 1.0, 3.0):
        params.shift = shift  # the same module, an attribute set again
        traced.clear()
        assert_eq(gnp.fori_loop(3, lambda i, u: u * SCALE + params.shift, x), expected(SCALE, shift), rtol=1e-12)
        assert len(traced) == 1


def test_guards_checked_again_on_every_call() -> None:
    """A body whose trace met a guard (float32 promoted by a NumPy float64) on a call that allowed it: a later call
    of the same body under ``guards="error"`` raises NumPy's promotion error as the trace would."""
    x = gnp.asarray(np.arange(8, dtype=np.float32)).persist()

    def body(i: Any, u: Any) -> Any:
        return (u * np.float64(0.5)).astype(np.float32)

    with gnp.allowpromotion():
        assert_eq(gnp.fori_loop(2, lambda i, u: body(i, u), x), np.arange(8, dtype=np.float32) * 0.25)
    with gnp.config.set(guards="error"), pytest.raises(gnp.PromotionError):
        gnp.fori_loop(2, lambda i, u: body(i, u), x)


def test_guard_allowed_inside_the_body_holds_on_every_call() -> None:
    """A body that allows the promotion guard itself: silent on every call of the same body (its trace reused), in
    the default mode and under ``guards="error"``, with NumPy's values."""
    x = gnp.asarray(np.arange(8, dtype=np.float32)).persist()

    def body(i: Any, u: Any) -> Any:
        with gnp.allowpromotion():
            return (u * np.float64(0.5)).astype(np.float32)

    expected = np.arange(8, dtype=np.float32) * np.float32(0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.GuardWarning)
        for mode in ("warn", "warn", "error", "error"):
            with gnp.config.set(guards=mode):
                np.testing.assert_array_equal(gnp.fetch(gnp.fori_loop(2, lambda i, u: body(i, u), x)), expected)
