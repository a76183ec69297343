"""The workers of a client's cluster, kept up to date by the scheduler instead of asked for on every call:
a scheduler plugin publishes the whole membership (address and name of every worker) as an event whenever a
worker joins or leaves, and the client keeps the latest one. A call then reads the workers without a round
trip to the scheduler (``cluster.active_workers``)."""
from __future__ import annotations

import threading
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

TOPIC = "gnp-membership"


class MembershipPlugin(SchedulerPlugin):
    """On the scheduler: the workers' addresses and names, published under ``TOPIC`` on every change."""

    name = "gnp-membership"
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self._publish()

    def add_worker(self, scheduler: Any, worker: str) -> None:
        self._publish()

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        self._publish(gone=worker)

    def _publish(self, gone: str | None = None) -> None:
        # remove_worker runs before the worker leaves scheduler.workers
        self.scheduler.log_event(TOPIC, [[address, ws.name] for address, ws in self.scheduler.workers.items()
                                         if address != gone])


class Membership:
    """A client's view of its workers: the latest membership the scheduler published, or, until one arrives,
    what the scheduler said when asked once."""

    def __init__(self, client: Any) -> None:
        self.lock = threading.Lock()
        self.workers: list[tuple[str, Any]] | None = None
        client.subscribe_topic(TOPIC, self._on_event)
        client.register_plugin(MembershipPlugin())
        if self.workers is None:
            asked = client.scheduler_info(n_workers=-1)["workers"]
            with self.lock:
                if self.workers is None:
                    self.workers = [(address, info.get("name")) for address, info in asked.items()]

    def _on_event(self, event: tuple[float, list]) -> None:
        _, workers = event
        with self.lock:
            self.workers = [(address, name) for address, name in workers]
