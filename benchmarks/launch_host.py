"""Host time of one launch of a fused kernel (``kernels.fused.run_cuda`` on one block, its plan and kernel made by
earlier calls), for the Monte-Carlo, Black-Scholes and softmax (a row program) programs.

    PYTHONPATH=. python benchmarks/launch_host.py [--size 1048576] [--calls 1000] [--rounds 15] [--cpu]

On a GPU: CuPy blocks and the programs' kernels, the device synchronised between rounds (so that the launch
queue never fills); thread time per call, best and median round. With ``--cpu`` (no GPU needed): the CUDA
emulator's ``cupy`` of NumPy arrays and kernels that do nothing, so that only the launch path's Python is timed;
and the attributes of the input arrays that one launch reads, counted on a NumPy subclass.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
for path in (ROOT / "tests", ROOT):
    if str(path) not in sys.path:
        sys.path.append(str(path))

#: The attributes of CuPy arrays a launch may read (each a property computed on every read).
ATTRIBUTES = ("dtype", "shape", "strides", "size", "ndim", "itemsize", "flags")


class Counted(np.ndarray):
    """A NumPy array counting reads of ``ATTRIBUTES``."""

    reads: collections.Counter = collections.Counter()

    def __getattribute__(self, name: str) -> Any:
        if name in ATTRIBUTES:
            Counted.reads[name] += 1
        return super().__getattribute__(name)


def emulate() -> None:
    """The emulator's NumPy-backed ``cupy``, kernels that do nothing (of a full wave of 1,056 blocks), kernels
    specialized to scalar values compiled at once."""
    import concurrent.futures

    import pytest
    from _cuda_emulator import emulated_cupy

    from dask_gpunumeric.kernels import cuda as _cuda

    def compiled(*args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result((lambda grid, block, args: None, 1056))
        return future

    patch = pytest.MonkeyPatch()
    emulated_cupy(patch)
    patch.setattr(_cuda, "compile_module", lambda source: types.SimpleNamespace(
        get_function=lambda name: lambda grid, block, args: None))
    patch.setattr(_cuda, "compile_in_background", compiled)
    patch.setattr(_cuda, "wave_blocks", lambda function, threads: 1056)


def launches(size: int, device: Callable[[np.ndarray], Any]) -> dict[str, Callable[[], Any]]:
    """A ``run_cuda`` call of each workload's one fused program on one block of ``size`` elements, its inputs
    moved by ``device``."""
    import black_scholes
    import monte_carlo
    import softmax

    import dask_gpunumeric as gnp
    from dask_gpunumeric.kernels import fused as _fused
    from dask_gpunumeric.optimize import explain_groups

    def call(x: gnp.Array, inputs: list) -> Callable[[], Any]:
        (group,) = explain_groups(x.expr)
        args = (group.operand("program"), group.operand("scalars"), *group.geometry((0,) * group.ndim),
                [device(a) for a in inputs])
        return lambda: _fused.run_cuda(*args)

    hosts = black_scholes.inputs(size)
    prices = black_scholes.price(gnp, *(gnp.asarray(h, chunks=size) for h in hosts))[0]
    (rows,) = softmax.inputs((size // 1024, 1024))
    return {"monte_carlo": call(monte_carlo.load_example().monte_carlo(size, 10.0), []),
            "black_scholes": call(prices, list(hosts)),
            "softmax": call(softmax.softmax_logsumexp(gnp, gnp.asarray(rows, chunks=rows.shape))[0], [rows])}


def timed(call: Callable[[], Any], calls: int, rounds: int, synchronize: Callable[[], None]) -> list[float]:
    """Thread time per call of each round of ``calls`` calls, in us (after ``calls`` calls, and the kernels
    specialized to their scalar values compiled)."""
    from dask_gpunumeric.kernels import cuda as _cuda

    for _ in range(calls):
        call()
    _cuda.wait_for_background_compiles()
    for _ in range(calls):
        call()
    synchronize()
    per_call = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            call()
        per_call.append((time.thread_time() - start) / calls * 1e6)
        synchronize()
    return per_call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2**20)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cpu", action="store_true", help="NumPy arrays and kernels that do nothing")
    args = parser.parse_args(argv)
    if args.cpu:
        emulate()
        device, synchronize = np.asarray, (lambda: None)
    else:
        import cupy

        device, synchronize = cupy.asarray, cupy.cuda.Device().synchronize
    print(f"run_cuda host time per call ({'CPU, no-op kernels' if args.cpu else 'GPU'}), us: best round, median")
    for name, call in launches(args.size, device).items():
        per_call = timed(call, args.calls, args.rounds, synchronize)
        print(f"{name:14s} {min(per_call):8.2f} {statistics.median(per_call):8.2f}", flush=True)
    if args.cpu:
        for name, call in launches(args.size, lambda a: np.asarray(a).view(Counted)).items():
            call()
            Counted.reads.clear()
            call()
            print(f"{name:14s} input attribute reads per launch: {sum(Counted.reads.values())} "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(Counted.reads.items())) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
