"""Probe (GPU): the stencil kernels' compile-time configurations, timed through the benchmarks' own accelerated
calls (on the CPU it runs on NumPy blocks, where no generated kernel runs: a smoke test).

    python benchmarks/stencil_probe.py [--variants [--pick 0,1,6]] [--gaps] [--graph] [--n 8192] [--repeat 10]
                                       [--rounds 2] [--only cg,gray_scott,heat]

Times CG (``benchmarks/cg.py``: 30 iterations, a pair tile kernel and a one-sweep stencil kernel per iteration),
Gray-Scott (``benchmarks/gray_scott.py``: 20 steps, tile kernels) and heat (``benchmarks/heat.py`` on a 2n x 2n
grid: 20 sweeps, tile kernels) as those benchmarks do (``_harness.measure``: the median wall time of a call, the
device synchronised, after a warm-up) under the default configuration (``kernels.stencil.TILE_CONFIG``,
``SWEEP_CONFIG``, ``SHIFTED_SWEEP_CONFIG``, ``PAIR_TILE_CONFIG``); with ``--variants`` under each configuration of ``VARIANTS`` in turn,
``--rounds`` times round all of them (the medians over the rounds: a drift of the clocks falls on every variant
alike; ``--pick``: those of these numbers in ``VARIANTS`` only, the default's first). Prints per variant and system the median ms, its ratio to the default's, the checksum (CG's and
Gray-Scott's ``float.hex``, a hash of heat's grid: equal bits to the default's, or marked ``DIFFERS``) and the
kernels the variant compiled (registers, local memory bytes: spills). ``--gaps``: per system (and variant, with
``--variants``), where a call's time goes between the host's launches and the device's kernels; ``--graph``: a call
replayed as a CUDA graph.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

ROOT = pathlib.Path(__file__).resolve().parent
if str(ROOT.parent) not in sys.path:
    sys.path.insert(0, str(ROOT.parent))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _harness as H  # noqa: E402
import _iterative  # noqa: E402
import cg  # noqa: E402
import gray_scott  # noqa: E402
import heat  # noqa: E402
import numpy as np  # noqa: E402

from dask_gpunumeric import config as gnp_config  # noqa: E402
from dask_gpunumeric.codegen.types import SweepConfig, TileConfig  # noqa: E402
from dask_gpunumeric.kernels import stencil as _stencil_kernels  # noqa: E402

class Variant(NamedTuple):
    """A configuration ``--variants`` compares: the tile kernels' shape (``pair``: of those of two sweeps, None:
    ``tile``), the one-sweep kernels' choices (``shifted``: of those reading more than one buffer at shifted
    positions, None: ``sweep``) and settings of ``gnp.config`` the plan reads (name, value pairs; a plan is traced
    per settings)."""

    tile: TileConfig
    sweep: SweepConfig
    settings: tuple[tuple[str, Any], ...] = ()
    shifted: SweepConfig | None = _stencil_kernels.SHIFTED_SWEEP_CONFIG
    pair: TileConfig | None = _stencil_kernels.PAIR_TILE_CONFIG


_DEFAULT = (_stencil_kernels.TILE_CONFIG, _stencil_kernels.SWEEP_CONFIG)
#: compared by ``--variants``, the default first (the shapes compared before are in docs/benchmarks.md: s14-tiles,
#: s15-cg, s16-cg, s17-cgk, s18-cgk2, s19-update). The defaults are packed kernels (each thread four consecutive
#: columns, each buffer row moved as one 16-byte access), the last block of CG's update and pair kernels loading 8
#: partials at a time (``combine_ahead``), CG's 0-d quotients computed by the stencil kernels that read them
#: (``stencil-quotients``); against them: the quotients as launches of their own; CG's pair kernel with its last
#: sweep packed too, reading its shared rows as packs (``TileConfig.packed_last``), at its 5 blocks per
#: multiprocessor even where the compiler spills (``min_blocks=5``); Gray-Scott's and heat's tile kernels with their
#: last sweep packed; CG's pair kernel asking L2 for each block's next tile's rows while it computes this one
#: (``TileConfig.prefetch_next``, at 5 blocks: 16 B spilled outside the loops); the partials loaded one at a time
#: (the old default), and 16 or 32 at a time (their registers spilled in the final combine; the pair kernel kept at 5
#: blocks per multiprocessor, which the runtime's unbounded rebuild of a spilling tile kernel would not).
#: (Measured slower or no faster on the H200: ``prefetch``, ``partials_in_tile``, ``SweepConfig.carveout`` by
#: s18-cgk2; the update kernel's x and r as streams, ``ld/st.global.cs``, and its launch geometry, fewer thread blocks
#: walking rows and columns, by s19-update.)
#: s19-cgorder: CG's first ``sum(b * b)`` computed by the ``b . Ab`` kernel (``stencil-late-reductions``: ``b``'s sweep
#: and that one then one tile kernel).
_PAIR = _stencil_kernels.PAIR_TILE_CONFIG
_QUOTIENTS_APART = (("stencil-quotients", False),)
VARIANTS: list[Variant] = [
    Variant(*_DEFAULT),
    Variant(*_DEFAULT, settings=_QUOTIENTS_APART),
    Variant(*_DEFAULT, pair=_PAIR._replace(packed_last=True, min_blocks=5)),
    Variant(_DEFAULT[0]._replace(packed_last=True), _DEFAULT[1]),
    Variant(*_DEFAULT, pair=_PAIR._replace(prefetch_next=True, min_blocks=5)),
    Variant(_DEFAULT[0], _DEFAULT[1]._replace(combine_ahead=0), pair=_PAIR._replace(combine_ahead=0)),
    *[Variant(_DEFAULT[0], _DEFAULT[1]._replace(combine_ahead=ahead), pair=_PAIR._replace(combine_ahead=ahead, min_blocks=5))
      for ahead in (16, 32)],
    Variant(_DEFAULT[0], _DEFAULT[1]._replace(combine_ahead=0), pair=_PAIR._replace(combine_ahead=0),
            settings=_QUOTIENTS_APART),
    Variant(*_DEFAULT, settings=(("stencil-late-reductions", True),)),
]


class System(NamedTuple):
    """A timed accelerated call, as its benchmark times it: call ``i`` is ``finish(call(*arguments(i)))``;
    ``checksum`` of that: text equal for equal bits."""

    call: Callable[..., Any]
    arguments: Callable[[int], tuple]
    finish: Callable[[Any], Any]
    checksum: Callable[[Any], str]


def _iteration(it: _iterative.Iteration, n: int) -> System:
    """``benchmarks/_iterative``'s gnp call of ``it`` on an n x n grid: its checksum fetched."""
    import dask

    import dask_gpunumeric as gnp

    arrays = list(dask.persist(*(gnp.asarray(h) for h in it.inputs(n, n))))
    return System(_iterative.gnp_accelerated(it, it.steps), lambda i: (gnp.asarray(_iterative._salt(i)), *arrays),
                  gnp.fetch, lambda value: float(value).hex())


def _heat(n: int) -> System:
    """``benchmarks/heat.py``'s gnp call on a 2n x 2n grid (its suite size: 16384^2): the grid left on the device."""
    import dask

    import dask_gpunumeric as gnp

    (u,) = dask.persist(gnp.random.default_rng(0).random((2 * n, 2 * n), dtype=np.float32, chunks=(2 * n, 2 * n)))
    return System(gnp.accelerate(heat.relax), lambda i: (u, heat.WEIGHT, heat.SWEEPS), lambda value: value,
                  lambda value: hashlib.sha256(np.ascontiguousarray(gnp.fetch(value)).tobytes()).hexdigest()[:16])


SYSTEMS: dict[str, Callable[[int], System]] = {"cg": functools.partial(_iteration, cg.CG),
                                               "gray_scott": functools.partial(_iteration, gray_scott.GRAY_SCOTT),
                                               "heat": _heat}


def label(variant: Variant) -> str:
    """The fields of a variant that are not the default's."""
    defaults = ((variant.tile, VARIANTS[0].tile), (variant.sweep, VARIANTS[0].sweep))
    words = [f"{type(config).__name__[:-6].lower()} {f}={v}" for config, default in defaults
             for f, v, d in zip(config._fields, config, default) if v != d]
    words += [f"{name}={value}" for name, value in variant.settings]
    words += [f"shifted {f}={v}" for f, v in zip(SweepConfig._fields, variant.shifted or ()) if v]
    if variant.pair != VARIANTS[0].pair:
        pair = variant.pair
        flags = [f for f, v in pair._asdict().items() if v is True] if pair else []
        words.append(" ".join([f"pair {pair.rows}x{pair.columns}", *flags,
                               *[f"min_blocks={pair.min_blocks}"] * bool(pair.min_blocks),
                               *[f"combine_ahead={pair.combine_ahead}"] * bool(pair.combine_ahead)])
                     if pair else "pair as tile")
    return ", ".join(words) or "default"


class Compiled:
    """The stencil kernels compiled while it listens (``kernels.cuda.compile_function`` wrapped): name,
    registers, local memory bytes; with ``timed``, each launched between two CUDA events while ``launches`` is
    a list (``--gaps``)."""

    def __init__(self, timed: bool = False) -> None:
        from dask_gpunumeric.kernels import cuda as _cuda

        self.seen: list[str] = []
        self.launches: list[tuple[str, Any, Any, float]] | None = None
        self.geometry: dict[str, tuple] = {}  # per kernel, its last launch's (grid, block)
        compile_function = _cuda.compile_function

        def listened(source: str, name: str, threads: int) -> tuple[Any, int]:
            function, resident = compile_function(source, name, threads)
            if name.startswith(("gnp_pair_", "gnp_tiles_", "gnp_stencil_")):
                regs, local = getattr(function, "num_regs", "?"), getattr(function, "local_size_bytes", "?")
                self.seen.append(f"{name[:13]} {threads}t {regs}r {local}B")
                function = _Timed(function, name, self) if timed else function
            return function, resident

        _cuda.compile_function = listened

    def take(self) -> str:
        seen, self.seen = self.seen, []
        return "; ".join(seen)


class _Timed:
    """A compiled stencil kernel whose launches, while its listener's ``launches`` is a list, are each put
    between two CUDA events recorded on the current stream."""

    def __init__(self, function: Any, name: str, listener: Compiled) -> None:
        self.function, self.name, self.listener = function, name, listener

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.function, attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import cupy

        self.listener.geometry[self.name] = tuple(args[:2])
        if self.listener.launches is None:
            return self.function(*args, **kwargs)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        launched = time.perf_counter()
        start.record()
        result = self.function(*args, **kwargs)
        end.record()
        self.listener.launches.append((self.name, start, end, launched))
        return result


def _value(result: H.Result, system: System, i: int, args: tuple | None = None) -> Any:
    """The value of a timed call (``H.measure`` keeps numbers only): else call ``i`` (or on ``args``) again."""
    if result.value is not None:
        return result.value
    return system.finish(system.call(*(system.arguments(i) if args is None else args)))


def gaps(name: str, system: System, compiled: Compiled, calls: int = 3) -> None:
    """Whether the device idles in a call: per call (its kernels compiled already), its wall time; on the host,
    when the first and the last stencil kernel were launched; on the device, the span from the first stencil
    kernel's start to the last's end against the sum of their durations (the rest: the other launches, e.g.
    CG's one-thread divisions, and the gaps between kernels); the median duration of each kernel, and its launch
    geometry (grid, block)."""
    import cupy

    for i in range(calls):
        compiled.launches = []
        H.sync()
        began = time.perf_counter()
        system.finish(system.call(*system.arguments(10_000 + i)))
        H.sync()
        wall = time.perf_counter() - began
        launches, compiled.launches = compiled.launches, None
        if not launches:
            print(f"gaps {name}: no stencil kernel timed")
            return
        durations: dict[str, list[float]] = {}
        for kernel, start, end, _ in launches:
            durations.setdefault(kernel, []).append(cupy.cuda.get_elapsed_time(start, end))
        span = cupy.cuda.get_elapsed_time(launches[0][1], launches[-1][2])
        busy = sum(sum(d) for d in durations.values())
        each = ", ".join(f"{k[:20]} x{len(d)} {1e3 * statistics.median(d):.1f} us (grid, block {compiled.geometry.get(k)})"
                         for k, d in durations.items())
        print(f"gaps {name}: call {1e3 * wall:.3f} ms, stencil kernels launched from {1e3 * (launches[0][3] - began):.3f} "
              f"to {1e3 * (launches[-1][3] - began):.3f} ms; {len(launches)} of them span {span:.3f} ms on the device, "
              f"busy {busy:.3f} ms, rest {span - busy:.3f} ms ({1e3 * (span - busy) / len(launches):.2f} us a launch); "
              f"{each}", flush=True)


def graph_replay(name: str, system: System, repeat: int) -> None:
    """One call captured into a CUDA graph (stream capture; its 0-d arguments put on the device first: a copy from
    the host cannot be captured) and replayed ``repeat`` times: the median ms of a replay (launch to
    synchronisation) against the median of the call itself, both in this process, and both checksums: what
    launching a call's kernels from a graph would save."""
    import cupy

    import dask_gpunumeric as gnp

    args = tuple(gnp.asarray(cupy.asarray(gnp.fetch(a), dtype=a.dtype)) if isinstance(a, gnp.Array) and a.ndim == 0 else a
                 for a in system.arguments(1))
    call = H.measure(f"{name} call", lambda: system.finish(system.call(*args)), repeat=repeat, warmup=3, verbose=False)
    H.sync()
    stream = cupy.cuda.Stream(non_blocking=True)
    try:
        with stream:
            stream.begin_capture()
            try:
                out = system.call(*args)
            finally:
                graph = stream.end_capture()
        replay = H.measure(f"{name} graph", lambda: graph.launch(stream), repeat=repeat, warmup=3, verbose=False,
                           synchronize=stream.synchronize)
        replayed = system.checksum(system.finish(out))
    except Exception as exc:  # (a host synchronisation or copy inside the call cannot be captured)
        print(f"graph {name}: not captured: {H.describe_error(exc)}"[:300], flush=True)
        return
    ms = [1e3 * statistics.median(r.times_s) if r.times_s else float("nan") for r in (call, replay)]
    print(f"graph {name}: call {ms[0]:.3f} ms, graph replay {ms[1]:.3f} ms ({ms[1] / ms[0]:.3f}x), checksum "
          f"{system.checksum(_value(call, system, 1, args))} / replay {replayed}", flush=True)


def use(variant: Variant) -> None:
    """The stencil kernels' configurations of ``variant`` in place of the library's."""
    _stencil_kernels.TILE_CONFIG, _stencil_kernels.SWEEP_CONFIG = variant.tile, variant.sweep
    _stencil_kernels.SHIFTED_SWEEP_CONFIG, _stencil_kernels.PAIR_TILE_CONFIG = variant.shifted, variant.pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--gaps", action="store_true", help="time each stencil launch of a call between events")
    parser.add_argument("--graph", action="store_true", help="replay a call captured as a CUDA graph")
    parser.add_argument("--n", type=int, default=8192 if H.cupy_gpu() is not None else 128)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default=",".join(SYSTEMS))
    parser.add_argument("--pick", help="with --variants, the numbers of those compared, the first the one compared "
                                       "against (0: the default), e.g. 0,1,6")
    args = parser.parse_args(argv)

    compiled = Compiled(timed=args.gaps)
    variants = VARIANTS if args.variants else VARIANTS[:1]
    if args.variants and args.pick:
        variants = [VARIANTS[int(v)] for v in dict.fromkeys(["0", *args.pick.split(",")])]
    systems = {name: SYSTEMS[name](args.n) for name in args.only.split(",")}
    print(f"stencil probe: {args.n} x {args.n} float32, {H.device_name()}, {len(variants)} variant(s), "
          f"{args.rounds} round(s) of {args.repeat} timed calls", flush=True)
    times: dict[tuple[int, str], list[float]] = {}
    sums: dict[tuple[int, str], str] = {}
    kernels: dict[int, list[str]] = {}
    calls = itertools.count()
    for round_ in range(args.rounds):
        for v, variant in enumerate(variants):
            use(variant)
            with gnp_config.set(**dict(variant.settings)):
                for name, system in systems.items():
                    result = H.measure(f"{name} {label(variant)}",
                                       lambda s=system: s.finish(s.call(*s.arguments(next(calls)))),
                                       repeat=args.repeat, warmup=2, verbose=False)
                    if result.error:
                        sums[v, name] = f"ERROR {result.error}"[:60]
                        continue
                    times.setdefault((v, name), []).extend(result.times_s)
                    sums[v, name] = system.checksum(_value(result, system, next(calls)))
                    print(f"round {round_ + 1}: {label(variant)} {name} {1e3 * statistics.median(result.times_s):.3f} ms",
                          flush=True)  # (as it goes: a run cut short still tells)
            if compiled.seen:
                kernels.setdefault(v, []).append(compiled.take())
    use(VARIANTS[0])
    print(f"{'variant':<40} {'system':<11} {'median ms':>9} {'x default':>9}  {'checksum':<24} kernels compiled")
    for v, variant in enumerate(variants):
        for name in systems:
            ms = 1e3 * statistics.median(times[v, name]) if (v, name) in times else float("nan")
            base = 1e3 * statistics.median(times[0, name]) if (0, name) in times else float("nan")
            same = "" if sums.get((v, name)) == sums.get((0, name)) else " DIFFERS"
            print(f"{label(variant):<40} {name:<11} {ms:9.3f} {ms / base:9.3f}  {sums.get((v, name), '') + same:<24} "
                  f"{'; '.join(kernels.get(v, [])) if name == next(iter(systems)) else ''}", flush=True)
    if (args.gaps or args.graph) and H.cupy_gpu() is None:
        print("--gaps and --graph need a GPU")
        return 0
    for variant in variants if args.gaps else ():  # (each variant's kernels compiled, and timed, already)
        use(variant)
        with gnp_config.set(**dict(variant.settings)):
            for name, system in systems.items():
                gaps(f"{name} [{label(variant)}]" if args.variants else name, system, compiled)
    use(VARIANTS[0])
    for name, system in systems.items() if args.graph else ():
        graph_replay(name, system, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
