"""Small results pushed to the client that fetches them, in the messages that say their tasks are done.

``gnp.fetch`` (or ``compute()``, or ``dask.compute`` on ``gnp.cluster``'s Client) of a small result on a cluster
would wait for the scheduler's word that its task finished, then ask the scheduler to gather it, which asks the
worker: a second round trip. Here each fetched key of one block has its task carry an annotation naming the client;
when it finishes, a worker plugin sends the value (on the host, pickled) in the worker's stream to the scheduler,
in the batch that reports the task done, and a scheduler plugin forwards it in the client's stream, beside the
report that the key is in memory. The client gathers (in one request) only what was not pushed: the blocks of
a result of several, a larger result, a key that was in memory already, an error; and joins each result's
blocks itself.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from distributed import WorkerPlugin
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps, loads

from ..backend import to_numpy
from ..kernels.blocks import concatenate_grid
from ..expr import ArrayExpr, flat_keys
from .submit import combined_here, submit

OP = "gnp-pushed"
ANNOTATION = "gnp_push"
PUSHED_BYTES = 2**16  # results up to this size on the host are pushed (through the scheduler), larger gathered


class PushTo:
    """The annotation of a fetch's tasks: on each fetched key of one block, the client's id and whether the value
    goes to the host (``gnp.fetch``) or stays of its backend (``compute()``); None on the others."""

    def __init__(self, client: str, keys: frozenset, host: bool) -> None:
        self.client, self.keys, self.host = client, keys, host

    def __call__(self, key: Any) -> tuple[str, bool] | None:
        return (self.client, self.host) if key in self.keys else None


class PushingWorker(WorkerPlugin):
    """On a worker: a finished task annotated with a client's id sends its value (if small) to that client."""

    name = "gnp-push"
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.worker = worker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "memory" or start != "executing":
            return
        ts = self.worker.state.tasks.get(key)
        wanted = None if ts is None or not ts.annotations else ts.annotations.get(ANNOTATION)
        if wanted is None:
            return
        (client, host), value = wanted, self.worker.data[key]
        if getattr(value, "nbytes", 0) > PUSHED_BYTES:
            return
        self.worker.batched_stream.send({"op": OP, "client": client,
                                         "value": dumps((key, to_numpy(value) if host else value))})


class Forwarding(SchedulerPlugin):
    """On the scheduler: a pushed value goes on to its client, in the client's stream."""

    name = "gnp-push"
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        scheduler.stream_handlers[OP] = self.forward

    def forward(self, client: str, value: bytes, **extra: Any) -> None:
        stream = self.scheduler.client_comms.get(client)
        if stream is not None:
            stream.send({"op": OP, "value": value})


class _Arrivals:
    """On the client: pushed values by key, and the keys fetches wait for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[Any, list] = {}  # key -> [event, value (or None)]

    def arrived(self, value: bytes) -> None:
        key, host = loads(value)
        with self.lock:
            slot = self.waiting.get(key)
        if slot is not None:
            slot[1] = (host,)
            slot[0].set()


_arrivals: dict[tuple[int, str], _Arrivals] = {}


def _arrivals_of(client: Any) -> _Arrivals:
    """The client's arrivals, the plugins set up on its cluster the first time (two round trips, once)."""
    where = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    found = _arrivals.get(where)
    if found is None:
        found = _arrivals[where] = _Arrivals()
        client._stream_handlers[OP] = found.arrived
        client.register_plugin(Forwarding())
        client.register_plugin(PushingWorker())
    return found


def combined_on_client(client: Any, exprs: Sequence[ArrayExpr], workers: tuple[str, ...]) -> dict:
    """The tasks, by key, of the one-block results among ``exprs`` that this client combines from partials that
    several workers computed (``submit.combined_here``)."""
    # (compiled here as the scheduler compiles it: with the same settings where it runs in this process)
    if getattr(getattr(client, "cluster", None), "scheduler", None) is None:
        return {}
    return {flat_keys(e)[0]: task for e in exprs if (task := combined_here(e, workers)) is not None}


def fetch_pushed(client: Any, exprs: Sequence[ArrayExpr], host: bool, workers: tuple[str, ...],
                 combined: dict | None = None) -> list[list]:
    """The blocks (in C order) of each of ``exprs``, computed together in one graph on ``client``'s cluster (blocks
    placed on ``workers``), on the host (``host``) or of their backend: a result of one block pushed by its task
    when it is small, or combined here from the pushed partials that several workers computed
    (``combined_on_client``, unless given), the other blocks gathered in one request while those arrive."""
    import dask

    per_expr = [flat_keys(e) for e in exprs]
    combined = combined_on_client(client, exprs, workers) if combined is None else combined
    asked = [k for keys in per_expr for k in keys if k not in combined]
    asked += [d for task in combined.values() for d in task.dependencies if d not in asked]
    gathered = [k for keys in per_expr if len(keys) > 1 for k in keys]
    pushed = frozenset(asked) - set(gathered)
    arrivals = _arrivals_of(client)
    slots = {key: [threading.Event(), None] for key in pushed}
    with arrivals.lock:
        arrivals.waiting.update(slots)
    futures: dict = {}
    try:
        with dask.annotate(**{ANNOTATION: PushTo(client.id, pushed, host and not combined)}):
            futures = submit(client, exprs, workers, asked)
        for key, slot in slots.items():
            futures[key].add_done_callback(lambda _, event=slot[0]: event.set())
        values = dict(zip(gathered, client.gather([futures[k] for k in gathered]))) if gathered else {}
        for slot in slots.values():
            slot[0].wait()
        rest = [k for k, slot in slots.items() if slot[1] is None]  # large, in memory already, or failed
        if rest:
            values.update(zip(rest, client.gather([futures[k] for k in rest])))
        values.update((k, slot[1][0]) for k, slot in slots.items() if slot[1] is not None)
        for key, task in combined.items():  # (with the worker's own function, on the partials as it gets them)
            values[key] = task({d: values[d] for d in task.dependencies})
        return [[to_numpy(values[k]) if host else values[k] for k in keys] for keys in per_expr]
    finally:
        with arrivals.lock:
            for key, slot in slots.items():
                if arrivals.waiting.get(key) is slot:
                    del arrivals.waiting[key]
        for future in futures.values():
            future.release()  # (as ``Client.get`` does: the keys are not kept for another call)


def fetch_joined(client: Any, exprs: Sequence[ArrayExpr], host: bool, workers: tuple[str, ...]) -> list:
    """The value of each of ``exprs`` (``fetch_pushed``), its blocks joined here: no task joining them on a worker
    first (a task that waits for every block is one more scheduler-to-worker cycle)."""
    from .direct import enabled, fetched

    combined = combined_on_client(client, exprs, workers)
    made = fetched(client, exprs, host, workers, combined) if enabled(client) else None  # (by the workers directly)
    if made is not None:
        return made
    blocks = fetch_pushed(client, exprs, host, workers, combined)
    return [concatenate_grid(b, e.numblocks) for b, e in zip(blocks, exprs)]
