"""Benchmark: the host cost of the plain path (no ``accelerate``) on small work, where it is all there is.

    python benchmarks/plain_path.py [--repeat 200] [--json PATH]

- ``chain``: a 40-operation elementwise chain on 4 blocks of 1,024 float64, built and computed with
  ``compute()`` each call (target on the CPU machine: <= 1.5 ms), against dask.array and NumPy;
- ``build``: the same chain built only (per operation: <= 10 us);
- ``prebuilt``: the chain built once, computed each call (a graph-cache hit: dispatch <= 100 us plus the
  work of 40 operations on 4 blocks);
- ``loop``: ``STEPS`` Jacobi sweeps of a 64^2 grid as users write them (copy, then an interior update), each
  step persisted: every step is a new tree on new inputs, whose plan is the first step's (reused by its
  structure), against NumPy;
- ``fetch two``: two outputs of one prebuilt tree on a persisted 64x32 block, fetched together with
  ``gnp.fetch((a, b))`` (straight from their jointly compiled graph), against ``dask.compute(a, b)``;
- ``matrix build``: ``(w.T @ w).sum(axis=1, keepdims=True).reshape(-1)`` built only (transpose, matmul,
  reduction and reshape nodes);
- ``slice``: the first 10 elements of a 1,024-block array fetched (only the first block is built and run:
  <= 30 ms), against dask.array;
- ``workloads``: the suite's workloads at tiny sizes on one block (Black-Scholes, heat, softmax, advection,
  least squares, RK4, the erf Black-Scholes, the setitem-Laplacian CG of 30 iterations), each called as the
  suite calls it plain (``gnp.persist``/``gnp.compute`` of the undecorated function's outputs) and under
  ``accelerate``: what is left is host time (target: plain <= 1.3x accelerated). ``--only workloads`` runs these
  alone;
- ``breakdown`` (``--only breakdown``): where each workload's plain call goes: building its expressions alone,
  the suite's call (``gnp.persist``/``gnp.compute``) on outputs built once (a graph-cache hit: our dispatch and
  the run, without Dask's collection machinery, which ``compute_overhead.py`` shows), and ``gnp.fetch`` of those
  outputs (the same, copied to the host); the plain call is about build + call;
- ``operations`` (``--only operations``): the host CPU time to build one operation as users write it
  (``a * 1.5``, ``a + b``, ``gnp.exp(a)``, ``gnp.where(c, a, b)``, a slice, a roll, row sums and maxima
  with ``keepdims``, ...; target: <= 2 us each on the CPU
  machine), the other operations users write on whole arrays built again on the same operands (``x.T @ x``,
  ``solve``, ``reshape``, ``concatenate``, ``einsum``, ``pad``, ...: their nodes made from recipes, ``api.recipes``),
  the minimum over batches of 2,000 of ``time.thread_time`` (on a shared machine the minimum is
  what the code costs), and of one least-squares fit, one RK4 step and one Black-Scholes price built alone.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

OPS = 40
STEPS = 10
BENCHMARKS = pathlib.Path(__file__).resolve().parent


def chain(x):
    """``OPS`` elementwise operations, alternately a multiply and an add."""
    for _ in range(OPS // 2):
        x = x * 1.0001
        x = x + 0.5
    return x


def sweep(u):
    """One Jacobi sweep, written as users write it."""
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


class Workload(NamedTuple):
    """A suite workload at a tiny size, on one block: its plain call is ``call(build())``."""

    name: str
    build: Callable[[], tuple]  # the undecorated function: its outputs' expressions, built
    call: Callable[[tuple], Any]  # what the suite does with them (``gnp.persist``/``gnp.compute``)
    accelerated: Callable[[], Any]  # the same function under ``accelerate``


def workloads(gnp) -> list[Workload]:
    """The suite's workloads at a tiny size, on one block, each called as the suite calls it plain and under
    ``accelerate``."""
    import dask

    import advection
    import black_scholes
    import black_scholes_erf
    import cg_setitem
    import heat
    import least_squares
    import rk4
    import softmax

    out = []
    host = black_scholes.inputs(1024)
    S, K, T = dask.persist(*(gnp.from_array(h) for h in host))
    priced = gnp.accelerate(lambda S, K, T: black_scholes.price(gnp, S, K, T))
    out.append(Workload("black-scholes 2^10", lambda: black_scholes.price(gnp, S, K, T),
                        lambda outputs: gnp.persist(*outputs), lambda: priced(S, K, T)))
    (u,) = dask.persist(gnp.random.default_rng(0).random((64, 64), dtype=np.float32))
    relaxed = gnp.accelerate(heat.relax)
    out.append(Workload("heat 64^2 x20", lambda: (heat.relax(u, sweeps=heat.SWEEPS),),
                        lambda outputs: gnp.persist(*outputs)[0], lambda: relaxed(u, heat.WEIGHT, heat.SWEEPS)))
    for w, shape in ((softmax.SOFTMAX, (64, 32)), (advection.ADVECTION, (256,)),
                     (least_squares.LEAST_SQUARES, (256, 8)), (rk4.RK4, (256,)),
                     (black_scholes_erf.BLACK_SCHOLES_ERF, (1024,)), (cg_setitem.CG_SETITEM, (32, 32))):
        options = {} if w.steps is None else {"steps": w.steps}
        arrays = dask.persist(*(gnp.asarray(h) for h in w.inputs(shape)))
        accelerated = gnp.accelerate(lambda *a, w=w, options=options: w.compute(gnp, *a, **options))
        out.append(Workload(f"{w.name} {'x'.join(map(str, shape))}",
                            lambda w=w, arrays=arrays, options=options: _tuple(w.compute(gnp, *arrays, **options)),
                            lambda outputs: gnp.compute(*outputs),
                            lambda accelerated=accelerated, arrays=arrays: accelerated(*arrays)))
    return out


def breakdown_runs(gnp, w: Workload) -> list[tuple[str, Callable[[], Any], None]]:
    """The parts of one workload's plain call (see ``breakdown`` in the module docstring), beside the whole call
    and the accelerated one."""
    built = w.build()
    return [(f"{w.name}: plain call", lambda: w.call(w.build()), None),
            (f"{w.name}: build alone", w.build, None),
            (f"{w.name}: call on outputs built once", lambda: w.call(built), None),
            (f"{w.name}: gnp.fetch of outputs built once", lambda: gnp.fetch(built), None),
            (f"{w.name}: accelerated", w.accelerated, None)]


def operation_times(gnp, batches: int = 15, size: int = 2000) -> list[tuple[str, int, float]]:
    """(what is built, its operations, µs of CPU time per build): the minimum over ``batches`` batches of ``size``
    builds (of ``size // 50`` for the whole RK4 step and Black-Scholes price)."""
    import black_scholes
    import least_squares
    import rk4

    a, b = gnp.asarray(np.linspace(0.5, 1.5, 256, dtype=np.float32)), gnp.asarray(np.ones(256, np.float32))
    q, c = a * 2.0, a > b
    r = q + b  # (q, r: results of operations, as most operands are; a, b: inputs)
    x = gnp.asarray(np.linspace(0.5, 1.5, 1024, dtype=np.float32).reshape(32, 32))
    q64, half, root = q.astype(np.float64), np.float32(1.5), np.sqrt(2.0)  # (NumPy numbers: not weak)
    u, v = (gnp.asarray(h) for h in rk4.inputs((256,)))
    S, K, T = (gnp.asarray(h) for h in black_scholes.inputs(256))
    cases = [("a * 1.5", 1, lambda: a * 1.5), ("1.5 * a", 1, lambda: 1.5 * a), ("a + b", 1, lambda: a + b),
             ("q * 1.5", 1, lambda: q * 1.5), ("q + r", 1, lambda: q + r), ("a / 3.0", 1, lambda: a / 3.0),
             ("q * np.float32(1.5)", 1, lambda: q * half), ("q64 * np.sqrt(2.0)", 1, lambda: q64 * root),
             ("-a", 1, lambda: -a), ("gnp.exp(a)", 1, lambda: gnp.exp(a)),
             ("gnp.where(c, a, b)", 1, lambda: gnp.where(c, a, b)),
             ("q[1:-1]", 1, lambda: q[1:-1]), ("gnp.roll(q, 1)", 1, lambda: gnp.roll(q, 1)),
             ("gnp.sum(x, axis=1, keepdims=True)", 1, lambda: gnp.sum(x, axis=1, keepdims=True)),
             ("gnp.max(x, axis=1, keepdims=True)", 1, lambda: gnp.max(x, axis=1, keepdims=True)),
             ("x.T @ x", 2, lambda: x.T @ x), ("gnp.linalg.solve(x, x[0])", 2, lambda: gnp.linalg.solve(x, x[0])),
             ("x.reshape(-1)", 1, lambda: x.reshape(-1)), ("q[:, None]", 1, lambda: q[:, None]),
             ("gnp.concatenate([x, x])", 1, lambda: gnp.concatenate([x, x])),
             ("gnp.stack([a, b])", 1, lambda: gnp.stack([a, b])), ("gnp.dot(x, x)", 1, lambda: gnp.dot(x, x)),
             ("gnp.einsum('ij,jk->ik', x, x)", 1, lambda: gnp.einsum("ij,jk->ik", x, x)),
             ("gnp.linalg.inv(x)", 1, lambda: gnp.linalg.inv(x)), ("gnp.pad(x, 1)", 1, lambda: gnp.pad(x, 1)),
             ("least squares", 5, lambda: least_squares.least_squares(gnp, x, x[:, 0])),
             ("RK4 step", 78, lambda: rk4.rk4(gnp, u, v, steps=1)),
             ("Black-Scholes price", 104, lambda: black_scholes.price(gnp, S, K, T))]
    out = []
    for name, operations, build in cases:
        n = size if operations == 1 else max(size // 50, 1)
        best = float("inf")
        for _ in range(batches):
            start = time.thread_time()
            for _ in range(n):
                build()
            best = min(best, (time.thread_time() - start) / n)
        out.append((name, operations, best * 1e6))
    return out


def _tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--only", choices=["all", "chain", "workloads", "breakdown", "operations"], default="all")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))

    import dask
    import dask.array as da

    import dask_gpunumeric as gnp

    if args.only == "operations":
        times = operation_times(gnp)
        print(f"plain path: CPU time to build operations, {H.device_name()}")
        print(H.format_table(["built", "operations", "us (min)", "us per operation"],
                             [[name, str(n), f"{t:.2f}", f"{t / n:.2f}"] for name, n, t in times]))
        if args.json:
            H.write_json(args.json, {"benchmark": "plain_path operations", "machine": H.device_name(),
                                     "results": [{"name": name, "operations": n, "us": t} for name, n, t in times]})
        return 0
    host = np.random.default_rng(0).random(4096)
    x, d = gnp.asarray(host, chunks=1024), da.from_array(host, chunks=1024)
    exact = chain(host)
    big_n, big_chunk = 1024 * 2**14, 2**14

    def check_chain(value):
        ok = np.allclose(H.to_host(value), exact, rtol=1e-12)
        return ok, "matches NumPy" if ok else "differs from NumPy"

    built = chain(x)
    grid = np.random.default_rng(1).random((64, 64))
    start = gnp.asarray(grid).persist()
    exact_loop = grid
    for _ in range(STEPS):
        exact_loop = sweep(exact_loop)

    def loop(xp, u):
        for _ in range(STEPS):
            u = sweep(u)
            u = u.persist() if xp is gnp else u
        return u

    def check_loop(value):
        ok = np.allclose(H.to_host(value), exact_loop, rtol=1e-12)
        return ok, "matches NumPy" if ok else "differs from NumPy"

    w = gnp.asarray(np.random.default_rng(2).random((64, 32))).persist()
    pair = (w * 2.0 + 1.0, gnp.sum(w - 3.0, axis=1))
    exact_pair = [pair[0].compute(), pair[1].compute()]

    def check_pair(value):
        ok = all(np.array_equal(H.to_host(v), e) for v, e in zip(value, exact_pair))
        return ok, "matches compute()" if ok else "differs from compute()"

    runs = [("gnp chain compute()", lambda: chain(x).compute(), check_chain),
            ("gnp chain compute() prebuilt", lambda: built.compute(), check_chain),
            ("dask.array chain compute()", lambda: chain(d).compute(), check_chain),
            ("numpy chain", lambda: chain(host), check_chain),
            ("gnp chain build", lambda: chain(x), None),
            ("gnp fetch two outputs", lambda: gnp.fetch(pair), check_pair),
            ("dask.compute two outputs", lambda: dask.compute(*pair), check_pair),
            ("gnp matrix build", lambda: (w.T @ w).sum(axis=1, keepdims=True).reshape(-1), None),
            ("gnp slice of 1,024 blocks", lambda: gnp.fetch(gnp.ones(big_n, chunks=big_chunk)[:10]), None),
            ("dask.array slice of 1,024 blocks", lambda: da.ones(big_n, chunks=big_chunk)[:10].compute(), None),
            (f"gnp {STEPS}-step loop, persist each step", lambda: loop(gnp, start), check_loop),
            (f"numpy {STEPS}-step loop", lambda: loop(np, grid), check_loop)]
    if args.only in ("workloads", "breakdown"):
        runs = []
    if args.only == "breakdown":
        runs = [run for workload in workloads(gnp) for run in breakdown_runs(gnp, workload)]
    elif args.only != "chain":  # (not ``w``: the matrix build's lambda reads that name)
        for workload in workloads(gnp):
            runs += [(f"gnp plain {workload.name}", lambda wl=workload: wl.call(wl.build()), None),
                     (f"gnp accelerated {workload.name}", workload.accelerated, None)]
    print(f"plain path: {OPS}-op chain on 4 x 1,024 float64, gnp backend {gnp.config.backend()}, {H.device_name()}")
    results = [H.measure(name, fn, repeat=args.repeat, warmup=args.warmup, check=check)
               for name, fn, check in runs]
    report = H.make_report("plain_path", results, baseline="gnp chain compute()", params={"ops": OPS, "steps": STEPS},
                           value_name="value")
    return H.finish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
