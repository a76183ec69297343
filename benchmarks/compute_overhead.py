"""Benchmark: the fixed cost of ``dask.compute`` and ``dask.persist`` on gnp Arrays, against ``compute()``,
``gnp.compute``, ``gnp.fetch``, ``persist()`` and ``gnp.persist`` of the same outputs (side by side, per call) and
against Dask's own floor (the same calls on trivial expression-backed collections: a one-key ``Expr`` each, a
scheduler that returns at once, so that all that is left is ``dask.compute``'s own work).

    python benchmarks/compute_overhead.py [--rounds 5] [--batch 100] [--cold 30] [--json PATH]

The outputs are softmax's two (a 64x32 float32 block and its row logsumexp), built once on a persisted input:
every call is a graph-cache hit that runs four small tasks. Each number is the CPU time of this thread per call
(``time.thread_time``), the minimum over ``rounds`` batches of ``batch`` calls, the cases taking turns batch by
batch (on a machine shared with other work the minimum is what the code costs). ``steps`` are the steps of
``dask.compute`` (``dask/base.py``) timed one at a time, on our outputs and on the trivial collections. ``cold``:
each call alone after a NumPy softmax of 1024x1024 (not timed), which evicts the caches as the suite's
interleaved rounds do; the median over ``--cold`` calls of each case.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import _harness as H
import softmax


def trivial_collections() -> tuple[Any, Any]:
    """Two collections backed by a one-key expression each, computed by a scheduler that returns at once."""
    from dask._expr import Expr
    from dask.base import DaskMethodsMixin

    class OneKey(Expr):
        _parameters = ["label"]

        def __dask_keys__(self) -> list:
            return [(self.operand("label"), 0)]

        def _layer(self) -> dict:
            return {}

    def returns_at_once(dsk: Any, keys: list, **kwargs: Any) -> list:
        return [None] * len(keys)

    class Trivial(DaskMethodsMixin):
        __dask_scheduler__ = staticmethod(returns_at_once)

        def __init__(self, label: str) -> None:
            self.expr = OneKey(label)

        def __dask_graph__(self) -> dict:
            return {}

        def __dask_keys__(self) -> list:
            return self.expr.__dask_keys__()

        def __dask_tokenize__(self) -> str:
            return self.expr._name

        def __dask_postcompute__(self) -> tuple:
            return (lambda results: results[0]), ()

        def __dask_postpersist__(self) -> tuple:
            raise NotImplementedError

    return Trivial("c"), Trivial("d")


def steps(collections: tuple) -> list[tuple[str, Callable[[], Any]]]:
    """``dask.compute(*collections)``'s steps (Dask 2026.7.1 and 2026.8.0 alike), each a call that repeats it on
    the results of the steps before it; the expression steps are timed cumulatively (each needs a new input)."""
    import dask.base
    from dask._expr import FinalizeCompute
    from dask.core import flatten

    found, repack = dask.base.unpack_collections(*collections)
    schedule = dask.base.get_scheduler(collections=found)
    expr = FinalizeCompute(dask.base.collections_to_expr(found, True)).optimize()
    keys = list(flatten(expr.__dask_keys__()))
    results = schedule(expr, keys)
    return [("unpack_collections", lambda: dask.base.unpack_collections(*collections)),
            ("get_scheduler", lambda: dask.base.get_scheduler(collections=found)),
            ("collections_to_expr", lambda: dask.base.collections_to_expr(found, True)),
            ("+ FinalizeCompute", lambda: FinalizeCompute(dask.base.collections_to_expr(found, True))),
            ("+ optimize()", lambda: FinalizeCompute(dask.base.collections_to_expr(found, True)).optimize()),
            ("keys", lambda: list(flatten(expr.__dask_keys__()))),
            ("the scheduler's call (optimized once)", lambda: schedule(expr, keys)),
            ("repack", lambda: repack(results))]


def per_call(cases: list[tuple[str, Callable[[], Any]]], rounds: int, batch: int) -> dict[str, float]:
    """µs of this thread's CPU time per call of each case: the minimum over ``rounds`` batches, cases in turn."""
    best = {name: float("inf") for name, _ in cases}
    for _ in range(rounds):
        for name, call in cases:
            call()
            start = time.thread_time()
            for _ in range(batch):
                call()
            best[name] = min(best[name], (time.thread_time() - start) / batch * 1e6)
    return best


def cold_call(cases: list[tuple[str, Callable[[], Any]]], calls: int) -> dict[str, float]:
    """µs of this thread's CPU time per call of each case, each call after a NumPy softmax of 1024x1024: the median
    over ``calls`` calls, cases in turn."""
    host = softmax.inputs((1024, 1024))[0]
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(calls):
        for name, call in cases:
            softmax.softmax_logsumexp(np, host)
            start = time.thread_time()
            call()
            times[name].append((time.thread_time() - start) * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--cold", type=int, default=30)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask

    import dask_gpunumeric as gnp

    x = gnp.asarray(softmax.inputs((64, 32))[0]).persist()
    a, b = softmax.softmax_logsumexp(gnp, x)
    expected = gnp.fetch((a, b))
    for got in (dask.compute(a, b), (dask.compute(a)[0], b.compute()), gnp.compute(a, b),
                gnp.compute(*gnp.persist(a, b)), dask.compute(*dask.persist(a, b))):
        assert all(np.array_equal(H.to_host(g), e) for g, e in zip(got, expected)), "differs from gnp.fetch"
    c, d = trivial_collections()
    cases = [("a.compute()", a.compute), ("gnp.compute(a)", lambda: gnp.compute(a)),
             ("dask.compute(a)", lambda: dask.compute(a)), ("gnp.compute(a, b)", lambda: gnp.compute(a, b)),
             ("dask.compute(a, b)", lambda: dask.compute(a, b)), ("a.persist()", a.persist),
             ("gnp.persist(a, b)", lambda: gnp.persist(a, b)), ("dask.persist(a, b)", lambda: dask.persist(a, b)),
             ("gnp.fetch(a)", lambda: gnp.fetch(a)), ("gnp.fetch((a, b))", lambda: gnp.fetch((a, b))),
             ("floor: dask.compute(c)", lambda: dask.compute(c)), ("floor: dask.compute(c, d)", lambda: dask.compute(c, d))]
    calls, cold = per_call(cases, args.rounds, args.batch), cold_call(cases, args.cold)
    ours, floor = per_call(steps((a, b)), args.rounds, args.batch), per_call(steps((c, d)), args.rounds, args.batch)
    print(f"dask.compute's and dask.persist's fixed cost, softmax 64x32 outputs built once, {H.device_name()} "
          "(µs of CPU time per call)")
    print(H.format_table(["call", "us (min)", "cold us (median)"],
                         [[name, f"{t:.1f}", f"{cold[name]:.1f}"] for name, t in calls.items()]))
    print()
    print(H.format_table(["step of dask.compute(a, b)", "gnp Arrays", "trivial collections"],
                         [[name, f"{ours[name]:.1f}", f"{floor[name]:.1f}"] for name in ours]))
    if args.json:
        H.write_json(args.json, {"benchmark": "compute_overhead", "machine": H.device_name(), "calls_us": calls,
                                 "cold_us": cold, "steps_us": {"gnp": ours, "trivial": floor}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
