"""Iterative computations written once for NumPy and gnp, for the loop and region tests: conjugate gradients
on a matrix-free Laplacian, and a stencil time loop that records an energy every few steps."""
from __future__ import annotations

import pathlib
import sys
from typing import Any

import numpy as np

import dask_gpunumeric as gnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import cg  # noqa: E402  (the benchmarks' CG; benchmarks/ is not a package)
from cg import laplacian  # noqa: E402,F401  (matrix-free 5-point Laplacian: pad and shifted slices)


def cg_step(state: tuple, xp: Any) -> tuple:
    """One conjugate-gradient iteration on the Laplacian: (x, r, p, r.r) -> the next (the benchmark's)."""
    return cg.step(state, xp)


def numpy_cg(b: np.ndarray, iterations: int) -> np.ndarray:
    state = (np.zeros_like(b), b, b, np.sum(b * b))
    for _ in range(iterations):
        state = cg_step(state, np)
    return state[0]


def gnp_cg(b: gnp.Array, iterations: int) -> gnp.Array:
    return gnp.fori_loop(iterations, lambda i, s: cg_step(s, gnp), (gnp.zeros_like(b), b, b, gnp.sum(b * b)))[0]


def heat_step(u: Any, c: Any, xp: Any) -> Any:
    """An explicit step of a periodic stencil whose coefficient field is ``0.1 * exp(c)``."""
    return u + 0.1 * xp.exp(c) * (xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=1) - 2 * u)


def numpy_simulation(u: np.ndarray, c: np.ndarray, reports: int, steps: int) -> tuple[np.ndarray, float]:
    """``reports`` times: ``steps`` stencil steps, then add the energy sum(u * u) to a total."""
    energy = 0.0
    for _ in range(reports):
        for _ in range(steps):
            u = heat_step(u, c, np)
        energy += np.sum(u * u)
    return u, energy


@gnp.accelerate
def gnp_simulation(u: gnp.Array, c: gnp.Array, reports: int, steps: int) -> tuple:
    """``numpy_simulation`` as two nested loops in one region."""
    def report(i: Any, state: tuple) -> tuple:
        v, energy = state
        v = gnp.fori_loop(steps, lambda j, w: heat_step(w, c, gnp), v)
        return v, energy + gnp.sum(v * v)

    return gnp.fori_loop(reports, report, (u, gnp.zeros((), dtype=u.dtype)))
