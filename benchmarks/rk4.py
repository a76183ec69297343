"""Benchmark: explicit Runge-Kutta-4 time stepping of two coupled fields (a Lotka-Volterra-type pointwise
system with Python-float coefficients, about 80 elementwise operations per step with shared
subexpressions), float32, 50 steps in a Python loop, both fields computed; as users write it (see
``_user_code``). Each system's first call is reported next to its warm calls.

    python benchmarks/rk4.py [--shape N] [--steps 50] [--repeat 10] [--warmup 2] [--json PATH]

2**20 elements with a GPU, 2**16 without (``rk4_large.py``: 2**26 and 2**18).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code

GROWTH, CAPACITY, PREDATION, SATURATION, CONVERSION, DEATH = 1.1, 2.0, 0.4, 0.5, 0.3, 0.4
DT = 0.05


def rates(u: Any, v: Any) -> tuple[Any, Any]:
    """du/dt and dv/dt: logistic prey, predators with a saturating (Holling type II) response."""
    eaten = u * v / (1.0 + SATURATION * u)
    du = GROWTH * u * (1.0 - u / CAPACITY) - PREDATION * eaten
    dv = CONVERSION * eaten - DEATH * v
    return du, dv


def rk4(xp: Any, u: Any, v: Any, steps: int = 50, dt: float = DT) -> tuple[Any, Any]:
    """``steps`` classical RK4 steps of size ``dt``."""
    for _ in range(steps):
        k1u, k1v = rates(u, v)
        k2u, k2v = rates(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
        k3u, k3v = rates(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
        k4u, k4v = rates(u + dt * k3u, v + dt * k3v)
        u = u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u)
        v = v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return u, v


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.uniform(0.5, 1.5, shape).astype(np.float32), rng.uniform(0.5, 1.5, shape).astype(np.float32))


RK4 = _user_code.Workload("rk4", "RK4 of two coupled fields, float32", rk4, inputs, gpu_shape=(2**20,),
                          cpu_shape=(2**16,), rtol=1e-4, steps=50, first_call=True)

if __name__ == "__main__":
    sys.exit(_user_code.main(RK4))
