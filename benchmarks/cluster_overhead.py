"""What a cluster adds to a call: every weak-scaling workload's gnp run locally and on a cluster, against
Dask's own round trip measured in the same run.

    python benchmarks/cluster_overhead.py [--workers K] [--repeat 7] [--warmup 2] [--scale S] [--rounds R]
                                          [--cpu-calls N] [--task-calls N] [--rmm-async] [--no-direct]
                                          [--only W,...] [--json PATH]

For each workload of ``weak_scaling.WORKLOADS`` (the suite's benchmarks with a size per worker; the
small-array latency benchmark has none), its "gnp" system (``weak_scaling(k, scale)``, K workers' worth of
work) is timed on ``gnp.cluster(n_workers=K)`` (default 1: the one-worker cluster; K above the GPUs puts
several workers on one GPU, whose regions then exchange through Dask's comms), then in the same process
without a cluster (Dask's local scheduler). On the cluster, Dask's floor is measured too: ``rt``, the
median of ``client.submit(int, 1, pure=False).result()``, and the median of ``client.run(int)``. (A cluster
``gnp.cluster`` starts sends its messages without distributed's batching intervals, ``runtime.streams``: its
``rt`` is that of such a cluster, shorter than with distributed's defaults.)

The overhead of a workload is (cluster time - local time) / rt: how many of Dask's own round trips a call
costs on top of its work (the goal: at most one, the call's own; 1.2 on a noisy 2-core CPU machine), of
the medians; the same of the fastest runs is printed beside it (on a loaded machine the medians drift), and
the same overhead in ``client.run`` latencies (a request to the workers and back, no scheduler cycle): what an
call that the workers run directly (``runtime/direct.py``: the accelerated Black-Scholes, heat, Gray-Scott and CG,
and Monte-Carlo's fetch of one level of tasks, here) is measured against. ``--no-direct`` sends every call through
the scheduler. The
workers run with this process's memory allocator settings (``SAME_MALLOC``). ``--rounds`` alternates
cluster and local measurements, for a machine whose load drifts.
Times end with a device synchronisation (every worker's on the cluster, its idle cost taken off); each
workload's last result is checked against NumPy. ``--scale`` defaults to 1 with a GPU and 2^8 without one.
``--cpu-calls N`` also measures the CPU time of a call (N calls a round), on the cluster in this process and in
the workers: what a call costs whatever the machine's load, which stretches wall times but not CPU times.
``--task-calls N`` also measures, over N calls on the cluster, the time a call's tasks compute on the workers
(the scheduler's task stream): a cluster call's time is that and the control path around it, so a workload
whose worker tasks take longer than its local call has its extra time in the work, not in round trips.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import _harness as H
import dask
import weak_scaling as W

SYSTEM = "gnp"
# Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which makes glibc map and unmap every
# block-sized NumPy temporary: 2-6x slower NumPy work on the 2-core CPU machine, a cost of the worker's
# allocator, not of the control path measured here. The workers get this process's allocator settings.
SAME_MALLOC = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
CYCLE = 64  # distinct calls of a workload (see measure_all)
TARGET_RT = {"gpu": 1.0, "cpu": 1.2}  # the goal, in round trips over the local time


def dask_floor_ms(client: Any, calls: int = 31) -> tuple[float, float, float]:
    """Medians (ms) of one round trip through the scheduler to a worker (``submit(...).result()``) and of a
    ``client.run`` on every worker, and the fastest round trip, after a few calls of each to warm up."""
    def times_ms(call: Any) -> list[float]:
        for _ in range(3):
            call()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            call()
            times.append(1e3 * (time.perf_counter() - start))
        return times

    rt = times_ms(lambda: client.submit(int, 1, pure=False).result())
    return statistics.median(rt), statistics.median(times_ms(lambda: client.run(int))), min(rt)


def gnp_runs(modules: dict[str, Any], k: int, scale: int) -> dict[str, tuple[Any, Any]]:
    """(run, check) of each workload's gnp system, set up now (on the active cluster, if any)."""
    runs = {}
    for name, module in modules.items():
        try:
            runs[name] = next((run, check) for system, run, check in module.weak_scaling(k, scale) if system == SYSTEM)
        except Exception as exc:  # noqa: BLE001 - the next workload still runs
            runs[name] = exc
    return runs


def measure_all(runs: dict[str, Any], k: int, where: str, repeat: int, warmup: int, sync: Any,
                sync_s: float) -> dict[str, W.Row]:
    rows = {}
    for name, entry in runs.items():
        if isinstance(entry, Exception):
            rows[name] = W.new_row(name, where, k, H.describe_error(entry))
            continue
        run, check = entry
        # i cycles: a fast local run is called hundreds of times in its warm-up, and Black-Scholes folds i into
        # its rate while its check prices at the base rate (off by more than its tolerance from i ~ 130 on);
        # a result 64 calls old is no longer held anywhere
        rows[name] = W.measure_run(name, where, k, lambda i, run=run: run(i % CYCLE), check, repeat=repeat,
                                   warmup=warmup, sync=sync, sync_s=sync_s)
    return rows


def cpu_ms_per_call(runs: dict[str, Any], calls: int, client: Any = None, idle_s: float = 0.0
                    ) -> dict[str, float | None]:
    """Per workload, the CPU time (ms) of one call in this process (the client; on a LocalCluster its
    scheduler too) and in the ``client``'s workers (less ``idle_s``, what reading theirs costs: ``cpu_of_run``):
    what a call costs whatever the machine's load (a loaded machine stretches wall times, not CPU times);
    ``calls`` calls after the timed ones, of i values of their own."""
    def workers_s() -> float:
        return sum(client.run(time.process_time).values()) if client is not None else 0.0

    out: dict[str, float | None] = {}
    for name, entry in runs.items():
        if isinstance(entry, Exception):
            out[name] = None
            continue
        run = entry[0]
        start = time.process_time() + workers_s()
        for i in range(calls):
            run(CYCLE + i)  # (each i a call of its own, none of the timed runs')
        out[name] = 1e3 * (time.process_time() + workers_s() - start - idle_s) / calls
    return out


def cpu_of_run(client: Any, calls: int = 11) -> float:
    """CPU seconds (this process and the workers) of reading the workers' CPU time twice with nothing to do."""
    times = []
    for _ in range(calls):
        start = time.process_time() + sum(client.run(time.process_time).values())
        times.append(time.process_time() + sum(client.run(time.process_time).values()) - start)
    return statistics.median(times)


def task_ms_per_call(client: Any, runs: dict[str, Any], calls: int) -> dict[str, float | None]:
    """Per workload, the median over ``calls`` calls (of i values of their own) of the time its tasks computed
    on the workers (ms: the sum of their compute spans in the scheduler's task stream; on a GPU a task ends
    when its function returns, which waits for the device where the task returns a host value)."""
    from distributed import get_task_stream

    out: dict[str, float | None] = {}
    for name, entry in runs.items():
        if isinstance(entry, Exception):
            out[name] = None
            continue
        per_call = []
        for i in range(calls):
            with get_task_stream(client) as stream:
                entry[0](2 * CYCLE + i)
            per_call.append(1e3 * sum(span["stop"] - span["start"] for task in stream.data
                                      for span in task["startstops"] if span["action"] == "compute"))
        out[name] = statistics.median(per_call)
    return out


def cpu_table(cpu: dict[str, dict[str, list[float | None]]], names: list[str], calls: int) -> dict[str, Any]:
    """Print the CPU times per call (medians of the rounds) and return them: per workload local, cluster and
    the cluster's extra CPU, with ``rt``'s (a ``submit(...).result()``) beside them."""
    def median(values: list[float | None] | None) -> float | None:
        values = [v for v in values or [] if v is not None]
        return statistics.median(values) if values else None

    rt = median(cpu["rt"].get("rt"))
    table: dict[str, Any] = {"rt": None if rt is None else round(rt, 3)}
    lines = []
    for name in names:
        c, l = median(cpu["cluster"].get(name)), median(cpu["local"].get(name))
        extra = None if c is None or l is None else c - l
        table[name] = {k: None if v is None else round(v, 3) for k, v in (("local", l), ("cluster", c), ("extra", extra))}
        lines.append([H.title(name), "-" if l is None else f"{l:.2f}", "-" if c is None else f"{c:.2f}",
                      "-" if extra is None else f"{extra:.2f}", "-" if extra is None or not rt else f"{extra / rt:.2f}"])
    print(f"\nCPU time per call ({calls} calls a round; cluster: this process, which holds a LocalCluster's scheduler, "
          f"and the workers), a round trip's: {rt:.2f} ms")
    print(H.format_table(["workload", "local ms", "cluster ms", "extra ms", "extra / rt's"], lines, align="lrrrr"))
    return table


def task_table(task_ms: dict[str, list[float | None]], local: dict[str, list[W.Row]], calls: int
               ) -> dict[str, float | None]:
    """Print the time a call's tasks computed on the workers (median of the rounds) beside the local call's, and
    return it per workload."""
    table: dict[str, float | None] = {}
    lines = []
    for name, measured in task_ms.items():
        values = [ms for ms in measured if ms is not None]
        table[name] = round(statistics.median(values), 3) if values else None
        l = merged(local[name])
        lines.append([H.title(name), "-" if l["median_ms"] is None else f"{l['median_ms']:.2f}",
                      "-" if table[name] is None else f"{table[name]:.2f}"])
    print(f"\nWorker task time per call ({calls} calls a round, the scheduler's task stream)")
    print(H.format_table(["workload", "local ms", "tasks on the workers ms"], lines, align="lrr"))
    return table


def merged(rows: list[W.Row]) -> W.Row:
    """One row of the rounds' rows of a workload: their times together (the first error, the worst check)."""
    times = [t for row in rows for t in row["times_s"]]
    failed = next((row for row in rows if row["error"] or row["ok"] is False), rows[0])
    return {**failed, "times_s": times, "median_ms": 1e3 * statistics.median(times) if times and not failed["error"]
            else None}


def overhead(cluster: W.Row, local: W.Row, rt_ms: float) -> float | None:
    """(cluster - local) / rt, or None where either failed."""
    if not (W.passed(cluster) and W.passed(local)) or cluster["median_ms"] is None or local["median_ms"] is None:
        return None
    return (cluster["median_ms"] - local["median_ms"]) / rt_ms


def cell(row: W.Row) -> str:
    return "error" if row["error"] else "WRONG" if row["ok"] is False else f"{row['median_ms']:.2f}"


def main(argv: list[str] | None = None) -> int:
    cpu_only = H.cupy_gpu() is None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1, help="workers of the cluster (default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--scale", type=H.parse_int, default=2**8 if cpu_only else 1,
                        help="divide every size per worker by this (default 1 with a GPU, 2**8 without)")
    parser.add_argument("--rounds", type=int, default=2 if cpu_only else 1,
                        help="cluster-then-local rounds, times pooled (default 2 without a GPU, where load drifts; "
                             "1 with one: a cluster starts before this process uses the GPU)")
    parser.add_argument("--only", help="comma-separated workloads to run (default: all of weak_scaling.WORKLOADS)")
    parser.add_argument("--cpu-calls", type=int, default=0,
                        help="also measure the CPU time per call over this many calls (cluster: this process and "
                             "the workers; a loaded machine stretches wall times, not CPU times); default 0: not")
    parser.add_argument("--task-calls", type=int, default=0,
                        help="also measure the time a call's tasks compute on the workers over this many calls "
                             "(the scheduler's task stream); default 0: not")
    parser.add_argument("--rmm-async", action="store_true",
                        help="GPU workers allocate CuPy blocks through RMM's asynchronous pool (dask-cuda's "
                             "rmm_async), not CuPy's pool (gnp.cluster's default): what that allocator costs a call")
    parser.add_argument("--no-direct", action="store_true",
                        help="accelerated calls through the scheduler (gpunumeric.cluster.direct-calls off), not run "
                             "by the workers directly: what the direct path saves")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    names = tuple(args.only.split(",")) if args.only else W.WORKLOADS
    unknown = sorted(set(names) - set(W.WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {list(W.WORKLOADS)}")
    modules, skipped = W.load_workloads(names)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", flush=True)
    k = args.workers

    import distributed  # noqa: F401  (its configuration's defaults, before SAME_MALLOC changes one)

    import dask_gpunumeric as gnp

    on_cluster: dict[str, list[W.Row]] = {name: [] for name in modules}
    local: dict[str, list[W.Row]] = {name: [] for name in modules}
    floors: list[tuple[float, float, float]] = []
    task_ms: dict[str, list[float | None]] = {name: [] for name in modules}
    cpu: dict[str, dict[str, list[float]]] = {"cluster": {}, "local": {}, "rt": {}}
    for _ in range(args.rounds):  # each round: the cluster first (it starts before this process uses a GPU)
        rmm_async = {"rmm_async": True, "rmm_allocator_external_lib_list": ["cupy"]}
        allocator = rmm_async if args.rmm_async and not cpu_only else {}
        direct = {"gpunumeric.cluster.direct-calls": not args.no_direct}
        with dask.config.set({**SAME_MALLOC, **direct}), gnp.cluster(n_workers=k, dashboard_address=":0", **allocator) as client:
            client.wait_for_workers(k)
            floors.append(dask_floor_ms(client))
            sync_s = W.idle_sync_seconds(client)
            print(f"cluster of {k} worker(s): rt {floors[-1][0]:.2f} ms, client.run {floors[-1][1]:.2f} ms, "
                  f"synchronising the workers {1e3 * sync_s:.2f} ms (taken off every time)", flush=True)
            runs = gnp_runs(modules, k, args.scale)
            for name, row in measure_all(runs, k, "cluster", args.repeat, args.warmup,
                                         lambda: W.sync_workers(client), sync_s).items():
                on_cluster[name].append(row)
            floors.append(dask_floor_ms(client, calls=11))  # the floor again: a noisy machine shows here
            if args.task_calls:
                for name, ms in task_ms_per_call(client, runs, args.task_calls).items():
                    task_ms[name].append(ms)
            if args.cpu_calls:
                idle_s = cpu_of_run(client)
                submit = {"rt": (lambda i: client.submit(int, 1, pure=False).result(), None)}
                for where, measured in (("rt", cpu_ms_per_call(submit, args.cpu_calls, client, idle_s)),
                                        ("cluster", cpu_ms_per_call(runs, args.cpu_calls, client, idle_s))):
                    for name, ms in measured.items():
                        cpu[where].setdefault(name, []).append(ms)
        print("without a cluster (Dask's local scheduler):", flush=True)
        runs = gnp_runs(modules, k, args.scale)
        for name, row in measure_all(runs, k, "local", args.repeat, args.warmup, H.sync, 0.0).items():
            local[name].append(row)
        if args.cpu_calls:
            for name, ms in cpu_ms_per_call(runs, args.cpu_calls).items():
                cpu["local"].setdefault(name, []).append(ms)
    rt_ms = statistics.median(rt for rt, _, _ in floors)
    run_ms = statistics.median(run for _, run, _ in floors)
    fastest_rt_ms = min(fastest for _, _, fastest in floors)

    target = TARGET_RT["cpu" if cpu_only else "gpu"]
    results = []
    lines = []
    for name in modules:
        c, l = merged(on_cluster[name]), merged(local[name])
        over = overhead(c, l, rt_ms)
        detail = "-" if over is None else f"{over:.2f} rt"
        verdict = "" if over is None else "ok" if over <= target else f"over {target:g} rt"
        fastest = "-" if over is None else f"{(min(c['times_s']) - min(l['times_s'])) * 1e3 / fastest_rt_ms:.2f} rt"
        runs_over = "-" if over is None else f"{over * rt_ms / run_ms:.2f}"
        lines.append([H.title(name), cell(l), cell(c), detail, verdict, fastest, runs_over])
        for row in (l, c):
            result = H.Result(f"{name} {row['system']}", times_s=list(row["times_s"]), ok=row["ok"],
                              detail=row["detail"] if row is l else f"{row['detail']}; overhead {detail}".strip("; "),
                              error=row["error"])
            results.append(result)
    results.append(H.Result("rt", times_s=[rt_ms / 1e3]))
    results.append(H.Result("client.run", times_s=[run_ms / 1e3]))
    results.append(H.Result("rt fastest", times_s=[fastest_rt_ms / 1e3]))
    print(f"\ncluster overhead, {H.device_name()}, {k} worker(s)"
          + (f" (sizes / {args.scale})" if args.scale != 1 else "")
          + f", {args.rounds} round(s): rt {rt_ms:.2f} ms (each time: {', '.join(f'{rt:.1f}' for rt, _, _ in floors)}), "
          f"client.run {run_ms:.2f} ms, target <= {target:g} rt; fastest rt {fastest_rt_ms:.2f} ms")
    print(H.format_table(["workload", "local ms", "cluster ms", "(cluster - local) / rt", "", "of the fastest runs",
                          "/ client.run"], lines, align="lrrrlrr"))
    params = {"workers": k, "scale": args.scale, "rmm_async": args.rmm_async, "direct_calls": not args.no_direct,
              "repeat": args.repeat,
              "warmup": args.warmup,
              "rounds": args.rounds, "rt_ms": round(rt_ms, 3), "client_run_ms": round(run_ms, 3),
              "fastest_rt_ms": round(fastest_rt_ms, 3),
              "target_rt": target}
    if args.task_calls:
        params["task_ms_per_call"] = task_table(task_ms, local, args.task_calls)
    if args.cpu_calls:
        params["cpu_ms_per_call"] = cpu_table(cpu, list(modules), args.cpu_calls)
    return H.finish(H.make_report("cluster_overhead", results, baseline="rt", params=params), args.json)


if __name__ == "__main__":
    sys.exit(main())
