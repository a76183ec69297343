"""Benchmark: ``heat3d.py`` on 512^3 with a GPU (96^3 without).

    python benchmarks/heat3d_large.py [--shape 512,512,512] [--steps 10] [--repeat 10] [--warmup 2] [--json PATH]
"""
from __future__ import annotations

import dataclasses
import sys

import _user_code
from heat3d import HEAT3D

HEAT3D_LARGE = dataclasses.replace(HEAT3D, name="heat3d_large", gpu_shape=(512, 512, 512), cpu_shape=(96, 96, 96))

if __name__ == "__main__":
    sys.exit(_user_code.main(HEAT3D_LARGE))
