"""The moonshot of issue #19, measured: accelerated calls that the workers run directly (``runtime/direct.py``), the
scheduler out of the call's path, against Dask's round trip (``rt``) and ``client.run`` on the same cluster.

    python benchmarks/worker_calls.py [--n 4096] [--calls 31] [--workers 2]

On ``gnp.cluster(n_workers=K)`` (with a GPU, CuPy blocks on it), accelerated functions of a persisted argument of
``n`` elements and a 0-d rate, a new rate each call: two elementwise outputs of an argument of one block per
worker, persisted (a request to each worker); a sum over an argument of one block, fetched. Printed: medians (ms, the kinds of call
taken in turn) of ``rt`` (``submit(int, 1).result()``), ``client.run(int)``, the call persisted and fetched through
the scheduler (``gpunumeric.cluster.direct-calls`` off) and run directly; what the scheduler knows of a direct
call's output (who has it, its bytes, its lineage); its values against NumPy, and again after its worker is killed
(recomputed from lineage).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

OFF = {"gpunumeric.cluster.direct-calls": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="elements of the argument")
    parser.add_argument("--calls", type=int, default=31)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    import dask
    import distributed

    import dask_gpunumeric as gnp
    from dask_gpunumeric.backend import to_numpy

    f = gnp.accelerate(lambda x, r: (gnp.exp(-x * x) * r + 1, gnp.sqrt(x) * r))  # (ranks that need no peer)
    g = gnp.accelerate(lambda x, r: (gnp.exp(-x * x) * r + 1, gnp.sum(x * r)))
    host = np.random.default_rng(0).random(args.n)
    with gnp.cluster(n_workers=args.workers, dashboard_address=":0") as client:
        client.wait_for_workers(args.workers)
        x = gnp.asarray(host, chunks=args.n // args.workers).persist()  # a block per worker
        one = gnp.asarray(host, chunks=args.n).persist()  # one block: a call of one rank, with a sum
        distributed.wait([x, one])
        client.run(lambda dask_worker: None)
        rates = iter(np.linspace(1.0, 2.0, 10**6))  # a new rate each call: no call finds its output made

        def persisted() -> Any:
            out = dask.persist(f(x, gnp.asarray(next(rates)))[0])
            distributed.wait(out)
            return out

        def fetched() -> float:
            return gnp.fetch(g(one, gnp.asarray(next(rates)))[1])

        def off(call: Any) -> Any:
            def run() -> Any:
                with dask.config.set(OFF):
                    return call()
            return run

        calls = {"rt": lambda: client.submit(int, 1, pure=False).result(), "client.run": lambda: client.run(int),
                 "persisted through the scheduler": off(persisted), "persisted directly": persisted,
                 "fetched through the scheduler": off(fetched), "fetched directly": fetched}
        times: dict[str, list[float]] = {name: [] for name in calls}
        for i in range(3 + args.calls):  # the kinds in turn, so that the machine's load drifts under all alike
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                if i >= 3:
                    times[name].append(1e3 * (time.perf_counter() - start))
        rows = {name: statistics.median(t) for name, t in times.items()}
        (made,) = dask.persist(f(x, gnp.asarray(2.0))[0])
        value = gnp.fetch(made)
        future = distributed.futures_of(made)[-1]
        known = client.run_on_scheduler(lambda dask_scheduler, k=future.key: (
            [ws.address for ws in dask_scheduler.tasks[k].who_has], dask_scheduler.tasks[k].nbytes,
            dask_scheduler.tasks[k].run_spec is not None, [d.key for d in dask_scheduler.tasks[k].dependencies]))
        # its worker dies: the scheduler recomputes the output elsewhere from its lineage (the input, then its task)
        if args.workers > 1:
            client.run(lambda: __import__("os")._exit(1), workers=known[0], on_error="ignore")
        recovered = to_numpy(made.compute())
    print(f"{args.workers} worker(s) (gnp.cluster), {args.n} float64 elements, medians of {args.calls} calls:")
    for name, ms in rows.items():
        print(f"  {name:35s} {ms:8.2f} ms  {ms / rows['rt']:.2f} rt  {ms / rows['client.run']:.2f} client.run")
    print(f"  the scheduler on a direct call's output block: who has {known[0]}, {known[1]} bytes, run_spec set "
          f"{known[2]}, depends on {known[3]}")
    ok = np.allclose(value, np.exp(-host * host) * 2 + 1)
    again = np.array_equal(recovered, value)
    print(f"  values against NumPy: {'ok' if ok else 'WRONG'}; "
          f"{'recomputed after its worker died' if args.workers > 1 else 'computed again'}: "
          f"{'same' if again else 'DIFFERENT'}")
    return 0 if ok and again else 1


if __name__ == "__main__":
    sys.exit(main())
