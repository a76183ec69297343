"""Benchmark: a dense float32 matrix product of two n x n matrices, against baselines.

    python benchmarks/matmul.py [--n N] [--repeat 10] [--warmup 2] [--json PATH]

The operands live on the device before timing and the product stays there, so every system is timed
from device arrays to a device array. Side by side, in one run:

- ``gnp``: ``(A @ B).persist()`` (a product of block grids; the baseline of the ratios), and
  ``gnp-unfused``: the same with the fusion pass off;
- ``dask.array+cupy`` (or ``+numpy`` without a GPU) with gnp's chunks, on the threaded scheduler;
- ``jax-jit`` where JAX is installed, at ``precision="highest"`` (full float32, as CuPy and gnp compute,
  rather than JAX's default TF32 on recent GPUs); ``cupynumeric`` where cuPyNumeric is;
- with a GPU: ``cupy`` (eager: one cuBLAS call); without one: ``numpy``.

n defaults to 16384 with a GPU (1 GiB per operand) and 1024 without. The first 16 rows of every product
are checked against NumPy in float64. ``weak_scaling`` and ``jax_sharded`` give
``benchmarks/weak_scaling.py`` a product of 16384^2 float32 elements per worker.
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

CHECKED_ROWS = 16
TOLERANCE = 1e-4  # largest error relative to the largest element; float32 sums of n products stay below


def product_check(a: np.ndarray, b: np.ndarray) -> Callable[[Any], tuple[bool, str]]:
    """A check of the product of any system: its first ``CHECKED_ROWS`` rows against NumPy in float64."""
    reference = a[:CHECKED_ROWS].astype(np.float64) @ b.astype(np.float64)

    def check(value: Any) -> tuple[bool, str]:
        err = float(np.max(np.abs(H.to_host(value[:CHECKED_ROWS]) - reference)) / np.max(np.abs(reference)))
        return err < TOLERANCE, f"rel err {err:.1e}"

    return check


def main(argv: list[str] | None = None) -> int:
    cp = H.cupy_gpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=16384 if cp is not None else 1024,
                        help="rows and columns (default 16384 with a GPU, 1024 without)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    n = args.n

    import dask
    import dask.array as da

    import dask_gpunumeric as gnp

    rng = np.random.default_rng(0)
    host_a, host_b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    a, b = dask.persist(gnp.from_array(host_a), gnp.from_array(host_b))

    def run_gnp() -> Any:
        return (a @ b).persist()

    def run_gnp_unfused() -> Any:
        with gnp.config.set(fusion=False):
            return run_gnp()

    xp = np if cp is None else cp
    device_a, device_b = xp.asarray(host_a), xp.asarray(host_b)
    dask_a, dask_b = dask.persist(da.from_array(device_a, chunks=a.chunks), da.from_array(device_b, chunks=b.chunks),
                                  scheduler="threads")
    runs: list[tuple[str, Callable[[], Any]]] = [
        ("gnp", run_gnp), ("gnp-unfused", run_gnp_unfused),
        (H.dask_array_system(), lambda: (dask_a @ dask_b).persist(scheduler="threads")),
    ]
    modules = H.jax_modules()
    if modules is not None:
        jax, jnp = modules
        jax_a, jax_b = jax.device_put(host_a), jax.device_put(host_b)
        jitted = jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest"))
        runs.append(("jax-jit", lambda: jitted(jax_a, jax_b).block_until_ready()))
    cn = H.cupynumeric_module()
    if cn is not None:
        cn_a, cn_b = cn.asarray(host_a), cn.asarray(host_b)
        runs.append(("cupynumeric", lambda: cn_a @ cn_b))
    runs.append(("cupy" if cp is not None else "numpy", lambda: device_a @ device_b))

    print(f"matrix product benchmark: {n} x {n} float32, gnp backend {gnp.config.backend()}, {H.device_name()}",
          flush=True)
    check = product_check(host_a, host_b)
    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check) for name, fn in runs]
    for result in results:
        result.value = result.detail or None  # the product itself is a device array: show the check instead
    params = {"n": n, "dtype": "float32", "gnp_chunks": str(a.chunksize), "checked_rows": CHECKED_ROWS,
              "tolerance": TOLERANCE, "repeat": args.repeat, "warmup": args.warmup}
    report = H.make_report("matmul", results, baseline="gnp", params=params, value_name="check")
    return H.finish(report, args.json)


SIDE_PER_WORKER = 16384


def weak_scaling(k: int, scale: int) -> Iterator[tuple[str, Callable[[int], Any], Callable[[Any], tuple[bool, str]]]]:
    """(system, run, check) for ``benchmarks/weak_scaling.py`` on the active cluster of ``k`` workers:
    ``A @ B`` with ``A`` of ``k * side`` rows (one block per worker) and ``B`` of ``side x side``, where
    ``side = SIDE_PER_WORKER / sqrt(scale)``. ``run(i)`` scales ``A`` by a factor that depends on ``i``
    so that no run reuses another's result, and returns the product."""
    import dask_gpunumeric as gnp

    side = int(SIDE_PER_WORKER / scale ** 0.5)
    rng = gnp.random.default_rng(0)
    a, b = H.persisted(rng.random((k * side, side), dtype=np.float32), rng.random((side, side), dtype=np.float32))
    check = product_check(H.to_host(a[:CHECKED_ROWS]), H.to_host(b))
    dask_a, dask_b = a.to_dask_array(), b.to_dask_array()  # the same blocks, on the same workers
    factor = lambda i: np.float32(1 + 1e-7 * i)  # noqa: E731

    def run_gnp_unfused(i: int) -> Any:
        with gnp.config.set(fusion=False):
            return H.persisted((a * factor(i)) @ b)[0]

    yield "gnp", lambda i: H.persisted((a * factor(i)) @ b)[0], check
    yield "gnp-unfused", run_gnp_unfused, check
    yield H.dask_array_system(), lambda i: H.persisted((dask_a * factor(i)) @ dask_b)[0], check


def jax_sharded(devices: list, scale: int) -> tuple[Callable[[int], Any], Callable[[Any], tuple[bool, str]]]:
    """(run, check) of the product under ``jax.jit`` with ``A``'s rows sharded over ``devices`` and ``B`` on
    every one of them (same sizes per device as ``weak_scaling``); needs JAX."""
    jax, jnp = H.jax_modules()
    from jax.sharding import NamedSharding, PartitionSpec

    side = int(SIDE_PER_WORKER / scale ** 0.5)
    rows = H.jax_row_sharding(devices)
    replicated = NamedSharding(rows.mesh, PartitionSpec())
    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    a = jax.jit(lambda key: jax.random.uniform(key, (len(devices) * side, side), jnp.float32),
                out_shardings=rows)(key_a)
    b = jax.jit(lambda key: jax.random.uniform(key, (side, side), jnp.float32), out_shardings=replicated)(key_b)
    product = jax.jit(lambda x, y, f: jnp.matmul(x * f, y, precision="highest"), out_shardings=rows)
    check = product_check(np.asarray(a[:CHECKED_ROWS]), np.asarray(b))
    return (lambda i: product(a, b, np.float32(1 + 1e-7 * i)).block_until_ready()), check


if __name__ == "__main__":
    sys.exit(main())
