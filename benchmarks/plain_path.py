"""Benchmark: the host cost of the plain path (no ``accelerate``) on small work, where it is all there is.

    python benchmarks/plain_path.py [--repeat 200] [--json PATH]

- ``chain``: a 40-operation elementwise chain on 4 blocks of 1,024 float64, built and computed with
  ``compute()`` each call (target on the CPU machine: <= 1.5 ms), against dask.array and NumPy;
- ``build``: the same chain built only (per operation: <= 10 us);
- ``prebuilt``: the chain built once, computed each call (a graph-cache hit: dispatch <= 100 us plus the
  work of 40 operations on 4 blocks);
- ``loop``: ``STEPS`` Jacobi sweeps of a 64^2 grid as users write them (copy, then an interior update), each
  step persisted: every step is a new tree on new inputs, whose plan is the first step's (reused by its
  structure), against NumPy;
- ``slice``: the first 10 elements of a 1,024-block array fetched (only the first block is built and run:
  <= 30 ms), against dask.array.
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

OPS = 40
STEPS = 10


def chain(x):
    """``OPS`` elementwise operations, alternately a multiply and an add."""
    for _ in range(OPS // 2):
        x = x * 1.0001
        x = x + 0.5
    return x


def sweep(u):
    """One Jacobi sweep, written as users write it."""
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask.array as da

    import dask_gpunumeric as gnp

    host = np.random.default_rng(0).random(4096)
    x, d = gnp.asarray(host, chunks=1024), da.from_array(host, chunks=1024)
    exact = chain(host)
    big_n, big_chunk = 1024 * 2**14, 2**14

    def check_chain(value):
        ok = np.allclose(H.to_host(value), exact, rtol=1e-12)
        return ok, "matches NumPy" if ok else "differs from NumPy"

    built = chain(x)
    grid = np.random.default_rng(1).random((64, 64))
    start = gnp.asarray(grid).persist()
    exact_loop = grid
    for _ in range(STEPS):
        exact_loop = sweep(exact_loop)

    def loop(xp, u):
        for _ in range(STEPS):
            u = sweep(u)
            u = u.persist() if xp is gnp else u
        return u

    def check_loop(value):
        ok = np.allclose(H.to_host(value), exact_loop, rtol=1e-12)
        return ok, "matches NumPy" if ok else "differs from NumPy"

    runs = [("gnp chain compute()", lambda: chain(x).compute(), check_chain),
            ("gnp chain compute() prebuilt", lambda: built.compute(), check_chain),
            ("dask.array chain compute()", lambda: chain(d).compute(), check_chain),
            ("numpy chain", lambda: chain(host), check_chain),
            ("gnp chain build", lambda: chain(x), None),
            ("gnp slice of 1,024 blocks", lambda: gnp.fetch(gnp.ones(big_n, chunks=big_chunk)[:10]), None),
            ("dask.array slice of 1,024 blocks", lambda: da.ones(big_n, chunks=big_chunk)[:10].compute(), None),
            (f"gnp {STEPS}-step loop, persist each step", lambda: loop(gnp, start), check_loop),
            (f"numpy {STEPS}-step loop", lambda: loop(np, grid), check_loop)]
    print(f"plain path: {OPS}-op chain on 4 x 1,024 float64, gnp backend {gnp.config.backend()}, {H.device_name()}")
    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check)
               for name, fn, check in runs]
    report = H.make_report("plain_path", results, baseline="gnp chain compute()", params={"ops": OPS, "steps": STEPS},
                           value_name="value")
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
