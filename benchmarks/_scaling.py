"""Weak scaling of an iterative computation written once for any array namespace: gnp next to JAX, cuPyNumeric
and NumPy, on 1..k GPUs (or CPU workers), the work per GPU fixed.

A benchmark gives an :class:`Iteration`: the initial state from host arrays, one step, and a scalar checksum of
the final state, each a function of the namespace ``xp``. For ``k`` GPUs (the arrays' leading axis k times
longer) it runs:

- gnp: one accelerated call (``gnp.fori_loop`` over the steps): without a cluster on one GPU (one task), on
  ``gnp.cluster(n_gpus=k)`` on more (one task per GPU, the GPUs exchanging halos and reduction partials);
- JAX: ``jit`` with ``lax.fori_loop``, the arrays sharded by rows over k devices;
- cuPyNumeric (when it imports): a Python loop, on the GPUs its runtime was started with (the 1-GPU row);
- NumPy (``--numpy``, or ``--small``): a Python loop on each grid, the reference the others are checked
  against (without it, each system is checked against JAX on the same number of GPUs).

Times are medians of ``--repeat`` calls after warm-ups, relative to JAX on one GPU; then each system's
weak-scaling efficiency, time(1 GPU) / time(k GPUs), and the benchmark's targets for gnp.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import _harness as H

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPUs with the others


@dataclass
class Iteration:
    """An iterative computation for any array namespace ``xp``."""

    name: str
    inputs: Callable[[int, int], tuple[np.ndarray, ...]]  # (rows, columns) -> host arrays
    initial: Callable[[tuple, Any], Any]  # (arrays, xp) -> state
    step: Callable[[Any, Any], Any]  # (state, xp) -> state
    checksum: Callable[[Any, Any], Any]  # (state, xp) -> 0-d array
    steps: int  # iterations by default
    rtol: float  # agreement expected between systems' checksums
    targets: dict[str, float] = field(default_factory=dict)  # "ms_1": gnp on one GPU; "efficiency": gnp 1 -> most


def _gnp_runner(it: Iteration, steps: int) -> Callable[..., Any]:
    """Calls of the computation; each call gets a salt of its own (a 0-d array that changes no value), so that
    no call can reuse what the cluster still holds of the one before."""
    import dask_gpunumeric as gnp

    @gnp.accelerate
    def run(salt: Any, *arrays: Any) -> Any:
        return _gnp_region(it, steps, salt, arrays)

    calls = iter(range(1, 2**62))
    return lambda arrays: gnp.fetch(run(gnp.asarray(np.float32(1e-30 * next(calls))), *arrays))


def _jax_runner(it: Iteration, steps: int, jax: Any) -> Callable[..., Any]:
    import jax.numpy as jnp

    def run(salt: Any, *arrays: Any) -> Any:
        arrays = (arrays[0] + salt, *arrays[1:])
        return it.checksum(jax.lax.fori_loop(0, steps, lambda i, s: it.step(s, jnp), it.initial(arrays, jnp)), jnp)

    compiled = jax.jit(run)
    calls = iter(range(1, 2**62))
    return lambda arrays: compiled(np.float32(1e-30 * next(calls)), *arrays).block_until_ready()


def _loop_runner(it: Iteration, steps: int, xp: Any) -> Callable[..., Any]:
    def run(arrays: tuple) -> Any:
        state = it.initial(arrays, xp)
        for _ in range(steps):
            state = it.step(state, xp)
        return float(it.checksum(state, xp))

    return run


def _label(system: str, k: int) -> str:
    unit = "GPU" if H.cupy_gpu() is not None else "worker"
    return f"{system} {k} {unit}{'s' if k > 1 else ''}"


def _gnp(it: Iteration, steps: int, counts: list[int], inputs: dict, run: dict) -> dict[int, H.Result]:
    """gnp on each GPU count, clusters first (before this process has a CUDA context); on the largest, what
    its region does."""
    import dask_gpunumeric as gnp
    from dask_gpunumeric._explain import _region_lines, plan

    out = {}
    for k in sorted(counts, reverse=True):
        with gnp.cluster(n_gpus=k, n_workers=k, dashboard_address=":0") if k > 1 else contextlib.nullcontext():
            arrays = [gnp.asarray(a).persist() for a in inputs[k]]
            out[k] = H.measure(_label("gnp", k), functools.partial(_gnp_runner(it, steps), arrays), **run)
            if k == max(counts):
                for region in plan(_gnp_region(it, steps, gnp.asarray(np.float32(0)), arrays))["regions"]:
                    print("\n".join(_region_lines(region)))
    return out


def _gnp_region(it: Iteration, steps: int, salt: Any, arrays: tuple) -> Any:
    """The checksum of a gnp run (the salt added to the first array changes none of its values)."""
    import dask_gpunumeric as gnp

    arrays = (arrays[0] + salt, *arrays[1:])
    return it.checksum(gnp.fori_loop(steps, lambda i, s: it.step(s, gnp), it.initial(arrays, gnp)), gnp)


def _jax(it: Iteration, steps: int, counts: list[int], inputs: dict, run: dict) -> dict[int, H.Result]:
    try:
        import jax
    except ImportError:
        return {}
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    runner = _jax_runner(it, steps, jax)
    out = {}
    for k in sorted(counts):
        devices = jax.devices()[:k]
        if len(devices) < k:
            print(f"  jax: {len(devices)} device(s), not {k}: skipped")
            continue
        rows = NamedSharding(Mesh(np.array(devices), ("rows",)), PartitionSpec("rows"))
        arrays = [jax.device_put(a, rows) for a in inputs[k]]
        out[k] = H.measure(_label("jax", k), functools.partial(runner, arrays), **run)
    return out


def main(it: Iteration, description: str, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--gpus", default="1,2", help="GPU (or CPU worker) counts, e.g. 1,2")
    parser.add_argument("--n", type=int, default=8192, help="the grid is (k*n) x n on k GPUs: n*n per GPU")
    parser.add_argument("--steps", type=int, default=it.steps)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--numpy", action="store_true", help="also run NumPy (the reference; slow at full size)")
    parser.add_argument("--small", action="store_true", help="n=256 and NumPy (a CPU run)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    n = 256 if args.small else args.n
    counts = sorted({int(k) for k in args.gpus.split(",")})
    run = {"repeat": args.repeat, "warmup": args.warmup}
    inputs = {k: it.inputs(k * n, n) for k in counts}

    gnp_results = _gnp(it, args.steps, counts, inputs, run)
    jax_results = _jax(it, args.steps, counts, inputs, run)
    results = [*(gnp_results[k] for k in counts if k in gnp_results), *jax_results.values()]
    cupynumeric = _import("cupynumeric")
    if cupynumeric is not None:
        runner = _loop_runner(it, args.steps, cupynumeric)
        arrays = tuple(cupynumeric.asarray(a) for a in inputs[counts[0]])
        results.append(H.measure(_label("cupynumeric", counts[0]), functools.partial(runner, arrays), **run))
    references: dict[int, H.Result] = {}
    if args.numpy or args.small:  # on each grid: (k * n) x n
        runner = _loop_runner(it, args.steps, np)
        for k in counts:
            references[k] = H.measure(f"numpy {k}x", functools.partial(runner, inputs[k]), repeat=1, warmup=0)
            results.append(references[k])
    for k, group in _by_count(results, counts).items():
        ref = references.get(k) or jax_results.get(k)
        for r in group:
            if r is not ref and ref is not None and ref.error is None and r.error is None:
                err = abs(r.value - ref.value) / max(abs(ref.value), 1e-30)
                r.ok, r.detail = err <= it.rtol, f"rel.err {err:.1e} vs {ref.name.split(' ')[0]}"
    baseline = jax_results[1].name if 1 in jax_results else results[0].name
    report = H.make_report(it.name, results, baseline=baseline, value_name="checksum",
                           params={"per_gpu": f"{n}x{n}", "steps": args.steps, "gpus": args.gpus},
                           modules=("numpy", "cupy", "dask", "distributed", "dask_gpunumeric", "jax", "cupynumeric"))
    code = H.finish(report, args.json)
    print("\n".join(_scaling_lines(it, {k: r.median_ms for k, r in gnp_results.items()},
                                   {k: r.median_ms for k, r in jax_results.items()})))
    return code


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


def _by_count(results: list[H.Result], counts: list[int]) -> dict[int, list[H.Result]]:
    """Results by GPU count (the grid they ran on): "gnp 2 GPUs", "numpy 2x"."""
    groups: dict[int, list[H.Result]] = {k: [] for k in counts}
    for r in results:
        groups[int(r.name.split(" ")[1].rstrip("x"))].append(r)
    return groups


def _scaling_lines(it: Iteration, gnp_ms: dict[int, float], jax_ms: dict[int, float]) -> list[str]:
    lines = []
    for system, times in (("gnp", gnp_ms), ("jax", jax_ms)):
        for k in sorted(times):
            if k > 1 and 1 in times:
                lines.append(f"weak-scaling efficiency {system} 1 -> {k}: {times[1] / times[k]:.0%}")
    if 1 in gnp_ms and "ms_1" in it.targets:
        met = gnp_ms[1] <= it.targets["ms_1"]
        lines.append(f"target: gnp on 1 GPU <= {it.targets['ms_1']:g} ms: {gnp_ms[1]:.2f} ms, {'met' if met else 'MISSED'}")
    top = max(gnp_ms, default=1)
    if top > 1 and 1 in gnp_ms and "efficiency" in it.targets:
        efficiency = gnp_ms[1] / gnp_ms[top]
        met = efficiency >= it.targets["efficiency"]
        lines.append(f"target: gnp efficiency 1 -> {top} >= {it.targets['efficiency']:.0%}: {efficiency:.0%}, "
                     f"{'met' if met else 'MISSED'}")
    return lines
