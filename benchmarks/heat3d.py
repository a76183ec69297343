"""Benchmark: the 3-D heat equation, explicit 7-point stencil written with slices and a setitem on the
interior (fixed boundaries), float32, 10 steps in a Python loop, as users write it (see ``_user_code``);
JAX runs its nearest form, ``.at[].set``.

    python benchmarks/heat3d.py [--shape 256,256,256] [--steps 10] [--repeat 10] [--warmup 2] [--json PATH]

256^3 with a GPU, 64^3 without (``heat3d_large.py``: 512^3 and 96^3).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code

DIFFUSION = 0.1  # times dt / dx^2: stable up to 1/6


def updated_interior(u: Any) -> Any:
    """The interior after one explicit step."""
    c = u[1:-1, 1:-1, 1:-1]
    neighbours = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
                  + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])
    return c + DIFFUSION * (neighbours - 6 * c)


def heat(xp: Any, u: Any, steps: int = 10) -> Any:
    for _ in range(steps):
        v = u.copy()
        v[1:-1, 1:-1, 1:-1] = updated_interior(u)
        u = v
    return u


def heat_at(xp: Any, u: Any, steps: int = 10) -> Any:
    """``heat`` for JAX, which has no setitem."""
    for _ in range(steps):
        u = u.at[1:-1, 1:-1, 1:-1].set(updated_interior(u))
    return u


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray]:
    return (np.random.default_rng(0).random(shape, dtype=np.float32),)


HEAT3D = _user_code.Workload("heat3d", "3-D 7-point heat stencil by slices, float32", heat, inputs,
                             gpu_shape=(256, 256, 256), cpu_shape=(64, 64, 64), rtol=1e-5, steps=10,
                             jax_compute=heat_at)

if __name__ == "__main__":
    sys.exit(_user_code.main(HEAT3D))
