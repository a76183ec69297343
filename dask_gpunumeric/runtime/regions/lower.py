"""A region's programs as Dask tasks: one long-running task per rank, leaving its output blocks on its worker,
and one small task per output block taking it there once every rank is done (two levels of tasks); a region
of one rank on a cluster as one task per output block, the first to run computing them all (one level; their
reports leave together, ``reports``); and the summary ``gnp.explain`` shows of them."""
from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dask._task_spec import GraphNode, Task, TaskRef

from . import store as _store
from .build import Built
from .program import Collective, Exchange, Key, Program, Repeat, Run, execute


@dataclass(frozen=True)
class RankSpec:
    """What a per-worker task runs: its program, as rank ``rank`` of ``size`` in region ``region``. Sent to a
    worker by a scheduler holding the plan (``store``), it carries no program: the worker asks for it once."""

    program: Program | None  # None: the program of (plan, rank), from ``store.program``
    region: str  # the call
    plan: str  # what every call of the same plan and layout shares (their exchanges are the same)
    rank: int
    size: int
    timeout: float  # seconds to wait for peers
    transport: str  # "auto", "comm" or "nccl"
    backend: str  # of the region's blocks
    addresses: tuple[str, ...] = ()  # the workers the ranks are placed on, in rank order

    def __reduce__(self) -> tuple:
        fields = (self.region, self.plan, self.rank, self.size, self.timeout, self.transport, self.backend,
                  self.addresses)
        return RankSpec, (None if _store.holds(self.plan) else self.program, *fields)

    def with_names(self, renamed: Callable[[str], str]) -> RankSpec:
        """This spec for another call of its plan (a graph made again from a kept one, ``runtime.reuse``)."""
        return RankSpec(self.program, renamed(self.region), self.plan, self.rank, self.size, self.timeout,
                        self.transport, self.backend, self.addresses)

    def steps(self) -> Program:
        """The program, kept with the spec or on this worker."""
        return self.program if self.program is not None else _store.program(self.plan, self.rank, self.timeout)


def run_rank(spec: RankSpec, *inputs: Any) -> dict[Key, Any]:
    """Task function of a per-worker task: its program run on its input blocks; its output blocks by key."""
    program = spec.steps()
    env = dict(zip(program.inputs, inputs))
    if spec.size == 1:
        execute(program, env, None)
    else:
        from .collectives import connect  # distributed imported only where a region runs on several workers

        with connect(spec.region, spec.plan, spec.rank, spec.size, spec.timeout, spec.transport,
                     spec.backend, spec.addresses) as transport:
            execute(program, env, transport)
    return {k: env[k] for k in program.outputs}


def run_alone(spec: RankSpec, *inputs: Any) -> Any:
    """Task function of a region of one rank and one output block: that block (no task picking it: one level
    of tasks less, a scheduler-to-worker cycle less)."""
    (value,) = run_rank(spec, *inputs).values()
    return value


_PENDING = ("waiting", "ready", "constrained", "executing")  # a worker's states of a task it will run (or runs)
_left: dict[Key, Any] = {}  # output blocks a task of a one-rank region left for its siblings' tasks, by key
_running: set[str] = set()  # one-rank regions whose program runs in this process now
_shared = threading.Condition()


async def run_shared(spec: RankSpec, key: Key, siblings: tuple[tuple[Key, Key], ...], *inputs: Any) -> Any:
    """Task function of an output block ``key`` of a region of one rank on a cluster, whose output blocks are
    all tasks with the same inputs (sent to the worker together: no task between them and the inputs). The
    first to run computes them all and leaves its siblings' blocks (``siblings``: the plan's key and the
    call's of each) for their tasks waiting on this worker; a task finding nothing left (run elsewhere, or
    again after a loss) runs the program itself. A coroutine: the worker runs it in its event loop, where a
    block left for it is taken at once (a trip through the worker's thread pool less per sibling), and the
    program runs in the worker's thread pool, as a task's function does."""
    with _shared:
        if key in _left and spec.region not in _running:
            return _left.pop(key)
    import distributed
    from distributed.utils import run_in_executor_with_context

    executor = distributed.get_worker().executors["default"]
    return await run_in_executor_with_context(executor, _run_shared, spec, key, siblings, *inputs)


def _run_shared(spec: RankSpec, key: Key, siblings: tuple[tuple[Key, Key], ...], *inputs: Any) -> Any:
    """``run_shared`` in a thread: the block left for ``key``, or the program run and the siblings' blocks
    left."""
    with _shared:
        while spec.region in _running:  # a sibling on another thread of the worker computes it
            _shared.wait()
        if key in _left:
            return _left.pop(key)
        _running.add(spec.region)
    try:
        outputs = run_rank(spec, *inputs)
    finally:
        with _shared:
            _running.discard(spec.region)
            _shared.notify_all()
    mine = next(template for template, actual in siblings if actual == key)
    waiting = _waiting_here([actual for _, actual in siblings if actual != key])
    with _shared:
        _left.update((actual, outputs[template]) for template, actual in siblings if actual in waiting)
    return outputs[mine]


def _waiting_here(keys: list[Key]) -> set[Key]:
    """The keys among ``keys`` whose tasks this worker holds to run (none outside a worker); blocks left
    for tasks it no longer holds (cancelled, or released) are dropped here."""
    if "distributed" not in sys.modules:
        return set()
    import distributed

    try:
        tasks = distributed.get_worker().state.tasks
    except ValueError:
        return set()
    _drop_stale(tasks)
    return {k for k in keys if _pending(tasks, k)}


def _pending(tasks: dict, key: Key) -> bool:
    ts = tasks.get(key)
    return ts is not None and ts.state in _PENDING


def _drop_stale(tasks: dict) -> None:
    """Drop the blocks left for tasks that the worker of ``tasks`` no longer holds to run."""
    with _shared:
        for stale in [k for k in _left if not _pending(tasks, k)]:
            del _left[stale]


def blocks_waiting(tasks: dict) -> bool:
    """Whether blocks are left on the worker of ``tasks`` for sibling tasks it is about to run (what it no
    longer holds to run is dropped first)."""
    if not _left:
        return False
    _drop_stale(tasks)
    return bool(_left)


def run_rank_leaving(spec: RankSpec, *inputs: Any) -> tuple[str, float]:
    """Task function of a rank of a region of several ranks: its program run, its output blocks left on its
    worker for their tasks (``pick``); its value is small (where they are), so that the output blocks can
    depend on every rank (computing any of them runs all ranks) without moving the ranks' results."""
    from .collectives import leave

    outputs = run_rank(spec, *inputs)
    return leave((spec.region, spec.rank), outputs), spec.timeout


async def pick(rank_key: Key, mine: tuple[str, float], key: Key, *peers: tuple[str, float]) -> Any:
    """Task function of an output block: the block its rank's task (``rank_key``, which ran where ``mine``
    says) left. A coroutine: the worker takes it in its event loop, or asks the worker holding it from there
    (no trip through its thread pool)."""
    from .collectives import take

    where, timeout = mine
    return await take(where, rank_key, key, timeout)


def rank_keys(name: str, built: Built) -> list[Key]:
    """The keys of a region's per-worker tasks."""
    return [(name, rank) for rank in range(built.layout.size)]


def layer(name: str, plan: str, built: Built, input_key: Callable[[Key], Key], output_key: Callable[[Key], Key],
          timeout: float, transport: str, backend: str, workers: tuple[str, ...], inline: dict[Key, GraphNode]
          ) -> dict[Key, Any]:
    """The tasks of a call ``name`` of a plan (``plan`` names it and its layout) on ``workers`` (the cluster's,
    none without one): one per rank (``(name, rank)``),
    one per output block (picking it from its rank's outputs; with several ranks depending on every rank,
    ``pick``); one rank with one output block is one task computing that block,
    and on a cluster one rank is one task per output block (``run_shared``). Arguments in ``inline`` (small
    host data, by key) are made inside the tasks reading them, not as tasks of their own (a level less).
    ``input_key``/``output_key`` turn the plan's keys into the call's."""
    out: dict[Key, Any] = dict(built.external)
    size = built.layout.size
    alone = _alone(built, input_key, output_key)
    cluster = bool(workers)
    addresses = tuple(workers[w] for w in built.layout.workers) if size > 1 else ()
    for rank, program in enumerate(built.programs):
        spec = RankSpec(program, name, plan, rank, size, timeout, transport, backend, addresses)
        refs = [inline.get(input_key(k)) or TaskRef(input_key(k)) for k in program.inputs]
        if alone is not None:
            out[alone] = Task(alone, run_alone, spec, *refs)
            return out
        siblings = _shared_outputs(built, input_key, output_key) if cluster else ()
        if siblings:
            for _, actual in siblings:
                out[actual] = Task(actual, run_shared, spec, actual, siblings, *refs)
            return out
        out[(name, rank)] = Task((name, rank), run_rank if size == 1 else run_rank_leaving, spec, *refs)
    inputs = {input_key(k) for p in built.programs for k in p.inputs}
    for key, (rank,) in built.placement.items():
        actual = output_key(key)
        if actual in inputs:  # an argument returned as it is
            continue
        if size == 1:
            out[actual] = Task(actual, operator.getitem, TaskRef((name, rank)), key)
        else:
            peers = [TaskRef((name, r)) for r in range(size) if r != rank]
            out[actual] = Task(actual, pick, (name, rank), TaskRef((name, rank)), key, *peers)
    return out


def _alone(built: Built, input_key: Callable[[Key], Key], output_key: Callable[[Key], Key]) -> Key | None:
    """The key of the one output block of a region of one rank, which its task then computes itself (not an
    argument returned as it is); None for other regions."""
    if built.layout.size != 1 or len(built.placement) != 1:
        return None
    (key,) = built.placement
    inputs = {input_key(k) for k in built.programs[0].inputs}
    return None if output_key(key) in inputs else output_key(key)


def _shared_outputs(built: Built, input_key: Callable[[Key], Key], output_key: Callable[[Key], Key]
                    ) -> tuple[tuple[Key, Key], ...]:
    """(plan key, call key) of the output blocks of a region of one rank that its program computes (not
    arguments returned as they are), each then a task of its own (``run_shared``); () for other regions."""
    if built.layout.size != 1:
        return ()
    inputs = {input_key(k) for k in built.programs[0].inputs}
    return tuple((key, output_key(key)) for key in built.placement if output_key(key) not in inputs)


def owned(name: str, built: Built, output_key: Callable[[Key], Key]) -> Iterable[tuple[Key, tuple, tuple]]:
    """(key, index, numblocks) of a region's tasks such that ``cluster.owner`` gives each its rank's worker."""
    n = built.layout.n_workers
    alone = _alone(built, output_key, output_key)  # (the call's renaming covers its placeholders too)
    if alone is not None:
        yield alone, (built.layout.workers[0],), (n,)
        return
    for rank, worker in enumerate(built.layout.workers):
        yield (name, rank), (worker,), (n,)
    for key, (rank,) in built.placement.items():
        yield output_key(key), (built.layout.workers[rank],), (n,)


# --- explain --------------------------------------------------------------------------------------------


def summary(built: Built) -> dict[str, Any]:
    """Per rank: steps outside loops, and for each loop the kernels, exchanges (and of them those ending in
    all-reducible combines, ``Collective``) and bytes sent per iteration."""

    def count(program: Program) -> dict[str, Any]:
        collectives = [s for s in program.steps if isinstance(s, Collective)]
        runs = [s for s in program.steps if isinstance(s, Run)] + [r.combine for c in collectives for r in c.reductions]
        exchanges = [s for s in program.steps if isinstance(s, Exchange)] + [c.exchange for c in collectives]
        return {
            "tasks": len(runs),
            "kernels": sum(1 for s in runs if _is_kernel(s.task)),
            "exchanges": len(exchanges),
            "all_reduces": sum(len(c.reductions) for c in collectives),
            "bytes_sent": sum(built.sizes[k][0] for s in exchanges for _, keys in s.sends for k in keys),
            "loops": [dict(count(s.body), count=s.count, kind="while" if s.body_flag is not None else "fori")
                      for s in program.steps if isinstance(s, Repeat)],
        }

    return {"ranks": built.layout.size, "workers": list(built.layout.workers),
            "programs": [count(p) for p in built.programs]}


def _is_kernel(task: GraphNode) -> bool:
    """Whether a task runs generated kernels: a fused group's, or a stencil group's (one per sweep)."""
    from ...kernels import fused as _fused
    from ...kernels import stencil as _stencil_kernels

    return getattr(task, "func", None) in (_fused.run, _stencil_kernels.run)
