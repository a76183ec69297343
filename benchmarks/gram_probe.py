"""Probe (GPU only): the gram kernel and the small solve against cuBLAS and cuSOLVER, device time of each.

    python benchmarks/gram_probe.py [--shape 1048576,64] [--dtype float32] [--repeat 30]

Times with ``cupyx.profiler.benchmark`` (GPU ms, median of ``--repeat`` after 3 warm-up runs) on X of
``--shape`` and y, both on the device:

- ``X.T @ X`` and ``X.T @ y`` by cuBLAS (``cupy.matmul`` on the transposed view, as eager CuPy), each and both;
- ``X.T @ X`` alone and the pair by the gram kernel (``kernels.gram.products``: one pass over X);
- ``solve(A, b)`` of the system those make: cuSOLVER's getrf + getrs (``kernels.lapack.cusolver_gesv``) and the
  one-block kernel (``small_gesv``);
- least squares, eager CuPy (``cupy.linalg.solve(X.T @ X, X.T @ y)``) against the gram kernel and the small
  solve.

and prints each result's largest error relative to its largest entry, against NumPy in float64.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _error(value: Any, reference: np.ndarray) -> float:
    host = value.get() if hasattr(value, "get") else np.asarray(value)
    return float(np.abs(host - reference).max() / np.abs(reference).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1048576,64")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    import cupy
    from cupyx.profiler import benchmark

    from dask_gpunumeric.codegen.linalg import gram_plan
    from dask_gpunumeric.kernels import gram as _gram
    from dask_gpunumeric.kernels import lapack as _lapack

    n, k = map(int, args.shape.split(","))
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((n, k), dtype=np.float32).astype(dtype)
    v = (h @ rng.uniform(-1, 1, k).astype(dtype) + rng.standard_normal(n).astype(dtype)).astype(dtype)
    X, y = cupy.asarray(h), cupy.asarray(v)
    wide = h.astype(np.float64)
    gram_ref, moment_ref = wide.T @ wide, wide.T @ v.astype(np.float64)
    solution_ref = np.linalg.solve(gram_ref, moment_ref)

    def gram_pair() -> tuple:
        return _gram.products("cupy", dtype, X, y)

    def ours() -> Any:
        gram, moment = gram_pair()
        return _lapack.small_gesv(gram, moment)[0]

    A, b = cupy.matmul(X.T, X), cupy.matmul(X.T, y)
    cases = {
        "X.T @ X, cuBLAS": (lambda: cupy.matmul(X.T, X), gram_ref),
        "X.T @ y, cuBLAS": (lambda: cupy.matmul(X.T, y), moment_ref),
        "both, cuBLAS": (lambda: (cupy.matmul(X.T, X), cupy.matmul(X.T, y)), None),
        "X.T @ X, gram kernel": (lambda: _gram.products("cupy", dtype, X)[0], gram_ref),
        "both, gram kernel": (gram_pair, None),
        "solve, cuSOLVER getrf+getrs": (lambda: _lapack.cusolver_gesv(A, b)[0], solution_ref),
        "solve, small kernel": (lambda: _lapack.small_gesv(A, b)[0], solution_ref),
        "least squares, eager CuPy": (lambda: cupy.linalg.solve(cupy.matmul(X.T, X), cupy.matmul(X.T, y)),
                                      solution_ref),
        "least squares, gram + small solve": (ours, solution_ref),
    }
    plan = gram_plan(dtype, k, (1,))
    function, wave, _ = _gram._kernels(plan)
    print(f"X {n} x {k} {dtype}, gram plan: {plan.threads} threads, {plan.chunk} rows a chunk, "
          f"{function.num_regs} registers, {function.shared_size_bytes} B shared, a wave of {wave} blocks")
    print(f"{'case':<36} {'GPU ms':>8} {'max rel err':>12}")
    for name, (run, reference) in cases.items():
        result = run()
        error = "" if reference is None else f"{_error(result, reference):12.2e}"
        if reference is None:
            pair = [_error(r, ref) for r, ref in zip(result, (gram_ref, moment_ref))]
            error = " ".join(f"{e:.1e}" for e in pair)
        timing = benchmark(run, n_repeat=args.repeat, n_warmup=3)
        print(f"{name:<36} {float(np.median(timing.gpu_times[0])) * 1e3:8.3f} {error:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
