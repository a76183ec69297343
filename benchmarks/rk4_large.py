"""Benchmark: ``rk4.py`` at 2**26 elements with a GPU (2**18 without).

    python benchmarks/rk4_large.py [--shape N] [--steps 50] [--repeat 10] [--warmup 2] [--json PATH]
"""
from __future__ import annotations

import dataclasses
import sys

import _user_code
from rk4 import RK4

RK4_LARGE = dataclasses.replace(RK4, name="rk4_large", gpu_shape=(2**26,), cpu_shape=(2**18,))

if __name__ == "__main__":
    sys.exit(_user_code.main(RK4_LARGE))
