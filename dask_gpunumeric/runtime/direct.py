"""Accelerated calls on ``gnp.cluster``'s Client run by the workers directly, the scheduler out of the call's path.

A call's ``Region`` on a cluster is a graph the scheduler runs: one round trip through it (``rt``). Here, where every
block the call reads is held on a known worker (blocks the client persisted: a ``Future`` of their own key, on the
worker its placement names) or is small host data sent with the call, and no rank of its programs talks to a peer,
the client sends one request to each rank's worker, in parallel (``call``): the plan by its token (a worker asks
the scheduler for its program once, ``store.program``), the keys of its input blocks, the small values, and the
output keys the client chose (the Region's own). The worker runs its program as the Region's task would
(``execute``, the same program on the same blocks: the same bits), and then:

* kept (a persist, ``Client.compute``): it puts the outputs in its memory (``Worker.update_data``, as a scatter
  does) and answers their sizes. The client then tells the scheduler, in a message on its own stream (no reply
  waited for), that the worker holds them: their sizes, the client's desire, and the task that would compute each
  again from its inputs (run_spec and dependencies: recomputed from lineage when the worker dies). Whatever the
  client sends the scheduler later about them (their release, a graph reading them) follows on that stream, so the
  scheduler knows them first. The client holds a finished ``Future`` of each, as after a persist: who has them,
  their memory on the dashboard, spilling and releasing are the scheduler's as for any key;
* fetched (``gnp.fetch``, ``dask.compute``, ``np.asarray``): the values come back in the answer, nothing is kept.

A fetch of a plain expression whose graph (the one the scheduler would make, compiled here from the same cache) is
one level of tasks, each reading only persisted blocks on the worker its placement names (or nothing: Monte-Carlo's
draws), runs the same way: each worker is sent its tasks (``gnp_direct_tasks``) and answers their values.

Anything else goes the scheduler's way, with the same results and exceptions: a call whose blocks are not all
held where the placement says (the worker says so before running anything), that needs peers, that fails on the
worker (the scheduler's path then raises the error as it always did), or whose worker is gone.
``gpunumeric.cluster.direct-calls`` (default True) turns the path off. Imported only for calls on a cluster (as
``pushed`` is), where distributed is installed: its plugins are classes of this module, pickled by reference.
"""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

import dask
from dask._task_spec import Task, TaskRef
from distributed import Future, WorkerPlugin
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps, loads
from distributed.utils import run_in_executor_with_context
from distributed.worker import _worker_cvar

from ..backend import to_numpy
from ..expr import ArrayExpr, Bundle, Finalize, Materialized, flat_keys
from ..kernels.blocks import concatenate_grid
from .regions import store as _store
from .regions.program import Program, execute
from .schedule import held_keys

SETTING = "gpunumeric.cluster.direct-calls"
_CALL = "gnp_direct_call"  # a worker's handler: run a rank's program
_TASKS = "gnp_direct_tasks"  # a worker's handler: run tasks of a plain call, their values answered
_MADE = "gnp_direct_made"  # the scheduler's stream handler: a worker holds outputs of a direct call
_KEEP = "gnp_direct_plan"  # the scheduler's handler: keep a plan (``store.restored``), which workers then ask for

_ready: set[tuple[int, str]] = set()  # (client, scheduler) whose cluster has the plugins
#: seconds a call waits to reach a worker before the scheduler's path takes it: the client may not know yet that a
#: worker died, and distributed's own connect timeout (30 s) would stall the first call after the loss
CONNECT_TIMEOUT = 3.0


def enabled(client: Any) -> bool:
    """Whether calls on ``client`` may run directly: ``gnp.cluster``'s synchronous Client, the setting on."""
    return (dask.config.get(SETTING, True) is not False and not client.asynchronous
            and hasattr(type(client), "_gnp_owned_cluster")
            and not dask.config.get("annotations", None))  # (a graph's annotations: the scheduler's path)


# --- on the client --------------------------------------------------------------------------------------


def _region(exprs: Sequence[ArrayExpr], unwrap: bool) -> Any:
    """The call (a ``Region``) whose outputs ``exprs`` all are (``Finalize`` of one looked through where ``unwrap``),
    else None."""
    region = None
    for e in exprs:
        if unwrap and isinstance(e, Finalize):
            e = e.operand("array")
        r = getattr(e, "region_call", None)  # (a ``RegionOutput``'s)
        if r is None or region is not None and r._name != region._name:
            return None
        region = r
    return region


def _prepare(client: Any, plan: Any) -> None:
    """Give the cluster the plugins (once per cluster), and the scheduler ``plan`` (if any) unless it holds it (once
    per plan): workers ask it for their programs."""
    where = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    if where not in _ready:
        client.register_plugin(_Registrar())
        client.register_plugin(_Executor())
        _ready.add(where)
    if plan is not None and not _store.published(plan.token):
        client.sync(getattr(client.scheduler, _KEEP), plan=dumps(plan))
        _store.note_published(client, plan.token)


def _send(client: Any, requests: list[tuple[str, dict]], handler: str, common: dict, partial: bool = False
          ) -> list | None:
    """The workers' answers to ``requests`` (to their ``handler``, each with the ``common`` arguments too), sent
    together; None where one could not be reached (or, for ``partial``, that answer the exception)."""
    async def call(address: str, request: dict) -> Any:
        client.rpc.reuse(address, await client.rpc.connect(address, timeout=CONNECT_TIMEOUT))  # (reached in time)
        return await getattr(client.rpc(address), handler)(**request, **common)

    async def send() -> list[Any]:
        return await asyncio.gather(*(call(address, request) for address, request in requests), return_exceptions=True)

    answers = client.sync(send)
    return answers if partial or not any(isinstance(a, BaseException) for a in answers) else None


def _register(client: Any, requests: Sequence[tuple[str, dict]], answers: Sequence[Any], timeout: float) -> list:
    """Tell the scheduler, on ``client``'s stream, of the outputs that workers kept for ``requests`` (those that
    answered ok): who holds them, their sizes, the task computing each again from its inputs (asking the scheduler
    for its program within ``timeout``, the call's region timeout); their keys."""
    keys = []
    for (address, request), answer in zip(requests, answers):
        if not (isinstance(answer, dict) and answer.get("status") == "ok"):
            continue
        inputs = request["inputs"]
        refs = [TaskRef(v) if is_key else v for is_key, v in inputs]
        specs = {k: Task(k, recompute, request["plan"], request["rank"], t, timeout, *refs)
                 for t, k in request["outputs"]}
        client._send_to_scheduler({"op": _MADE, "worker": address, "nbytes": answer["nbytes"], "specs": dumps(specs),
                                   "dependencies": [v for is_key, v in inputs if is_key]})
        keys.extend(answer["nbytes"])
    return keys


def persisted(client: Any, roots: Sequence[ArrayExpr]) -> dict | None:
    """The Futures, by key, of the blocks of ``roots`` (outputs of one accelerated call) computed directly by the
    workers and kept there, known to the scheduler; None to leave the call to the scheduler."""
    region = _region(roots, unwrap=False)
    if region is None or not enabled(client):
        return None
    wanted = {k for r in roots for k in flat_keys(r)}
    if all(client.futures.get(k) is not None and client.futures[k].status == "finished" for k in wanted):
        return {k: Future(k, client) for k in wanted}  # (held already: the scheduler would not compute it again)
    requests = region.direct_requests(wanted)
    if requests is None:
        return None
    _prepare(client, region.plan)
    answers = _send(client, requests, _CALL, {"keep": True, "host": False}, partial=True)
    futures = {k: Future(k, client, state="memory") for k in _register(client, requests, answers, region.timeout)}
    if len(futures) != len(wanted):  # (a rank's worker did not run it: the scheduler's path, the rest given up)
        for future in futures.values():
            future.release()
        return None
    return futures


def _task_requests(exprs: Sequence[ArrayExpr], workers: tuple[str, ...], combined: dict
                   ) -> list[tuple[str, dict]] | None:
    """Per worker: its address and the tasks it runs (pickled) for ``exprs``' blocks, where the call is one level of
    plain tasks each reading only persisted blocks (or nothing: Monte-Carlo's draws), each placed on a worker, but
    for the results in ``combined`` (tasks by key) that the client combines from partials of that level; else None.
    The graph is the one the scheduler would make of the call (compiled here, cached)."""
    if not workers:
        return None
    node = Materialized.of(exprs[0] if len(exprs) == 1 else Bundle.of(*exprs), workers)
    graph = node._graph
    wanted = {k for e in exprs for k in flat_keys(e) if k not in combined}
    wanted.update(d for task in combined.values() for d in task.dependencies)
    held = held_keys(graph)
    placement = node._placement
    if graph.keys() - held - combined.keys() != wanted or set(placement) - {"workers", "allow_other_workers"}:
        return None
    where, per_worker = placement.get("workers", {}), {}
    for key in wanted:
        task = graph[key]
        if type(task) is not Task or inspect.iscoroutinefunction(task.func) or not task.dependencies <= held:
            return None
        address = where.get(key) or (workers if len(workers) == 1 else None)
        if not address:
            return None
        per_worker.setdefault(address[0], {})[key] = task
    return [(address, {"tasks": dumps(tasks)}) for address, tasks in per_worker.items()]


def fetched(client: Any, exprs: Sequence[ArrayExpr], host: bool, workers: tuple[str, ...], combined: dict
            ) -> list | None:
    """The value of each of ``exprs`` computed directly by the workers and brought back in their answers (on the host
    for ``host``), its blocks joined here: outputs of one accelerated call (or ``Finalize`` of them), or a plain call
    of one level of tasks on ``workers`` (``_task_requests``; the results in ``combined``, tasks by key, combined
    here from their partials, as ``pushed.combined_on_client`` has them); None to leave the call to the
    scheduler."""
    region = _region(exprs, unwrap=True)
    arrays = [e.operand("array") if isinstance(e, Finalize) else e for e in exprs]
    here = host and bool(combined)  # (partials combined with the backend's own functions, as the workers would)
    if region is None:
        requests, handler = _task_requests(arrays, workers, combined), _TASKS
    else:
        requests, handler = region.direct_requests({k for a in arrays for k in flat_keys(a)}), _CALL
    if requests is None:
        return None
    _prepare(client, None if region is None else region.plan)
    common = {"host": host and not here}
    if region is not None:
        common.update(keep=False)
    answers = _send(client, requests, handler, common)
    if answers is None or any(a["status"] != "ok" for a in answers):
        return None
    values = {k: v for a in answers for k, v in loads(a["values"]).items()}
    for key, task in combined.items():  # (with the worker's own function, as ``pushed.fetch_pushed`` does)
        values[key] = task({d: values[d] for d in task.dependencies})
    return [concatenate_grid([to_numpy(values[k]) if here else values[k] for k in flat_keys(a)], a.numblocks)
            for a in arrays]


# --- on a worker and on the scheduler -------------------------------------------------------------------


def run_program(program: Program, inputs: Sequence[Any]) -> dict:
    """A rank's program run on its input blocks (a rank that talks to no peer), as the Region's task runs it: its
    outputs by the plan's keys."""
    env = dict(zip(program.inputs, inputs))
    execute(program, env, None)
    return {k: env[k] for k in program.outputs}


def _in_worker(worker: Any, function: Any, *args: Any) -> Any:
    """``function(*args)`` as in a task of ``worker`` (``distributed.get_worker`` finds it there)."""
    token = _worker_cvar.set(worker)
    try:
        return function(*args)
    finally:
        _worker_cvar.reset(token)


def run_tasks(graph: dict, blocks: dict) -> dict:
    """The values of the tasks of ``graph`` (one level: each reads only ``blocks``), by key."""
    return {key: task({k: blocks[k] for k in task.dependencies}) for key, task in graph.items()}


def recompute(plan: str, rank: int, template: Any, timeout: float, *inputs: Any) -> Any:
    """Task function of an output block a direct call made (its run_spec on the scheduler): the block computed
    again from its inputs (rank ``rank``'s program of ``plan``, "<token>-<workers>"), after its worker died."""
    return run_program(_store.program(plan, rank, timeout), inputs)[template]


class _Executor(WorkerPlugin):
    """On a worker: runs a rank's program of a direct call on blocks held here."""

    name = "gnp-direct-calls"
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.worker = worker
        worker.handlers[_CALL] = self.call
        worker.handlers[_TASKS] = self.tasks

    async def tasks(self, tasks: bytes, host: bool) -> dict:
        worker, graph = self.worker, loads(tasks)
        inputs = {k for task in graph.values() for k in task.dependencies}
        if any(k not in worker.data for k in inputs):
            return {"status": "missing"}
        blocks = {k: worker.data[k] for k in inputs}
        try:
            made = await run_in_executor_with_context(worker.executors["default"], _in_worker, worker, run_tasks,
                                                      graph, blocks)
        except Exception as error:  # noqa: BLE001 - the scheduler's path raises it for the client
            return {"status": "error", "error": repr(error)}
        return {"status": "ok", "values": dumps({k: to_numpy(v) if host else v for k, v in made.items()})}

    async def call(self, plan: str, rank: int, inputs: list, outputs: list, keep: bool, host: bool) -> dict:
        worker = self.worker
        if any(is_key and key not in worker.data for is_key, key in inputs):
            return {"status": "missing"}
        if keep and any(key in worker.state.tasks for _, key in outputs):
            # an output of the same call held here, or on its way out (its release crossing this call): the
            # scheduler's path orders the two
            return {"status": "held"}
        blocks = [worker.data[v] if is_key else v for is_key, v in inputs]
        try:
            program = await _store.program_for(worker, plan, rank)
            made = await run_in_executor_with_context(worker.executors["default"], _in_worker, worker,
                                                      run_program, program, blocks)
        except Exception as error:  # noqa: BLE001 - the scheduler's path raises it for the client
            return {"status": "error", "error": repr(error)}
        if not keep:  # (pickled here as a pushed value is: CuPy blocks through the host)
            return {"status": "ok", "values": dumps({k: to_numpy(made[t]) if host else made[t] for t, k in outputs})}
        data = {k: made[t] for t, k in outputs}
        worker.update_data(data, stimulus_id=f"gnp-direct-{plan}-{rank}")
        return {"status": "ok", "nbytes": {k: worker.state.tasks[k].nbytes for k in data}}


class _Registrar(SchedulerPlugin):
    """On the scheduler: keys a worker made in a direct call (its client's message), known as if a task of a graph had
    made them."""

    name = "gnp-direct-calls"
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        scheduler.stream_handlers[_MADE] = self.made
        scheduler.handlers[_KEEP] = self.keep

    def keep(self, plan: bytes) -> None:
        loads(plan)  # (unpickling a plan keeps it here: ``store.restored``)

    def made(self, worker: str, nbytes: dict, specs: bytes, dependencies: list, client: str) -> None:
        s, specs = self.scheduler, loads(specs)
        alive = worker in s.workers
        if alive:  # (new keys: nobody to tell yet)
            s.update_data(who_has={k: [worker] for k in nbytes}, nbytes=nbytes)
        else:  # (it died after answering: its outputs are computed again from their inputs, below)
            for key in specs:
                if key not in s.tasks:
                    s.new_task(key, None, "released")
        spans = s.extensions.get("spans")
        if spans is not None:  # (a worker computing one again reports its metrics by its group's span)
            spans.observe_tasks([s.tasks[k] for k in specs], code=(), span_metadata={})
        wanted_by = s.clients.get(client)
        for key, spec in specs.items():
            ts = s.tasks[key]
            ts.run_spec = spec
            if ts.priority is None:  # (a graph's task has one; recomputing sorts by it)
                ts.priority = (0, s.generation, 0)
            for dep in dependencies:
                dts = s.tasks.get(dep)
                if dts is not None and dts not in ts.dependencies:
                    ts.add_dependency(dts)
            if wanted_by is not None:  # the client's desire, as ``client_desires_keys`` records it, without the
                # report of each key it sends the client back: the client made its Futures finished already
                if ts.who_wants is None:
                    ts.who_wants = set()
                ts.who_wants.add(wanted_by)
                wanted_by.wants_what.add(ts)
        stimulus = f"gnp-direct-{worker}"
        if wanted_by is None:  # (the client left meanwhile: nobody wants them)
            s.transitions({k: "forgotten" for k in specs}, stimulus_id=stimulus)
        elif not alive:
            s.transitions({k: "waiting" for k in specs if s.tasks[k].state == "released"}, stimulus_id=stimulus)
