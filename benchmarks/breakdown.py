"""Where the time of one Monte-Carlo estimate goes: Python and scheduling overhead, and kernel time.

    python benchmarks/breakdown.py [--n 2**30] [--repeat 20] [--processes 10]

Prints the median of: building the expression; building + fetching at a tiny size (overhead floor); the
full estimate; and, on a GPU, the fused kernel of one block run directly (device-synchronised) beside a
hand-written kernel of the same estimate (Philox draws in registers, four samples per draw, a float32
partial per thread, a block tree and one float64 atomic per block: the floor our generated kernel is held
to). ``--profile`` adds the Python functions the estimate spends most time in. ``--processes N`` runs
the estimate in N fresh processes instead (``--repeat`` calls each after 2 warm-ups, with the hand-written
kernel timed in each) and prints each process's medians and the median of them (issue #21's form).
"""
from __future__ import annotations

import argparse
import cProfile
import pathlib
import pstats
import statistics
import sys
import time

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def median_ms(fn, repeat: int) -> float:
    fn()
    H.sync()
    times = []
    for _ in range(repeat):
        H.sync()
        start = time.perf_counter()
        fn()
        H.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


HAND_WRITTEN = r"""
extern "C" __global__ void __launch_bounds__(256) mc_hand(double* out, unsigned int k0, unsigned int k1,
                                                          unsigned long long stream, long long n4)
{
    float acc = 0.0f;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < n4; c += (long long)gridDim.x * blockDim.x) {
        const gnp_u32x4 r = gnp_philox_block(k0, k1, stream, (unsigned long long)c);
        const unsigned int w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float x = 20.0f * gnp_u32_to_f32(w[j]) - 10.0f;
            acc += expf(-(x * x));
        }
    }
    __shared__ float sh[256];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, (double)sh[0]);
}
"""


def hand_written(n: int):
    """The Monte-Carlo sum as one hand-written kernel (n a multiple of 4), or None without a GPU."""
    cp = H.cupy_gpu()
    if cp is None:
        return None
    from dask_gpunumeric.codegen.philox import PHILOX_DEVICE_SOURCE

    kernel = cp.RawKernel(PHILOX_DEVICE_SOURCE + HAND_WRITTEN, "mc_hand")
    out = cp.zeros(1, dtype=cp.float64)
    blocks = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"] * 4

    def run():
        out.fill(0)
        kernel((blocks,), (256,), (out, cp.uint32(1), cp.uint32(2), cp.uint64(3), cp.int64(n // 4)))
        return out

    return run


def fresh_processes(n: int, repeat: int, processes: int) -> int:
    """The estimate's median time (and the hand-written kernel's, on a GPU) in each of ``processes`` fresh
    Python processes, and the median over them."""
    import subprocess

    script = ("import sys, statistics, time; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import breakdown as B; "
              "import monte_carlo as mc, dask_gpunumeric as gnp; n, r = int(sys.argv[3]), int(sys.argv[4]); "
              "f = lambda: gnp.fetch(mc.monte_carlo(n, 10.0)); f(); f(); hand = B.hand_written(n); "
              "print(B.median_ms(f, r), B.median_ms(hand, r) if hand else float('nan'))")
    here = pathlib.Path(__file__).resolve().parent
    rows = []
    for k in range(processes):
        out = subprocess.run([sys.executable, "-c", script, str(here), str(ROOT / "examples"), str(n), str(repeat)],
                             capture_output=True, text=True, check=True).stdout.split()
        rows.append((float(out[-2]), float(out[-1])))
        print(f"  process {k + 1:2d}: estimate {rows[-1][0]:7.3f} ms, hand-written kernel {rows[-1][1]:7.3f} ms", flush=True)
    print(f"Monte-Carlo n={n}, {H.device_name()}: median over {processes} fresh processes "
          f"{statistics.median(r[0] for r in rows):.3f} ms (hand-written kernel {statistics.median(r[1] for r in rows):.3f} ms)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=2**30 if H.cupy_gpu() else 2**22)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="print the top Python functions of one estimate")
    parser.add_argument("--processes", type=int, default=0,
                        help="time the estimate in this many fresh processes instead (median of their medians)")
    args = parser.parse_args(argv)
    if args.processes:
        return fresh_processes(args.n, args.repeat, args.processes)

    import monte_carlo as mc

    import dask_gpunumeric as gnp
    from dask_gpunumeric.kernels import fused as _fused
    from dask_gpunumeric.optimize import explain_groups

    rows = [
        ("build expression", median_ms(lambda: mc.monte_carlo(args.n, 10.0), args.repeat)),
        ("build + fetch, n=1000", median_ms(lambda: gnp.fetch(mc.monte_carlo(1000, 10.0)), args.repeat)),
        (f"build + fetch, n={args.n}", median_ms(lambda: gnp.fetch(mc.monte_carlo(args.n, 10.0)), args.repeat)),
    ]
    estimate = mc.monte_carlo(args.n, 10.0)
    (fused,) = explain_groups(estimate.expr)
    if fused.backend == "cupy":
        index = (0,) * fused.ndim
        block = (fused.operand("program"), fused.operand("scalars"), *fused.geometry(index))
        rows.append((f"fused kernel, first block: {block[3]} elements",
                     median_ms(lambda: _fused.run_cuda(*block, []), args.repeat)))
        rows.append((f"hand-written kernel, n={args.n}", median_ms(hand_written(args.n), args.repeat)))
    print(f"breakdown of the Monte-Carlo estimate, backend {gnp.config.backend()}, {H.device_name()}")
    for label, ms in rows:
        print(f"  {label:55s} {ms:9.3f} ms")
    if fused.backend == "cupy":
        launches: list[float] = []
        run_cuda = _fused.run_cuda

        def timed_run_cuda(*a):
            launches.append(time.perf_counter())
            return run_cuda(*a)

        _fused.run_cuda = timed_run_cuda
        prefix, total = [], []
        for _ in range(args.repeat):
            H.sync()
            start = time.perf_counter()
            gnp.fetch(mc.monte_carlo(args.n, 10.0))
            total.append(time.perf_counter() - start)
            prefix.append(launches[-1] - start)
        _fused.run_cuda = run_cuda
        print(f"  {'from the call to the fused kernel launch':55s} {statistics.median(prefix) * 1e3:9.3f} ms")
        print(f"  {'from the call to the value':55s} {statistics.median(total) * 1e3:9.3f} ms")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [gnp.fetch(mc.monte_carlo(args.n, 10.0)) for _ in range(args.repeat)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
