"""Benchmark: the 2-D heat equation, Jacobi sweeps with fixed boundaries, against eager CuPy, JAX and dask.array.

    python benchmarks/heat.py [--n N] [--sweeps 20] [--repeat 10] [--warmup 2] [--json PATH]

Every system runs ``--sweeps`` sweeps of

    v = u.copy(); v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])

on an n x n float32 grid (n = 16384 with a GPU, 1024 without) that is on the device before timing; the
result stays there. Side by side:

- ``gnp``: the sweeps in ``gnp.accelerate`` (one stencil group: one task running a kernel per sweep); its
  argument is in memory, so the call runs at once and returns device arrays, as JAX's ``jit`` does;
  ``gnp-auto``: the same loop undecorated, lazy, then ``gnp.persist`` (expressions built on every call; without
  ``dask.persist``'s own per-call work);
  ``gnp-unfused``: fusion and the stencil pass off;
- ``dask.array+cupy`` (or ``+numpy`` without a GPU): ``map_overlap`` once per sweep, the threaded scheduler;
  ``jax-jit`` where JAX is installed, ``cupynumeric`` where cuPyNumeric is;
- with a GPU: ``cupy`` (eager), and ``copy``: one device copy of the grid per sweep, the memory floor (a
  sweep reads and writes the grid once); ``x copy`` is each time over that floor; without one: ``numpy``
  (eager).

Targets on an H200 (16384^2, 20 sweeps): gnp <= 15 ms (the floor is about 10 ms), and >= 90% weak-scaling
efficiency from 1 to 2 GPUs. Every system's first rows are checked against NumPy (run on the top rows of
the grid, which the sweeps can't reach past). ``weak_scaling`` and ``jax_sharded`` give
``benchmarks/weak_scaling.py`` the same sweeps on 16384^2 per worker, the leading axis growing with the
worker count.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

SWEEPS = 20
WEIGHT = 0.25
SIDE_PER_WORKER = 16384
CHECKED = 64  # rows checked against NumPy
TOLERANCE = 1e-5


def jacobi(u, w=WEIGHT):
    """One sweep on a NumPy, CuPy, cuPyNumeric or gnp array (or a dask.array block with its halo)."""
    v = u.copy()
    v[1:-1, 1:-1] = w * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def relax(u, w=WEIGHT, sweeps: int = SWEEPS):
    for _ in range(sweeps):
        u = jacobi(u, w)
    return u


def dask_relax(x, w=WEIGHT, sweeps: int = SWEEPS):
    """dask.array: one ``map_overlap`` per sweep (halo 1; none at the grid's edges, which stay fixed)."""
    for _ in range(sweeps):
        x = x.map_overlap(jacobi, depth=1, boundary="none", dtype=x.dtype, meta=x._meta, w=w)
    return x


def jax_relax(sweeps: int = SWEEPS) -> Callable:
    """The sweeps as a function of (grid, weight) for ``jax.jit``."""
    def run(u, w):
        for _ in range(sweeps):
            u = u.at[1:-1, 1:-1].set(w * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]))
        return u

    return run


def rows_check(top: Callable[[], np.ndarray], weight: Callable[[], float], sweeps: int) -> Callable[[Any], tuple[bool, str]]:
    """A check of any system's grid: its first ``CHECKED`` rows against NumPy's sweeps of ``top()`` (the first
    ``CHECKED + sweeps`` rows of the last run's grid: the rows below can't reach the checked ones), with the
    last run's weight."""
    def check(value):
        reference = relax(top(), np.float32(weight()), sweeps)[:CHECKED]
        err = float(np.max(np.abs(H.to_host(value[:CHECKED]) - reference)))
        return err <= TOLERANCE, f"max |err| {err:.1e}"

    return check


def main(argv=None) -> int:
    cp = H.cupy_gpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=SIDE_PER_WORKER if cp is not None else 1024,
                        help="grid side (default 16384 with a GPU, 1024 without)")
    parser.add_argument("--sweeps", type=int, default=SWEEPS)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    n, sweeps = args.n, args.sweeps

    import dask
    import dask.array as da

    import dask_gpunumeric as gnp

    (u,) = dask.persist(gnp.random.default_rng(0).random((n, n), dtype=np.float32, chunks=(n, n)))
    grid = u.compute()  # a CuPy array with a GPU, NumPy without: the other systems' input
    accelerated = gnp.accelerate(relax)

    def unfused():
        with gnp.config.set(fusion=False):
            return gnp.persist(relax(u, sweeps=sweeps))[0]

    (x,) = dask.persist(da.from_array(grid, chunks=(n, n)), scheduler="threads")
    runs = [("gnp", lambda: accelerated(u, WEIGHT, sweeps)),
            ("gnp-auto", lambda: gnp.persist(relax(u, sweeps=sweeps))[0]), ("gnp-unfused", unfused),
            (H.dask_array_system(), lambda: dask.persist(dask_relax(x, sweeps=sweeps), scheduler="threads")[0])]
    modules = H.jax_modules()
    if modules is not None:
        jax, _ = modules
        jitted, start = jax.jit(jax_relax(sweeps)), jax.device_put(H.to_host(grid))
        runs.append(("jax-jit", lambda: jitted(start, np.float32(WEIGHT)).block_until_ready()))
    cn = H.cupynumeric_module()
    if cn is not None:
        cgrid = cn.asarray(H.to_host(grid))
        runs.append(("cupynumeric", lambda: relax(cgrid, WEIGHT, sweeps)))
    floor_name = None
    if cp is None:
        runs.append(("numpy", lambda: relax(grid, WEIGHT, sweeps)))
    else:
        runs.append(("cupy", lambda: relax(grid, WEIGHT, sweeps)))
        a, b = cp.empty_like(grid), cp.empty_like(grid)

        def copies():
            for _ in range(sweeps):
                cp.copyto(b, a)

        runs.append(("copy", copies))
        floor_name = "copy"

    print(f"heat benchmark: {sweeps} Jacobi sweeps of {n}^2 float32, gnp backend {gnp.config.backend()}, "
          f"{H.device_name()}", flush=True)
    top = H.to_host(grid[:CHECKED + sweeps])
    check = rows_check(lambda: top, lambda: WEIGHT, sweeps)
    results = []
    for name, fn in runs:
        r = H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=None if name == "copy" else check)
        r.value = r.detail or None  # the grids stay on the device: show the check instead
        results.append(r)
    params = {"n": n, "sweeps": sweeps, "dtype": "float32", "bytes_moved": 8 * n * n * sweeps, "floor": floor_name}
    report = H.make_report("heat", results, baseline="gnp", params=params, value_name="check")
    H.print_floor_ratios(results, floor_name)
    return H.finish(report, args.json)


ROTATION = 3
"""Weak scaling rotates over this many grids, so that no run reuses a result the cluster still holds."""


def weak_scaling(k: int, scale: int) -> Iterator[tuple[str, Callable[[int], Any], Callable[[Any], tuple[bool, str]]]]:
    """(system, run, check) for ``benchmarks/weak_scaling.py`` on the active cluster of ``k`` workers: the
    sweeps on a grid of ``k * side`` rows (one block per worker) and ``side`` columns, where
    ``side = SIDE_PER_WORKER / sqrt(scale)``. ``run(i)`` sweeps grid ``i % ROTATION`` (persisted first: a
    coefficient folding ``i`` in would be one more task ahead of the sweeps) and returns the result."""
    import dask_gpunumeric as gnp

    side = int(SIDE_PER_WORKER / scale ** 0.5)
    grids = H.persisted(*(gnp.random.default_rng(seed).random((k * side, side), dtype=np.float32, chunks=(side, side))
                          for seed in range(ROTATION)))
    tops = [H.to_host(g[:CHECKED + SWEEPS]) for g in grids]
    last = {"grid": 0}
    check = rows_check(lambda: tops[last["grid"]], lambda: WEIGHT, SWEEPS)
    accelerated = gnp.accelerate(relax)
    arrays = [g.to_dask_array() for g in grids]  # the same blocks, on the same workers

    def rotating(sweep: Callable[[Any], Any], inputs: list) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            last["grid"] = i % ROTATION
            return sweep(inputs[i % ROTATION])
        return run

    def gnp_unfused(u: Any) -> Any:
        with gnp.config.set(fusion=False):
            return H.persisted(relax(u))[0]

    yield "gnp", rotating(lambda u: H.persisted(accelerated(u))[0], grids), check
    yield "gnp-unfused", rotating(gnp_unfused, grids), check
    yield H.dask_array_system(), rotating(lambda x: H.persisted(dask_relax(x))[0], arrays), check


def jax_sharded(devices: list, scale: int) -> tuple[Callable[[int], Any], Callable[[Any], tuple[bool, str]]]:
    """(run, check) of the sweeps under ``jax.jit`` with the grid's rows sharded over ``devices`` (same size
    per device as ``weak_scaling``); ``run(i)`` folds ``i`` into the weight. Needs JAX."""
    jax, jnp = H.jax_modules()
    side = int(SIDE_PER_WORKER / scale ** 0.5)
    rows = H.jax_row_sharding(devices)
    grid = jax.jit(lambda key: jax.random.uniform(key, (len(devices) * side, side), jnp.float32),
                   out_shardings=rows)(jax.random.PRNGKey(0))
    sweeps = jax.jit(jax_relax(), out_shardings=rows)
    last = {"weight": WEIGHT}

    def run(i: int) -> Any:
        last["weight"] = np.float32(WEIGHT * (1 + 1e-6 * i))
        return sweeps(grid, last["weight"]).block_until_ready()

    top = np.asarray(grid[:CHECKED + SWEEPS])
    return run, rows_check(lambda: top, lambda: last["weight"], SWEEPS)


if __name__ == "__main__":
    sys.exit(main())
