"""Probe (GPU only): the gram kernel and the small solve against cuBLAS and cuSOLVER, device time of each.

    python benchmarks/gram_probe.py [--shape 1048576,64] [--dtype float32] [--repeat 30] [--variants]

Times with ``cupyx.profiler.benchmark`` (GPU ms, median of ``--repeat`` after 3 warm-up runs) on X of
``--shape`` and y, both on the device:

- ``X.T @ X`` and ``X.T @ y`` by cuBLAS (``cupy.matmul`` on the transposed view, as eager CuPy), each and both;
- ``X.T @ X`` alone and the pair by the gram kernel (``kernels.gram.products``: one pass over X);
- ``solve(A, b)`` of the system those make: cuSOLVER's getrf + getrs (``kernels.lapack.cusolver_gesv``) and the
  one-block kernel (``small_gesv``);
- least squares, eager CuPy (``cupy.linalg.solve(X.T @ X, X.T @ y)``) against the gram kernel and the small
  solve, and against the plan's choices (``kernels.faster``: each kernel where measured faster).

and prints each result's largest error relative to its largest entry, against NumPy in float64.

``--variants`` times instead each compile-time configuration of ``GRAM_VARIANTS`` (the pair ``X.T @ X``,
``X.T @ y``) and of ``SOLVE_VARIANTS`` in one run, next to cuBLAS and cuSOLVER: per call (as the benchmark
above: an idle device waits for the host's launches) and back to back (``--batch`` calls between two events:
the device's own time), with the kernel's registers, shared memory and wave; the fastest of each last.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dask_gpunumeric.codegen.linalg import GramConfig, SolveConfig  # noqa: E402

#: The gram kernel's configurations ``--variants`` compares: the default ``GramConfig()`` (the plan's: the fastest
#: correct one of the H200 run of 09:50 UTC), then the first round's kernel.
GRAM_VARIANTS = [
    GramConfig(),
    GramConfig(threads=256, chunk_bytes=44 * 1024, vectors=False),
    GramConfig(threads=256, chunk_bytes=44 * 1024),
    GramConfig(threads=128, chunk_bytes=44 * 1024),
    GramConfig(chunk_bytes=11 * 1024),
    GramConfig(vectors=False),
    GramConfig(unroll=2),
    GramConfig(threads=512, chunk_bytes=44 * 1024),
    GramConfig(buffers=2),
    GramConfig(buffers=2, chunk_bytes=44 * 1024),
    GramConfig(buffers=2, threads=256, chunk_bytes=44 * 1024),
    GramConfig(buffers=2, chunk_bytes=88 * 1024),
    GramConfig(buffers=2, threads=256, chunk_bytes=88 * 1024),
]
#: The small solve's (the default, the plan's, first: the fastest of that run).
SOLVE_VARIANTS = [SolveConfig()] + [SolveConfig(threads=t, fixed=f) for f in (True, False) for t in (128, 256, 512)
                                    if (t, f) != (512, True)] + [SolveConfig(registers=True)]


def _label(config: tuple) -> str:
    """A configuration's fields that are not the default's."""
    return type(config).__name__ + "(" + ", ".join(
        f"{f}={v}" for f, v, d in zip(config._fields, config, type(config)()) if v != d) + ")"


def _error(value: Any, reference: np.ndarray) -> float:
    host = value.get() if hasattr(value, "get") else np.asarray(value)
    return float(np.abs(host - reference).max() / np.abs(reference).max())


def _errors(result: Any, references: tuple) -> str:
    """The errors of a result (a tuple of results) against their references."""
    if not isinstance(result, tuple):
        return f"{_error(result, references[0]):.1e}"
    return " ".join(f"{_error(r, ref):.1e}" for r, ref in zip(result, references))


def _times(run: Callable[[], Any], repeat: int, batch: int) -> tuple[float, float]:
    """GPU ms of ``run``: the median per call (``cupyx.profiler.benchmark``), and a call's share of ``batch``
    calls back to back (median of ``repeat`` batches)."""
    import cupy
    from cupyx.profiler import benchmark

    per_call = float(np.median(benchmark(run, n_repeat=repeat, n_warmup=3).gpu_times[0])) * 1e3
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    shares = []
    for _ in range(repeat):
        start.record()
        for _ in range(batch):
            run()
        stop.record()
        stop.synchronize()
        shares.append(cupy.cuda.get_elapsed_time(start, stop) / batch)
    return per_call, float(np.median(shares))


def variants(X: Any, y: Any, references: dict, repeat: int, batch: int) -> None:
    """Times each configuration of ``GRAM_VARIANTS`` and ``SOLVE_VARIANTS`` (see the module's docstring)."""
    import cupy

    from dask_gpunumeric.codegen.linalg import gram_plan
    from dask_gpunumeric.kernels import gram as _gram
    from dask_gpunumeric.kernels import lapack as _lapack

    n, k = X.shape
    dtype = X.dtype
    A, b = cupy.matmul(X.T, X), cupy.matmul(X.T, y)
    pair_refs, solution_ref = (references["gram"], references["moment"]), references["solution"]
    print(f"{'gram variant (X.T @ X, X.T @ y)':<64} {'call ms':>8} {'b2b ms':>8} {'errors':>16}  plan")
    base = _times(lambda: (cupy.matmul(X.T, X), cupy.matmul(X.T, y)), repeat, batch)
    print(f"{'cuBLAS, two matmuls':<64} {base[0]:8.3f} {base[1]:8.3f}")
    best_gram = (float("inf"), None)
    for config in GRAM_VARIANTS:
        plan = gram_plan(dtype, k, (1,), _gram.configured(X, config))
        function, wave, _ = _gram._kernels(plan)
        pair = lambda plan=plan: _gram._launch(plan, X, (y,))  # noqa: E731
        errors = _errors(pair(), pair_refs)
        call, back = _times(pair, repeat, batch)
        best_gram = min(best_gram, (call, config), key=lambda c: c[0])
        print(f"{_label(config):<64} {call:8.3f} {back:8.3f} {errors:>16}  {plan.threads} threads, {plan.chunk} rows, "
              f"{function.num_regs} regs, {plan.shared_bytes} B, wave {wave}"
              f"{'' if plan.vectors == config.vectors else ' (X unaligned: no vectors)'}")
    print(f"{'solve variant':<64} {'call ms':>8} {'b2b ms':>8} {'error':>16}")
    base_solve = _times(lambda: _lapack.cusolver_gesv(A, b)[0], repeat, batch)
    print(f"{'cuSOLVER getrf + getrs':<64} {base_solve[0]:8.3f} {base_solve[1]:8.3f}")
    empty = cupy.RawKernel('extern "C" __global__ void gnp_probe_empty() {}', "gnp_probe_empty")
    floor = _times(lambda: empty((1,), (32,), ()), repeat, batch)
    print(f"{'(an empty kernel launched: the floor)':<64} {floor[0]:8.3f} {floor[1]:8.3f}")
    best_solve = (float("inf"), None)
    for config in SOLVE_VARIANTS:
        solve = lambda config=config: _lapack.small_gesv(A, b, config)[0]  # noqa: E731
        errors = _errors(solve(), (solution_ref,))
        call, back = _times(solve, repeat, batch)
        best_solve = min(best_solve, (call, config), key=lambda c: c[0])
        function = _lapack._small_kernel(dtype, config, config.kernel_size(k, 1))[0]
        print(f"{_label(config):<64} {call:8.3f} {back:8.3f} {errors:>16}  {function.num_regs} regs")
    eager = _times(lambda: cupy.linalg.solve(cupy.matmul(X.T, X), cupy.matmul(X.T, y)), repeat, batch)
    print(f"{'least squares, eager CuPy':<64} {eager[0]:8.3f} {eager[1]:8.3f}")
    print(f"fastest gram: {_label(best_gram[1])} {best_gram[0]:.3f} ms (cuBLAS {base[0]:.3f}): "
          f"{'WINS' if best_gram[0] < base[0] else 'loses'}")
    print(f"fastest solve: {_label(best_solve[1])} {best_solve[0]:.3f} ms (cuSOLVER {base_solve[0]:.3f}): "
          f"{'WINS' if best_solve[0] < base_solve[0] else 'loses'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1048576,64")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--variants", action="store_true")
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
    print(f"X {n} x {k} {dtype}")
    if args.variants:
        variants(X, y, {"gram": gram_ref, "moment": moment_ref, "solution": solution_ref}, args.repeat, args.batch)
        return 0

    config = _gram.configured(X, _gram.CONFIG)
    plan, plan_x = gram_plan(dtype, k, (1,), config), gram_plan(dtype, k, (), config)

    def gram_pair() -> tuple:
        return _gram._launch(plan, X, (y,))

    def ours() -> Any:
        gram, moment = gram_pair()
        return _lapack.small_gesv(gram, moment)[0]

    def chosen() -> Any:  # the plan's way: each kernel where it was measured faster
        gram, moment = _gram.products("cupy", dtype, X, y)
        return _lapack.gesv(gram, moment)[0]

    A, b = cupy.matmul(X.T, X), cupy.matmul(X.T, y)
    cases = {
        "X.T @ X, cuBLAS": (lambda: cupy.matmul(X.T, X), gram_ref),
        "X.T @ y, cuBLAS": (lambda: cupy.matmul(X.T, y), moment_ref),
        "both, cuBLAS": (lambda: (cupy.matmul(X.T, X), cupy.matmul(X.T, y)), None),
        "X.T @ X, gram kernel": (lambda: _gram._launch(plan_x, X, ())[0], gram_ref),
        "both, gram kernel": (gram_pair, None),
        "solve, cuSOLVER getrf+getrs": (lambda: _lapack.cusolver_gesv(A, b)[0], solution_ref),
        "solve, small kernel": (lambda: _lapack.small_gesv(A, b)[0], solution_ref),
        "least squares, eager CuPy": (lambda: cupy.linalg.solve(cupy.matmul(X.T, X), cupy.matmul(X.T, y)),
                                      solution_ref),
        "least squares, gram + small solve": (ours, solution_ref),
        "least squares, the plan's choices": (chosen, solution_ref),
    }
    function, wave, _ = _gram._kernels(plan)
    print(f"gram plan: {plan.threads} threads, {plan.chunk} rows a chunk, "
          f"{function.num_regs} registers, {plan.shared_bytes} B shared, a wave of {wave} blocks")
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
