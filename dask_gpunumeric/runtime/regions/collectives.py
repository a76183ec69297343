"""A region's transport, chosen once its tasks have met (``connect``): the workers' channels
(``transport.CommTransport``), or NCCL for CuPy blocks (``NcclTransport``: one communicator per set of
workers, made once and kept, the layout of its messages going through the channels only the first time an
exchange runs).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .program import Collective, Exchange, Key, Transport, exchange
from .transport import (_WORKER_PLUGIN, FIRST_RUN, CommTransport, RegionError, RegionPeerError,
                        RegionTimeoutError)


# --- meeting --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def connect(region: str, plan: str, rank: int, size: int, timeout: float, transport: str, backend: str,
            placed: Sequence[str] = ()) -> Iterator[CommTransport | NcclTransport]:
    """The transport of rank ``rank`` of a call ``region`` of ``plan`` whose ranks are placed on the workers
    ``placed``, once all ``size`` tasks have met (``Channels.known``: once per set of workers); a failure
    inside tells the peers."""
    import distributed

    try:
        worker = distributed.get_worker()
    except ValueError:
        raise RegionError(f"region {region} was set up for {size} workers of a cluster but runs outside one; call "
                          "the accelerated function again where it is computed") from None
    plugin = worker.plugins.get(_WORKER_PLUGIN)
    if plugin is None:
        raise RegionError(f"worker {worker.address} has no gnp region channels: the region was made with a client "
                          "of another cluster; call the accelerated function again with this cluster's client")
    distributed.secede()  # the peers' tasks may need this worker's thread (two ranks on a worker after a loss)
    channels = plugin.channels
    meeting = _without_meeting(channels, region, rank, placed, transport, backend)
    if meeting is None:
        channels.tell(placed, {"region": region, "generation": FIRST_RUN,
                               "abort": f"rank {rank} meets its peers at the scheduler"})  # (see _without_meeting)
        meeting = _meet(worker, channels, region, rank, size, timeout, backend)
    members = meeting["members"]
    chosen: CommTransport | NcclTransport = CommTransport(
        channels, region, meeting["generation"], rank, [m["address"] for m in members], timeout)
    try:
        if use_nccl(transport, backend, members, meeting["exclusive"]):
            chosen = NcclTransport(chosen, members, plan)
        yield chosen
    except BaseException as e:
        chosen.abort(f"rank {rank} failed: {type(e).__name__}: {e}")
        raise
    chosen.close()


def _meet(worker: Any, channels: Any, region: str, rank: int, size: int, timeout: float, backend: str) -> dict:
    """The scheduler's rendezvous of a region's tasks: every rank's member (address, worker id, communicators,
    device), the round's generation, whether the region has its workers to itself; the members kept as a
    set of workers that met (``Channels.known``)."""
    member = {"address": worker.address, "id": worker.id, "communicators": list(channels.communicators),
              "device": device_of_this_worker() if backend == "cupy" else None}
    meeting = channels.call(worker.scheduler.gnp_region_meet(region=region, rank=rank, size=size, member=member,
                                                             timeout=timeout), timeout + 30)
    if not isinstance(meeting, dict):
        raise RegionError("the scheduler has no gnp region rendezvous (runtime.regions.transport.install() adds it)")
    if meeting["status"] == "timeout":
        raise RegionTimeoutError(
            f"rank {rank} of region {region}: ranks {list(meeting['missing'])} of {size} did not start within {timeout:g} s "
            "(their workers are busy, lost or gone); raise gpunumeric.region-timeout if they need longer")
    channels.met(meeting["members"])
    return meeting


def _without_meeting(channels: Any, region: str, rank: int, placed: Sequence[str], transport: str, backend: str
                     ) -> dict | None:
    """The meeting of a region's first run on the workers it was placed on, when they met before and none was
    lost since, and its transport is the workers' channels (NCCL needs each region to have its workers to
    itself, which only the scheduler knows): their members, and ``FIRST_RUN`` as the generation, which
    every rank of that run takes without asking. Else None: the region meets at the scheduler (a task run
    again, after a failure or a lost result, always does: the scheduler then runs its finished peers again
    to meet it, however old the region). A rank that meets first tells the workers of its peers, so that a
    peer that took its first run without meeting (its worker's view of the workers differed) fails at once
    and meets on its retry, instead of waiting for the region's timeout."""
    members = channels.first_run(region, rank, placed)
    if members is None:
        return None
    try:
        if use_nccl(transport, backend, members, exclusive=True):
            return None
    except RegionError:
        return None  # the meeting says why
    return {"members": members, "generation": FIRST_RUN, "exclusive": False}


def leave(rank_key: Key, outputs: dict[Key, Any]) -> str:
    """Keep a rank's output blocks on this worker for the tasks of those blocks (``take``); where they are."""
    import distributed

    worker = distributed.get_worker()
    worker.plugins[_WORKER_PLUGIN].channels.leave(rank_key, outputs)
    return worker.address


async def take(where: str, rank_key: Key, key: Key, timeout: float) -> Any:
    """An output block a rank's task left at the worker ``where``: from this worker's own channels, or
    asked of that worker (the block's task ran elsewhere: its owner was busy, or lost and replaced). In the
    worker's event loop."""
    import distributed

    worker = distributed.get_worker()
    channels = worker.plugins[_WORKER_PLUGIN].channels
    if where == worker.address:
        return channels.take(rank_key, key)
    return await asyncio.wait_for(worker.rpc(where).gnp_region_left(rank=rank_key, key=key), timeout)


def use_nccl(transport: str, backend: str, members: Sequence[dict[str, Any]], exclusive: bool) -> bool:
    """NCCL for CuPy blocks (asked for, or available with "auto") when every rank is on a worker and a GPU of
    its own (NCCL refuses two ranks on one device) and no other region runs on them (a communicator serves
    one region at a time). The same decision on every rank: it depends only on what all of them share."""
    if transport == "comm" or backend != "cupy" or not exclusive or len({m["id"] for m in members}) < len(members):
        return False
    if len({m.get("device") for m in members}) < len(members):
        if transport == "nccl":
            raise RegionError("gpunumeric.region-transport is 'nccl' but ranks of the region share a GPU (several "
                              "workers on one device), which NCCL refuses; use 'auto' or 'comm'")
        return False
    if transport == "nccl":  # asked for: NCCL missing is an error, raised where it is used
        return True
    try:
        from cupy.cuda import nccl
    except ImportError:
        return False
    return bool(nccl.available)


def device_of_this_worker() -> str:
    """This process's current GPU, the same text in every process using it: host and PCI bus id."""
    import cupy

    return f"{socket.gethostname()}/{cupy.cuda.Device().pci_bus_id}"


def nccl_communicator(size: int, uid: Any, rank: int, timeout: float) -> Any:
    """Rank ``rank`` of a new NCCL communicator of ``size`` ranks, or ``RegionTimeoutError`` when the others do
    not join within ``timeout`` seconds (NCCL itself would wait for ever: its thread is left waiting)."""
    import cupy
    from cupy.cuda import nccl

    device = cupy.cuda.Device()
    made: concurrent.futures.Future = concurrent.futures.Future()

    def make() -> None:
        try:
            with device:
                made.set_result(nccl.NcclCommunicator(size, uid, rank))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting task
            made.set_exception(e)

    threading.Thread(target=make, name="gnp-nccl-init", daemon=True).start()
    try:
        return made.result(timeout)
    except concurrent.futures.TimeoutError:
        raise RegionTimeoutError(f"rank {rank} of a new NCCL communicator of {size} ranks: its peers did not join "
                                 f"within {timeout:g} s; raise gpunumeric.region-timeout if they need longer") from None



@dataclass
class _Communicator:
    """An NCCL communicator of a set of workers, and the layouts of the messages of the exchanges it has run
    (by plan, exchange, direction and peer), kept from one call of a region to the next."""

    nccl: Any
    addresses: tuple[str, ...]
    layouts: dict[tuple, Any] = field(default_factory=dict)


class NcclTransport(Transport):
    """CuPy arrays through NCCL on the current stream, each exchange's sends and receives grouped; what else
    the values hold (their structure, shapes, dtypes, counts) goes through ``control`` the first time an
    exchange of a plan runs on these workers, and every time for values holding anything but arrays and
    ints."""

    def __init__(self, control: CommTransport, members: Sequence[dict[str, Any]], plan: str) -> None:
        self.control = control
        self.rank, self.size = control.rank, control.size
        self.plan = plan
        # a string: the members' lists of communicators reach the scheduler as msgpack, tuples as lists
        self.key = " ".join(f"{m['address']}={m['id']}" for m in members)
        communicators = control.channels.communicators
        if not all(self.key in m["communicators"] for m in members):
            # made once per set of workers, rank 0's unique id going to the others through the channels
            from cupy.cuda import nccl

            lost = control.channels.lost
            for key in [k for k, c in communicators.items() if k == self.key or any(a in lost for a in c.addresses)]:
                communicators.pop(key).nccl.destroy()  # this set's old one, and those of lost workers
            if self.rank == 0:
                uid = nccl.get_unique_id()
                control.exchange(0, {p: [uid] for p in range(1, self.size)}, [])
            else:
                uid = control.exchange(0, {}, [0])[0][0]
            communicators[self.key] = _Communicator(nccl_communicator(self.size, uid, self.rank, control.timeout),
                                                    tuple(control.addresses))
        self.communicator = communicators[self.key]

    def exchange(self, step: int, outgoing: dict[int, list[Any]], sources: Sequence[int]) -> dict[int, list[Any]]:
        import cupy
        from cupy.cuda import nccl

        known = self.communicator.layouts
        sends = {peer: _split(values) for peer, values in outgoing.items()}
        tell = {peer: [layout] for peer, (_, layout) in sends.items() if (self.plan, step, "to", peer) not in known}
        ask = [peer for peer in sources if (self.plan, step, "from", peer) not in known]
        layouts = {peer: known.get((self.plan, step, "from", peer)) for peer in sources}
        if tell or ask:
            told = self.control.exchange(step, tell, ask)
            for peer, [layout] in tell.items():
                if _static(layout):
                    known[(self.plan, step, "to", peer)] = layout
            for peer in ask:
                layouts[peer] = told[peer][0]
                if _static(layouts[peer]):
                    known[(self.plan, step, "from", peer)] = layouts[peer]
        stream = cupy.cuda.get_current_stream().ptr
        communicator = self.communicator.nccl
        received: dict[int, list[Any]] = {}
        nccl.groupStart()
        try:
            for peer, (arrays, _) in sends.items():
                for a in arrays:
                    if a.nbytes:
                        communicator.send(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, peer, stream)
            for peer in sources:
                arrays = [cupy.empty(shape, dtype) for shape, dtype in _array_specs(layouts[peer])]
                for a in arrays:
                    if a.nbytes:
                        communicator.recv(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, peer, stream)
                received[peer] = _join(layouts[peer], iter(arrays))
        finally:
            nccl.groupEnd()
        return received

    def collective(self, step: Collective, env: dict[Key, Any]) -> None:
        """The exchange without the reductions' partials, then an all-reduce of each reduction's local partial
        (its arrays, grouped) on every rank: the combine's value. Partials NCCL cannot reduce (a dtype it has
        not, values that are not arrays) take the exchange of every transport, on every rank alike."""
        partials = [env[r.partials[self.rank]] for r in step.reductions]
        if not all(_all_reducible(p) for p in partials):  # the same on every rank: the same dtypes
            super().collective(step, env)
            return
        moved = {k for r in step.reductions for k in r.partials}
        rest = Exchange(step.exchange.step, *(tuple((peer, kept) for peer, keys in pairs
                                                    if (kept := tuple(k for k in keys if k not in moved)))
                                              for pairs in (step.exchange.sends, step.exchange.recvs)))
        if rest.sends or rest.recvs:
            exchange(rest, env, self)
        for reduction, partial in zip(step.reductions, partials):
            env[reduction.combine.key] = nccl_all_reduce(self.communicator.nccl, partial, reduction.op)

    def settle(self) -> None:
        """Wait for the exchanges queued on the GPU; a lost or failed peer aborts the communicator (the
        waiting kernels then end) and raises."""
        import cupy

        stream = cupy.cuda.get_current_stream()
        channels = self.control.channels
        while not stream.done:
            why = channels.aborted.get((self.control.region, self.control.generation))
            lost = [a for a in self.control.addresses if a in channels.lost]
            if why or lost:
                self.communicator.nccl.abort()
                channels.communicators.pop(self.key, None)
                raise RegionPeerError(f"region {self.control.region}: {why or f'lost the worker at {lost[0]}'}")
            time.sleep(0.001)
        self.communicator.nccl.check_async_error()

    def abort(self, why: str) -> None:
        """Tell the peers, and drop the communicator: a failed region may have left it mid-exchange (every rank
        of the next region on these workers then makes a new one)."""
        self.control.channels.communicators.pop(self.key, None)
        self.control.abort(why)

    def close(self) -> None:
        self.settle()
        self.control.close()


_NCCL_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
               "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint32": "NCCL_UINT32", "uint64": "NCCL_UINT64",
               "int8": "NCCL_INT8", "uint8": "NCCL_UINT8"}


def _all_reducible(partial: Any) -> bool:
    """Whether NCCL can all-reduce a reduction's partial: a dict of CuPy arrays of dtypes it has."""
    import cupy

    return isinstance(partial, dict) and all(isinstance(v, cupy.ndarray) and v.dtype.name in _NCCL_TYPES
                                             for v in partial.values())


def nccl_all_reduce(communicator: Any, partial: dict[str, Any], op: str) -> dict[str, Any]:
    """A reduction's partial combined over every rank of ``communicator`` by NCCL's all-reduce, field by field
    (``op`` "sum" or "prod": the element-wise combine of partials of one shape), queued on the current
    stream."""
    import cupy
    from cupy.cuda import nccl

    stream = cupy.cuda.get_current_stream().ptr
    operation = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD}[op]
    out = {}
    nccl.groupStart()
    try:
        for name, value in partial.items():
            source = cupy.ascontiguousarray(value)
            out[name] = cupy.empty_like(source)
            communicator.allReduce(source.data.ptr, out[name].data.ptr, source.size,
                                   getattr(nccl, _NCCL_TYPES[source.dtype.name]), operation, stream)
    finally:
        nccl.groupEnd()
    return out


# A value's layout: the value with each CuPy array replaced by ("<array>", shape, dtype) and tuples, lists and
# dicts kept; anything else stays as it is (and makes the layout change from one run to the next unless it
# is an int, a bool, a str or None).
_ARRAY = "<array>"


def _split(values: list[Any]) -> tuple[list[Any], Any]:
    """The contiguous CuPy arrays of some values, and their layout."""
    import cupy

    arrays: list[Any] = []

    def walk(v: Any) -> Any:
        if isinstance(v, cupy.ndarray):
            arrays.append(cupy.ascontiguousarray(v))
            return (_ARRAY, v.shape, v.dtype.str)
        if isinstance(v, (tuple, list)):
            return type(v)(walk(x) for x in v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    layout = [walk(v) for v in values]
    return arrays, layout


def _static(layout: Any) -> bool:
    if isinstance(layout, tuple) and layout[:1] == (_ARRAY,):
        return True
    if isinstance(layout, (tuple, list)):
        return all(_static(x) for x in layout)
    if isinstance(layout, dict):
        return all(_static(x) for x in layout.values())
    return layout is None or type(layout) in (int, bool, str)


def _array_specs(layout: Any) -> Iterator[tuple[tuple[int, ...], str]]:
    if isinstance(layout, tuple) and layout[:1] == (_ARRAY,):
        yield layout[1], layout[2]
    elif isinstance(layout, (tuple, list)):
        for x in layout:
            yield from _array_specs(x)
    elif isinstance(layout, dict):
        for x in layout.values():
            yield from _array_specs(x)


def _join(layout: Any, arrays: Iterator[Any]) -> Any:
    if isinstance(layout, tuple) and layout[:1] == (_ARRAY,):
        return next(arrays)
    if isinstance(layout, (tuple, list)):
        return type(layout)(_join(x, arrays) for x in layout)
    if isinstance(layout, dict):
        return {k: _join(x, arrays) for k, x in layout.items()}
    return layout

