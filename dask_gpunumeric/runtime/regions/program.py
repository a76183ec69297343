"""Per-worker programs: what one rank of a region runs, and the interpreter that runs it.

A program is a list of steps, run in order on one rank:

* ``Run``: one task of the optimized graph (a fused kernel, a reduction stage, a gather, ...) on local values;
* ``Exchange``: values sent to and received from peers (halo pieces, reduction partials), through a
  ``Transport`` (``transport``, ``collectives``) that talks to the peers directly, never through the scheduler;
* ``Collective``: an exchange that brings every rank the partials of reductions (sums, products) whose
  combines every rank then runs: with NCCL, all-reduces of the partials instead;
* ``Repeat``: a ``fori_loop``/``while_loop``: the program of its body run in place, its state carried over;
* ``Free``: values that no later step needs.

``build`` makes the programs of a region, ``lower`` the tasks that run them.
"""
from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask._task_spec import GraphNode, List, Task, TaskRef

from ...backend import module, to_numpy

Key = Hashable


@dataclass(frozen=True)
class Run:
    """Compute ``key`` with a task of the optimized graph."""

    key: Key
    task: GraphNode

    @functools.cached_property
    def _args(self) -> tuple[tuple[str, Any], ...] | None:
        """How to call a plain task directly: its arguments, each a value, a key, keys or a nested node (what
        Task.__call__ does, without checking its inputs again on every call in a loop's body)."""
        task = self.task
        return tuple(_argument(a) for a in task.args) if type(task) is Task and not task.kwargs else None

    def __call__(self, env: dict[Key, Any]) -> Any:
        """The task's value, its inputs taken from ``env``."""
        args = self._args
        if args is None:
            return self.task({d: env[d] for d in self.task.dependencies})
        return self.task.func(*[a if kind is _VALUE else env[a] if kind is _KEY else [env[k] for k in a]
                                if kind is _KEYS else a({d: env[d] for d in a.dependencies}) for kind, a in args])


_VALUE, _KEY, _KEYS, _NODE = "value", "key", "keys", "node"


def _argument(a: Any) -> tuple[str, Any]:
    """How ``Run`` finds a task argument: a value, a key, a list of keys, or a node to call."""
    if isinstance(a, TaskRef):
        return _KEY, a.key
    if isinstance(a, List) and all(isinstance(x, TaskRef) for x in a.args):
        return _KEYS, tuple(x.key for x in a.args)
    return (_NODE, a) if isinstance(a, GraphNode) else (_VALUE, a)


@dataclass(frozen=True)
class Exchange:
    """Send values to peers and receive values from them: ``(peer rank, keys)`` each way. ``step`` names the
    exchange in the region (a transport may cache what it learnt about its messages by it)."""

    step: int
    sends: tuple[tuple[int, tuple[Key, ...]], ...]
    recvs: tuple[tuple[int, tuple[Key, ...]], ...]


@dataclass(frozen=True)
class AllReduce:
    """A reduction's combine run on every rank over one partial from each rank (``partials``, by rank),
    equal to an element-wise ``op`` ("sum" or "prod") of the partials' arrays."""

    combine: Run
    partials: tuple[Key, ...]
    op: str


@dataclass(frozen=True)
class Collective:
    """An exchange, then the combines of ``reductions`` over the partials it brought (and the local ones)."""

    exchange: Exchange
    reductions: tuple[AllReduce, ...]


@dataclass(frozen=True)
class Free:
    """Drop values no later step uses."""

    keys: tuple[Key, ...]


@dataclass(frozen=True)
class Repeat:
    """A loop: ``body`` runs with the loop invariants and the state (body keys), then the state becomes the
    body's outputs named in ``carry``; ``count`` times (fori_loop), or while the flag is true and at most
    ``count`` times (while_loop, ``count`` None: no bound)."""

    body: Program
    count: int | None
    state: tuple[tuple[Key, Key], ...]  # (outer key, body key): the initial state
    invariants: tuple[tuple[Key, Key], ...]  # (outer key, body key): values every iteration reads
    carry: tuple[tuple[Key, Key], ...]  # (body output key, body key): the next state
    results: tuple[tuple[Key, Key], ...]  # (body key, outer key): the final state
    index: Key | None  # the body key of the iteration number (fori_loop), when the body reads it
    flag: Key | None  # while_loop: the outer key of the condition on the initial state
    body_flag: Key | None  # while_loop: the body output key of the condition on the next state
    backend: str  # where the iteration number lives


@dataclass(frozen=True)
class Program:
    """What one rank runs: ``steps`` on the values of ``inputs`` (given in that order), leaving ``outputs``."""

    inputs: tuple[Key, ...]
    steps: tuple[Run | Exchange | Collective | Free | Repeat, ...]
    outputs: tuple[Key, ...]


class Transport:
    """How ranks exchange values (``transport`` and ``collectives`` have the implementations)."""

    rank: int
    size: int

    def exchange(self, step: int, outgoing: dict[int, list[Any]], sources: Sequence[int]) -> dict[int, list[Any]]:
        """Send ``outgoing[peer]`` to each peer and return the values each rank in ``sources`` sent here."""
        raise NotImplementedError

    def settle(self) -> None:
        """Wait until the exchanges so far are complete (a GPU transport only queues them)."""

    def collective(self, step: Collective, env: dict[Key, Any]) -> None:
        """Run a ``Collective``: its exchange, then its combines (a transport with all-reduces overrides it)."""
        exchange(step.exchange, env, self)
        for reduction in step.reductions:
            env[reduction.combine.key] = reduction.combine(env)


def talks_to_peers(program: Program) -> bool:
    """Whether a program exchanges values with other ranks (in its loops too)."""
    return any(isinstance(s, (Exchange, Collective)) or isinstance(s, Repeat) and talks_to_peers(s.body)
               for s in program.steps)


def execute(program: Program, env: dict[Key, Any], transport: Transport | None) -> None:
    """Run a program on the values in ``env`` (its inputs), leaving its outputs there."""
    for step in program.steps:
        kind = type(step)
        if kind is Run:
            env[step.key] = step(env)
        elif kind is Exchange:
            exchange(step, env, transport)
        elif kind is Collective:
            assert transport is not None, "a collective in a program of one rank"
            transport.collective(step, env)
        elif kind is Free:
            for k in step.keys:
                del env[k]
        else:
            _repeat(step, env, transport)


def exchange(step: Exchange, env: dict[Key, Any], transport: Transport | None) -> None:
    """Send the values of an exchange to the peers and put what they sent into ``env``."""
    assert transport is not None, "an exchange in a program of one rank"
    outgoing = {peer: [env[k] for k in keys] for peer, keys in step.sends}
    received = transport.exchange(step.step, outgoing, [peer for peer, _ in step.recvs])
    for peer, keys in step.recvs:
        env.update(zip(keys, received[peer]))


def _repeat(step: Repeat, env: dict[Key, Any], transport: Transport | None) -> None:
    invariants = {b: env[o] for o, b in step.invariants}
    state = {b: env[o] for o, b in step.state}
    going = step.flag is None or _truth(env[step.flag], transport)
    xp = module(step.backend)
    i = 0
    while going and (step.count is None or i < step.count):
        body_env = {**invariants, **state}
        if step.index is not None:
            body_env[step.index] = xp.asarray(i, dtype=np.int64)
        execute(step.body, body_env, transport)
        state = {b: body_env[o] for o, b in step.carry}
        if step.body_flag is not None:
            going = _truth(body_env[step.body_flag], transport)
        i += 1
    for b, o in step.results:
        env[o] = state[b]


def _truth(value: Any, transport: Transport | None) -> bool:
    """A while_loop's condition as a Python bool (a device-to-host copy of one element on a GPU)."""
    if transport is not None:
        transport.settle()
    return bool(to_numpy(value))

