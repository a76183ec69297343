"""Benchmarks of code written as users write it: one plain NumPy-style function of the namespace ``xp``, run
unchanged by every system (``black_scholes_erf.py``, ``cg_setitem.py``, ``rk4.py``, ``softmax.py``, ...).

A benchmark is a :class:`Workload`: the function, its host inputs for a shape, and the shapes to use with
and without a GPU. The systems, side by side in one run:

- ``gnp-auto``: the plain path, the function on persisted gnp arrays, then ``gnp.compute`` of all its
  outputs together (no decorator): building the expressions, our optimizer's cached graph and the run, without
  ``dask.compute``'s own per-call work (``compute_overhead.py`` shows that beside it); ``gnp``: the same function
  under ``gnp.accelerate``;
- ``numpy`` (without a GPU), ``cupy`` (eager, with one), ``jax-jit`` where JAX is installed (the
  workload's ``jax_compute`` where the code has no JAX form, e.g. setitem becomes ``.at[].set``).

The reference is NumPy without a GPU and eager CuPy with one: it runs first, and every other system's
outputs are checked against its outputs (``max |err| <= rtol * max(1, max |reference|)`` per output). Each
system's first call is timed on its own (it compiles; ``gnp``'s follows ``gnp-auto``'s in the same process,
and may reuse kernels that one compiled), then the harness's warm-up and timed runs follow,
as many as fit in ``BUDGET_S`` after the first call. The report holds each system's first call
(``first_call_ms``; rows of their own where ``Workload.first_call``) and its median against the reference
and against ``jax-jit`` (``ratios``).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # an installed dask_gpunumeric comes first; else the checkout

BUDGET_S = {"gpu": 20.0, "cpu": 3.0}
"""Seconds of timed runs a system gets after its first call (fewer runs when its calls are slow)."""


@dataclass(frozen=True)
class Workload:
    """User code for any NumPy-like namespace: ``compute(xp, *arrays, **options)`` returns an array, a 0-d
    result or a tuple of them."""

    name: str
    description: str  # one line: what is computed, for the printed header
    compute: Callable[..., Any]
    inputs: Callable[[tuple[int, ...]], tuple[np.ndarray, ...]]  # shape -> host arrays
    gpu_shape: tuple[int, ...]
    cpu_shape: tuple[int, ...]
    rtol: float
    steps: int | None = None  # passed as ``steps=`` to ``compute`` (and set by ``--steps``) when not None
    jax_compute: Callable[..., Any] | None = None  # JAX's nearest form, when ``compute`` can't run in JAX
    first_call: bool = False  # each system's first call as a row of the report


def as_tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def outputs_check(reference: tuple[np.ndarray, ...], rtol: float, against: str) -> Callable[[Any], tuple[bool, str]]:
    """A check of any system's outputs against the reference's host outputs."""
    def check(value: Any) -> tuple[bool, str]:
        values = as_tuple(value)
        if len(values) != len(reference):
            return False, f"{len(values)} outputs, {against} gave {len(reference)}"
        worst = 0.0
        for out, ref in zip(values, reference):
            out = H.to_host(out)
            if out.shape != ref.shape:
                return False, f"shape {out.shape}, {against} gave {ref.shape}"
            scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
            worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - ref), initial=0.0)) / scale)
        return worst <= rtol, f"rel.err {worst:.1e} vs {against}"

    return check


def systems(w: Workload, host: tuple[np.ndarray, ...], options: dict) -> list[tuple[str, Callable[[], Any]]]:
    """(name, run) of every system available here, the reference first; each run returns the outputs (on
    the device where there is one)."""
    import dask

    import dask_gpunumeric as gnp

    cp = H.cupy_gpu()
    runs: list[tuple[str, Callable[[], Any]]] = []
    if cp is None:
        runs.append(("numpy", lambda: w.compute(np, *host, **options)))
    else:
        device = [cp.asarray(h) for h in host]
        runs.append(("cupy", lambda: w.compute(cp, *device, **options)))
    arrays = dask.persist(*(gnp.asarray(h) for h in host))
    accelerated = gnp.accelerate(lambda *a: w.compute(gnp, *a, **options))
    runs.append(("gnp-auto", lambda: gnp.compute(*as_tuple(w.compute(gnp, *arrays, **options)))))
    runs.append(("gnp", lambda: accelerated(*arrays)))
    modules = H.jax_modules()
    if modules is not None:
        jax, jnp = modules
        inputs = [jax.device_put(h) for h in host]
        compiled = jax.jit(lambda *a: (w.jax_compute or w.compute)(jnp, *a, **options))
        runs.append(("jax-jit", lambda: jax.block_until_ready(compiled(*inputs))))
    return runs


def measure_system(name: str, run: Callable[[], Any], check: Callable[[Any], tuple[bool, str]] | None,
                   args: argparse.Namespace, budget_s: float) -> tuple[H.Result, H.Result]:
    """(first call, warm runs) of one system: the first call alone, then the harness's warm-up and timed
    runs, as many as ``budget_s`` allows at the first call's pace (timed runs first; a slow system's one
    timed run is its second call)."""
    first = H.measure(f"{name} first call", run, repeat=1, warmup=0, check=check)
    if first.error is not None:
        return first, first
    calls = max(1, int(budget_s / max(first.times_s[0], 1e-6)))
    repeat = min(args.repeat, calls)
    warm = H.measure(name, run, repeat=repeat, warmup=min(args.warmup, calls - repeat), check=check)
    return first, warm


def ratios(results: list[H.Result], baselines: list[str]) -> dict[str, dict[str, float]]:
    """Each system's median over each baseline's (baselines that failed or did not run are left out)."""
    medians = {r.name: r.median_ms for r in results if r.error is None}
    return {name: {f"x {b}": ms / medians[b] for b in baselines if b in medians} for name, ms in medians.items()}


def main(w: Workload, argv: list[str] | None = None) -> int:
    gpu = H.cupy_gpu() is not None
    parser = argparse.ArgumentParser(description=w.description)
    parser.add_argument("--shape", type=lambda text: tuple(H.parse_int(t) for t in text.split(",")),
                        default=w.gpu_shape if gpu else w.cpu_shape,
                        help=f"input shape (default {w.gpu_shape} with a GPU, {w.cpu_shape} without)")
    if w.steps is not None:
        parser.add_argument("--steps", type=int, default=w.steps)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    options = {} if w.steps is None else {"steps": args.steps}

    import dask_gpunumeric as gnp

    host = w.inputs(args.shape)
    print(f"{H.title(w.name)}: {w.description}; shape {args.shape}"
          + (f", {args.steps} steps" if w.steps is not None else "")
          + f", gnp backend {gnp.config.backend()}, {H.device_name()}", flush=True)
    runs = systems(w, host, options)
    reference_name, reference_run = runs[0]
    budget_s = BUDGET_S["gpu" if gpu else "cpu"]
    captured: list[tuple[np.ndarray, ...]] = []

    def keep(value: Any) -> tuple[None, str]:  # the reference's outputs, on the host, unchecked
        captured[:] = [tuple(H.to_host(out).astype(np.float64) for out in as_tuple(value))]
        return None, ""

    pairs = [measure_system(reference_name, reference_run, keep, args, budget_s)]
    if captured:
        check = outputs_check(captured[0], w.rtol, reference_name)
        pairs += [measure_system(name, run, check, args, budget_s) for name, run in runs[1:]]
    results = []
    for first, warm in pairs:
        if w.first_call and first is not warm:
            results.append(first)
        results.append(warm)
        warm.value = first.value = None  # outputs are arrays: the check's detail says how they compare
    params = {"shape": "x".join(map(str, args.shape)), "dtype": str(host[0].dtype), **options}
    report = H.make_report(w.name, results, baseline=reference_name, params=params, value_name="value")
    report["first_call_ms"] = {warm.name: first.median_ms for first, warm in pairs if first.error is None}
    report["ratios"] = ratios([warm for _, warm in pairs], [reference_name, "jax-jit"])
    report["passed"] = report["passed"] and all(first.passed for first, _ in pairs)
    print_summary(report)
    return H.finish(report, args.json)


def print_summary(report: dict) -> None:
    """Each system's first call, median and ratios, as one table."""
    firsts, ratio = report["first_call_ms"], report["ratios"]
    columns = sorted({key for by in ratio.values() for key in by})
    rows = [[r["name"], H._fmt_ms(firsts.get(r["name"])), H._fmt_ms(r["median_ms"]),
             *(f"{ratio[r['name']][c]:.2f}" if c in ratio.get(r["name"], {}) else "-" for c in columns)]
            for r in report["results"] if r["name"] in ratio]
    print()
    print(H.format_table(["system", "first call ms", "median ms", *columns], rows))
