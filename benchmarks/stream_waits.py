"""How long a call's messages wait in distributed's batched streams before they leave, per hop, for every
weak-scaling workload's gnp call and for Dask's own round trip (``rt``), on ``gnp.cluster``.

    python benchmarks/stream_waits.py [--workers K] [--calls 15] [--scale S] [--only W,...]

Distributed batches each stream's messages (the client's to the scheduler at most one batch per 10 ms, the
scheduler's to a worker per 5 ms and to a client per 2 ms, a worker's per 2 ms): a message queued within
that time of the stream's last batch waits for the next. Here every stream of the cluster (the client's, the
scheduler's to each worker and client, each worker's) records, for the messages a call waits for
(``update-graph``, ``compute-task``, ``task-finished``, ``key-in-memory``, pushed results), the time from
being queued to being written. Printed per workload: the median call time (ms, each call ended by a device
synchronisation of the workers, as ``cluster_overhead.py`` times them) and the median wait of each kind of
message on each hop (ms). A call waits for several of them in turn; a wait near a stream's interval is one
that a batch made.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import _harness as H
import dask
import cluster_overhead as C
import weak_scaling as W

WAITED = ("update-graph", "compute-task", "task-finished", "key-in-memory", "gnp-pushed")


def record_waits(stream: Any, hop: str, waits: dict[str, list[float]]) -> None:
    """Record into ``waits`` (by "hop op") how long each message of a kind in ``WAITED`` waits in ``stream``
    (a ``BatchedSend``) between being queued and being written."""
    queued: dict[int, tuple[float, str]] = {}
    send, write = stream.send, stream.comm.write

    def sent(*msgs: Any) -> Any:
        now = time.perf_counter()
        for m in msgs:
            if isinstance(m, dict) and m.get("op") in WAITED:
                queued[id(m)] = (now, m["op"])
        return send(*msgs)

    def written(payload: list, *args: Any, **kwargs: Any) -> Any:
        now = time.perf_counter()
        for m in payload:
            found = queued.pop(id(m), None)
            if found is not None:
                waits.setdefault(f"{hop} {found[1]}", []).append(1e3 * (now - found[0]))
        return write(payload, *args, **kwargs)

    stream.send, stream.comm.write = sent, written


def _on_workers(dask_worker: Any) -> None:
    dask_worker.gnp_stream_waits = {}
    record_waits(dask_worker.batched_stream, "worker->scheduler", dask_worker.gnp_stream_waits)


def _on_scheduler(dask_scheduler: Any) -> None:
    dask_scheduler.gnp_stream_waits = waits = {}
    for stream in dask_scheduler.stream_comms.values():
        record_waits(stream, "scheduler->worker", waits)
    for stream in dask_scheduler.client_comms.values():
        record_waits(stream, "scheduler->client", waits)


def _taken(dask_worker: Any = None, dask_scheduler: Any = None) -> dict[str, list[float]]:
    waits = (dask_worker if dask_worker is not None else dask_scheduler).gnp_stream_waits
    taken = {kind: list(values) for kind, values in waits.items()}
    waits.clear()
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1, help="workers of the cluster (default 1)")
    parser.add_argument("--calls", type=int, default=15, help="calls of each workload (default 15)")
    parser.add_argument("--scale", type=H.parse_int, default=2**8 if H.cupy_gpu() is None else 1,
                        help="divide every size per worker by this (default 1 with a GPU, 2**8 without)")
    parser.add_argument("--only", help="comma-separated workloads (default: all of weak_scaling.WORKLOADS)")
    args = parser.parse_args(argv)
    modules, skipped = W.load_workloads(tuple(args.only.split(",")) if args.only else W.WORKLOADS)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", flush=True)

    import dask_gpunumeric as gnp

    with dask.config.set(C.SAME_MALLOC), gnp.cluster(n_workers=args.workers, dashboard_address=":0") as client:
        client.wait_for_workers(args.workers)
        calls = {"rt": lambda i: client.submit(int, 1, pure=False).result()}
        for name, entry in C.gnp_runs(modules, args.workers, args.scale).items():
            if isinstance(entry, Exception):
                print(f"{name}: {H.describe_error(entry)}")
                continue
            run = entry[0]
            calls[name] = lambda i, run=run: (run(i), W.sync_workers(client))
        for call in calls.values():  # (traced, compiled, the cluster's plugins set up, before any stream is read)
            call(0), call(1)
        client.run(_on_workers)
        client.run_on_scheduler(_on_scheduler)
        here: dict[str, list[float]] = {}
        record_waits(client.scheduler_comm, "client->scheduler", here)
        lines = []
        for name, call in calls.items():
            client.run(_taken), client.run_on_scheduler(_taken), here.clear()
            times = []
            for i in range(args.calls):
                start = time.perf_counter()
                call(2 + i)
                times.append(time.perf_counter() - start)
            waits = {**here, **client.run_on_scheduler(_taken)}
            for found in client.run(_taken).values():
                for kind, values in found.items():
                    waits.setdefault(kind, []).extend(values)
            lines.append([H.title(name) if name != "rt" else "rt", f"{1e3 * statistics.median(times):.2f}",
                          ", ".join(f"{kind} {statistics.median(v):.2f}" for kind, v in sorted(waits.items()))])
    print(f"\nwaits in distributed's batched streams, {H.device_name()}, {args.workers} worker(s), "
          f"medians of {args.calls} calls (ms)")
    print(H.format_table(["call", "call ms", "median wait per hop and message (ms)"], lines, align="lrl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
