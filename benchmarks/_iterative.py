"""Iterative benchmarks written once for any array namespace (``cg.py``, ``gray_scott.py``): gnp next to JAX,
cuPyNumeric and NumPy on one device, and the ``weak_scaling``/``jax_sharded`` hooks of
``benchmarks/weak_scaling.py`` for several GPUs.

A benchmark is an :class:`Iteration`: its initial state from host arrays, one step, and a scalar checksum of
the final state, each a function of the namespace ``xp``. The systems run it as

- ``gnp``: one accelerated call, the steps a ``gnp.fori_loop`` (one task on one GPU; on a cluster one task
  per GPU, the GPUs exchanging halos and reduction partials directly);
- ``gnp-auto``: the same code undecorated (the plain path): lazy, the ``fori_loop`` a region of its own, then
  ``gnp.compute`` of the checksum;
- ``jax-jit``: ``jax.jit`` with ``lax.fori_loop`` (``jax-sharding``: the arrays sharded by rows), unrolled
  as gnp's (``Iteration.unroll``; JAX's default, one step, where gnp's is its default, "auto");
- ``cupynumeric`` and ``numpy``: a Python loop.

Every call gets a salt of its own, a 0-d array added to the first input that changes none of its values
(1e-30 * call number), so that no call can reuse what a cluster still holds of the one before. Checksums
are checked against NumPy's on the same grid where it is at most ``NUMPY_CHECKED`` elements (always on the
CPU), else against JAX's.
"""
from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import _harness as H

NUMPY_CHECKED = 2**24  # grid elements up to which NumPy computes the reference checksum


@dataclass(frozen=True)
class Iteration:
    """An iterative computation for any array namespace ``xp`` on an (rows, columns) grid."""

    name: str
    inputs: Callable[[int, int], tuple[np.ndarray, ...]]  # (rows, columns) -> host arrays
    initial: Callable[[tuple, Any], Any]  # (arrays, xp) -> state
    step: Callable[[Any, Any], Any]  # (state, xp) -> state
    checksum: Callable[[Any, Any], Any]  # (state, xp) -> 0-d array
    steps: int
    rtol: float  # agreement expected between systems' checksums (float32 grids)
    side: int  # n of the n x n grid per GPU at full size
    unroll: int | str = "auto"  # steps per iteration of gnp's and JAX's fori_loop (the same; "auto": each default)


def _salt(i: int) -> np.float32:
    return np.float32(1e-30 * i)


def _run(it: Iteration, xp: Any, loop: Callable[..., Any], salt: Any, arrays: tuple, steps: int) -> Any:
    arrays = (arrays[0] + salt, *arrays[1:])
    return it.checksum(loop(steps, lambda i, s: it.step(s, xp), it.initial(arrays, xp)), xp)


def gnp_accelerated(it: Iteration, steps: int) -> Callable[..., Any]:
    """gnp's accelerated call ``f(salt, *arrays)``: the checksum, a lazy 0-d Array."""
    import dask_gpunumeric as gnp

    loop = functools.partial(gnp.fori_loop, unroll=it.unroll)
    return gnp.accelerate(lambda salt, *a: _run(it, gnp, loop, salt, a, steps))


def gnp_runner(it: Iteration, steps: int, arrays: list) -> Callable[[int], float]:
    """``run(i)``: the checksum of call ``i`` under gnp (a Python float)."""
    import dask_gpunumeric as gnp

    accelerated = gnp_accelerated(it, steps)
    return lambda i: gnp.fetch(accelerated(gnp.asarray(_salt(i)), *arrays))


def gnp_plain_runner(it: Iteration, steps: int, arrays: list) -> Callable[[int], float]:
    """``run(i)``: the checksum of call ``i`` under gnp's plain path: ``gnp_runner``'s code undecorated, then
    ``gnp.compute``."""
    import dask_gpunumeric as gnp

    loop = functools.partial(gnp.fori_loop, unroll=it.unroll)
    return lambda i: float(gnp.compute(_run(it, gnp, loop, gnp.asarray(_salt(i)), tuple(arrays), steps))[0])


def jax_runner(it: Iteration, steps: int, arrays: list) -> Callable[[int], float]:
    import jax
    import jax.numpy as jnp

    def loop(n: int, body: Callable[[Any, Any], Any], state: Any) -> Any:
        return jax.lax.fori_loop(0, n, body, state, unroll=1 if it.unroll == "auto" else it.unroll)

    compiled = jax.jit(lambda salt, *a: _run(it, jnp, loop, salt, a, steps))
    return lambda i: float(compiled(_salt(i), *arrays).block_until_ready())


def loop_runner(it: Iteration, steps: int, xp: Any, arrays: list) -> Callable[[int], float]:
    def loop(n: int, body: Callable[[Any, Any], Any], state: Any) -> Any:
        for i in range(n):
            state = body(i, state)
        return state

    return lambda i: float(_run(it, xp, loop, xp.asarray(_salt(i)), tuple(arrays), steps))


def reference_check(it: Iteration, host: tuple[np.ndarray, ...], steps: int) -> Callable[[Any], tuple[bool, str]] | None:
    """A check of a checksum against NumPy's on the same grid (None for grids too large to compute here)."""
    if host[0].size > NUMPY_CHECKED:
        return None
    return value_check(it, loop_runner(it, steps, np, list(host))(0), "numpy")


def value_check(it: Iteration, expected: float, against: str) -> Callable[[Any], tuple[bool, str]]:
    def check(value: Any) -> tuple[bool, str]:
        err = abs(float(value) - expected) / max(abs(expected), 1e-30)
        return err <= it.rtol, f"rel.err {err:.1e} vs {against}"

    return check


def main(it: Iteration, description: str, argv: list[str] | None = None) -> int:
    """One device: gnp next to JAX, cuPyNumeric and NumPy (NumPy only where it checks: on small grids)."""
    gpu = H.cupy_gpu() is not None
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--n", type=int, default=it.side if gpu else 256, help="grid side (n x n)")
    parser.add_argument("--steps", type=int, default=it.steps)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--unroll", type=_unroll, default=it.unroll,
                        help="steps per fori_loop iteration (gnp's and JAX's), or auto (each one's default)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    it = replace(it, unroll=args.unroll)

    import dask

    import dask_gpunumeric as gnp

    host = it.inputs(args.n, args.n)
    arrays = list(dask.persist(*(gnp.asarray(h) for h in host)))
    runs = [("gnp", gnp_runner(it, args.steps, arrays)), ("gnp-auto", gnp_plain_runner(it, args.steps, arrays))]
    modules = H.jax_modules()
    if modules is not None:
        runs.append(("jax-jit", jax_runner(it, args.steps, [modules[0].device_put(h) for h in host])))
    cn = H.cupynumeric_module()
    if cn is not None:
        runs.append(("cupynumeric", loop_runner(it, args.steps, cn, [cn.asarray(h) for h in host])))
    if host[0].size <= NUMPY_CHECKED:
        runs.append(("numpy", loop_runner(it, args.steps, np, list(host))))
    print(f"{H.title(it.name)}: {args.n} x {args.n} float32, {args.steps} steps (unroll {it.unroll}), gnp backend "
          f"{gnp.config.backend()}, {H.device_name()}", flush=True)
    results = []
    for name, run in runs:
        calls = itertools.count()
        results.append(H.measure(name, functools.partial(_call, run, calls), repeat=args.repeat, warmup=args.warmup))
    reference = next((r for r in results if r.name == "numpy" and r.error is None), None) or next(
        (r for r in results if r.name == "jax-jit" and r.error is None), None)
    for r in results:
        if reference is not None and r is not reference and r.error is None:
            r.ok, r.detail = value_check(it, reference.value, reference.name)(r.value)
    baseline = "jax-jit" if modules is not None else "gnp"
    params = {"n": args.n, "steps": args.steps, "unroll": it.unroll, "dtype": "float32"}
    report = H.make_report(it.name, results, baseline=baseline, params=params, value_name="checksum")
    return H.finish(report, args.json)


def _unroll(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _call(run: Callable[[int], float], calls: Iterator[int]) -> float:
    return run(next(calls))


def weak_scaling(it: Iteration, k: int, scale: int) -> Iterator[tuple[str, Callable[[int], Any], Any]]:
    """("gnp", run, check) on the active cluster of ``k`` workers: a (k * n) x n grid, n = side / sqrt(scale)."""
    import dask_gpunumeric as gnp

    n = _side(it, scale)
    host = it.inputs(k * n, n)
    arrays = list(H.persisted(*(gnp.asarray(h) for h in host)))
    yield "gnp", gnp_runner(it, it.steps, arrays), reference_check(it, host, it.steps)


def jax_sharded(it: Iteration, devices: list, scale: int) -> tuple[Callable[[int], Any], Any]:
    """(run, check) under ``jax.jit``, the arrays sharded by rows over ``devices``."""
    jax, _ = H.jax_modules()
    n = _side(it, scale)
    host = it.inputs(len(devices) * n, n)
    rows = H.jax_row_sharding(devices)
    return jax_runner(it, it.steps, [jax.device_put(h, rows) for h in host]), reference_check(it, host, it.steps)


def _side(it: Iteration, scale: int) -> int:
    """The grid side per worker: the elements per worker divided by ``scale``."""
    return max(8, round(it.side / scale ** 0.5))
