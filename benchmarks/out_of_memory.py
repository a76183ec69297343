"""Benchmark (GPU): an array larger than the GPU, on a cluster and on the local scheduler.

    python benchmarks/out_of_memory.py [--gib G] [--chunk-gib 1] [--parts cluster,local] [--json PATH]

The array is ``2 * random + 1`` of G GiB of float32 (default: 1.25 times the GPU's memory).

* cluster: ``gnp.cluster(n_gpus=1)`` (dask-cuda, device-memory limit and spilling to host on by default)
  persists the whole array (more than the GPU holds: blocks spill to host memory), then sums it. It must
  complete with the right sum.
* local: the local scheduler sums the array (blocks are made and reduced one by one: it completes), then
  persists it, which keeps every block on the GPU: that must fail with ``gnp.OutOfMemoryError`` (a
  ``MemoryError``) naming the block and the fixes, fast (no hang), release the memory, and leave the
  process able to compute.

The cluster part runs first (its worker needs the GPU's memory, and UCX wants no CUDA context in this
process before the cluster starts). Exit code 0 when every check passes. Needs CuPy and a GPU.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

GIB = 2**30


def device_gib() -> float:
    """The GPU's memory, read through NVML-free CUDA runtime calls in a child process (no CUDA context here)."""
    import subprocess

    code = "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['totalGlobalMem'])"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout) / GIB


def big_array(gnp, gib: float, chunk_gib: float):
    """``2 * u + 1`` with u uniform in [0, 1): about ``gib`` GiB of float32 in blocks of ``chunk_gib`` GiB."""
    n = int(gib * GIB) // 4
    chunk = int(chunk_gib * GIB) // 4
    return gnp.random.default_rng(0).random(n, dtype=np.float32, chunks=chunk) * 2 + 1, n


def _worker_host_bytes(dask_worker) -> int:
    return dask_worker.monitor.get_process_memory()


def _device_memory_limit(dask_worker):
    return getattr(dask_worker.data, "device_memory_limit", None)


def cluster_part(gnp, gib: float, chunk_gib: float) -> dict:
    import distributed

    out: dict = {"part": "cluster"}
    with gnp.cluster(n_gpus=1, dashboard_address=":0") as client:
        out["device_memory_limit"] = list(client.run(_device_memory_limit).values())
        y, n = big_array(gnp, gib, chunk_gib)
        start = time.perf_counter()
        p = y.persist()
        distributed.wait(p)
        out["persist_seconds"] = time.perf_counter() - start
        out["worker_host_bytes_after_persist"] = sum(client.run(_worker_host_bytes).values())
        out["persisted_bytes"] = y.nbytes
        mean = gnp.fetch(gnp.sum(p, dtype=np.float64)) / n
        out["seconds"] = time.perf_counter() - start
        out["mean"] = mean
        out["checks"] = {
            "completed with the right mean (2)": abs(mean - 2) < 1e-3,
            "spilled to host (worker host memory > a quarter of the array)":
                out["worker_host_bytes_after_persist"] > y.nbytes / 4,
        }
    return out


def local_part(gnp, gib: float, chunk_gib: float) -> dict:
    import cupy

    out: dict = {"part": "local"}
    y, n = big_array(gnp, gib, chunk_gib)
    start = time.perf_counter()
    mean = gnp.fetch(gnp.sum(y, dtype=np.float64)) / n
    out["reduce_seconds"] = time.perf_counter() - start
    out["reduce_mean"] = mean
    start = time.perf_counter()
    try:
        y.persist()
        error = None
    except MemoryError as exc:
        error = exc
    out["persist_seconds"] = time.perf_counter() - start
    out["error_type"] = type(error).__name__ if error is not None else None
    out["message"] = str(error) if error is not None else None
    del error
    H.sync()
    held = cupy.get_default_memory_pool().used_bytes()
    out["device_bytes_held_after_error"] = int(held)
    small = gnp.random.default_rng(1).random(2**28, dtype=np.float32)
    follow_up = gnp.fetch(gnp.mean(small * 2 + 1, dtype=np.float64))
    out["checks"] = {
        "a reduction over the whole array completes (mean 2)": abs(mean - 2) < 1e-3,
        "persisting it raises gnp.OutOfMemoryError (a MemoryError)": out["error_type"] == "OutOfMemoryError",
        "the message names the block and the fixes": bool(out["message"]) and all(
            w in out["message"] for w in ("block", "chunk_size", "gnp.cluster()", "persist less")),
        "fails fast (under 10 minutes)": out["persist_seconds"] < 600,
        "memory released after the error (under 2 blocks held)": held < 2 * chunk_gib * GIB,
        "the process computes afterwards": abs(follow_up - 2) < 1e-3,
    }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=None, help="array size (default: 1.25 x the GPU's memory)")
    parser.add_argument("--chunk-gib", type=float, default=1.0)
    parser.add_argument("--parts", default="cluster,local")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    total = device_gib()
    gib = args.gib or 1.25 * total
    import dask_gpunumeric as gnp

    print(f"out of memory: {gib:.1f} GiB float32 array, {args.chunk_gib} GiB blocks, GPU of {total:.1f} GiB", flush=True)
    parts = {"cluster": cluster_part, "local": local_part}
    results = []
    for name in args.parts.split(","):
        print(f"== {name}", flush=True)
        result = parts[name](gnp, gib, args.chunk_gib)
        results.append(result)
        for check, ok in result["checks"].items():
            print(f"  {'ok    ' if ok else 'FAILED'} {check}")
        if result.get("message"):
            print("  the error said:\n    " + result["message"].replace("\n", "\n    "))
    report = {"benchmark": "out_of_memory", "date": H.now(), "device": H.device_name(),
              "versions": H.versions("numpy", "cupy", "dask", "distributed", "dask_cuda", "dask_gpunumeric"),
              "params": {"gib": gib, "chunk_gib": args.chunk_gib, "device_gib": total}, "results": results,
              "passed": all(all(r["checks"].values()) for r in results)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
