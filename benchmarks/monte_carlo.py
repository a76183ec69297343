"""Benchmark: the Monte-Carlo example (examples/monte_carlo.py), float32, against baselines.

    python benchmarks/monte_carlo.py [--n N] [--repeat 10] [--warmup 2] [--chunk 2**27] [--json PATH]

Side by side, in one run, each computing (20/n) * sum(exp(-(20*u - 10)**2)) for n uniform float32
samples u (an estimate of sqrt(pi)):

- ``gnp``: this library, ``gnp.fetch(monte_carlo(n, 10.0))`` from the example (the baseline of the
  ratios), and ``gnp-unfused``: the same with the fusion pass turned off (``gpunumeric.fusion``);
- ``jax-jit`` where JAX is installed (on its default device);
- with a GPU: ``cupy`` (eager CuPy) and ``dask.array+cupy`` (dask.array over CuPy blocks, the
  threaded scheduler);
- without one: ``dask.array+numpy`` and ``numpy`` (eager NumPy), as references.

n defaults to 2**30 with a GPU and 2**22 without. Every run is timed with device synchronisation
after warm-up runs; the table gives the median and minimum in ms and each median relative to gnp's.
Exits 1 when an implementation fails or its estimate is off sqrt(pi) by 1e-2 or more.
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


def cupy_eager(cp, n, x_max):
    omega = 2 * x_max
    raw = cp.random.default_rng(42).random(n, dtype=cp.float32)
    samples = omega * raw - x_max
    return float((omega / n) * cp.sum(cp.exp(-samples ** 2)))


def jax_jit(n, x_max):
    """The example under ``jax.jit`` (compiled once, then timed), or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    omega = 2 * x_max

    @jax.jit
    def estimate(key):
        raw = jax.random.uniform(key, (n,), dtype=jnp.float32)
        samples = omega * raw - x_max
        return (omega / n) * jnp.sum(jnp.exp(-samples ** 2))

    key = jax.random.PRNGKey(42)
    return lambda: float(estimate(key))


def numpy_eager(n, x_max):
    import numpy as np

    omega = 2 * x_max
    raw = np.random.default_rng(42).random(n, dtype=np.float32)
    samples = omega * raw - x_max
    return float((omega / n) * np.sum(np.exp(-samples ** 2)))


def dask_rng(cp):
    """A dask.array Generator over CuPy blocks (cp given) or NumPy blocks (cp None)."""
    import dask.array as da

    if cp is None:
        return da.random.default_rng(42)
    try:
        return da.random.default_rng(cp.random.default_rng(42))
    except Exception:  # older dask: the legacy RandomState interface
        return da.random.RandomState(42, RandomState=cp.random.RandomState)


def dask_array(rng, n, x_max, chunk):
    import numpy as np

    import dask.array as da

    omega = 2 * x_max
    if hasattr(rng, "random"):
        raw = rng.random(n, dtype=np.float32, chunks=chunk)
    else:
        raw = rng.random_sample(n, dtype=np.float32, chunks=chunk)
    samples = omega * raw - x_max
    estimate = (omega / n) * da.sum(da.exp(-samples ** 2))
    return float(estimate.compute(scheduler="threads"))


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

        def gnp_unfused_run():
            with gnp.config.set(fusion=False):
                return gnp.fetch(example.monte_carlo(n, X_MAX))
    except Exception as exc:  # still measure the baselines
        backend, import_error = "-", exc

        def gnp_run():
            raise import_error

        gnp_unfused_run = gnp_run

    print(f"Monte-Carlo sqrt(pi) benchmark: n = {n} float32, gnp backend {backend}, "
          f"{H.device_name()}", flush=True)

    runs = [("gnp", gnp_run), ("gnp-unfused", gnp_unfused_run)]
    jax_run = jax_jit(n, X_MAX)
    if jax_run is not None:
        runs.append(("jax-jit", jax_run))
    if cp is not None:
        runs.append(("cupy", lambda: cupy_eager(cp, n, X_MAX)))
        runs.append(("dask.array+cupy", lambda: dask_array(dask_rng(cp), n, X_MAX, args.chunk)))
    else:
        runs.append(("dask.array+numpy", lambda: dask_array(dask_rng(None), n, X_MAX, args.chunk)))
        runs.append(("numpy", lambda: numpy_eager(n, X_MAX)))

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
