"""Host time of whole calls on the CPU machine, as a GPU would run them: CuPy blocks emulated (``launch_host.py
--cpu``: the emulator's ``cupy`` of NumPy arrays, kernels that do nothing), so that only the Python of a call is
timed.

    PYTHONPATH=. python benchmarks/host_calls.py [--calls 200] [--rounds 15] [--size 1024]

Thread CPU time per call (us), best and median round, of: the Monte-Carlo estimate (``gnp.fetch`` of the example
at 2**30 samples: building it, then fetching it; and both), and Black-Scholes on persisted inputs of ``--size``
options: building the price alone, the suite's plain calls (``dask.persist`` and ``dask.compute`` of the
undecorated function's outputs), the same and ``gnp.fetch`` of outputs built once (``gnp.fetch``: our dispatch
without Dask's collection machinery) and the accelerated call.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
for path in (ROOT / "tests", ROOT):
    if str(path) not in sys.path:
        sys.path.append(str(path))


def calls(size: int) -> dict[str, Callable[[], Any]]:
    """The timed calls, CuPy blocks emulated."""
    import pytest

    import launch_host

    launch_host.emulate()
    from dask_gpunumeric import backend as _backend

    pytest.MonkeyPatch().setattr(_backend, "gpu_available", lambda: True)
    import dask

    import black_scholes
    import monte_carlo

    import dask_gpunumeric as gnp

    gnp.config.set(backend="cupy")
    example = monte_carlo.load_example()
    S, K, T = dask.persist(*(gnp.from_array(h) for h in black_scholes.inputs(size)))
    accelerated = gnp.accelerate(lambda S, K, T: black_scholes.price(gnp, S, K, T))
    built = black_scholes.price(gnp, S, K, T)
    return {"monte-carlo build": lambda: example.monte_carlo(2**30, 10.0),
            "monte-carlo build + fetch": lambda: gnp.fetch(example.monte_carlo(2**30, 10.0)),
            "black-scholes build": lambda: black_scholes.price(gnp, S, K, T),
            "black-scholes plain persist": lambda: dask.persist(*black_scholes.price(gnp, S, K, T)),
            "black-scholes plain compute": lambda: dask.compute(*black_scholes.price(gnp, S, K, T)),
            "black-scholes persist, built once": lambda: dask.persist(*built),
            "black-scholes compute, built once": lambda: dask.compute(*built),
            "black-scholes fetch, built once": lambda: gnp.fetch(built),
            "black-scholes accelerated": lambda: accelerated(S, K, T)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args(argv)
    print("host time per call (CPU, CuPy emulated, no-op kernels), us: best round, median")
    import launch_host

    for name, call in calls(args.size).items():
        per_call = launch_host.timed(call, args.calls, args.rounds, lambda: None)
        print(f"{name:34s} {min(per_call):8.1f} {statistics.median(per_call):8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
