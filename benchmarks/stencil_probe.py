"""Probe (GPU): the stencil kernels' compile-time configurations, timed through the benchmarks' own accelerated
calls (on the CPU it runs on NumPy blocks, where no generated kernel runs: a smoke test).

    python benchmarks/stencil_probe.py [--variants] [--n 8192] [--repeat 10] [--rounds 2] [--only cg,gray_scott]

Times CG (``benchmarks/cg.py``: 30 iterations, a pair tile kernel and a one-sweep stencil kernel per iteration)
and Gray-Scott (``benchmarks/gray_scott.py``: 20 steps, tile kernels) as those benchmarks do (``_harness.measure``:
the median wall time of a call, the device synchronised, after a warm-up) under the default configuration
(``kernels.stencil.TILE_CONFIG``, ``SWEEP_CONFIG``); with ``--variants`` under each configuration of
``VARIANTS`` in turn, ``--rounds`` times round all of them (the medians over the rounds: a drift of the clocks
falls on every variant alike). Prints per variant and system the median ms, its ratio to the default's, the
checksum (``float.hex``: equal bits to the default's, or marked ``DIFFERS``) and the kernels the variant
compiled (registers, local memory bytes: spills).
"""
from __future__ import annotations

import argparse
import itertools
import pathlib
import statistics
import sys
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent
if str(ROOT.parent) not in sys.path:
    sys.path.insert(0, str(ROOT.parent))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _harness as H  # noqa: E402
import _iterative  # noqa: E402
import cg  # noqa: E402
import gray_scott  # noqa: E402

from dask_gpunumeric.codegen.types import SweepConfig, TileConfig  # noqa: E402
from dask_gpunumeric.kernels import stencil as _stencil_kernels  # noqa: E402

#: (tile kernels' shape, one-sweep kernels' choices) compared by ``--variants``, the default first. CG's update
#: kernel (64 registers, 50% occupancy by default): bounded to 6 or 8 thread blocks per multiprocessor (40, 32
#: registers), fewer rows per thread; then the pair kernel's tile (rows x columns, its halo's share of the reads:
#: 34 x 66 / 2048 = 1.10 by default) and outputs per thread (rows * columns / threads): within 2% of the default
#: for CG but 64 x 128 (docs/benchmarks.md, s15-cg), kept for Gray-Scott's tile kernels.
VARIANTS: list[tuple[TileConfig, SweepConfig]] = [
    (_stencil_kernels.TILE_CONFIG, _stencil_kernels.SWEEP_CONFIG),
    (TileConfig(), SweepConfig()),
    (TileConfig(), SweepConfig(min_blocks=6)),
    (TileConfig(), SweepConfig(rows=2)),
    (TileConfig(), SweepConfig(rows=1, min_blocks=8)),
    (TileConfig(), SweepConfig(rows=1)),
    (TileConfig(rows=16, columns=128), SweepConfig()),
    (TileConfig(rows=32, columns=128), SweepConfig()),
    (TileConfig(threads=512), SweepConfig()),
]
SYSTEMS = {"cg": cg.CG, "gray_scott": gray_scott.GRAY_SCOTT}


def label(tile: TileConfig, sweep: SweepConfig) -> str:
    """The fields of a variant that are not the default's."""
    defaults = ((tile, _stencil_kernels.TILE_CONFIG), (sweep, _stencil_kernels.SWEEP_CONFIG))
    words = [f"{type(config).__name__[:-6].lower()} {f}={v}" for config, default in defaults
             for f, v, d in zip(config._fields, config, default) if v != d]
    return ", ".join(words) or "default"


class Compiled:
    """The stencil kernels compiled while it listens (``kernels.cuda.compile_function`` wrapped): name,
    registers, local memory bytes."""

    def __init__(self) -> None:
        from dask_gpunumeric.kernels import cuda as _cuda

        self.seen: list[str] = []
        compile_function = _cuda.compile_function

        def listened(source: str, name: str, threads: int) -> tuple[Any, int]:
            function, resident = compile_function(source, name, threads)
            if name.startswith(("gnp_pair_", "gnp_tiles_", "gnp_stencil_")):
                regs, local = getattr(function, "num_regs", "?"), getattr(function, "local_size_bytes", "?")
                self.seen.append(f"{name[:13]} {threads}t {regs}r {local}B")
            return function, resident

        _cuda.compile_function = listened

    def take(self) -> str:
        seen, self.seen = self.seen, []
        return "; ".join(seen)


def _runner(it: _iterative.Iteration, n: int) -> Callable[[int], float]:
    import dask

    import dask_gpunumeric as gnp

    arrays = list(dask.persist(*(gnp.asarray(h) for h in it.inputs(n, n))))
    return _iterative.gnp_runner(it, it.steps, arrays)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--n", type=int, default=8192 if H.cupy_gpu() is not None else 128)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default=",".join(SYSTEMS))
    args = parser.parse_args(argv)

    compiled = Compiled()
    variants = VARIANTS if args.variants else VARIANTS[:1]
    systems = {name: _runner(SYSTEMS[name], args.n) for name in args.only.split(",")}
    print(f"stencil probe: {args.n} x {args.n} float32, {H.device_name()}, {len(variants)} variant(s), "
          f"{args.rounds} round(s) of {args.repeat} timed calls", flush=True)
    times: dict[tuple[int, str], list[float]] = {}
    sums: dict[tuple[int, str], str] = {}
    kernels: dict[int, list[str]] = {}
    calls = itertools.count()
    for _ in range(args.rounds):
        for v, (tile, sweep) in enumerate(variants):
            _stencil_kernels.TILE_CONFIG, _stencil_kernels.SWEEP_CONFIG = tile, sweep
            for name, run in systems.items():
                result = H.measure(f"{name} {label(tile, sweep)}", lambda run=run: run(next(calls)),
                                   repeat=args.repeat, warmup=2, verbose=False)
                if result.error:
                    sums[v, name] = f"ERROR {result.error}"[:60]
                    continue
                times.setdefault((v, name), []).extend(result.times_s)
                sums[v, name] = float(result.value).hex()
            if compiled.seen:
                kernels.setdefault(v, []).append(compiled.take())
    _stencil_kernels.TILE_CONFIG, _stencil_kernels.SWEEP_CONFIG = VARIANTS[0]
    print(f"{'variant':<40} {'system':<11} {'median ms':>9} {'x default':>9}  {'checksum':<24} kernels compiled")
    for v, (tile, sweep) in enumerate(variants):
        for name in systems:
            ms = 1e3 * statistics.median(times[v, name]) if (v, name) in times else float("nan")
            base = 1e3 * statistics.median(times[0, name]) if (0, name) in times else float("nan")
            same = "" if sums.get((v, name)) == sums.get((0, name)) else " DIFFERS"
            print(f"{label(tile, sweep):<40} {name:<11} {ms:9.3f} {ms / base:9.3f}  {sums.get((v, name), '') + same:<24} "
                  f"{'; '.join(kernels.get(v, [])) if name == next(iter(systems)) else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
