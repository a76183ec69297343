"""Benchmark: statistics of draws (histogram, mean, standard deviation, percentiles), float32, as users
write them (see ``_user_code``).

    python benchmarks/histogram_stats.py [--shape N] [--repeat 10] [--warmup 2] [--json PATH]

2**24 draws with a GPU, 2**20 without; the draws are made on the host (the same for every system).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code

BINS, RANGE = 64, (-5.0, 11.0)
PERCENTS = [5.0, 50.0, 95.0]  # an array in the call: JAX takes no list


def statistics(xp: Any, x: Any) -> tuple[Any, Any, Any, Any]:
    counts, _ = xp.histogram(x, bins=BINS, range=RANGE)
    return counts, xp.mean(x), xp.std(x), xp.percentile(x, xp.asarray(PERCENTS))


def inputs(shape: tuple[int, ...]) -> tuple[np.ndarray]:
    return (np.random.default_rng(0).normal(3.0, 2.0, shape).astype(np.float32),)


HISTOGRAM_STATS = _user_code.Workload(
    "histogram_stats", "histogram, mean, std and percentiles, float32", statistics, inputs,
    gpu_shape=(2**24,), cpu_shape=(2**20,), rtol=1e-4)

if __name__ == "__main__":
    sys.exit(_user_code.main(HISTOGRAM_STATS))
