"""Benchmark: Gray-Scott reaction-diffusion (periodic 5-point Laplacian by rolls), float32, 20 steps: gnp
(one accelerated region, the steps a ``gnp.fori_loop``) next to JAX (``jit`` + ``lax.fori_loop``),
cuPyNumeric and NumPy (see ``_iterative``).

    python benchmarks/gray_scott.py [--n 8192] [--steps 20] [--repeat 10] [--warmup 2] [--json PATH]
    python benchmarks/weak_scaling.py --workers 1,2 --only gray_scott   # 8192^2 per GPU on 1 and 2 GPUs

The grid is 8192 x 8192 with a GPU, 256 x 256 without (checked against NumPy). ``weak_scaling`` and
``jax_sharded`` give ``benchmarks/weak_scaling.py`` 8192^2 grid points per worker (divided by its scale).
Targets on H200s: at most 7 ms on one GPU (JAX: 11.9 ms), at least 97% weak-scaling efficiency from 1 to
2 GPUs.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _iterative

DU, DV, FEED, KILL, DT = 0.16, 0.08, 0.035, 0.065, 1.0


def laplacian(u: Any, xp: Any) -> Any:
    """Periodic 5-point Laplacian."""
    return (xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=0) + xp.roll(u, 1, axis=1) + xp.roll(u, -1, axis=1)
            - 4 * u)


def inputs(rows: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """u = 1 and v = 0, but for a square of v = 0.25 in each n x n tile, with a little noise."""
    noise = np.random.default_rng(0).random((2, rows, columns), dtype=np.float32)
    square = np.zeros((rows, columns), dtype=bool)
    r0, c0, size = columns // 2 - columns // 16, columns // 2 - columns // 16, columns // 8
    for tile in range(rows // columns):
        square[tile * columns + r0 : tile * columns + r0 + size, c0 : c0 + size] = True
    u = np.where(square, np.float32(0.5), np.float32(1.0)) + np.float32(0.02) * noise[0]
    v = np.where(square, np.float32(0.25), np.float32(0.0)) + np.float32(0.02) * noise[1]
    return u.astype(np.float32), v.astype(np.float32)


def initial(arrays: tuple, xp: Any) -> tuple:
    return tuple(arrays)


def step(state: tuple, xp: Any) -> tuple:
    u, v = state
    uvv = u * v * v
    u = u + DT * (DU * laplacian(u, xp) - uvv + FEED * (1 - u))
    v = v + DT * (DV * laplacian(v, xp) + uvv - (FEED + KILL) * v)
    return u, v


def checksum(state: tuple, xp: Any) -> Any:
    """sum(v) (every system computes all of both fields)."""
    u, v = state
    return xp.sum(v) + xp.sum(u)


GRAY_SCOTT = _iterative.Iteration("gray_scott", inputs, initial, step, checksum, steps=20, rtol=1e-4,
                                  side=8192, unroll=4)  # four steps per iteration: one task, one tile kernel


def weak_scaling(k: int, scale: int):
    """For ``benchmarks/weak_scaling.py``: 8192^2 / scale grid points per worker (see ``_iterative``)."""
    return _iterative.weak_scaling(GRAY_SCOTT, k, scale)


def jax_sharded(devices: list, scale: int):
    """For ``benchmarks/weak_scaling.py``: the same under JAX, sharded by rows over ``devices``."""
    return _iterative.jax_sharded(GRAY_SCOTT, devices, scale)


if __name__ == "__main__":
    sys.exit(_iterative.main(GRAY_SCOTT, __doc__.splitlines()[0]))
