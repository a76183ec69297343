"""Weak scaling: the same work per worker on 1, 2, ... workers (GPUs, or CPU worker processes).

    python benchmarks/weak_scaling.py [--workers 1,2] [--repeat 5] [--warmup 1] [--scale S] [--only W,...]
                                      [--json PATH]

The workloads are the benchmark modules named in ``WORKLOADS`` that exist in ``benchmarks/`` and define

- ``weak_scaling(k, scale)``: yields (system, run, check), made while ``gnp.cluster(n_gpus=k)`` is the
  default client. ``run(i)`` does one timed unit of work, its size per worker fixed (divided by
  ``scale``), folds ``i`` into a scalar of the computation so that no run reuses a result the cluster
  still holds, and returns its result (persisted arrays, or a number); ``check(result)`` (or None)
  compares the last run's result, or a small part of it, with NumPy and returns (ok, detail);
- ``jax_sharded(devices, scale)`` (optional): (run, check) of the same under JAX, its data sharded over
  ``devices``; it runs after the cluster is closed, on the first k devices that JAX sees (without a GPU,
  XLA is asked for as many host devices).

Each workload module's docstring says its size per worker (the Monte-Carlo example at 2^30 samples,
Black-Scholes at 2^27 options, a matrix product of 16384^2 elements). The systems are ``gnp`` and
``gnp-unfused``, ``dask.array+cupy`` (or ``+numpy``) on the same cluster, and ``jax-sharding``. Every
run ends with a device synchronisation on every worker (a round trip whose cost with nothing to wait for,
measured once per cluster, is taken off the times); the median of ``--repeat`` runs after ``--warmup``
runs is reported. Efficiency at k workers is time(1) / time(k): 100% is perfect weak
scaling. ``--scale`` defaults to 1 with a GPU and 2^8 without one (CPU runs).
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.append(str(extra))

WORKLOADS = ("monte_carlo", "black_scholes", "heat", "gray_scott", "cg", "matmul")
"""Benchmark modules with a weak-scaling workload, in the order they run; missing ones are skipped."""

JAX_SYSTEM = "jax-sharding"

Row = dict[str, Any]
"""One measurement: workload, system, workers, times_s, median_ms, sync_ms (the cost of the final
synchronisation, taken off the times), ok and detail (the check), error."""

Check = Callable[[Any], tuple[bool, str]]


def load_workloads(names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """The importable workload modules among ``names`` that define ``weak_scaling``, and why each other
    one is left out."""
    modules, skipped = {}, {}
    for name in names:
        if not (ROOT / "benchmarks" / f"{name}.py").exists():
            skipped[name] = f"benchmarks/{name}.py does not exist"
            continue
        module = importlib.import_module(name)
        if hasattr(module, "weak_scaling"):
            modules[name] = module
        else:
            skipped[name] = f"benchmarks/{name}.py defines no weak_scaling(k, scale)"
    return modules, skipped


def sync_workers(client: Any) -> None:
    """Wait for the GPU of every worker: a finished Dask task may have left its kernels running."""

    def device_synchronize() -> None:  # a local function: pickled by value, so workers need not import this file
        try:
            import cupy
        except ImportError:
            return
        if cupy.cuda.runtime.getDeviceCount() > 0:
            cupy.cuda.runtime.deviceSynchronize()

    client.run(device_synchronize)


def new_row(workload: str, system: str, k: int, error: str | None = None) -> Row:
    """A measurement with no times yet (or none at all, with ``error``)."""
    return {"workload": workload, "system": system, "workers": k, "times_s": [], "median_ms": None,
            "sync_ms": 0.0, "ok": None, "detail": "", "error": error}


def measure_run(workload: str, system: str, k: int, run: Callable[[int], Any], check: Check | None, *,
                repeat: int, warmup: int, sync: Callable[[], None], sync_s: float = 0.0) -> Row:
    """Time ``run(i)`` (a different ``i`` each call) with ``_harness.measure``, each call ended by ``sync()``,
    and check the last result. ``sync_s``, what ``sync()`` costs with nothing to wait for, is taken off
    every time. An exception is recorded, not raised."""
    calls = itertools.count()
    result = H.measure(f"{workload} {system}, {k} worker(s)", lambda: run(next(calls)), repeat=repeat,
                       warmup=warmup, check=check, synchronize=sync, verbose=False)
    times_s = [max(t - sync_s, 0.0) for t in result.times_s]
    row = {**new_row(workload, system, k, result.error), "times_s": times_s, "sync_ms": 1e3 * sync_s,
           "median_ms": None if result.error else 1e3 * statistics.median(times_s), "ok": result.ok,
           "detail": result.detail}
    verdict = {True: "ok", False: "WRONG", None: ""}[row["ok"]]
    print(f"  {workload:14s} {system:18s} {k} worker(s): "
          + (f"ERROR {row['error']}" if row["error"] else f"{row['median_ms']:10.2f} ms  {row['detail']} {verdict}"),
          flush=True)
    return row


def idle_sync_seconds(client: Any, calls: int = 7) -> float:
    """The median time of ``sync_workers`` with nothing running: a round trip to every worker."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        sync_workers(client)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_cluster(modules: dict[str, Any], k: int, scale: int, repeat: int, warmup: int) -> list[Row]:
    """Every workload's systems on ``gnp.cluster`` with ``k`` workers."""
    import dask_gpunumeric as gnp

    rows = []
    with gnp.cluster(n_gpus=k, n_workers=k, dashboard_address=":0") as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if len(workers) != k:  # dask-cuda starts one worker per GPU there is, at most
            return [new_row(name, "setup", k, f"asked for {k} workers, the cluster has {len(workers)}")
                    for name in modules]
        sync_s = idle_sync_seconds(client)
        print(f"{k} worker(s): {workers}; synchronising them costs {1e3 * sync_s:.2f} ms, taken off every time",
              flush=True)
        for name, module in modules.items():
            try:
                for system, run, check in module.weak_scaling(k, scale):
                    rows.append(measure_run(name, system, k, run, check, repeat=repeat, warmup=warmup,
                                            sync=lambda: sync_workers(client), sync_s=sync_s))
            except Exception as exc:  # setting the workload up failed: the next one still runs
                rows.append(new_row(name, "setup", k, H.describe_error(exc)))
    return rows


def measure_jax(modules: dict[str, Any], k: int, scale: int, repeat: int, warmup: int) -> list[Row]:
    """Every workload's ``jax_sharded`` run on JAX's first ``k`` devices (none without JAX)."""
    jax_modules = H.jax_modules()
    if jax_modules is None:
        return []
    devices = jax_modules[0].devices()
    rows = []
    for name, module in modules.items():
        if not hasattr(module, "jax_sharded"):
            continue
        if len(devices) < k:
            rows.append(new_row(name, JAX_SYSTEM, k, f"JAX sees {len(devices)} device(s), fewer than {k}"))
            continue
        try:
            run, check = module.jax_sharded(devices[:k], scale)
        except Exception as exc:
            rows.append(new_row(name, JAX_SYSTEM, k, H.describe_error(exc)))
            continue
        rows.append(measure_run(name, JAX_SYSTEM, k, run, check, repeat=repeat, warmup=warmup, sync=H.sync))
    return rows


def passed(row: Row) -> bool:
    """True when the system ran and its result, if checked, was right."""
    return row["error"] is None and row["ok"] is not False


def efficiencies(rows: list[Row]) -> dict[tuple[str, str], dict[int, float]]:
    """time(fewest workers) / time(k) for every (workload, system) and worker count k measured and passed."""
    times: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        if passed(row) and row["median_ms"]:  # (a time at or below the subtracted sync cost gives none)
            times.setdefault((row["workload"], row["system"]), {})[row["workers"]] = row["median_ms"]
    return {key: {k: by_k[min(by_k)] / ms for k, ms in by_k.items()} for key, by_k in times.items()}


def table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Headers and lines of a table: one line per (workload, system), grouped by workload, with the median ms
    at each worker count ("error" where it raised, "WRONG" where its check failed), then the efficiency at
    each count after the first."""
    counts = sorted({row["workers"] for row in rows})
    efficiency = efficiencies(rows)
    medians: dict[tuple[str, str], dict[int, str]] = {}
    for row in rows:
        cell = "error" if row["error"] else "WRONG" if row["ok"] is False else f"{row['median_ms']:.2f}"
        medians.setdefault((row["workload"], row["system"]), {})[row["workers"]] = cell
    headers = ["workload", "system"] + [f"{k} w ms" for k in counts] + [f"eff {k}" for k in counts[1:]]
    workloads = list(dict.fromkeys(row["workload"] for row in rows))
    lines = [[workload, system] + [cells.get(k, "-") for k in counts]
             + [f"{efficiency[(workload, system)][k]:.0%}" if k in efficiency.get((workload, system), {}) else "-"
                for k in counts[1:]]
             for (workload, system), cells in sorted(medians.items(), key=lambda item: workloads.index(item[0][0]))]
    return headers, lines


def main(argv: list[str] | None = None) -> int:
    cpu_only = H.cupy_gpu() is None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2,4,8 (default 1,2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--scale", type=H.parse_int, default=2**8 if cpu_only else 1,
                        help="divide every size per worker by this (default 1 with a GPU, 2**8 without)")
    parser.add_argument("--only", help="comma-separated workloads to run (default: all of WORKLOADS)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    if cpu_only:  # JAX on the CPU: as many host devices as workers (read when JAX is first imported)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={max(counts)}").strip()

    names = tuple(args.only.split(",")) if args.only else WORKLOADS
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {list(WORKLOADS)}")
    modules, skipped = load_workloads(names)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", flush=True)

    rows: list[Row] = []
    for k in counts:  # every cluster before JAX: clusters start before the client process touches a GPU
        rows += measure_cluster(modules, k, args.scale, args.repeat, args.warmup)
    for k in counts:
        rows += measure_jax(modules, k, args.scale, args.repeat, args.warmup)

    import dask_gpunumeric  # noqa: F401  (imported already: for its version in the report)

    report = {
        "benchmark": "weak_scaling",
        "date": H.now(),
        "device": H.device_name(),
        "versions": H.versions(*H.MODULES),
        "params": {"workers": counts, "scale": args.scale, "repeat": args.repeat, "warmup": args.warmup},
        "results": rows,
        "skipped": skipped,
        "passed": all(passed(row) for row in rows),
    }
    print(f"\nweak scaling, {report['device']}, work per worker fixed"
          + (f" (sizes / {args.scale})" if args.scale != 1 else ""))
    headers, lines = table(rows)
    print(H.format_table(headers, lines, align="ll" + "r" * (len(headers) - 2)))
    if args.json:
        H.write_json(args.json, report)
        print(f"results written to {args.json}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
