"""The moonshot of issue #19, measured: an accelerated call run by a worker handler, the scheduler out of the
call's path, against Dask's round trip (``rt``) and ``client.run`` on the same cluster.

    python benchmarks/worker_calls.py [--n 4096] [--calls 31]

A prototype, not the package's path. A ``WorkerPlugin`` adds a handler to every worker; the client traces an
accelerated function (its ``Plan``) and hands it to the workers once. A call is then one request from the
client to the worker holding the argument's block: the handler runs the plan on the blocks it holds
(``Plan.run_local``), keeps the output under a new key and answers; before answering it tells the scheduler
(in the worker's stream, no reply waited for) that the worker holds that key, with its size and the task that
would recompute it (the scheduler's task gets that run_spec and its dependency: lineage), and that the client
wants it. The client then holds a Future of the output, as after ``persist``, and fetches it as any other.

On a ``LocalCluster`` of two worker processes (with a GPU, CuPy blocks on it), the argument one block.
Printed: medians (ms, the kinds of call taken in turn) of ``rt`` (``submit(int, 1).result()``),
``client.run(int)``, the same accelerated call through the scheduler (``persist`` and wait) and through the
handler; what the scheduler knows of the handler's output (who has it, its bytes, its run_spec, its
dependency); its values against NumPy, and again after its worker is killed (recomputed from lineage).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from typing import Any

import numpy as np

OP = "gnp-worker-made"


def _plugins() -> tuple[Any, Any]:
    from dask._task_spec import Task, TaskRef
    from distributed import WorkerPlugin
    from distributed.diagnostics.plugin import SchedulerPlugin

    def _recompute(plan: Any, *blocks: Any) -> Any:
        (out,) = plan.run_local(False, dict(zip((p.key((0,) * p.ndim) for p in plan.inputs), blocks))).values()
        return out

    class Executor(WorkerPlugin):
        """On a worker: ``gnp_call`` runs a plan handed over before on blocks held here."""

        name = "gnp-executor"

        def setup(self, worker: Any) -> None:
            self.worker, self.plans = worker, {}
            worker.handlers["gnp_plan"] = self.install
            worker.handlers["gnp_call"] = self.call

        def install(self, plan: Any) -> None:
            self.plans[plan.token] = plan

        def call(self, token: str, inputs: list, rate: float, output: str, client: str) -> int:
            plan = self.plans[token]
            blocks = [self.worker.data[k] for k in inputs]
            value = _recompute(plan, *blocks, np.asarray(rate))
            key = (output, *(0,) * value.ndim)
            task = Task(key, _recompute, plan, *(TaskRef(k) for k in inputs), np.asarray(rate))
            self.worker.batched_stream.send({"op": OP, "key": key, "nbytes": int(value.nbytes), "task": task,
                                             "inputs": inputs, "client": client})
            self.worker.update_data({key: value}, stimulus_id=f"gnp-call-{time.time()}")
            return int(value.nbytes)

    class Registrar(SchedulerPlugin):
        """On the scheduler: a key made by a worker handler, known as if a task of its own had made it."""

        name = "gnp-registrar"

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler
            scheduler.stream_handlers[OP] = self.made

        def made(self, key: Any, nbytes: int, task: Any, inputs: list, client: str, worker: str, **_: Any) -> None:
            s = self.scheduler
            s.update_data(who_has={key: [worker]}, nbytes={key: nbytes}, client=client)
            ts = s.tasks[key]
            ts.run_spec = task
            ts.priority = (0, s.generation, 0)  # (a task made by update_graph has one; recomputing sorts by it)
            for k in inputs:
                ts.add_dependency(s.tasks[k])

    return Executor, Registrar


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="elements of the argument (one block)")
    parser.add_argument("--calls", type=int, default=31)
    args = parser.parse_args(argv)

    import dask
    import distributed
    from distributed import Future

    import dask_gpunumeric as gnp
    from dask_gpunumeric.backend import to_numpy

    f = gnp.accelerate(lambda x, r: gnp.exp(-x * x) * r + 1)
    host = np.random.default_rng(0).random(args.n)
    f(gnp.asarray(host), gnp.asarray(2.0))  # traced without a cluster: the plan
    ((plan, _),) = f.plans.values()
    Executor, Registrar = _plugins()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client, dask.config.set(scheduler="dask.distributed"):
        client.register_plugin(Registrar())
        client.register_plugin(Executor())
        x = gnp.asarray(host, chunks=host.shape).persist()  # one block, as the plan was traced on
        distributed.wait(x)
        (input_key,) = [f.key for f in distributed.futures_of(x)]
        worker = client.run_on_scheduler(  # the worker holding the argument's block
            lambda dask_scheduler, k=input_key: next(iter(dask_scheduler.tasks[k].who_has)).address)
        client.run(lambda dask_worker: None)
        rpc = client.rpc(worker)
        client.sync(rpc.gnp_plan, plan=plan)

        rates = iter(np.linspace(1.0, 2.0, 10**6))  # a new rate each call: no call finds its output made

        def through_scheduler() -> Any:
            out = f(x, gnp.asarray(next(rates))).persist()
            distributed.wait(out)
            return out

        def through_handler(rate: float | None = None) -> Any:
            name = f"worker-call-{uuid.uuid4().hex}"
            client.sync(rpc.gnp_call, token=plan.token, inputs=[input_key], rate=next(rates) if rate is None else rate,
                        output=name, client=client.id)
            return Future((name, 0), client)

        calls = {"rt": lambda: client.submit(int, 1, pure=False).result(), "client.run": lambda: client.run(int),
                 "accelerated call through the scheduler (persist)": through_scheduler,
                 "accelerated call through the worker handler": through_handler}
        times: dict[str, list[float]] = {name: [] for name in calls}
        for i in range(3 + args.calls):  # the kinds in turn, so that the machine's load drifts under all alike
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                if i >= 3:
                    times[name].append(1e3 * (time.perf_counter() - start))
        rows = {name: statistics.median(t) for name, t in times.items()}
        made = through_handler(2.0)
        value = made.result()
        known = client.run_on_scheduler(lambda dask_scheduler, k=made.key: (
            [ws.address for ws in dask_scheduler.tasks[k].who_has], dask_scheduler.tasks[k].nbytes,
            dask_scheduler.tasks[k].run_spec is not None, [d.key for d in dask_scheduler.tasks[k].dependencies]))
        # its worker dies: the scheduler recomputes the output elsewhere from its lineage (the input, then its task)
        client.run(lambda: __import__("os")._exit(1), workers=[worker], on_error="ignore")
        recovered = made.result(timeout=60)
    print(f"two workers (LocalCluster, processes; calls to the one holding the argument), {args.n} float64 elements, medians of {args.calls} calls:")
    for name, ms in rows.items():
        print(f"  {name:50s} {ms:8.2f} ms  {ms / rows['rt']:.2f} rt")
    print(f"  the scheduler on the handler's output: who has {known[0]}, {known[1]} bytes, run_spec set {known[2]}, "
          f"depends on {known[3]}")
    ok = np.allclose(to_numpy(value), np.exp(-host * host) * 2 + 1)
    again = np.allclose(to_numpy(recovered), to_numpy(value))
    print(f"  values against NumPy: {'ok' if ok else 'WRONG'}; recomputed after the worker died: "
          f"{'same' if again else 'DIFFERENT'}")
    ok = ok and again
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
