"""The output blocks of a one-rank region on a cluster reported together. Each is a task of its own, the first
to run computing them all (``lower.run_shared``); a worker's stream to the scheduler sends at most one batch
per interval, so the first block's report would leave at once and the next ones an interval later, then the
scheduler's word to the client another interval later. While blocks are left on a worker for tasks about to
run, its stream holds its messages (at most ``HOLD_S``), and the last sibling to finish releases them in one
message, which the scheduler passes on to the client in one.
"""
from __future__ import annotations

from typing import Any

from distributed import WorkerPlugin

from ..streams import hold, release
from . import lower as _lower
from .store import synchronous_client

HOLD_S = 0.05  # the longest a finished task's report waits for its siblings' (a bound: they run next)

_reporting: set[tuple[int, str]] = set()  # (client, scheduler) whose workers report siblings together


def report_siblings_together() -> None:
    """Give the workers of the default client's cluster the plugin that reports the output blocks of a
    one-rank region together (once per cluster: one round trip)."""
    client = synchronous_client()
    if client is None:
        return
    where = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    if where not in _reporting:
        client.register_plugin(_Siblings())
        _reporting.add(where)


class _Siblings(WorkerPlugin):
    """On a worker: holds its stream to the scheduler while blocks are left for sibling tasks to run."""

    name = "gnp-region-siblings"
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.worker, self.holding = worker, False

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        # (called before the report of this transition is queued on the stream)
        if start != "executing":
            return
        waiting = _lower.blocks_waiting(self.worker.state.tasks)
        if waiting and not self.holding:
            hold(self.worker.batched_stream, HOLD_S)
            self.holding = True
        elif not waiting and self.holding:
            release(self.worker.batched_stream)  # (with this transition's report, queued next)
            self.holding = False
