"""Accelerated calls on ``gnp.cluster``'s Client run by the workers directly, the scheduler out of the call's path.

A call's ``Region`` on a cluster is a graph the scheduler runs: one round trip through it (``rt``). Here, where every
block the call reads is held on a known worker (blocks the client persisted: a ``Future`` of their own key, on the
worker its placement names) or is small host data sent with the call, and no rank of its programs talks to a peer,
the client sends one request to each rank's worker, in parallel (``call``): the plan by its token (a worker asks
the scheduler for its program once, ``store.program``), the keys of its input blocks, the small values, and the
output keys the client chose (the Region's own). The worker runs its program as the Region's task would
(``execute``, the same program on the same blocks: the same bits), and then:

* kept (a persist, ``Client.compute``): it puts the outputs in its memory (``Worker.update_data``, as a scatter
  does), and before answering tells the scheduler, in one request, that it holds them: their sizes, the client's
  desire, and the task that would compute each again from its inputs (run_spec and dependencies: recomputed from
  lineage when the worker dies). The client then holds a finished ``Future`` of each, as after a persist: who
  has them, their memory on the dashboard, spilling and releasing are the scheduler's as for any key;
* fetched (``gnp.fetch``, ``dask.compute``, ``np.asarray``): the values come back in the answer, nothing is kept.

Anything else goes the scheduler's way, with the same results and exceptions: a call whose blocks are not all
held where the placement says (the worker says so before running anything), that needs peers, that fails on the
worker (the scheduler's path then raises the error as it always did), or whose worker is gone.
``gpunumeric.cluster.direct-calls`` (default True) turns the path off.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import dask

from ..backend import to_numpy
from ..expr import ArrayExpr, Finalize, FromGraph, flat_keys
from .regions import store as _store
from .regions.plan import Region, RegionOutput, _renamer
from .regions.program import Collective, Exchange, Program, Repeat, execute

SETTING = "gpunumeric.cluster.direct-calls"
_CALL = "gnp_direct_call"  # a worker's handler: run a rank's program
_MADE = "gnp_direct_made"  # the scheduler's handler: a worker holds outputs of a direct call
_KEEP = "gnp_direct_plan"  # the scheduler's handler: keep a plan (``store.restored``), which workers then ask for

_ready: set[tuple[int, str]] = set()  # (client, scheduler) whose cluster has the plugins


def enabled(client: Any) -> bool:
    """Whether calls on ``client`` may run directly: ``gnp.cluster``'s synchronous Client, the setting on."""
    return (dask.config.get(SETTING, True) is not False and not client.asynchronous
            and hasattr(type(client), "_gnp_owned_cluster")
            and not dask.config.get("annotations", None))  # (a graph's annotations: the scheduler's path)


# --- on the client --------------------------------------------------------------------------------------


def _region(exprs: Sequence[ArrayExpr], unwrap: bool) -> Region | None:
    """The Region whose outputs ``exprs`` all are (``Finalize`` of one looked through where ``unwrap``), else None."""
    region = None
    for e in exprs:
        if unwrap and isinstance(e, Finalize):
            e = e.operand("array")
        if not isinstance(e, RegionOutput):
            return None
        r = e.operand("region")
        if region is not None and r._name != region._name:
            return None
        region = r
    return region


def _needs_peers(program: Program) -> bool:
    return any(isinstance(s, (Exchange, Collective)) or isinstance(s, Repeat) and _needs_peers(s.body)
               for s in program.steps)


def _requests(region: Region, wanted: set) -> list[tuple[str, dict]] | None:
    """Per rank: its worker's address and its request's arguments, or None where the call cannot run directly
    (not lowered as programs, a rank that talks to its peers, an input block that is neither small host data
    nor a block this client persisted, an argument returned as it is)."""
    from distributed import Future

    if not region.as_programs or not region.workers:
        return None
    plan, workers = region.plan, region.workers
    built = plan.built(len(workers))
    if built.layout.size > 1 and any(map(_needs_peers, built.programs)):
        return None
    input_key, output_key = _renamer(region._arguments()), region._rename_key
    inline = region._small_arguments()
    held = {}
    for a in region.args:
        if isinstance(a, FromGraph):
            held.update((k, v) for k, v in a.operand("layer").items() if isinstance(v, Future) and v.key == k)
    requests = []
    for rank, program in enumerate(built.programs):
        inputs = []
        for k in program.inputs:
            actual = input_key(k)
            if actual in inline:
                inputs.append((False, inline[actual]({})))
            elif actual in held:
                inputs.append((True, actual))
            else:
                return None
        names = {output_key(t): t for t, (r,) in built.placement.items() if r == rank}
        if any(is_key and key in names for is_key, key in inputs):
            return None
        outputs = [(t, k) for k, t in names.items() if k in wanted]
        if outputs:
            requests.append((workers[built.layout.workers[rank]],
                             {"plan": f"{plan.token}-{len(workers)}", "rank": rank, "inputs": inputs,
                              "outputs": outputs, "timeout": region.timeout}))
    covered = {k for _, r in requests for _, k in r["outputs"]}
    return requests if covered == wanted else None


def _prepare(client: Any, plan: Any) -> None:
    """Give the cluster the plugins (once per cluster), and the scheduler ``plan`` unless it holds it (once per
    plan): workers ask it for their programs."""
    where = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    if where not in _ready:
        client.register_plugin(_registrar_class()())
        client.register_plugin(_executor_class()())
        _ready.add(where)
    if not _store.published(plan.token):
        from distributed.protocol.pickle import dumps

        client.sync(getattr(client.scheduler, _KEEP), plan=dumps(plan))
        _store.note_published(client, plan.token)


def _send(client: Any, requests: list[tuple[str, dict]], keep: bool, host: bool) -> list[dict] | None:
    """The workers' answers to ``requests``, sent together; None where one could not be reached."""
    async def send() -> list[Any]:
        calls = [getattr(client.rpc(address), _CALL)(**request, keep=keep, host=host, client=client.id)
                 for address, request in requests]
        return await asyncio.gather(*calls, return_exceptions=True)

    answers = client.sync(send)
    return None if any(isinstance(a, BaseException) for a in answers) else answers


def _release(client: Any, answers: Sequence[Any]) -> None:
    """Give up the outputs that workers kept for a call falling back to the scheduler's path."""
    from distributed import Future

    for answer in answers:
        if isinstance(answer, dict) and answer.get("status") == "ok":
            for key in answer["nbytes"]:
                Future(key, client, state="memory").release()


def persisted(client: Any, roots: Sequence[ArrayExpr]) -> dict | None:
    """The Futures, by key, of the blocks of ``roots`` (outputs of one accelerated call) computed directly by the
    workers and kept there, known to the scheduler; None to leave the call to the scheduler."""
    from distributed import Future

    region = _region(roots, unwrap=False)
    if region is None or not enabled(client):
        return None
    wanted = {k for r in roots for k in flat_keys(r)}
    if all(client.futures.get(k) is not None and client.futures[k].status == "finished" for k in wanted):
        return {k: Future(k, client) for k in wanted}  # (held already: the scheduler would not compute it again)
    requests = _requests(region, wanted)
    if requests is None:
        return None
    _prepare(client, region.plan)
    answers = _send(client, requests, True, False)
    if answers is None or any(a["status"] != "ok" for a in answers):
        _release(client, answers or ())
        return None
    return {k: Future(k, client, state="memory") for a in answers for k in a["nbytes"]}


def fetched(client: Any, exprs: Sequence[ArrayExpr], host: bool) -> list | None:
    """The value of each of ``exprs`` (outputs of one accelerated call, or ``Finalize`` of them), computed directly
    by the workers and brought back in their answers (on the host for ``host``), its blocks joined here; None to
    leave the call to the scheduler."""
    from ..kernels.blocks import concatenate_grid

    region = _region(exprs, unwrap=True)
    if region is None or not enabled(client):
        return None
    arrays = [e.operand("array") if isinstance(e, Finalize) else e for e in exprs]
    requests = _requests(region, {k for a in arrays for k in flat_keys(a)})
    if requests is None:
        return None
    _prepare(client, region.plan)
    answers = _send(client, requests, False, host)
    if answers is None or any(a["status"] != "ok" for a in answers):
        return None
    from distributed.protocol.pickle import loads

    values = {k: v for a in answers for k, v in loads(a["values"]).items()}
    return [concatenate_grid([values[k] for k in flat_keys(a)], a.numblocks) for a in arrays]


# --- on a worker and on the scheduler -------------------------------------------------------------------


def run_program(program: Program, inputs: Sequence[Any]) -> dict:
    """A rank's program run on its input blocks (a rank that talks to no peer), as the Region's task runs it: its
    outputs by the plan's keys."""
    env = dict(zip(program.inputs, inputs))
    execute(program, env, None)
    return {k: env[k] for k in program.outputs}


def recompute(plan: str, rank: int, template: Any, timeout: float, *inputs: Any) -> Any:
    """Task function of an output block a direct call made (its run_spec on the scheduler): the block computed
    again from its inputs (rank ``rank``'s program of ``plan``, "<token>-<workers>"), after its worker died."""
    return run_program(_store.program(plan, rank, timeout), inputs)[template]


def _executor_class() -> type:
    """The worker plugin running direct calls (``gnp_direct_call``), made on first use (distributed is optional)
    and kept as this module's attribute, so that it pickles by reference."""
    made = globals().get("_Executor")
    if made is not None:
        return made
    from dask._task_spec import Task, TaskRef
    from distributed import WorkerPlugin
    from distributed.protocol.pickle import dumps
    from distributed.utils import run_in_executor_with_context

    class _Executor(WorkerPlugin):
        """On a worker: runs a rank's program of a direct call on blocks held here."""

        name = "gnp-direct-calls"
        idempotent = True

        def setup(self, worker: Any) -> None:
            self.worker = worker
            worker.handlers[_CALL] = self.call

        async def call(self, plan: str, rank: int, inputs: list, outputs: list, timeout: float, keep: bool,
                       host: bool, client: str) -> dict:
            worker = self.worker
            if any(is_key and key not in worker.data for is_key, key in inputs):
                return {"status": "missing"}
            blocks = [worker.data[v] if is_key else v for is_key, v in inputs]
            try:
                program = await _store.program_for(worker, plan, rank)
                made = await run_in_executor_with_context(worker.executors["default"], run_program, program, blocks)
            except Exception as error:  # noqa: BLE001 - the scheduler's path raises it for the client
                return {"status": "error", "error": repr(error)}
            if not keep:  # (pickled here as a pushed value is: CuPy blocks through the host)
                return {"status": "ok", "values": dumps({k: to_numpy(made[t]) if host else made[t] for t, k in outputs})}
            data = {k: made[t] for t, k in outputs}
            worker.update_data(data, stimulus_id=f"gnp-direct-{plan}-{rank}")
            refs = [TaskRef(v) if is_key else v for is_key, v in inputs]
            specs = {k: Task(k, recompute, plan, rank, t, timeout, *refs) for t, k in outputs}
            nbytes = {k: worker.state.tasks[k].nbytes for k in data}
            await getattr(worker.scheduler, _MADE)(worker=worker.address, nbytes=nbytes, specs=dumps(specs),
                                                   dependencies=[v for is_key, v in inputs if is_key], client=client)
            return {"status": "ok", "nbytes": nbytes}

    _Executor.__qualname__ = "_Executor"
    globals()["_Executor"] = _Executor
    return _Executor


def _registrar_class() -> type:
    """The scheduler plugin learning of the outputs of direct calls (``gnp_direct_made``) and keeping the plans
    they run (``gnp_direct_plan``), made on first use and kept as this module's attribute (``_executor_class``)."""
    made = globals().get("_Registrar")
    if made is not None:
        return made
    from distributed.diagnostics.plugin import SchedulerPlugin
    from distributed.protocol.pickle import loads

    class _Registrar(SchedulerPlugin):
        """On the scheduler: keys a worker made in a direct call, known as if a task of a graph had made them."""

        name = "gnp-direct-calls"
        idempotent = True

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler
            scheduler.handlers[_MADE] = self.made
            scheduler.handlers[_KEEP] = self.keep

        def keep(self, plan: bytes) -> None:
            loads(plan)  # (unpickling a plan keeps it here: ``store.restored``)

        def made(self, worker: str, nbytes: dict, specs: bytes, dependencies: list, client: str) -> None:
            s = self.scheduler
            if worker not in s.workers:  # (gone meanwhile: the client falls back on the worker's silence)
                return
            s.update_data(who_has={k: [worker] for k in nbytes}, nbytes=nbytes, client=client)
            spans = s.extensions.get("spans")
            if spans is not None:  # (a worker computing one again reports its metrics by its group's span)
                spans.observe_tasks([s.tasks[k] for k in nbytes], code=(), span_metadata={})
            for key, spec in loads(specs).items():
                ts = s.tasks[key]
                ts.run_spec = spec
                if ts.priority is None:  # (a graph's task has one; recomputing sorts by it)
                    ts.priority = (0, s.generation, 0)
                for dep in dependencies:
                    dts = s.tasks.get(dep)
                    if dts is not None and dts not in ts.dependencies:
                        ts.add_dependency(dts)

    _Registrar.__qualname__ = "_Registrar"
    globals()["_Registrar"] = _Registrar
    return _Registrar


def __getattr__(name: str) -> Any:
    # (unpickling a plugin on the scheduler or a worker looks its class up here)
    if name == "_Executor":
        return _executor_class()
    if name == "_Registrar":
        return _registrar_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
