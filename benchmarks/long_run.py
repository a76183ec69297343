"""Benchmark: a long time-stepping loop keeps host and device memory flat.

    python benchmarks/long_run.py [--out DIR] [--steps 10000] [--n N] [--blocks 4] [--workers 0]

A 2-D heat equation on an n x n periodic grid (a 5-point stencil from ``gnp.roll``, fused into one kernel per
block), persisted every ``--persist-every`` steps, checkpointed every ``--checkpoint-every`` steps, with a
reduction (the energy, fetched) every ``--every`` steps. At each reduction it records the host memory of this
process (and of the workers), the device memory held by CuPy's pool, the sizes of the library's caches
(graphs, compiled kernels), the tasks of the loop's array and, on a cluster, the scheduler's tasks. The
run passes when memory is flat over the second half (host: within 2 % + 16 MiB; device: within one block)
and every cache stays within its bound. It prints a table of the checks and, with ``--out DIR``, writes the
records to ``DIR/long_run.json`` and plots them (matplotlib) to ``DIR/long_run.png``.

``--workers 0`` (the default) uses the local scheduler (one GPU, or threads on NumPy blocks);
``--workers N`` starts ``gnp.cluster`` with N workers (GPUs, or CPU processes without a GPU).
Defaults: n = 8192 float32 on a GPU (256 MiB, 4 blocks; the loop's time is mostly Python building and
launching the steps, under a minute on one H200), n = 128 float64 without one.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def heat_step(u, xp, alpha: float = 0.1):
    """One explicit step of the 2-D heat equation on a periodic grid, in any NumPy-like namespace."""
    neighbours = xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=0) + xp.roll(u, 1, axis=1) + xp.roll(u, -1, axis=1)
    return u + alpha * (neighbours - 4 * u)


def host_memory() -> int:
    """Resident memory of this process in bytes (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _worker_memory(dask_worker) -> int:
    return dask_worker.monitor.get_process_memory()


def _scheduler_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def record(step: int, u, energy: float, client, started: float) -> dict:
    """Memory, caches and graph sizes now."""
    from dask_gpunumeric.kernels import fused as _fused
    from dask_gpunumeric.kernels import cuda as _cuda
    from dask_gpunumeric.runtime import compile as _compile

    cp = H.cupy_gpu()
    row = {
        "step": step, "seconds": time.perf_counter() - started, "energy": energy,
        "host_bytes": host_memory(),
        "device_bytes": int(cp.get_default_memory_pool().used_bytes()) if cp is not None else 0,
        "graph_cache": len(_compile._GRAPH_CACHE), "graph_cache_limit": _compile._GRAPH_CACHE_SIZE,
        "kernels": _fused.kept_programs()[0], "kernels_limit": _fused.kept_programs()[1],
        "modules": len(_cuda._modules), "modules_limit": _cuda.MODULE_CACHE_SIZE,
        "array_tasks": len(u.__dask_graph__()),
    }
    if client is not None:
        row["scheduler_tasks"] = client.run_on_scheduler(_scheduler_tasks)
        row["worker_bytes"] = sum(client.run(_worker_memory).values())
        row["futures"] = len(client.futures)
    return row


def flat(values: list[int], slack: float) -> bool:
    """Whether the second half of a series stays within ``slack`` of its first value."""
    half = values[len(values) // 2 :]
    return max(half) - min(half) <= slack


def verdict(records: list[dict], block_bytes: int) -> dict:
    host = [r["host_bytes"] for r in records]
    device = [r["device_bytes"] for r in records]
    checks = {
        "host memory flat": flat(host, 0.02 * max(host) + 16 * 2**20),
        "device memory flat": flat(device, block_bytes),
        "caches bounded": all(r["graph_cache"] <= r["graph_cache_limit"] and r["kernels"] <= r["kernels_limit"]
                              and r["modules"] <= r["modules_limit"] for r in records),
        "array graph bounded": max(r["array_tasks"] for r in records) == records[0]["array_tasks"],
    }
    if "scheduler_tasks" in records[0]:
        checks["scheduler tasks bounded"] = max(r["scheduler_tasks"] for r in records[len(records) // 2 :]) <= \
            4 * records[0]["array_tasks"] + 16
        checks["worker memory flat"] = flat([r["worker_bytes"] for r in records],
                                            0.02 * max(r["worker_bytes"] for r in records) + 32 * 2**20)
    return checks


def plot(records: list[dict], path: str, title: str) -> bool:
    """Memory against the step number as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [r["step"] for r in records]
    fig, (mem, caches) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    series = [("host (this process)", "host_bytes"), ("device (CuPy pool)", "device_bytes"),
              ("workers (host)", "worker_bytes")]
    for label, key in series:
        if key in records[0] and any(r[key] for r in records):
            mem.plot(steps, [r[key] / 2**20 for r in records], label=label)
    mem.set_ylabel("MiB")
    mem.set_ylim(bottom=0)
    mem.legend()
    mem.set_title(title)
    for label, key in [("graph cache", "graph_cache"), ("programs kept with their kernels", "kernels"),
                       ("tasks of the array", "array_tasks"), ("scheduler tasks", "scheduler_tasks")]:
        if key in records[0]:
            caches.plot(steps, [r[key] for r in records], label=label)
    caches.set_ylabel("entries")
    caches.set_xlabel("step")
    caches.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    gpu = H.cupy_gpu() is not None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=H.parse_int, default=10_000)
    parser.add_argument("--n", type=H.parse_int, default=8192 if gpu else 128, help="grid side")
    parser.add_argument("--blocks", type=int, default=4, help="blocks along the first axis")
    parser.add_argument("--every", type=int, default=100, help="steps between reductions (and records)")
    parser.add_argument("--persist-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--workers", type=int, default=0, help="0: local scheduler; N: gnp.cluster of N workers")
    parser.add_argument("--out", type=pathlib.Path, help="folder for long_run.json and long_run.png")
    args = parser.parse_args(argv)

    import dask

    import dask_gpunumeric as gnp

    dtype = np.float32 if gpu else np.float64
    n = args.n
    x = np.linspace(0, 2 * np.pi, n, dtype=dtype)
    start = (np.sin(x)[:, None] * np.cos(x)[None, :]).astype(dtype)
    block_bytes = -(-n // args.blocks) * n * np.dtype(dtype).itemsize
    client = gnp.cluster(n_workers=args.workers, n_gpus=args.workers, dashboard_address=":0") if args.workers else None
    mode = f"{args.workers}-worker cluster" if client else "local scheduler"
    print(f"long run: {args.steps} steps of a {n}x{n} {np.dtype(dtype).name} heat equation, {args.blocks} blocks, "
          f"{mode}, backend {gnp.config.backend()}, {H.device_name()}", flush=True)
    records: list[dict] = []
    try:
        with dask.config.set(scheduler="dask.distributed") if client else dask.config.set({}):
            u = gnp.asarray(start, chunks=(-(-n // args.blocks), n))
            started = time.perf_counter()
            for step in range(1, args.steps + 1):
                u = heat_step(u, gnp)
                if step % args.checkpoint_every == 0:
                    u = gnp.checkpoint(u)
                elif step % args.persist_every == 0:
                    u = u.persist()
                if step % args.every == 0:
                    energy = gnp.fetch(gnp.sum(u * u, dtype=np.float64))
                    H.sync()
                    records.append(record(step, u, energy, client, started))
                    if step % (args.every * 10) == 0:
                        r = records[-1]
                        print(f"  step {step:6d}  {r['seconds']:7.1f} s  host {r['host_bytes'] / 2**20:8.1f} MiB  "
                              f"device {r['device_bytes'] / 2**20:8.1f} MiB  energy {energy:.6e}", flush=True)
    finally:
        if client is not None:
            client.close()
    checks = verdict(records, block_bytes)
    report = {
        "benchmark": "long_run", "date": H.now(), "device": H.device_name(),
        "versions": H.versions("numpy", "cupy", "dask", "distributed", "dask_gpunumeric"),
        "params": {**vars(args), "out": str(args.out), "dtype": np.dtype(dtype).name, "mode": mode},
        "records": records, "checks": checks, "passed": all(checks.values()),
    }
    print()
    print(H.format_table(["check", "result"], [[k, "ok" if v else "FAILED"] for k, v in checks.items()], "ll"))
    first, last = records[len(records) // 2], records[-1]
    print(f"second half: host {first['host_bytes'] / 2**20:.1f} -> {last['host_bytes'] / 2**20:.1f} MiB, device "
          f"{first['device_bytes'] / 2**20:.1f} -> {last['device_bytes'] / 2**20:.1f} MiB; "
          f"{last['seconds'] / args.steps * 1e3:.2f} ms per step")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        H.write_json(str(args.out / "long_run.json"), report)
        png = args.out / "long_run.png"
        title = f"{args.steps} steps, {n}x{n} {np.dtype(dtype).name}, {mode}"
        print(f"results written to {args.out / 'long_run.json'}"
              + (f", plot to {png}" if plot(records, str(png), title) else " (matplotlib not installed: no plot)"))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
