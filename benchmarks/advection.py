"""Benchmark: 1-D upwind advection with a velocity of either sign (``where`` and periodic ``roll``),
float32, 30 steps in a Python loop, as users write it (see ``_user_code``).

    python benchmarks/advection.py [--shape N] [--steps 30] [--repeat 10] [--warmup 2] [--json PATH]

2**22 cells with a GPU, 2**18 without.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code

COURANT = 0.4  # dt / dx: stable while COURANT * |c| <= 1


def advect(xp: Any, q: Any, c: Any, steps: int = 30) -> Any:
    """``steps`` first-order upwind steps of dq/dt + c dq/dx = 0."""
    for _ in range(steps):
        backward = q - xp.roll(q, 1)
        forward = xp.roll(q, -1) - q
        q = q - COURANT * c * xp.where(c > 0, backward, forward)
    return q


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0, 1, shape[0], endpoint=False, dtype=np.float32)
    q = np.exp(-(((x - 0.5) / 0.05) ** 2)) + 0.1 * np.random.default_rng(0).random(shape, dtype=np.float32)
    return q.astype(np.float32), (0.8 * np.sin(2 * np.pi * x) + 0.1).astype(np.float32)


ADVECTION = _user_code.Workload("advection", "1-D upwind advection by where and roll, float32", advect, inputs,
                                gpu_shape=(2**22,), cpu_shape=(2**18,), rtol=1e-5, steps=30)

if __name__ == "__main__":
    sys.exit(_user_code.main(ADVECTION))
