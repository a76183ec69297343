"""How much of a call's time is host time the GPU waits for: per workload, the wall time of a call, and the
device time of the same call's work when the host is ahead (a spin kernel queued first keeps the GPU busy while
the call's Python runs, so the call's kernels then run back to back); their difference is the host time not
hidden behind the GPU (what a faster launch path can take off).

    python benchmarks/host_gap.py [--repeat 15] [heat gray_scott cg monte_carlo black_scholes black_scholes_plain]

Needs a GPU (CuPy blocks). Each workload runs as the suite runs it under ``gnp`` (accelerated unless named
``_plain``), at the suite's size.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import _harness as H

SPIN_CYCLES = 60_000_000  # about 30 ms at 2 GHz: longer than any call's host time here
WORKLOADS = ("heat", "gray_scott", "cg", "monte_carlo", "black_scholes", "black_scholes_plain")


def runner(name: str) -> Callable[[], Any]:
    """A call of workload ``name`` as the suite's ``gnp`` row makes it, its inputs on the device."""
    import dask

    import dask_gpunumeric as gnp

    if name in ("gray_scott", "cg"):
        import _iterative
        import cg
        import gray_scott

        it = gray_scott.GRAY_SCOTT if name == "gray_scott" else cg.CG
        arrays = dask.persist(*[gnp.asarray(a) for a in it.inputs(it.side, it.side)])
        run = _iterative.gnp_runner(it, it.steps, list(arrays))
        return lambda: run(1)
    if name == "heat":
        import heat

        u = dask.persist(gnp.asarray(np.random.default_rng(0).random((16384, 16384), dtype=np.float32)))[0]
        relax = gnp.accelerate(lambda u: heat.relax(u))
        return lambda: dask.persist(relax(u))
    if name == "monte_carlo":
        import monte_carlo

        example = monte_carlo.load_example()
        return lambda: gnp.fetch(example.monte_carlo(2**30, 10.0))
    import black_scholes

    S, K, T = dask.persist(*(gnp.from_array(h) for h in black_scholes.inputs(2**27)))
    if name == "black_scholes_plain":
        return lambda: dask.persist(*black_scholes.price(gnp, S, K, T))
    price = gnp.accelerate(lambda S, K, T: black_scholes.price(gnp, S, K, T))
    return lambda: price(S, K, T)


def measure(call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median wall time of a call (device-synchronised) and median device time of its work with the host
    ahead, in ms."""
    import cupy as cp

    spin = cp.RawKernel('extern "C" __global__ void spin(long long cycles) '
                        "{ long long t0 = clock64(); while (clock64() - t0 < cycles) {} }", "spin")
    for _ in range(3):
        call()
    cp.cuda.Device().synchronize()
    walls, devices = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        cp.cuda.Device().synchronize()
        walls.append(time.perf_counter() - start)
    for _ in range(repeat):
        spin((1,), (1,), (np.int64(SPIN_CYCLES),))
        before, after = cp.cuda.Event(), cp.cuda.Event()
        before.record()
        call()
        after.record()
        after.synchronize()
        devices.append(cp.cuda.get_elapsed_time(before, after))
    return statistics.median(walls) * 1e3, statistics.median(devices)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    if H.cupy_gpu() is None:
        print("host_gap.py: needs a GPU (CuPy blocks): nothing measured", file=sys.stderr)
        return 2
    print(f"host gap, {H.device_name()}: median ms")
    print(f"{'workload':22s} {'wall':>8s} {'device':>8s} {'gap':>7s}")
    for name in args.workloads:
        wall, device = measure(runner(name), args.repeat)
        print(f"{name:22s} {wall:8.3f} {device:8.3f} {wall - device:7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
