"""Conjugate gradients on a matrix-free 2-D Laplacian (5-point, zero Dirichlet boundaries), float32, n x n per
GPU, 30 iterations: gnp (one accelerated region with ``gnp.fori_loop``: one task per GPU, the GPUs exchanging
halos and reduction partials directly) next to JAX (``jit`` + ``lax.fori_loop``, sharded by rows), cuPyNumeric
and NumPy (see ``_scaling``).

    python benchmarks/cg.py [--gpus 1,2] [--n 8192] [--steps 30] [--repeat 5] [--numpy] [--json PATH]
    python benchmarks/cg.py --small        # a CPU run: 256 x 256 per worker, checked against NumPy

Targets on H200s: at most 15 ms on one GPU (JAX: 18.4 ms), at least 92% weak-scaling efficiency from 1 to 2.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _scaling


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


def step(state: tuple, xp: Any) -> tuple:
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


CG = _scaling.Iteration("cg", inputs, initial, step, checksum, steps=30, rtol=1e-3,
                        targets={"ms_1": 15.0, "efficiency": 0.92})

if __name__ == "__main__":
    sys.exit(_scaling.main(CG, __doc__.splitlines()[0]))
