"""Benchmark: an accelerated RK4 step of two coupled float32 fields called with a new Python-float ``dt`` on
every call (a time step chosen at each step, a time passed in), against the same call with one ``dt`` over
and over (its plan reused) and NumPy.

    python benchmarks/scalars.py [--shape N] [--repeat 100] [--warmup 5] [--json PATH]

2**20 elements with a GPU, 2**16 without. Each timed call of "gnp, new dt" has a value of ``dt`` never
seen before; its outputs are computed (the call runs at once, its arguments being in memory).
"""
from __future__ import annotations

import argparse
import itertools
import pathlib
import sys
from typing import Any

import numpy as np

import _harness as H
from rk4 import DT, inputs, rates

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def rk4_step(u: Any, v: Any, dt: float) -> tuple[Any, Any]:
    """One classical RK4 step of size ``dt``, in any NumPy-like namespace (the operators only)."""
    k1u, k1v = rates(u, v)
    k2u, k2v = rates(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
    k3u, k3v = rates(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
    k4u, k4v = rates(u + dt * k3u, v + dt * k3v)
    return u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u), v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=H.parse_int, default=None)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask_gpunumeric as gnp

    n = args.shape or (2**20 if gnp.config.backend() == "cupy" else 2**16)
    un, vn = inputs((n,))
    u, v = gnp.asarray(un), gnp.asarray(vn)
    step = gnp.accelerate(rk4_step)
    fresh = (DT * (1 + k * 1e-7) for k in itertools.count())  # a new value on every call

    def new_dt() -> tuple[float, Any]:
        dt = next(fresh)
        return dt, step(u, v, dt)

    def check(value: tuple[float, Any]) -> tuple[bool, str]:
        dt, outputs = value
        got = [H.to_host(o) for o in (gnp.fetch(outputs) if isinstance(outputs[0], gnp.Array) else outputs)]
        want = rk4_step(un, vn, dt)
        ok = all(g.dtype == w.dtype and np.allclose(g, w, rtol=1e-5, atol=0) for g, w in zip(got, want))
        return ok, "matches NumPy (float32)" if ok else "differs from NumPy"

    runs = [("gnp, new dt", new_dt), ("gnp, same dt", lambda: (DT, step(u, v, DT))),
            ("numpy, new dt", lambda: (DT, rk4_step(un, vn, DT)))]
    print(f"accelerated RK4 step, a new dt per call: n = {n} float32, gnp backend {gnp.config.backend()}, "
          f"{H.device_name()}")
    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check) for name, fn in runs]
    report = H.make_report("scalars", results, baseline="gnp, same dt", params={"n": n, "calls": args.repeat})
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
