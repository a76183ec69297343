"""Plans kept where they run, so that a call on a cluster names its plan instead of sending it again.

* A call's ``Region`` carries its plan to the scheduler in full until the scheduler has said it holds it: the
  scheduler keeps every plan it unpickles (``restored``) and announces its token on ``TOPIC``; the client
  notes it (``watch``), and from then on pickles the plan as its token (``Plan.__reduce__``, ``plan``). No
  request waits for that: a plan sent twice costs bytes, never a round trip.
* A task of a region pickles its program as (plan, rank) when the scheduler holds the plan (``holds``); a
  worker asks the scheduler for each program once and keeps it (``program``).

A plan the scheduler no longer holds (it keeps the ``_KEPT`` most recently used) is an error naming the fix.
"""
from __future__ import annotations

import asyncio
import sys
import threading
from collections import OrderedDict
from typing import Any

TOPIC = "gnp-plans"
_PLUGIN = "gnp-plans"
_PROGRAM = "gnp_plan_program"
_KEPT = 1024  # plans a scheduler keeps
_KNOWN_KEPT = 256  # plans a client counts on its scheduler holding (fewer: never more than it keeps)
_PROGRAMS_KEPT = 256  # programs a worker keeps

_lock = threading.Lock()
_plans: OrderedDict[str, Any] = OrderedDict()  # on a scheduler: the plans it unpickled, by token
_arrived: list[str] = []  # on a scheduler: tokens of plans unpickled since the last announcement
_programs: OrderedDict[tuple[str, int], Any] = OrderedDict()  # on a worker: (plan key, rank) -> program
_held: dict[tuple[int, str], OrderedDict[str, None]] = {}  # on a client: per (client, scheduler), tokens held


class PlanMissingError(RuntimeError):
    """A call named a plan its scheduler does not hold."""


def _remember(cache: OrderedDict, key: Any, value: Any, size: int) -> None:
    with _lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)


# --- on the client --------------------------------------------------------------------------------------


def synchronous_client() -> Any:
    """The default distributed client when one is active and synchronous (None otherwise)."""
    if "distributed" not in sys.modules:
        return None
    import distributed

    try:
        client = distributed.default_client()
    except ValueError:
        return None
    return None if client.asynchronous else client


def _destination(client: Any) -> tuple[int, str]:
    return id(client), client.scheduler.address  # the address too: a new client may reuse an old id


def watch() -> None:
    """Give the default client's scheduler the plan store (once per cluster: one round trip) and note the
    plans it announces."""
    client = synchronous_client()
    if client is None:
        return
    where = _destination(client)
    if where in _held:
        return
    _held[where] = OrderedDict()

    def held(event: tuple[float, list[str]]) -> None:
        for token in event[1]:
            _remember(_held[where], token, None, _KNOWN_KEPT)

    client.subscribe_topic(TOPIC, held)
    client.register_plugin(_plan_store_class()())


def published(token: str) -> bool:
    """Whether the default client's scheduler holds the plan ``token`` (a plan pickled now, for it, is then
    its token alone)."""
    client = synchronous_client()
    if client is None:
        return False
    held = _held.get(_destination(client))
    return held is not None and token in held


def note_published(client: Any, token: str) -> None:
    """Note that ``client``'s scheduler holds the plan ``token`` (handed to it in a request of its own)."""
    held = _held.get(_destination(client))
    if held is not None:
        _remember(held, token, None, _KNOWN_KEPT)


# --- on the scheduler -----------------------------------------------------------------------------------


def _plan_store_class() -> type:
    """The scheduler plugin class ``_PlanStore`` (announces the plans the scheduler holds, hands out their
    programs), made on first use: distributed is an optional dependency, and this module is imported with the
    package. It is kept as this module's attribute, so that the plugin pickles by reference."""
    made = globals().get("_PlanStore")
    if made is not None:
        return made
    from distributed.diagnostics.plugin import SchedulerPlugin

    class _PlanStore(SchedulerPlugin):
        """On the scheduler: announces the plans it holds, and hands out their programs."""

        name = _PLUGIN
        idempotent = True

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler
            scheduler.handlers[_PROGRAM] = self.program

        def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
            with _lock:
                tokens = _arrived[:]
                _arrived.clear()
            if tokens:
                scheduler.log_event(TOPIC, tokens)

        def program(self, plan: str, rank: int) -> bytes:
            from distributed.protocol.pickle import dumps

            return dumps(program_of(plan, rank))

    _PlanStore.__qualname__ = "_PlanStore"
    globals()["_PlanStore"] = _PlanStore
    return _PlanStore


def __getattr__(name: str) -> Any:
    # (unpickling the plugin on the scheduler looks the class up here)
    if name == "_PlanStore":
        return _plan_store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def restored(token: str, state: dict, cls: type) -> Any:
    """A plan unpickled (its class ``cls``, its ``state``), kept here under its token: on a scheduler, what
    later calls name."""
    made = object.__new__(cls)
    made.__dict__.update(state)
    _remember(_plans, token, made, _KEPT)
    with _lock:
        _arrived.append(token)
        del _arrived[:-_KEPT]  # (nothing announces them where no client watches)
    return made


def plan(token: str) -> Any:
    """The plan ``token`` held here (unpickling a Region on the scheduler)."""
    with _lock:
        found = _plans.get(token)
        if found is not None:
            _plans.move_to_end(token)
    if found is None:
        raise PlanMissingError(f"the scheduler does not hold the accelerated plan {token} (it went to another "
                               "scheduler, or was dropped among many newer plans); call the accelerated function "
                               "again with this cluster's client as the default client")
    return found


def holds(plan_key: str) -> bool:
    """Whether this process (the scheduler) holds the plan of ``plan_key`` ("<token>-<workers>"), so that a
    worker can ask it for the plan's programs."""
    return plan_key.rpartition("-")[0] in _plans


def program_of(plan_key: str, rank: int) -> Any:
    """The program of rank ``rank`` of a plan held here, for ``plan_key``'s number of workers."""
    token, _, n_workers = plan_key.rpartition("-")
    return plan(token).built(int(n_workers)).programs[rank]


# --- on a worker ----------------------------------------------------------------------------------------


async def program_for(worker: Any, plan_key: str, rank: int) -> Any:
    """``program`` from ``worker``'s event loop (a handler's): kept here, or asked of the scheduler once."""
    with _lock:
        found = _programs.get((plan_key, rank))
    if found is None:
        if holds(plan_key):
            found = program_of(plan_key, rank)
        else:
            from distributed.protocol.pickle import loads

            found = loads(await worker.scheduler.gnp_plan_program(plan=plan_key, rank=rank))
        _remember(_programs, (plan_key, rank), found, _PROGRAMS_KEPT)
    return found


def program(plan_key: str, rank: int, timeout: float) -> Any:
    """The program of rank ``rank`` of the plan of ``plan_key``: kept here, or asked of the scheduler once
    (from a task's thread)."""
    key = (plan_key, rank)
    with _lock:
        found = _programs.get(key)
    if found is not None:
        return found
    if holds(plan_key):  # the scheduler's own process (workers in it)
        found = program_of(plan_key, rank)
    else:
        import distributed
        from distributed.protocol.pickle import loads

        worker = distributed.get_worker()
        asked = asyncio.run_coroutine_threadsafe(worker.scheduler.gnp_plan_program(plan=plan_key, rank=rank),
                                                 worker.loop.asyncio_loop)
        found = loads(asked.result(timeout))
    _remember(_programs, key, found, _PROGRAMS_KEPT)
    return found
