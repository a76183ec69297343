"""Benchmark: 2-D Jacobi sweeps (heat equation, fixed boundary), against eager CuPy, JAX and dask.array.

    python benchmarks/heat.py [--n N] [--sweeps 20] [--gpus 1,2] [--repeat 10] [--warmup 2] [--json PATH]

Every system runs ``--sweeps`` sweeps of

    v = u.copy(); v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])

on an n x n float32 grid (n = 16384 with a GPU, 1024 without) that is on the device before timing; results
stay there. First weak scaling (``--gpus``, default 1,2 where there are two GPUs or none): n x n per GPU
(the leading axis grows with the GPU count k) on ``gnp.cluster(n_gpus=k)`` (CPU worker processes without a
GPU), for gnp (``gnp.accelerate``: one stencil group, halo strips between neighbours) and dask.array
``map_overlap`` (one per sweep) over the same blocks, and JAX sharding over k devices where installed; each
run is timed to the end of the device work on every worker, and efficiency at k is time(1) / time(k).
Then one device, side by side (the local scheduler):

- ``gnp``: the sweeps in ``gnp.accelerate`` (traced once), ``gnp-auto``: the same loop undecorated
  (expressions built each call), ``gnp-unfused``: fusion and the stencil pass off;
- ``jax-jit`` where JAX is installed (on its default device);
- with a GPU: ``cupy`` (eager, also the reference of the checks), ``dask.array+cupy`` (``map_overlap`` per
  sweep) and ``copy``: one device copy of the grid per sweep, the memory floor (a sweep reads and writes
  the grid once);
- without one: ``numpy`` (eager, the reference) and ``dask.array+numpy``.

Targets on H200s (16384^2 per GPU, 20 sweeps): gnp <= 15 ms on one GPU (the memory floor, ``copy``, is
about 10 ms) and >= 90% weak-scaling efficiency from 1 to 2 GPUs. Exits 1 when an implementation fails or
its grid differs from the reference (on the cluster: gnp's from dask.array's) by more than 1e-5.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

import _harness as H
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

TOLERANCE = 1e-5


def jacobi(u):
    """One sweep on a NumPy, CuPy or gnp array (or a dask.array block with its halo)."""
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def relax(u, sweeps: int):
    for _ in range(sweeps):
        u = jacobi(u)
    return u


def dask_relax(x, sweeps: int):
    """dask.array: one ``map_overlap`` per sweep (halo 1; no halo at the grid's edges, which stay fixed)."""
    for _ in range(sweeps):
        x = x.map_overlap(jacobi, depth=1, boundary="none", dtype=x.dtype, meta=x._meta)
    return x


def jax_relax(sweeps: int):
    """The sweeps as a JAX function (to jit), or None without JAX."""
    try:
        import jax.numpy as jnp  # noqa: F401
    except ImportError:
        return None

    def run(u):
        for _ in range(sweeps):
            u = u.at[1:-1, 1:-1].set(0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]))
        return u

    return run


def _device_sync() -> None:
    """Wait for the GPU of the worker this runs on (nothing without one)."""
    try:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    except (ImportError, RuntimeError):  # no CuPy, or no GPU
        return


def median_ms(fn, repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def weak_scaling(counts: list[int], n: int, sweeps: int, repeat: int, warmup: int) -> tuple[dict, list[str]]:
    """{system: {k: ms}} at n x n per worker, and the checks that failed."""
    import dask_gpunumeric as gnp

    times: dict[str, dict[int, float]] = {}
    failed: list[str] = []
    for k in counts:
        with gnp.cluster(n_gpus=k, n_workers=k, dashboard_address=":0") as client:
            print(f"{k} worker(s): {sorted(client.scheduler_info(n_workers=-1)['workers'])}", flush=True)
            for system, ms in on_cluster(client, k, n, sweeps, repeat, warmup, failed).items():
                times.setdefault(system, {})[k] = ms
    jax_times = jax_sharding(counts, n, sweeps, repeat, warmup, failed)
    if jax_times:
        times["jax-sharding"] = jax_times
    return times, failed


def on_cluster(client, k: int, n: int, sweeps: int, repeat: int, warmup: int, failed: list[str]) -> dict:
    """gnp and dask.array on a cluster of k workers: {system: ms}; failed checks go to ``failed``."""
    import dask
    from distributed import wait

    import dask_gpunumeric as gnp

    # an input per run (keys differ, so no run can reuse a result the cluster still holds), the same for
    # both systems: seeds 0, 1, ...
    grids = [gnp.random.default_rng(seed).random((k * n, n), dtype=np.float32, chunks=(n, n)).persist()
             for seed in range(repeat + warmup)]
    wait(grids)
    inputs = {"gnp": list(grids), "dask.array": [g.to_dask_array() for g in grids]}
    accelerated = gnp.accelerate(relax)
    steps = {"gnp": lambda u: accelerated(u, sweeps), "dask.array": lambda x: dask_relax(x, sweeps)}
    outs, times = {}, {}

    for system, step in steps.items():
        def run():
            outs[system] = step(inputs[system].pop(0)).persist()  # noqa: B023  (run now, in this loop)
            wait(outs[system])  # noqa: B023
            client.run(_device_sync)

        times[system] = median_ms(run, repeat, warmup)
        print(f"  {system:12s} {times[system]:10.2f} ms", flush=True)
    with dask.config.set(scheduler=client):
        err = gnp.fetch(gnp.max(gnp.abs(outs["gnp"] - gnp.from_dask_array(outs["dask.array"]))))
    print(f"  max |gnp - dask.array| {err:.1e}", flush=True)
    if not err <= TOLERANCE:
        failed.append(f"weak scaling k={k}: gnp differs from dask.array by {err:.1e}")
    return times


def jax_sharding(counts: list[int], n: int, sweeps: int, repeat: int, warmup: int, failed: list[str]) -> dict:
    """JAX ``jit`` with the grid sharded by rows over k devices, where JAX is installed (and sees k devices):
    {k: ms}; failed checks go to ``failed``."""
    run = jax_relax(sweeps)
    if run is None:
        return {}
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    times = {}
    for k in counts:
        if len(jax.devices()) < k:
            continue
        sharding = NamedSharding(Mesh(np.array(jax.devices()[:k]), ("rows",)), PartitionSpec("rows", None))
        u = jax.jit(lambda key: jax.random.uniform(key, (k * n, n), jnp.float32),  # noqa: B023
                    out_shardings=sharding)(
            jax.random.key(0))
        sharded = jax.jit(run, in_shardings=sharding, out_shardings=sharding)
        times[k] = median_ms(lambda: sharded(u).block_until_ready(), repeat, warmup)  # noqa: B023
        print(f"  jax-sharding {times[k]:10.2f} ms ({k} device(s))", flush=True)
        one = jax.jit(run)(jax.device_put(u, jax.devices()[0]))
        err = float(np.max(np.abs(np.asarray(sharded(u)) - np.asarray(one))))
        if not err <= TOLERANCE:
            failed.append(f"jax sharding k={k}: differs from one device by {err:.1e}")
    return times


def one_device(n: int, sweeps: int, repeat: int, warmup: int) -> list:
    """The single-device runs, checked against eager CuPy (NumPy without a GPU)."""
    import dask

    import dask_gpunumeric as gnp

    cp = H.cupy_gpu()
    u = gnp.random.default_rng(0).random((n, n), dtype=np.float32, chunks=(n, n)).persist()
    grid = u.compute()  # a CuPy array on a GPU, NumPy elsewhere: the eager runs' input
    xp = cp if cp is not None else np
    reference = relax(grid, sweeps)
    accelerated = gnp.accelerate(relax)

    def unfused():
        with gnp.config.set(fusion=False):
            return relax(u, sweeps).persist()

    def check(value):
        if isinstance(value, gnp.Array):
            value = value.compute()
        elif type(value).__module__.startswith("jax"):
            value = np.asarray(value) if cp is None else cp.from_dlpack(value)
        elif hasattr(value, "dask"):
            value = value.compute(scheduler="threads")
        err = float(xp.max(xp.abs(value - reference)))
        return err <= TOLERANCE, f"max |err| {err:.1e}"

    x = u.to_dask_array()
    runs = [("gnp", lambda: accelerated(u, sweeps).persist()), ("gnp-auto", lambda: relax(u, sweeps).persist()),
            ("gnp-unfused", unfused)]
    run = jax_relax(sweeps)
    if run is not None:
        import jax

        jitted, start = jax.jit(run), (jax.device_put(grid) if cp is None else jax.dlpack.from_dlpack(grid))
        runs.append(("jax-jit", lambda: jitted(start).block_until_ready()))
    if cp is not None:
        runs.append(("cupy", lambda: relax(grid, sweeps)))
        runs.append(("dask.array+cupy", lambda: dask.persist(dask_relax(x, sweeps), scheduler="threads")[0]))
        a, b = cp.empty_like(grid), cp.empty_like(grid)

        def copies():
            for _ in range(sweeps):
                cp.copyto(b, a)
        runs.append(("copy", copies))
    else:
        runs.append(("numpy", lambda: relax(grid, sweeps)))
        runs.append(("dask.array+numpy", lambda: dask.persist(dask_relax(x, sweeps), scheduler="threads")[0]))
    results = []
    for name, fn in runs:
        r = H.measure(name, fn, repeat=repeat, warmup=warmup, check=None if name == "copy" else check)
        r.value = r.detail or None  # the grids themselves stay on the device: show the check instead
        results.append(r)
    return results


def main(argv=None) -> int:
    cp = H.cupy_gpu()
    gpus = cp.cuda.runtime.getDeviceCount() if cp is not None else 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384 if cp is not None else 1024, help="grid side per device")
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--gpus", default="1,2" if gpus != 1 else "",
                        help="worker counts for weak scaling, e.g. 1,2 ('' to skip)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPUs with the others

    import dask_gpunumeric as gnp

    print(f"heat benchmark: {args.sweeps} Jacobi sweeps, {args.n}^2 float32 per device, gnp backend "
          f"{gnp.config.backend()}, {H.device_name()}", flush=True)
    counts = [int(k) for k in args.gpus.split(",") if k]
    scaling, failed = weak_scaling(counts, args.n, args.sweeps, args.repeat, args.warmup) if counts else ({}, [])
    results = one_device(args.n, args.sweeps, args.repeat, args.warmup)  # after the clusters: no CUDA context before

    params = {"n": args.n, "sweeps": args.sweeps, "dtype": "float32", "bytes_per_sweep": 8 * args.n**2,
              "tolerance": TOLERANCE}
    report = H.make_report("heat", results, baseline="gnp", params=params, value_name="check")
    if scaling:
        header = ["system"] + [f"{k} dev ms" for k in counts] + [f"eff {k}" for k in counts[1:]]
        rows = [[system] + [f"{t[k]:.2f}" if k in t else "-" for k in counts]
                + [f"{t[counts[0]] / t[k]:.0%}" if counts[0] in t and k in t else "-" for k in counts[1:]]
                for system, t in scaling.items()]
        print(f"\nweak scaling: {args.n}^2 float32 per device, {args.sweeps} sweeps")
        print(H.format_table(header, rows))
        report["weak_scaling"] = {system: {str(k): ms for k, ms in t.items()} for system, t in scaling.items()}
    for message in failed:
        print(f"FAILED: {message}", file=sys.stderr)
    report["passed"] = report["passed"] and not failed
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
