"""Benchmark: end-to-end latency of a small computation (build, optimize, schedule, run, fetch).

    python benchmarks/small_arrays.py [--n 10000] [--repeat 200] [--json PATH]

A 5-operation elementwise expression plus a sum over n float64 elements, fetched as a Python float, on
the local scheduler: gnp (blocks on the default backend), dask.array over NumPy, and plain NumPy as the
floor. Target for gnp on the CPU machine: <= 1 ms.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def expression(xp, x):
    """sum(exp(-x**2) * 3 + 1 - x) in any NumPy-like namespace."""
    return xp.sum(xp.exp(-x ** 2) * 3 + 1 - x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask.array as da

    import dask_gpunumeric as gnp

    host = np.random.default_rng(0).random(args.n)
    x = gnp.from_array(host)
    d = da.from_array(host)
    exact = float(expression(np, host))

    def check(value):
        ok = abs(float(value) - exact) <= 1e-9 * abs(exact)
        return ok, "matches NumPy" if ok else f"off by {float(value) - exact:.3e}"

    runs = [("gnp", lambda: gnp.fetch(expression(gnp, x))),
            ("dask.array", lambda: float(expression(da, d).compute())),
            ("numpy", lambda: float(expression(np, host)))]
    print(f"small-array latency: n = {args.n} float64, gnp backend {gnp.config.backend()}, {H.device_name()}")
    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check) for name, fn in runs]
    report = H.make_report("small_arrays", results, baseline="gnp", params={"n": args.n}, value_name="value")
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
