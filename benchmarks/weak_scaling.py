"""Weak scaling: the same work per worker on 1, 2, ... workers (GPUs, or CPU worker processes).

    python benchmarks/weak_scaling.py [--workers 1,2] [--repeat 5] [--json PATH] [--small]

For each worker count k it starts ``gnp.cluster(n_gpus=k)`` (one worker per GPU; CPU worker processes
without a GPU) and times, with the work per worker fixed:

- ``monte_carlo``: the example at 2^30 float32 samples per worker (gnp, and dask.array + CuPy/NumPy on
  the same cluster);
- ``black_scholes``: 2^27 options per worker, inputs persisted first, outputs persisted;
- ``matmul``: float32 matrices with 16384^2 elements per worker (the leading axis grows with k).

Efficiency at k workers is time(1) / time(k). ``--small`` divides every size by 2^8 (CPU runs).
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.append(str(extra))


def timed(fn, repeat: int) -> float:
    """Median ms of ``fn(i)`` over ``repeat`` calls after one warm-up. Each call gets its own ``i``, which
    the workloads fold into a scalar, so that no call can reuse results a cluster still holds."""
    fn(0)
    times = []
    for i in range(1, repeat + 1):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def workloads(k: int, scale: int):
    """(name, system, function) for k workers; each function runs one timed unit of work."""
    import dask
    import dask.array as da
    from distributed import wait

    import black_scholes as bs
    import dask_gpunumeric as gnp
    import monte_carlo as mc_benchmark

    mc = mc_benchmark.load_example()

    n_mc = k * 2**30 // scale
    yield "monte_carlo", "gnp", lambda i: gnp.fetch(mc.monte_carlo(n_mc, 10.0 + 1e-7 * i))

    def dask_mc(i: int) -> float:
        raw = da.random.default_rng(42).random(n_mc, dtype=np.float32, chunks=n_mc // k)
        samples = 20.0 * raw - (10.0 + 1e-7 * i)
        return float(((20.0 / n_mc) * da.sum(da.exp(-samples ** 2))).compute())

    yield "monte_carlo", "dask.array", dask_mc

    rng = gnp.random.default_rng(0)
    n_bs = k * 2**27 // scale
    S, K, T = dask.persist(rng.uniform(5.0, 30.0, n_bs, dtype=np.float32),
                           rng.uniform(1.0, 100.0, n_bs, dtype=np.float32),
                           rng.uniform(0.25, 10.0, n_bs, dtype=np.float32))
    price = gnp.accelerate(lambda S, K, T, r: bs.price(gnp, S, K, T, r=r))
    rate = lambda i: gnp.asarray(np.float32(0.02 + 1e-6 * i))  # noqa: E731  (an array: one plan for all)
    yield "black_scholes", "gnp", lambda i: wait(dask.persist(*price(S, K, T, rate(i))))

    side = int(16384 / scale ** 0.5)
    A = rng.random((k * side, side), dtype=np.float32).persist()
    B = rng.random((side, side), dtype=np.float32).persist()
    yield "matmul", "gnp", lambda i: wait(((A * np.float32(1 + 1e-7 * i)) @ B).persist())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2,4,8")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="sizes / 2^8 (for CPU runs)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask_gpunumeric as gnp

    scale = 2**8 if args.small else 1
    rows: dict[tuple[str, str], dict[int, float]] = {}
    for k in (int(w) for w in args.workers.split(",")):
        with gnp.cluster(n_gpus=k, n_workers=k, dashboard_address=":0") as client:
            print(f"{k} worker(s): {sorted(client.scheduler_info(n_workers=-1)['workers'])}", flush=True)
            for name, system, fn in workloads(k, scale):
                ms = timed(fn, args.repeat)
                rows.setdefault((name, system), {})[k] = ms
                print(f"  {name:14s} {system:11s} {ms:10.2f} ms", flush=True)
    counts = sorted({k for times in rows.values() for k in times})
    header = ["workload", "system"] + [f"{k} w ms" for k in counts] + [f"eff {k}" for k in counts[1:]]
    table = []
    for (name, system), times in rows.items():
        base = times.get(counts[0])
        table.append([name, system] + [f"{times.get(k, float('nan')):.2f}" for k in counts]
                     + [f"{base / times[k]:.0%}" if base and k in times else "-" for k in counts[1:]])
    print(f"\nweak scaling, {H.device_name()}, work per worker fixed" + (" (sizes / 2^8)" if args.small else ""))
    print(H.format_table(header, table))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({"device": H.device_name(), "small": args.small,
                       "results": [{"workload": n, "system": s, "ms": t} for (n, s), t in rows.items()]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
