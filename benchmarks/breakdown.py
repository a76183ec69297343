"""Where the time of one Monte-Carlo estimate goes: Python and scheduling overhead, and kernel time.

    python benchmarks/breakdown.py [--n 2**30] [--repeat 20]

Prints the median of: building the expression; building + fetching at a tiny size (overhead floor); the
full estimate; and, on a GPU, the fused kernel of one block run directly (device-synchronised).
"""
from __future__ import annotations

import argparse
import pathlib
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=2**30 if H.cupy_gpu() else 2**22)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)

    import monte_carlo as mc

    import dask_gpunumeric as gnp
    from dask_gpunumeric import _codegen
    from dask_gpunumeric._fusion import explain_groups

    rows = [
        ("build expression", median_ms(lambda: mc.monte_carlo(args.n, 10.0), args.repeat)),
        ("build + fetch, n=1000", median_ms(lambda: gnp.fetch(mc.monte_carlo(1000, 10.0)), args.repeat)),
        (f"build + fetch, n={args.n}", median_ms(lambda: gnp.fetch(mc.monte_carlo(args.n, 10.0)), args.repeat)),
    ]
    estimate = mc.monte_carlo(args.n, 10.0)
    (fused,) = explain_groups(estimate.expr)
    if fused.backend == "cupy":
        index = (0,) * fused.ndim
        block = (fused.operand("program"), fused.operand("scalars"), fused.block_offset(index),
                 fused.block_shape(index), fused.shape)
        rows.append((f"fused kernel, one block of {fused.block_shape(index)} ({fused.numblocks} blocks)",
                     median_ms(lambda: _codegen.run_cuda(*block, []), args.repeat)))
    print(f"breakdown of the Monte-Carlo estimate, backend {gnp.config.backend()}, {H.device_name()}")
    for label, ms in rows:
        print(f"  {label:55s} {ms:9.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
