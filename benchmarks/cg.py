"""Benchmark: conjugate gradients on a matrix-free 2-D Laplacian (5-point, zero Dirichlet boundaries),
float32, 30 iterations: gnp (one accelerated region, the iterations a ``gnp.fori_loop``) next to JAX
(``jit`` + ``lax.fori_loop``), cuPyNumeric and NumPy (see ``_iterative``).

    python benchmarks/cg.py [--n 8192] [--steps 30] [--unroll auto] [--repeat 10] [--warmup 2] [--json PATH]
    python benchmarks/weak_scaling.py --workers 1,2 --only cg      # 8192^2 per GPU on 1 and 2 GPUs

The grid is 8192 x 8192 with a GPU, 256 x 256 without (checked against NumPy). ``weak_scaling`` and
``jax_sharded`` give ``benchmarks/weak_scaling.py`` 8192^2 grid points per worker (divided by its scale).
Targets on H200s: at most 17.5 ms on one GPU, at least 92% weak-scaling efficiency from 1 to 2 GPUs.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import _iterative


def laplacian(u: Any, xp: Any) -> Any:
    """-Laplacian of ``u`` with zero Dirichlet boundaries: pad, then shifted slices."""
    p = xp.pad(u, 1)
    return 4 * p[1:-1, 1:-1] - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


def inputs(rows: int, columns: int) -> tuple[np.ndarray]:
    """The right-hand side: smooth, with noise (the same for every system)."""
    y, x = np.meshgrid(np.linspace(0, 1, rows, dtype=np.float32), np.linspace(0, 1, columns, dtype=np.float32),
                       indexing="ij")
    noise = np.random.default_rng(0).standard_normal((rows, columns), dtype=np.float32)
    return (np.sin(3 * np.pi * x) * np.sin(2 * np.pi * y) + 0.1 * noise,)


def initial(arrays: tuple, xp: Any) -> tuple:
    (b,) = arrays
    return xp.zeros_like(b), b, b, xp.sum(b * b)


def step(state: tuple, xp: Any, laplacian: Callable[[Any, Any], Any] = laplacian) -> tuple:
    """One CG iteration: (x, r, p, r.r) -> the next."""
    x, r, p, rr = state
    ap = laplacian(p, xp)
    alpha = rr / xp.sum(p * ap)
    x = x + alpha * p
    r = r - alpha * ap
    rr_new = xp.sum(r * r)
    return x, r, r + (rr_new / rr) * p, rr_new


def checksum(state: tuple, xp: Any) -> Any:
    """sum(x * x) of the solution (so that every system computes all of it)."""
    return xp.sum(state[0] * state[0])


CG = _iterative.Iteration("cg", inputs, initial, step, checksum, steps=30, rtol=1e-3, side=8192)


def weak_scaling(k: int, scale: int):
    """For ``benchmarks/weak_scaling.py``: 8192^2 / scale grid points per worker (see ``_iterative``)."""
    return _iterative.weak_scaling(CG, k, scale)


def jax_sharded(devices: list, scale: int):
    """For ``benchmarks/weak_scaling.py``: the same under JAX, sharded by rows over ``devices``."""
    return _iterative.jax_sharded(CG, devices, scale)


if __name__ == "__main__":
    sys.exit(_iterative.main(CG, __doc__.splitlines()[0]))
