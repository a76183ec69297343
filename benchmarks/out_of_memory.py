"""Benchmark (GPU): an array larger than the GPU, on a cluster and on the local scheduler.

    python benchmarks/out_of_memory.py [--out DIR] [--gib G] [--chunk-gib 1] [--parts cluster,local]
                                       [--host-memory-limit 96GiB]

The array is ``2 * random + 1`` in G GiB of float32 (default: 1.05 times the GPU's memory, 147 GiB on an
H200, in 1 GiB blocks): larger than the GPU, and larger than the host's memory too on a machine such as ours
(128 GiB), so that nothing completes by holding the whole array somewhere.

* cluster: ``gnp.cluster(n_gpus=1)`` (dask-cuda: past its device-memory limit, 80 % of the GPU by default,
  a worker spills blocks to host memory) persists the whole array, then sums it, spilled blocks coming back
  to the GPU in turn. It must complete with the right mean, with blocks in host memory and no more than the
  limit on the device. The worker's host memory limit is set (``--host-memory-limit``; what spills to host is
  the array less the device limit, 35 GiB by default): Dask's default reads the machine's memory, which on
  some machines reads low at first and grows as it is used.
* local: the local scheduler sums the array (each block made and reduced by one fused kernel, never all at
  once: it streams, and completes), then persists it, which keeps every block on the GPU: that must fail
  with ``gnp.OutOfMemoryError`` (a ``MemoryError``) naming the block and the fixes, within a minute (no
  hang), free the blocks' memory, and leave the process able to compute.

The cluster part runs first (its worker needs the GPU's memory, and UCX wants no CUDA context in this
process before the cluster starts). It prints a table of the checks and writes ``DIR/out_of_memory.json``
(every measurement); exit code 0 when every check passes. Needs CuPy and a GPU; with the defaults on one
H200, about a minute.
"""
from __future__ import annotations

import argparse
import gc
import pathlib
import subprocess
import sys
import time
from typing import Any

import numpy as np
from dask.utils import format_bytes

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

GIB = 2**30


def device_gib() -> float:
    """The GPU's memory, read in a child process (no CUDA context in this one)."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['totalGlobalMem'])"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout) / GIB


def big_array(gnp: Any, gib: float, chunk_gib: float) -> tuple[Any, int]:
    """``2 * u + 1`` with u uniform in [0, 1): about ``gib`` GiB of float32 in blocks of ``chunk_gib`` GiB, and
    its length."""
    n = int(gib * GIB) // 4
    chunk = int(chunk_gib * GIB) // 4
    return gnp.random.default_rng(0).random(n, dtype=np.float32, chunks=chunk) * 2 + 1, n


def _spill_state(dask_worker: Any) -> dict[str, int | None]:
    """Bytes of blocks a dask-cuda worker holds in device and in host memory, and its device-memory limit."""
    from distributed.sizeof import safe_sizeof

    data = dask_worker.data
    return {"device_memory_limit": getattr(data.device_buffer, "n", None),
            "device_bytes": sum(safe_sizeof(v) for v in data.device.values()),
            "host_bytes": sum(safe_sizeof(v) for v in data.host.values())}


def cluster_part(gnp: Any, gib: float, chunk_gib: float, host_memory_limit: str) -> dict:
    """Persist the array on a one-GPU cluster (it spills), then sum it."""
    import distributed

    out: dict = {"part": "cluster", "host_memory_limit": host_memory_limit}
    with gnp.cluster(n_gpus=1, dashboard_address=":0", memory_limit=host_memory_limit) as client:
        y, n = big_array(gnp, gib, chunk_gib)
        start = time.perf_counter()
        persisted = y.persist()
        distributed.wait(persisted)
        out["persist_seconds"] = time.perf_counter() - start
        [state] = client.run(_spill_state).values()
        out.update(state)
        start = time.perf_counter()
        out["mean"] = gnp.fetch(gnp.sum(persisted, dtype=np.float64)) / n
        out["sum_seconds"] = time.perf_counter() - start
    limit = out["device_memory_limit"]
    out["checks"] = {
        "persisted and summed: the right mean (2)": abs(out["mean"] - 2) < 1e-3,
        f"spilled: {out['host_bytes'] / GIB:.0f} GiB of blocks in host memory": out["host_bytes"] > 0,
        f"the device held {out['device_bytes'] / GIB:.0f} GiB, within its limit":
            limit is not None and out["device_bytes"] <= limit,
    }
    return out


def local_part(gnp: Any, gib: float, chunk_gib: float) -> dict:
    """Sum the array on the local scheduler (it streams), then persist it (out of memory)."""
    import cupy

    out: dict = {"part": "local"}
    y, n = big_array(gnp, gib, chunk_gib)
    start = time.perf_counter()
    out["reduce_mean"] = gnp.fetch(gnp.sum(y, dtype=np.float64)) / n
    out["reduce_seconds"] = time.perf_counter() - start
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
    gc.collect()
    H.sync()
    held = int(cupy.get_default_memory_pool().used_bytes())
    out["device_bytes_held_after_error"] = held
    small = gnp.random.default_rng(1).random(2**28, dtype=np.float32)
    follow_up = gnp.fetch(gnp.mean(small * 2 + 1, dtype=np.float64))
    message = out["message"] or ""
    block_size = format_bytes(int(chunk_gib * GIB) // 4 * 4)
    out["checks"] = {
        "summed (streaming): the right mean (2)": abs(out["reduce_mean"] - 2) < 1e-3,
        "persisted: gnp.OutOfMemoryError (a MemoryError)": out["error_type"] == "OutOfMemoryError",
        f"the message names the block, its size ({block_size}) and the fixes": all(
            w in message for w in ("block (", block_size, "chunk_size", "gnp.cluster()", "persist less")),
        f"it failed fast ({out['persist_seconds']:.1f} s, under a minute)": out["persist_seconds"] < 60,
        f"memory released: {held / GIB:.2f} GiB held after it (under 2 blocks)": held < 2 * chunk_gib * GIB,
        "the process computes afterwards": abs(follow_up - 2) < 1e-3,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, help="folder for out_of_memory.json")
    parser.add_argument("--gib", type=float, help="array size in GiB (default: 1.05 x the GPU's memory)")
    parser.add_argument("--chunk-gib", type=float, default=1.0, help="block size in GiB")
    parser.add_argument("--parts", default="cluster,local", help="which parts, in order (cluster, local)")
    parser.add_argument("--host-memory-limit", default="96GiB",
                        help="the cluster worker's host memory limit (Dask's memory_limit)")
    args = parser.parse_args(argv)

    total = device_gib()
    gib = args.gib or 1.05 * total
    import dask_gpunumeric as gnp

    print(f"out of memory: a {gib:.1f} GiB float32 array in {args.chunk_gib} GiB blocks, GPU of {total:.1f} GiB",
          flush=True)
    parts = {"cluster": lambda: cluster_part(gnp, gib, args.chunk_gib, args.host_memory_limit),
             "local": lambda: local_part(gnp, gib, args.chunk_gib)}
    results = []
    for name in args.parts.split(","):
        print(f"== {name}", flush=True)
        results.append(parts[name]())
    rows = [[r["part"], check, "ok" if ok else "FAILED"] for r in results for check, ok in r["checks"].items()]
    print(H.format_table(["part", "check", "result"], rows, "lll"))
    for r in results:
        if r.get("message"):
            print("\nthe error said:\n    " + r["message"].replace("\n", "\n    "))
    report = {"benchmark": "out_of_memory", "date": H.now(), "device": H.device_name(),
              "versions": H.versions("numpy", "cupy", "dask", "distributed", "dask_cuda", "dask_gpunumeric"),
              "params": {"gib": gib, "chunk_gib": args.chunk_gib, "device_gib": total}, "results": results,
              "passed": all(all(r["checks"].values()) for r in results)}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        H.write_json(str(args.out / "out_of_memory.json"), report)
        print(f"results written to {args.out / 'out_of_memory.json'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
