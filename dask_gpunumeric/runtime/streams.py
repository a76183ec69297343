"""When a cluster's messages leave. Distributed batches each stream's messages: the client's to the scheduler
at most one batch per 10 ms, the scheduler's to a worker per 5 ms and to a client per 2 ms, a worker's per
2 ms. A call's request and the reports it waits for then wait behind whatever went just before them on
their stream (the release of the last call's result, its freed keys): up to 19 ms a call, more than the
call's own round trip. So:

* clusters ``gnp.cluster`` starts send at once (``unbatch``; the client's own stream by ``unbatch_client``):
  what one turn of an event loop queued still leaves as one message;
* a stream can be held (``hold``) until messages that belong together are queued (``release``): the output
  blocks of a one-rank region, reported in one message (``regions.reports``).

Both set what distributed's ``BatchedSend`` reads on each send: its ``interval``, and ``next_deadline``
(with ``waker``), the moment its sender waits for.
"""
from __future__ import annotations

from typing import Any

from distributed import WorkerPlugin
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.metrics import time

UNBATCHED = 0.0  # seconds between two batches of a stream of a cluster ``gnp.cluster`` started


def unbatch(client: Any) -> None:
    """Make the scheduler and workers of ``client``'s cluster (and workers joining later) send at once."""
    client.register_plugin(_UnbatchedScheduler())
    client.register_plugin(_UnbatchedWorker())


def unbatch_client(client: Any) -> None:
    """Make ``client`` send to its scheduler at once (after each connection: its stream is new)."""
    if client.scheduler_comm is not None:
        client.scheduler_comm.interval = UNBATCHED


class _UnbatchedScheduler(SchedulerPlugin):
    """On the scheduler: its streams to workers and clients send at once."""

    name = "gnp-unbatched"
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        for stream in [*scheduler.stream_comms.values(), *scheduler.client_comms.values()]:
            stream.interval = UNBATCHED

    def add_worker(self, scheduler: Any, worker: str) -> None:
        scheduler.stream_comms[worker].interval = UNBATCHED

    def update_graph(self, scheduler: Any, *, client: str, **kwargs: Any) -> None:
        # (a client's stream is made after the plugins hear of the client: it is set on its first graph)
        stream = scheduler.client_comms.get(client)
        if stream is not None:
            stream.interval = UNBATCHED


class _UnbatchedWorker(WorkerPlugin):
    """On a worker: its stream to the scheduler sends at once."""

    name = "gnp-unbatched"
    idempotent = True

    def setup(self, worker: Any) -> None:
        worker.batched_stream.interval = UNBATCHED


def hold(stream: Any, seconds: float) -> None:
    """Keep a batched stream's messages, those queued from now on included, for at most ``seconds``."""
    held = time() + seconds
    idle = stream.next_deadline is None
    stream.next_deadline = held if idle else max(stream.next_deadline, held)
    if idle:
        stream.waker.set()  # (its sender waits again, now until that deadline)


def release(stream: Any) -> None:
    """Send a held stream's messages, those queued before the event loop's next turn included."""
    stream.next_deadline = None
    stream.waker.set()
