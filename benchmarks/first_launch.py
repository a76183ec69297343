"""From a call to its first kernel launch: the host time before the device starts, of calls whose kernels are
short enough that it shows (issues #21 and #23).

    python benchmarks/first_launch.py [--only monte_carlo,least_squares,black_scholes,cg,gray_scott] [--repeat 30]
                                      [--processes 10] [--cpu] [--profile TOP]

The calls: the Monte-Carlo estimate as the suite makes it (``gnp.fetch(monte_carlo(2**30, 10.0))`` of the example:
its nine nodes built each call), least squares accelerated (``solve(X.T @ X, X.T @ y)``, 2**20 x 64 float32, on
persisted inputs) and plain (``least_squares_plain``: the same function undecorated, then ``gnp.compute``), Black-Scholes accelerated (2**27 options), and CG's and Gray-Scott's accelerated calls as
``benchmarks/_iterative`` makes them (8192^2, 256^2 with ``--cpu``; the checksum not fetched). Every compiled kernel is wrapped so that each
launch notes the time (``Stamped``); each call is timed after a device synchronisation, and the medians of these
are printed, in ms: from the call to its first kernel launch, from the call to its return (the host's part) and
to the device's end (the call as the suite times it: its return, then a synchronisation). ``--processes N``
runs the calls in N fresh processes (``--repeat`` calls each, after 2 warm-ups) and prints each process's
medians and the median of them.

With ``--cpu`` (no GPU needed) the blocks are CuPy blocks on the emulated device of ``tests/_fake_device.py``
whose kernels do nothing (smaller inputs: least squares 4096 x 64, Black-Scholes 1,024 options), and the times
are the thread's CPU time in us: only our Python (and the emulator's) is timed.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import functools
import pathlib
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
for path in (ROOT / "tests", ROOT / "examples", ROOT):
    if str(path) not in sys.path:
        sys.path.append(str(path))

CALLS = ("monte_carlo", "least_squares", "least_squares_plain", "black_scholes", "cg", "gray_scott")


class _Stamps(list):
    """The clock at each kernel launch; the first one stops ``profiler`` (``--profile``: the work before it)."""

    profiler: Any = None

    def append(self, value: float) -> None:
        if not self and self.profiler is not None:
            self.profiler.disable()
        super().append(value)


_stamps = _Stamps()
_clock: Callable[[], float] = time.perf_counter


class Stamped:
    """A compiled kernel (a CuPy ``Function``) whose every launch first notes the clock in ``_stamps``; its
    attributes are the kernel's."""

    def __init__(self, function: Any) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _stamps.append(_clock())
        return self._function(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._function, name, value)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # (isinstance sees the kernel's class: ``kernels.cuda.takes_packed``)
        return type(self._function)


def stamp_launches(cpu: bool) -> None:
    """Every kernel compiled from now on stamped (``Stamped``); with ``cpu``, CuPy blocks on the emulated device,
    kernels that do nothing and the thread's CPU time as the clock."""
    global _clock
    import pytest

    from dask_gpunumeric.kernels import cuda as _cuda

    patch = pytest.MonkeyPatch()
    if cpu:
        import _fake_device

        _fake_device.fake_device(patch)
        # kernels that do nothing write no status: new buffers zeroed, so that a solve's status reads as good
        patch.setattr(sys.modules["cupy"], "empty", _fake_device._device_function(np.zeros), raising=False)
        _clock = time.thread_time
        patch.setattr(_cuda, "compile_module", lambda source: types.SimpleNamespace(
            get_function=lambda name: Stamped(_no_kernel())))

        def compile_now(source: str, name: str, threads: int) -> concurrent.futures.Future:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result(_cuda.compile_function(source, name, threads))
            return future

        patch.setattr(_cuda, "compile_in_background", compile_now)
        return
    compile_module = _cuda.compile_module

    def stamped_module(source: str) -> Any:
        module = compile_module(source)
        return types.SimpleNamespace(get_function=lambda name: Stamped(module.get_function(name)))

    patch.setattr(_cuda, "compile_module", stamped_module)


def _no_kernel() -> Callable[..., None]:
    """A kernel that does nothing, with a compiled function's attributes that the launch code reads."""
    def launch(grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        return None

    launch.local_size_bytes = launch.num_regs = 0  # type: ignore[attr-defined]
    return launch


def calls(cpu: bool) -> dict[str, Callable[[], Any]]:
    """The timed calls by name."""
    import dask

    import _iterative
    import black_scholes
    import cg
    import gray_scott
    import least_squares
    import monte_carlo

    import dask_gpunumeric as gnp

    gnp.config.set(backend="cupy")
    example = monte_carlo.load_example()
    X, y = dask.persist(*(gnp.asarray(h) for h in least_squares.inputs((2**12 if cpu else 2**20, 64))))
    fit = gnp.accelerate(lambda X, y: least_squares.least_squares(gnp, X, y))
    S, K, T = dask.persist(*(gnp.asarray(h) for h in black_scholes.inputs(2**10 if cpu else 2**27)))
    prices = gnp.accelerate(lambda S, K, T: black_scholes.price(gnp, S, K, T))
    side = 256 if cpu else 8192
    iterations = {it.name: (_iterative.gnp_accelerated(it, it.steps), dask.persist(*(gnp.asarray(h) for h in it.inputs(side, side))))
                  for it in (cg.CG, gray_scott.GRAY_SCOTT)}
    return {"monte_carlo": lambda: gnp.fetch(example.monte_carlo(2**30, 10.0)),
            "least_squares": lambda: fit(X, y),
            "least_squares_plain": lambda: gnp.compute(least_squares.least_squares(gnp, X, y)),
            "black_scholes": lambda: prices(S, K, T),
            **{name: functools.partial(_iteration_call, *made) for name, made in iterations.items()}}


def _iteration_call(accelerated: Callable[..., Any], arrays: tuple) -> Any:
    """An iterative benchmark's accelerated call as ``benchmarks/_iterative.gnp_runner`` makes it (its checksum
    left on the device)."""
    import _iterative

    import dask_gpunumeric as gnp

    return accelerated(gnp.asarray(_iterative._salt(1)), *arrays)


def timed(call: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> tuple[float, float, float]:
    """Medians of (call to first launch, call to return, call to the device's end) over ``repeat`` calls."""
    first, back, end = [], [], []
    for _ in range(repeat):
        sync()
        del _stamps[:]
        start = _clock()
        call()
        returned = _clock()
        sync()
        finished = _clock()
        first.append((_stamps[0] if _stamps else float("nan")) - start)
        back.append(returned - start)
        end.append(finished - start)
    return statistics.median(first), statistics.median(back), statistics.median(end)


def profile(call: Callable[[], Any], repeat: int, sync: Callable[[], None], top: int) -> str:
    """The ``top`` functions by cumulative and by own time (cProfile) from the call's start to its first kernel
    launch, over ``repeat`` calls."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    for _ in range(repeat):
        sync()
        del _stamps[:]
        _stamps.profiler = profiler
        profiler.enable()
        call()
        profiler.disable()
        _stamps.profiler = None
        sync()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    for order in ("cumulative", "tottime"):
        stats.sort_stats(order).print_stats(top)
    return out.getvalue()


def run_here(names: list[str], repeat: int, warmup: int, cpu: bool, top: int = 0) -> list[tuple[str, float, float, float]]:
    """Each named call's medians (``timed``), in this process; with ``top``, its profile before the first launch
    printed (``profile``)."""
    stamp_launches(cpu)
    import _harness as H

    from dask_gpunumeric.kernels import cuda as _cuda

    made = calls(cpu)
    sync = (lambda: None) if cpu else H.sync
    rows = []
    for name in names:
        for _ in range(warmup):
            made[name]()
        _cuda.wait_for_background_compiles()  # (kernels specialized to their scalar values)
        for _ in range(warmup):
            made[name]()
        rows.append((name, *timed(made[name], repeat, sync)))
        if top:
            print(f"{name}: before the first launch, {repeat} calls\n{profile(made[name], repeat, sync, top)}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CALLS))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--processes", type=int, default=0, help="run in this many fresh processes")
    parser.add_argument("--cpu", action="store_true", help="the emulated device, kernels that do nothing")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="print the TOP functions by cumulative time before each call's first launch")
    parser.add_argument("--scale", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.only.split(",")
    unit, scale = ("us", 1e6) if args.cpu else ("ms", 1e3)
    header = f"{'call':20s} {'to 1st launch':>14s} {'to return':>10s} {'to end':>10s}  ({unit}, medians)"
    if not args.processes:
        print(header)
        for name, *times in run_here(names, args.repeat, args.warmup, args.cpu, args.profile):
            print(f"{name:20s} " + " ".join(f"{t * scale:{w}.3f}" for t, w in zip(times, (14, 10, 10))), flush=True)
        return 0
    per_call: dict[str, list[list[float]]] = {name: [] for name in names}
    command = [sys.executable, __file__, "--only", args.only, "--repeat", str(args.repeat),
               "--warmup", str(args.warmup), *(["--cpu"] if args.cpu else [])]
    for k in range(args.processes):
        lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[1:]
        for line in lines:
            name, *times = line.split()
            per_call[name].append([float(t) for t in times])
        print(f"process {k + 1:2d}: " + "; ".join(line.strip() for line in lines), flush=True)
    print(header)
    for name, rows in per_call.items():
        print(f"{name:20s} " + " ".join(f"{statistics.median(col):{w}.3f}" for col, w in zip(zip(*rows), (14, 10, 10)))
              + f"   median of {len(rows)} processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
