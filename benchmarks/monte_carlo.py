"""Benchmark: the Monte-Carlo example (examples/monte_carlo.py), float32, against baselines.

    python benchmarks/monte_carlo.py [--n N] [--repeat 10] [--warmup 2] [--chunk 2**27] [--json PATH]

Side by side, in one run, each computing (20/n) * sum(exp(-(20*u - 10)**2)) for n uniform float32
samples u (an estimate of sqrt(pi)):

- ``gnp``: this library, ``gnp.fetch(monte_carlo(n, 10.0))`` from the example (the baseline of the
  ratios): the plain path, as the example is written (no decorator); ``gnp-accelerated``: the same function
  under ``gnp.accelerate`` (what the plain path is measured against: the other benchmarks' ``gnp`` row, whose
  plain path is their ``gnp-auto``); ``gnp-unfused``: the plain path with the fusion pass turned off
  (``gpunumeric.fusion``);
- ``jax-jit`` where JAX is installed (on its default device), ``cupynumeric`` where cuPyNumeric is;
- with a GPU: ``cupy`` (eager CuPy) and ``dask.array+cupy`` (dask.array over CuPy blocks, the
  threaded scheduler);
- without one: ``dask.array+numpy`` and ``numpy`` (eager NumPy), as references.

n defaults to 2**30 with a GPU and 2**22 without. Every run is timed with device synchronisation
after warm-up runs; the table gives the median and minimum in ms and each median relative to gnp's.
Exits 1 when an implementation fails or its estimate is off sqrt(pi) by 1e-2 or more.

``weak_scaling`` and ``jax_sharded`` give ``benchmarks/weak_scaling.py`` the same estimate at 2**30 samples
per worker.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import sys

import _harness as H  # benchmarks/ is on sys.path when this file is run as a script

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # an installed dask_gpunumeric comes first; else the checkout

X_MAX = 10.0
EXACT = math.sqrt(math.pi)
TOLERANCE = 1e-2


def load_example():
    """examples/monte_carlo.py as a module: the benchmark times exactly the example's code."""
    path = ROOT / "examples" / "monte_carlo.py"
    spec = importlib.util.spec_from_file_location("gnp_example_monte_carlo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(value):
    err = abs(float(value) - EXACT)
    return err < TOLERANCE, f"|err| {err:.1e}"


def jax_jit(n, x_max):
    """The example under ``jax.jit`` (compiled once, then timed), or None without JAX."""
    modules = H.jax_modules()
    if modules is None:
        return None
    jax, jnp = modules
    omega = 2 * x_max

    @jax.jit
    def estimate(key):
        raw = jax.random.uniform(key, (n,), dtype=jnp.float32)
        samples = omega * raw - x_max
        return (omega / n) * jnp.sum(jnp.exp(-samples ** 2))

    keys: list = []

    def run() -> float:  # the key is made at the first (warm-up) call: JAX starts on the device when measured
        if not keys:
            keys.append(jax.random.PRNGKey(42))
        return float(estimate(keys[0]))

    return run


def eager(xp, n, x_max):
    """The example in an eager NumPy-like namespace: NumPy itself or cuPyNumeric."""
    omega = 2 * x_max
    raw = xp.random.default_rng(42).random(n, dtype=xp.float32)
    samples = omega * raw - x_max
    return float((omega / n) * xp.sum(xp.exp(-samples ** 2)))


def dask_rng(cp):
    """A dask.array Generator over CuPy blocks (cp given) or NumPy blocks (cp None)."""
    import dask.array as da

    if cp is None:
        return da.random.default_rng(42)
    try:
        return da.random.default_rng(cp.random.default_rng(42))
    except Exception:  # older dask: the legacy RandomState interface
        return da.random.RandomState(42, RandomState=cp.random.RandomState)


def dask_estimate(rng, n, x_max, chunk):
    """The example in dask.array (a lazy 0-d dask array), samples drawn by ``rng`` in blocks of ``chunk``."""
    import numpy as np

    import dask.array as da

    omega = 2 * x_max
    if hasattr(rng, "random"):
        raw = rng.random(n, dtype=np.float32, chunks=chunk)
    else:
        raw = rng.random_sample(n, dtype=np.float32, chunks=chunk)
    samples = omega * raw - x_max
    return (omega / n) * da.sum(da.exp(-samples ** 2))


def dask_array(rng, n, x_max, chunk):
    return float(dask_estimate(rng, n, x_max, chunk).compute(scheduler="threads"))


SAMPLES_PER_WORKER = 2**30


def weak_scaling(k: int, scale: int):
    """(system, run, check) for ``benchmarks/weak_scaling.py`` on the active cluster of ``k`` workers:
    ``SAMPLES_PER_WORKER // scale`` samples per worker. ``run(i)`` folds ``i`` into ``x_max`` so that no
    run reuses another's result, and returns the estimate."""
    import dask_gpunumeric as gnp

    example = load_example()
    n = k * SAMPLES_PER_WORKER // scale

    def run_gnp(i: int) -> float:
        return gnp.fetch(example.monte_carlo(n, X_MAX + 1e-7 * i))

    def run_gnp_unfused(i: int) -> float:
        with gnp.config.set(fusion=False):
            return run_gnp(i)

    rng = dask_rng(H.cupy_gpu())
    yield "gnp", run_gnp, check
    yield "gnp-unfused", run_gnp_unfused, check
    yield H.dask_array_system(), lambda i: float(dask_estimate(rng, n, X_MAX + 1e-7 * i, n // k).compute()), check


def jax_sharded(devices: list, scale: int):
    """(run, check) of the example under ``jax.jit`` with its samples sharded over ``devices`` (same size
    per device as ``weak_scaling``); needs JAX."""
    jax, jnp = H.jax_modules()
    n = len(devices) * SAMPLES_PER_WORKER // scale
    blocks = H.jax_row_sharding(devices)

    @jax.jit
    def estimate(key, x_max):
        raw = jax.lax.with_sharding_constraint(jax.random.uniform(key, (n,), dtype=jnp.float32), blocks)
        samples = 2 * x_max * raw - x_max
        return (2 * x_max * (1.0 / n)) * jnp.sum(jnp.exp(-samples ** 2))  # 1/n a float: n may exceed int32

    key = jax.random.PRNGKey(42)
    return (lambda i: float(estimate(key, X_MAX + 1e-7 * i))), check


def main(argv=None) -> int:
    cp = H.cupy_gpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=2**30 if cp is not None else 2**22,
                        help="samples (default 2**30 with a GPU, 2**22 without)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--chunk", type=H.parse_int, default=2**27,
                        help="chunk size in elements for dask.array (default 2**27)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    n = args.n

    try:
        import dask_gpunumeric as gnp

        example = load_example()
        backend = gnp.config.backend()
        gnp_run = lambda: gnp.fetch(example.monte_carlo(n, X_MAX))  # noqa: E731
        accelerated = gnp.accelerate(example.monte_carlo)
        gnp_accelerated_run = lambda: gnp.fetch(accelerated(n, X_MAX))  # noqa: E731

        def gnp_unfused_run():
            with gnp.config.set(fusion=False):
                return gnp.fetch(example.monte_carlo(n, X_MAX))
    except Exception as exc:  # still measure the baselines
        backend, import_error = "-", exc

        def gnp_run():
            raise import_error

        gnp_unfused_run = gnp_accelerated_run = gnp_run

    print(f"Monte-Carlo sqrt(pi) benchmark: n = {n} float32, gnp backend {backend}, "
          f"{H.device_name()}", flush=True)

    runs = [("gnp", gnp_run), ("gnp-accelerated", gnp_accelerated_run), ("gnp-unfused", gnp_unfused_run)]
    jax_run = jax_jit(n, X_MAX)
    if jax_run is not None:
        runs.append(("jax-jit", jax_run))
    cn = H.cupynumeric_module()
    if cn is not None:
        runs.append(("cupynumeric", lambda: eager(cn, n, X_MAX)))
    if cp is not None:
        runs.append(("cupy", lambda: eager(cp, n, X_MAX)))
    runs.append((H.dask_array_system(), lambda: dask_array(dask_rng(cp), n, X_MAX, args.chunk)))
    if cp is None:
        import numpy as np

        runs.append(("numpy", lambda: eager(np, n, X_MAX)))

    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check)
               for name, fn in runs]

    params = {
        "n": n,
        "dtype": "float32",
        "gnp_backend": backend,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "dask_chunk": args.chunk,
        "exact": round(EXACT, 6),
        "tolerance": TOLERANCE,
    }
    report = H.make_report("monte_carlo", results, baseline="gnp", params=params,
                           value_name="estimate")
    code = H.finish(report, args.json)
    if code:
        print("FAILED: an implementation raised or its estimate is off sqrt(pi) by 1e-2 or more",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
