"""Benchmark: row-wise softmax and logsumexp (reductions along one axis with ``keepdims``, broadcast back),
float32, as users write it (see ``_user_code``).

    python benchmarks/softmax.py [--shape 4096,1024] [--repeat 10] [--warmup 2] [--json PATH]

4096 x 1024 with a GPU, 1024 x 1024 without.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code


def softmax_logsumexp(xp: Any, x: Any) -> tuple[Any, Any]:
    """softmax of each row, and each row's logsumexp."""
    m = xp.max(x, axis=1, keepdims=True)
    e = xp.exp(x - m)
    s = xp.sum(e, axis=1, keepdims=True)
    return e / s, (m + xp.log(s))[:, 0]


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray]:
    return (4 * np.random.default_rng(0).standard_normal(shape, dtype=np.float32),)


SOFTMAX = _user_code.Workload("softmax", "row-wise softmax and logsumexp, float32", softmax_logsumexp, inputs,
                              gpu_shape=(4096, 1024), cpu_shape=(1024, 1024), rtol=1e-5)

if __name__ == "__main__":
    sys.exit(_user_code.main(SOFTMAX))
