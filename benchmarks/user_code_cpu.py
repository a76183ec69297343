"""Benchmark: every workload of code as users write it (``_user_code``), each system's calls interleaved round
by round with the reference's (NumPy without a GPU, eager CuPy with one), so that a machine shared with other
work slows them alike; reports per workload the median wall time and the median CPU time of the process
(all its threads) of each system, and their ratios to the reference's. Outputs are checked first: bit for bit
against NumPy's where they are equal (``bitwise``), else within the workload's tolerance.

    python benchmarks/user_code_cpu.py [--only rk4,softmax] [--rounds 9] [--shape rk4=1048576] [--json PATH]
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

import _harness as H
import _user_code

WORKLOADS = ("rk4", "softmax", "heat3d", "advection", "histogram_stats", "least_squares")
"""The benchmark modules run by default (any module of a ``_user_code.Workload`` may be named)."""


def workload(module_name: str) -> _user_code.Workload:
    """The Workload that a benchmark module defines."""
    module = importlib.import_module(module_name)
    return next(value for value in vars(module).values() if isinstance(value, _user_code.Workload))


def bitwise(reference: tuple, outputs: tuple) -> bool:
    return all(np.array_equal(H.to_host(a), H.to_host(b), equal_nan=True) for a, b in zip(reference, outputs))


def measure(w: _user_code.Workload, shape: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """One workload: each system's check, then ``rounds`` rounds of one call of every system in turn."""
    host = w.inputs(shape)
    options = {} if w.steps is None else {"steps": w.steps}
    runs = _user_code.systems(w, host, options)
    reference = _user_code.as_tuple(runs[0][1]())
    check = _user_code.outputs_check(tuple(H.to_host(r).astype(np.float64) for r in reference), w.rtol, runs[0][0])
    report: dict[str, Any] = {"shape": "x".join(map(str, shape)), "systems": {}}
    for name, run in runs:
        outputs = _user_code.as_tuple(run())
        passed, detail = check(outputs)
        report["systems"][name] = {"passed": passed, "check": detail, "bitwise": bitwise(reference, outputs),
                                   "wall_ms": [], "cpu_ms": []}
    for _ in range(rounds):
        for name, run in runs:
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            H.sync()
            times = report["systems"][name]
            times["wall_ms"].append((time.perf_counter() - wall) * 1e3)
            times["cpu_ms"].append((time.process_time() - cpu) * 1e3)
    base = report["systems"][runs[0][0]]
    for times in report["systems"].values():
        for kind in ("wall", "cpu"):
            times[f"{kind}_median_ms"] = statistics.median(times[f"{kind}_ms"])
            times[f"{kind}_ratio"] = times[f"{kind}_median_ms"] / statistics.median(base[f"{kind}_ms"])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=N,M",
                        help="a workload's input shape (default: its shape without or with a GPU)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    shapes = {name: tuple(H.parse_int(t) for t in text.split(",")) for name, text in
              (item.split("=", 1) for item in args.shape)}
    gpu = H.cupy_gpu() is not None
    print(f"device: {H.device_name()}; rounds: {args.rounds}", flush=True)
    results, passed = {}, True
    for module_name in args.only.split(","):
        w = workload(module_name)
        shape = shapes.get(module_name, w.gpu_shape if gpu else w.cpu_shape)
        report = results[module_name] = measure(w, shape, args.rounds)
        rows = [[name, f"{t['wall_median_ms']:.2f}", f"{t['wall_ratio']:.2f}", f"{t['cpu_median_ms']:.2f}",
                 f"{t['cpu_ratio']:.2f}", "bitwise" if t["bitwise"] else t["check"] if t["passed"] else "FAILED " + t["check"]]
                for name, t in report["systems"].items()]
        passed = passed and all(t["passed"] for t in report["systems"].values())
        print(f"\n{module_name}, shape {report['shape']}")
        print(H.format_table(["system", "wall ms", "x ref", "cpu ms", "x ref", "outputs"], rows), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": H.device_name(), "rounds": args.rounds, "workloads": results}, f, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
