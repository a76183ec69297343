"""Worker-to-worker transfer: which protocol and which link a block takes between two workers.

    python benchmarks/transfer.py [--mib 4096] [--repeat 5] [--json PATH]

Starts ``gnp.cluster(n_gpus=2)`` (two CPU worker processes without a GPU), makes one block of ``--mib``
MiB on worker 0 and times worker 1 fetching it (a task on worker 1 that reads it), as Dask does for a
halo, a reduction partial or a matrix-product panel. Prints the scheduler's protocol, the bandwidth,
and on NVIDIA GPUs the NVLink data counters (``nvidia-smi nvlink -gt d``) before and after: over UCX
with NVLink the bytes appear there; over TCP they go through host memory and the counters stay still.
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time

import _harness as H


def nvlink_bytes() -> int | None:
    """Total NVLink data (TX + RX, all links, all GPUs) in bytes since boot, or None where unavailable."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        text = subprocess.run(["nvidia-smi", "nvlink", "-gt", "d"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    values = [int(v) for v in re.findall(r"Data (?:Tx|Rx):\s*(\d+)\s*KiB", text)]
    return sum(values) * 1024 if values else None


def make_block(nbytes: int, seed: int):
    """A block of ``nbytes`` on this worker (CuPy on a GPU worker, else NumPy)."""
    from dask_gpunumeric.backend import gpu_available

    if gpu_available():
        import cupy

        block = cupy.full(nbytes // 4, seed, dtype=cupy.float32)
        cupy.cuda.Device().synchronize()
        return block
    import numpy

    return numpy.full(nbytes // 4, seed, dtype=numpy.float32)


def first_value(block) -> float:
    """Read the block where it arrived (one element to the host: the transfer must have completed)."""
    return float(block[:1].sum())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=4096 if H.cupy_gpu() is not None else 256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import distributed

    import dask_gpunumeric as gnp

    nbytes = args.mib * 2**20
    with gnp.cluster(n_gpus=2) as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if len(workers) < 2:
            print(f"transfer: needs two workers, the cluster has {len(workers)}", file=sys.stderr)
            return 1
        protocol = client.scheduler.address.split("://")[0]
        print(f"transfer benchmark: {args.mib} MiB from worker 0 to worker 1, protocol {protocol}, "
              f"{H.device_name()}", flush=True)
        times, moved = [], None
        for i in range(args.repeat + 1):
            source = client.submit(make_block, nbytes, i, workers=[workers[0]], pure=False)
            distributed.wait(source)
            before = nvlink_bytes()
            start = time.perf_counter()
            value = client.submit(first_value, source, workers=[workers[1]], allow_other_workers=False).result()
            elapsed = time.perf_counter() - start
            after = nvlink_bytes()
            assert value == i, (value, i)
            if i:  # the first round warms up both endpoints
                times.append(elapsed)
                if before is not None and after is not None:
                    moved = (moved or 0) + after - before
            del source
        median = statistics.median(times)
        print(f"  median {median * 1e3:.2f} ms for {args.mib} MiB: {nbytes / median / 1e9:.1f} GB/s")
        if moved is not None:
            print(f"  NVLink counters moved {moved / 2**20:.0f} MiB over {args.repeat} transfers "
                  f"({moved / (args.repeat * nbytes):.2f}x the data)")
        else:
            print("  NVLink counters: not available on this machine")
        result = H.Result(f"{protocol} transfer", times_s=times)
        report = H.make_report("transfer", [result], baseline=result.name,
                               params={"mib": args.mib, "protocol": protocol, "nvlink_bytes": moved})
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
