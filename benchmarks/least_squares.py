"""Benchmark: least squares through the normal equations, ``solve(X.T @ X, X.T @ y)``, float32, as users
write it (see ``_user_code``).

    python benchmarks/least_squares.py [--shape 1048576,64] [--repeat 10] [--warmup 2] [--json PATH]

2**20 x 64 with a GPU, 2**16 x 64 without.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code


def least_squares(xp: Any, X: Any, y: Any) -> Any:
    return xp.linalg.solve(X.T @ X, X.T @ y)


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal(shape, dtype=np.float32)
    beta = rng.uniform(-1.0, 1.0, shape[1]).astype(np.float32)
    return X, X @ beta + np.float32(0.1) * rng.standard_normal(shape[0], dtype=np.float32)


LEAST_SQUARES = _user_code.Workload("least_squares", "least squares by X.T @ X, float32", least_squares, inputs,
                                    gpu_shape=(2**20, 64), cpu_shape=(2**16, 64), rtol=1e-3)

if __name__ == "__main__":
    sys.exit(_user_code.main(LEAST_SQUARES))
