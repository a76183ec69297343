"""How the per-worker tasks of a region (``lower``) meet and send each other values, directly between workers.

* Rendezvous: each task of a region reports to the scheduler (a handler that ``install`` adds once per
  cluster) and waits until all of them have, or fails with ``RegionTimeoutError`` after
  ``gpunumeric.region-timeout``. Once per set of workers: the first run of a region on workers that met
  before (none lost since) takes its peers from that meeting (``Channels.first_run``, generation
  ``FIRST_RUN``), unless it needs NCCL. A task that runs again (a retry after a lost peer, or a lost result,
  however old the region) meets, starting a new round, and its peers that had finished run again too, so a
  recomputed region meets afresh. The scheduler keeps only the rounds still meeting.
* Channels: every worker (a plugin, also on workers that join later) keeps one connection to each peer it
  talks to, reused by every region, and an inbox of the messages from its peers. A closed connection means
  a lost peer: the tasks waiting on it fail at once with ``RegionPeerError`` (the scheduler then runs the
  region again: its tasks are retried, the lost worker's elsewhere). A task that fails tells its peers.
* ``CommTransport`` sends values through these channels with Dask's comms (TCP; UCX where the cluster uses
  it, which moves CuPy blocks GPU to GPU). ``collectives`` chooses it or NCCL for a region.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .program import Transport

_SCHEDULER_PLUGIN = "gnp-region-rendezvous"
_WORKER_PLUGIN = "gnp-region-channels"
_MEET = "gnp_region_meet"
_CHANNEL = "gnp_region_channel"
_LEFT = "gnp_region_left"
_ABORTS_KEPT = 4096  # failed regions a worker remembers (their peers' tasks may still be starting)
_STARTED_KEPT = 65536  # region tasks a worker remembers running (one run again meets its peers)
_KNOWN_KEPT = 256  # sets of workers that met, a worker remembers
FIRST_RUN = -1  # the generation of a region's first run without a meeting (the scheduler's rounds count from 0)


class RegionError(RuntimeError):
    """A region's per-worker tasks could not run together."""


class RegionTimeoutError(RegionError):
    """A region's peers did not start, or did not send what they owe, within ``gpunumeric.region-timeout``."""


class RegionPeerError(RegionError):
    """A peer of a region's task was lost (its worker died) or failed."""


# --- setup, once per cluster ---------------------------------------------------------------------------

_installed: set[tuple[int, str]] = set()


def install() -> None:
    """Give the default client's cluster the rendezvous (scheduler) and the channels (every worker)."""
    import distributed

    client = distributed.default_client()
    key = (id(client), client.scheduler.address)
    if key not in _installed:
        client.register_plugin(_Rendezvous())
        client.register_plugin(_ChannelsPlugin())
        _installed.add(key)


def _scheduler_plugin_base() -> type:
    from distributed.diagnostics.plugin import SchedulerPlugin

    return SchedulerPlugin


def _worker_plugin_base() -> type:
    from distributed.diagnostics.plugin import WorkerPlugin

    return WorkerPlugin


@dataclass
class _Round:
    """The tasks of a region that have reported, and whether all have."""

    generation: int
    members: dict[int, dict[str, Any]] = field(default_factory=dict)
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    exclusive: bool = False  # no other running region shares a worker with it


class _Rendezvous(_scheduler_plugin_base()):  # type: ignore[misc]
    """On the scheduler: the handler where a region's tasks meet."""

    name = _SCHEDULER_PLUGIN
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.rounds: dict[str, _Round] = {}  # regions whose tasks are meeting now (a complete round is dropped)
        self.generations = itertools.count()  # each round's own number: messages of another never match it
        self.busy: dict[str, str] = {}  # worker id -> the region using it exclusively
        self.running: dict[str, set[int]] = {}  # such a region -> its ranks still running
        scheduler.handlers[_MEET] = self.meet

    async def meet(self, region: str, rank: int, size: int, member: dict[str, Any], timeout: float) -> dict:
        """Wait until all ``size`` tasks of ``region`` have reported; then everyone's report, in rank order."""
        current = self.rounds.get(region)
        if current is None or rank in current.members:  # a new round
            again = current is not None
            current = self.rounds[region] = _Round(next(self.generations))
            peers = [r for r in range(size) if r != rank]
            # a task running again while its round is open, or after its peers finished (a lost result or
            # worker, however long ago the region ran): the peers that finished run again to meet it
            if again or any(self._state(region, r) == "memory" for r in peers):
                self._run_again(region, peers)
        current.members[rank] = member
        if len(current.members) == size:
            ids = [m["id"] for m in current.members.values()]
            current.exclusive = not any(i in self.busy for i in ids)
            if current.exclusive:
                self.busy.update(dict.fromkeys(ids, region))
                self.running[region] = set(range(size))
            current.complete.set()
            del self.rounds[region]
        try:
            await asyncio.wait_for(current.complete.wait(), timeout)
        except TimeoutError:
            if self.rounds.get(region) is current:
                del self.rounds[region]
            return {"status": "timeout", "missing": sorted(set(range(size)) - set(current.members))}
        return {"status": "OK", "generation": current.generation, "exclusive": current.exclusive,
                "members": [current.members[r] for r in range(size)]}

    def _state(self, region: str, rank: int) -> str | None:
        ts = self.scheduler.tasks.get((region, rank))
        return None if ts is None else ts.state

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """A task of an exclusive region that stops running frees its worker for the next region."""
        if start == "processing" and isinstance(key, tuple) and key[0] in self.running:
            ranks = self.running[key[0]]
            ranks.discard(key[1])
            if not ranks:
                del self.running[key[0]]
                self.busy = {i: r for i, r in self.busy.items() if r != key[0]}

    def _run_again(self, region: str, ranks: list[int]) -> None:
        """A region's task runs again (its worker was lost, or its result): its peers that finished run again
        too, so that they meet it (a peer still running fails on its own, and its retry meets it)."""
        stimulus = f"gnp-region-rerun-{time.time()}"
        for rank in ranks:
            ts = self.scheduler.tasks.get((region, rank))
            if ts is not None and ts.state == "memory":
                self.scheduler.transitions({ts.key: "released"}, stimulus)
            if ts is not None and ts.state == "released":
                self.scheduler.transitions({ts.key: "waiting"}, stimulus)


class _ChannelsPlugin(_worker_plugin_base()):  # type: ignore[misc]
    """On every worker: its Channels."""

    name = _WORKER_PLUGIN
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.channels = Channels(worker)
        worker.handlers[_CHANNEL] = self.channels.serve
        worker.handlers[_LEFT] = self.channels.serve_left

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        """A rank's task leaving memory here drops the output blocks it left that no task took."""
        if start == "memory":
            self.channels.drop_left(key)

    async def teardown(self, worker: Any) -> None:
        await self.channels.close()


# --- channels between workers ---------------------------------------------------------------------------


class Channels:
    """One worker's connections to its peers (written to from the worker's event loop) and its inbox of
    their messages (read by the region tasks' threads)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.loop = worker.loop.asyncio_loop
        self.arrived = threading.Condition()
        self.inbox: dict[tuple, list[Any]] = {}  # (region, generation, source, target, number) -> values
        self.aborted: OrderedDict[tuple[str, int], str] = OrderedDict()  # (region, generation) -> why
        self.lost: set[str] = set()  # peers whose connection here closed
        self.comms: dict[str, Any] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.communicators: dict[str, Any] = {}  # NCCL's (``collectives``), by their members
        self.left: dict[Any, dict[Any, Any]] = {}  # a rank task's key -> its output blocks no task took yet
        self.known: OrderedDict[tuple[str, ...], list[dict]] = OrderedDict()  # addresses that met -> members
        self.started: OrderedDict[tuple[str, int], None] = OrderedDict()  # (region, rank) of tasks run here

    # -- meetings, once per set of workers (``collectives.connect``) ------------------------------------------
    def met(self, members: list[dict[str, Any]]) -> None:
        """Keep the members of a meeting, by their addresses in rank order."""
        with self.arrived:
            self.known[tuple(m["address"] for m in members)] = members
            self.known.move_to_end(tuple(m["address"] for m in members))
            while len(self.known) > _KNOWN_KEPT:
                self.known.popitem(last=False)

    def first_run(self, region: str, rank: int, placed: Sequence[str]) -> list[dict[str, Any]] | None:
        """The members of an earlier meeting of the workers ``placed`` (in rank order, none lost since) when this
        is the first run here of rank ``rank`` of ``region``, on the worker it was placed on; else None (the
        task meets its peers at the scheduler)."""
        placed = tuple(placed)
        with self.arrived:
            again = (region, rank) in self.started
            self.started[(region, rank)] = None
            while len(self.started) > _STARTED_KEPT:
                self.started.popitem(last=False)
            if again or rank >= len(placed) or placed[rank] != self.worker.address:
                return None
            return self.known.get(placed)  # (a set with a worker lost since is dropped: ``serve``)

    # -- output blocks a rank's task leaves for the tasks of its blocks (``lower.run_rank_leaving``) ---------
    def leave(self, rank_key: Any, outputs: dict[Any, Any]) -> None:
        with self.arrived:
            self.left[rank_key] = dict(outputs)

    def take(self, rank_key: Any, key: Any) -> Any:
        """An output block left here by a rank's task (KeyError when it is not here)."""
        with self.arrived:
            blocks = self.left[rank_key]
            value = blocks.pop(key)
            if not blocks:
                del self.left[rank_key]
            return value

    def drop_left(self, rank_key: Any) -> None:
        with self.arrived:
            self.left.pop(rank_key, None)

    async def serve_left(self, rank: Any, key: Any) -> Any:
        """Handler: a block left here, for the task of that block running on another worker."""
        from distributed.protocol import to_serialize

        return to_serialize(self.take(_as_key(rank), _as_key(key)))

    async def serve(self, comm: Any, source: str) -> None:
        """Handler of a peer's connection: its messages into the inbox until it closes."""
        from distributed.comm.core import CommClosedError

        with self.arrived:
            self.lost.discard(source)
        try:
            while True:
                self._deliver(await comm.read())
        except (CommClosedError, OSError):
            pass
        finally:
            with self.arrived:
                self.lost.add(source)
                for workers in [w for w in self.known if source in w]:  # they meet again, even if it comes back
                    del self.known[workers]
                self.arrived.notify_all()

    def _deliver(self, msg: dict[str, Any]) -> None:
        with self.arrived:
            if "abort" in msg:
                self.aborted[(msg["region"], msg["generation"])] = msg["abort"]
                while len(self.aborted) > _ABORTS_KEPT:
                    self.aborted.popitem(last=False)
            elif "values" in msg:
                tag = (msg["region"], msg["generation"], msg["source"], msg["target"], msg["number"])
                self.inbox[tag] = msg["values"]
            self.arrived.notify_all()

    def tell(self, addresses: Sequence[str], msg: dict[str, Any]) -> None:
        """Send a message to the workers ``addresses`` (this one too, if among them), waiting for nothing."""
        for address in set(addresses):
            if address == self.worker.address:
                self._deliver(msg)
            else:
                self.send(address, msg)

    def send(self, address: str, msg: dict[str, Any]) -> concurrent.futures.Future:
        """Queue a message to a peer (in order with the earlier ones to it)."""
        return asyncio.run_coroutine_threadsafe(self._write(address, msg), self.loop)

    async def _write(self, address: str, msg: dict[str, Any]) -> None:
        from distributed.comm import connect

        async with self.locks.setdefault(address, asyncio.Lock()):
            comm = self.comms.get(address)
            if comm is None or comm.closed():
                comm = await connect(address, **self.worker.connection_args)
                await comm.write({"op": _CHANNEL, "source": self.worker.address, "reply": False})
                self.comms[address] = comm
            await comm.write(msg)

    def call(self, coroutine: Any, timeout: float) -> Any:
        """Run a coroutine on the worker's event loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def discard(self, region: str, generation: int, rank: int) -> None:
        """Forget the messages to one rank of a region (another rank may share the worker)."""
        with self.arrived:
            for tag in [t for t in self.inbox if t[:2] == (region, generation) and t[3] == rank]:
                del self.inbox[tag]

    async def close(self) -> None:
        for comm in self.comms.values():
            comm.abort()
        for communicator in self.communicators.values():
            communicator.nccl.destroy()



def _as_key(value: Any) -> Any:
    """A key as it was before msgpack made its tuples lists."""
    return tuple(_as_key(v) for v in value) if isinstance(value, list) else value


# --- transports -----------------------------------------------------------------------------------------


class CommTransport(Transport):
    """Values through the workers' channels (Dask's comms: TCP, or UCX where the cluster uses it)."""

    def __init__(self, channels: Channels, region: str, generation: int, rank: int, addresses: list[str],
                 timeout: float) -> None:
        self.channels = channels
        self.region, self.generation = region, generation
        self.rank, self.size = rank, len(addresses)
        self.addresses = addresses
        self.timeout = timeout
        self.sent = [0] * self.size  # messages sent to each peer
        self.received = [0] * self.size  # messages taken from each peer
        self.pending: list[tuple[int, concurrent.futures.Future]] = []
        for peer in range(self.size):  # open the channels both ways now: a peer lost later is noticed at once
            if peer != rank:
                self._send(peer, {"hello": True})

    def _send(self, peer: int, body: dict[str, Any]) -> None:
        msg = {"region": self.region, "generation": self.generation, "source": self.rank, "target": peer, **body}
        self.pending.append((peer, self.channels.send(self.addresses[peer], msg)))

    def _check_sends(self) -> None:
        still = []
        for peer, future in self.pending:
            if not future.done():
                still.append((peer, future))
            elif future.exception() is not None:
                raise RegionPeerError(f"rank {self.rank} of region {self.region} could not reach rank {peer} at "
                                      f"{self.addresses[peer]}: {future.exception()}")
        self.pending = still

    def exchange(self, step: int, outgoing: dict[int, list[Any]], sources: Sequence[int]) -> dict[int, list[Any]]:
        from distributed.protocol import to_serialize

        for peer, values in outgoing.items():
            self._send(peer, {"number": self.sent[peer], "values": [to_serialize(v) for v in values]})
            self.sent[peer] += 1
        tags = {}
        for peer in sources:
            tags[peer] = (self.region, self.generation, peer, self.rank, self.received[peer])
            self.received[peer] += 1
        return self._wait(tags)

    def _wait(self, tags: dict[int, tuple]) -> dict[int, list[Any]]:
        channels = self.channels
        deadline = time.monotonic() + self.timeout
        with channels.arrived:
            while True:
                if all(tag in channels.inbox for tag in tags.values()):
                    return {peer: channels.inbox.pop(tag) for peer, tag in tags.items()}
                why = channels.aborted.get((self.region, self.generation))
                if why is not None:
                    raise RegionPeerError(f"region {self.region}: {why}")
                lost = [p for p, tag in tags.items() if tag not in channels.inbox and self.addresses[p] in channels.lost]
                if lost:
                    raise RegionPeerError(f"rank {self.rank} of region {self.region} lost rank {lost[0]} (worker "
                                          f"{self.addresses[lost[0]]} closed its connection)")
                self._check_sends()
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [p for p, tag in tags.items() if tag not in channels.inbox]
                    raise RegionTimeoutError(f"rank {self.rank} of region {self.region} waited {self.timeout:g} s for "
                                             f"ranks {missing}; raise gpunumeric.region-timeout if they need longer")
                channels.arrived.wait(min(left, 0.5))

    def abort(self, why: str) -> None:
        """Tell the peers this rank failed (best effort) and forget the region's messages."""
        for peer in range(self.size):
            if peer != self.rank:
                self._send(peer, {"abort": why})
        concurrent.futures.wait([f for _, f in self.pending], timeout=5)
        self.channels.discard(self.region, self.generation, self.rank)

    def close(self) -> None:
        """Wait until every message sent has left (a failure to send is an error)."""
        concurrent.futures.wait([f for _, f in self.pending], timeout=self.timeout)
        self._check_sends()
        if self.pending:
            raise RegionTimeoutError(f"rank {self.rank} of region {self.region} could not send its last messages "
                                     f"within {self.timeout:g} s")
        self.channels.discard(self.region, self.generation, self.rank)


