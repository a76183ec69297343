"""Benchmark: the optimizer's time per expression node, from 100 to 100,000 nodes.

    python benchmarks/optimizer_scaling.py [--sizes 100,1000,10000,100000] [--repeat 3] [--json PATH]

Three shapes, built as users write them on NumPy blocks and optimized with ``gnp``'s default settings
(``dask_gpunumeric.optimize.optimize``: every pass, kernels built; nothing run): a Runge-Kutta-4 time-stepping
loop over two coupled fields (a deep chain whose steps share subexpressions), a wide sum of independent
terms, and a deep loop with a reduction per step feeding back (groups cut by each reduction). Prints the
median optimizer time per node, as the process's CPU time (the optimizer is single-threaded Python: on an
idle machine that is its wall time; on a shared one, less noisy), the wall time, and the ratio to one walk
over the same DAG measured in the same run (constant when the optimizer is linear, whatever the machine's
load); the target is at most 10 us per node at every size.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from rk4 import rk4 as rk4_steps  # noqa: E402  (this folder's user-code benchmark)


def rk4(gnp, steps: int):
    """``steps`` steps of the user-code benchmark's RK4 (``rk4.py``: two coupled fields)."""
    return rk4_steps(gnp, gnp.linspace(0.5, 1.5, 64, dtype="float32"), gnp.ones(64, dtype="float32"), steps)


def wide(gnp, steps: int):
    """A sum of ``steps`` independent terms ``sin(x * k) * cos(y + k)``, added pairwise."""
    x = gnp.linspace(0.0, 1.0, 64)
    y = gnp.linspace(1.0, 2.0, 64)
    terms = [gnp.sin(x * float(k)) * gnp.cos(y + float(k)) for k in range(steps)]
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) - len(terms) % 2:]
    return (terms[0],)


def normalized(gnp, steps: int):
    """``steps`` updates of a field, each divided by its norm (a reduction feeding back)."""
    u = gnp.linspace(0.0, 1.0, 64, chunks=16)
    for _ in range(steps):
        u = gnp.tanh(u * 1.5 + 0.25) - 0.5 * u
        u = u / gnp.sqrt(gnp.sum(u * u))
    return (u,)


SHAPES: dict[str, Callable] = {"rk4": rk4, "wide": wide, "normalized": normalized}


def _count(gnp, *arrays) -> int:
    from dask_gpunumeric.expr import Bundle
    from dask_gpunumeric.optimize.dag import DAG

    return len(DAG(Bundle(*(a.expr for a in arrays))).order) - 1


def measure(shape: str, n_nodes: int, repeat: int) -> dict:
    import dask_gpunumeric as gnp
    from dask_gpunumeric.expr import Bundle
    from dask_gpunumeric.optimize import explain_groups, optimize

    build = SHAPES[shape]
    one, two = _count(gnp, *build(gnp, 1)), _count(gnp, *build(gnp, 2))
    arrays = build(gnp, max(1, round((n_nodes - one) / (two - one)) + 1))
    root = Bundle(*(a.expr for a in arrays))
    nodes = _count(gnp, *arrays)
    from dask_gpunumeric.optimize.dag import DAG

    cpu, wall, walk = [], [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        optimize(root)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
        start_cpu = time.process_time()
        DAG(root)
        walk.append(time.process_time() - start_cpu)
    seconds = statistics.median(cpu)
    return {"shape": shape, "nodes": nodes, "kernels": len(explain_groups(root)), "cpu_seconds": seconds,
            "wall_seconds": statistics.median(wall), "us_per_node": seconds / nodes * 1e6,
            "walks": seconds / statistics.median(walk)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import dask_gpunumeric as gnp

    sys.setrecursionlimit(10_000)  # the optimizer is iterative; this only guards against a regression
    rows = []
    with gnp.config.set(backend="numpy"):
        print(f"{'shape':<11} {'nodes':>8} {'kernels':>8} {'cpu (s)':>9} {'wall (s)':>9} {'us/node':>8} "
              f"{'DAG walks':>9}")
        for shape in args.shapes.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                row = measure(shape, size, args.repeat)
                rows.append(row)
                print(f"{row['shape']:<11} {row['nodes']:>8} {row['kernels']:>8} {row['cpu_seconds']:>9.3f} "
                      f"{row['wall_seconds']:>9.3f} {row['us_per_node']:>8.2f} {row['walks']:>9.1f}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
