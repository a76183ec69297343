"""Running graphs: the schedule of a run in one thread (``dask.order``'s order, each block freed after its last
use) and ``run_in_order``; ``fuse_chains`` for clusters; and the default local schedulers of each backend."""
from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping
from typing import Any

import dask.callbacks
import dask.local
import dask.threaded
import numpy as np
from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef
from dask.order import order

from ..expr import Materialized, Outputs
from ..kernels.fused import pick
from .faults import BlockFunction, OutOfMemoryError, release_blocks


def schedule_of(graph: dict, outputs: set) -> list[tuple[Any, tuple]]:
    """The keys of a graph in ``dask.order``'s order, each with the keys (not among ``outputs``) whose last
    use it is."""
    priority = order(graph)
    keys = sorted(graph, key=priority.__getitem__)
    last_use = {dep: i for i, k in enumerate(keys) for dep in graph[k].dependencies}
    release: dict[int, list] = collections.defaultdict(list)
    for dep, i in last_use.items():
        if dep not in outputs:
            release[i].append(dep)
    return [(k, tuple(release[i])) for i, k in enumerate(keys)]


def _skip_aliases(graph: dict, keep: set) -> dict:
    """The graph without its aliases of other keys (but of ``keep``), their dependents reading those keys."""
    skipped = {key: node.target for key, node in graph.items() if isinstance(node, Alias) and key not in keep}
    if not skipped:
        return graph

    def resolve(key: Any) -> Any:
        while key in skipped:
            key = skipped[key]
        return key

    subs = {key: resolve(key) for key in skipped}
    return {key: node.substitute(subs) if isinstance(node, GraphNode) else node
            for key, node in graph.items() if key not in skipped}


def _tasks_as_aliases(graph: dict, keep: set, frozen: set) -> tuple[dict, set]:
    """The graph with each alias of ``keep`` whose target is a task only it reads replaced by that task under
    the alias's key (the optimizer renames the roots it fuses; their keys stay, as aliases): one task, not a
    task and then its alias, a level of tasks less on a cluster. The alias is frozen where its target was."""
    readers: collections.Counter = collections.Counter(
        dep for node in graph.values() if isinstance(node, GraphNode) for dep in node.dependencies)
    moved = {node.target: key for key in keep if isinstance(node := graph.get(key), Alias) and node.target not in keep
             and readers[node.target] == 1 and isinstance(graph.get(node.target), Task)}
    if not moved:
        return graph, frozen
    out = {}
    for key, node in graph.items():
        if key in moved:
            continue
        target = node.target if isinstance(node, Alias) else None
        out[key] = graph[target].substitute({}, key=key) if moved.get(target) == key else node
    return out, frozen | {key for target, key in moved.items() if target in frozen}


def fuse_chains(graph: dict, keep: set, frozen: set) -> dict:
    """The graph with each task folded into its dependent where that is its only dependent.

    A task (or data) folds into its only dependent when neither is in ``frozen`` nor blocks fusion (a
    coroutine function's task, ``faults.AwaitedTask``) nor the task in ``keep`` (Futures stay as they are): on a cluster every level of tasks costs a scheduler round trip of
    milliseconds, so a reduction's combine, its finish and the scalar work after it, or a small argument
    made from host data and the kernel reading it, run as one task. The fused task keeps the key of the
    task the others folded into. Aliases (but of ``keep``) are skipped first: their dependents read the
    aliased key; an alias of ``keep`` takes the place of the task it names where nothing else reads it
    (``_tasks_as_aliases``)."""
    graph, frozen = _tasks_as_aliases(_skip_aliases(graph, keep), keep, frozen)
    tasks = {key for key, node in graph.items() if isinstance(node, GraphNode)}
    dependents: dict = collections.defaultdict(list)
    for key in tasks:
        for dep in graph[key].dependencies:
            dependents[dep].append(key)

    def foldable(key: Any) -> Any:
        """The dependent ``key`` folds into, or None."""
        after = dependents.get(key, ())
        if key in keep or key in frozen or key not in tasks or len(after) != 1 or graph[key].block_fusion:
            return None
        (nxt,) = after
        return nxt if nxt not in frozen and not isinstance(graph[nxt], DataNode) and not graph[nxt].block_fusion \
            else None

    into = {key: nxt for key in graph if (nxt := foldable(key)) is not None}
    if not into:
        return graph
    folded: dict = collections.defaultdict(list)
    for key, nxt in into.items():
        folded[nxt].append(key)
    fused = {}
    for key, node in graph.items():
        if key in into:
            continue  # folded into a later task
        group, todo = [key], list(folded.get(key, ()))
        while todo:  # the tree of tasks folded into this one
            group.append(todo.pop())
            todo.extend(folded.get(group[-1], ()))
        fused[key] = node if len(group) == 1 else Task.fuse(*(graph[k] for k in group), key=key)
    return fused


def run_in_order(graph: dict, schedule: list[tuple[Any, tuple]], keys: list, inputs: dict | None = None) -> list:
    """Run a graph in this thread in its schedule's order (what ``dask.local.get_sync`` does, without its
    per-call ordering and bookkeeping: what a handful of tasks launching GPU kernels needs), freeing each
    intermediate after its last use; the values of ``keys``. ``inputs`` holds values the graph's tasks
    read that it has no tasks for."""
    cache: dict = dict(inputs or {})
    for key, done in schedule:
        node = graph[key]
        kind = type(node)
        # (the common nodes called here without Dask's generic steps, which check every dependency and evaluate
        # each argument through a closure: the schedule computed every dependency before)
        if kind is Task and not node.kwargs:
            cache[key] = node.func(*[cache[a.key] if type(a) is TaskRef else a(cache) if isinstance(a, GraphNode)
                                     else a for a in node.args])
        elif kind is Alias:
            cache[key] = cache[node.target]
        elif kind is DataNode:
            cache[key] = node.value
        else:
            cache[key] = node(cache)
        for dep in done:
            cache.pop(dep, None)  # a block used under two names (f(x, x)) is released once
    return [cache[k] for k in keys]


def _releasing(get: Callable[..., Any]) -> Callable[..., Any]:
    def get_releasing_blocks_when_out_of_memory(dsk: Mapping, keys: Any, **kwargs: Any) -> Any:
        try:
            return get(dsk, keys, **kwargs)
        except OutOfMemoryError as exc:
            release_blocks(exc)
            raise

    return get_releasing_blocks_when_out_of_memory


# below this many bytes of blocks in all, threads cost more (handing each task over) than they gain
_THREADED_BYTES = 2**20


def _small_in_order(get: Callable[..., Any], sequential: bool) -> Callable[..., Any]:
    """``get``, but the tree of one ``compute()``/``persist()`` runs in this thread with ``run_in_order`` and its
    compiled graph's cached schedule (without Dask's ordering and bookkeeping on each call) where ``in_this_thread``
    says so, as ``gnp.fetch`` runs it; any other graph small in all on Dask's synchronous scheduler."""

    def get_small_in_order(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        compiled = _one_tree_graph(dsk)
        if compiled is not None and not kwargs and not dask.callbacks.Callback.active:
            if in_this_thread(compiled, sequential) and compiled.graph.keys() >= set(keys):
                return run_in_order(compiled.graph, compiled.schedule(), keys)
        graph = dsk if isinstance(dsk, Mapping) else dsk.__dask_graph__()
        return (dask.local.get_sync if small_graph(graph) else get)(graph, keys, **kwargs)

    return get_small_in_order


_SMALL_GRAPH = 8  # tasks: a graph of no more runs in this thread (handing its tasks to threads costs more)


def in_this_thread(compiled: Any, sequential: bool) -> bool:
    """Whether a compiled graph (``compile.CompiledGraph``) runs in order in this thread (``run_in_order``): where
    its scheduler is one thread anyway (``sequential``: CuPy blocks, whose kernels run asynchronously on the
    device), it has a handful of tasks, or threads could not shorten its run (``threads_gain``)."""
    return sequential or len(compiled.graph) <= _SMALL_GRAPH or not compiled.threads_gain()


def _one_tree_graph(dsk: Any) -> Any:
    """The compiled graph (``compile.CompiledGraph``) of the one local tree of ours that Dask hands a scheduler:
    the tree of the outputs of ``dask.compute``/``dask.persist`` of our Arrays alone (``Outputs``), or a tree given
    as it is; or None."""
    if isinstance(dsk, Outputs):
        return dsk.compiled
    return dsk._compiled if isinstance(dsk, Materialized) and not dsk.operand("workers") else None


def small_graph(graph: Mapping) -> bool:
    """Whether the blocks that a graph's tasks make and its data holds are under ``_THREADED_BYTES`` in all (not
    when a task's are unknown): threads gain nothing on it."""
    total = 0
    for node in graph.values():
        if isinstance(node, DataNode):
            total += getattr(node.value, "nbytes", 0)
        elif isinstance(node, Task):
            func = node.func
            if type(func) is not BlockFunction:
                return False  # not one of ours (Task.fuse, a user's task)
            if func.shape is not None:  # a reduction's or a scan's stage: its inputs are counted
                total += math.prod(func.shape) * np.dtype(func.dtype).itemsize
        if total >= _THREADED_BYTES:
            return False
    return True


def threads_gain(graph: Mapping) -> bool:
    """Whether Dask's threads could shorten a run of a graph: whether its work off the heaviest chain of
    dependent tasks reaches ``_THREADED_BYTES`` (a task's work: the bytes of the blocks it reads or makes,
    the larger; none for aliases and for picking an output of a multi-output kernel). A graph of one block
    per array (a chain of kernels, the reductions reading them and small side work) runs in order in one
    thread whatever the scheduler: threads would only hand its tasks over. Unknown tasks (not ours): True."""
    made: dict = {}  # bytes of each key's value (a partial reduction: what it reads, an upper bound)
    chain: dict = {}  # work of the heaviest chain of tasks ending at each key
    total = longest = 0  # (total - longest never shrinks: a task adds at most its work to longest)
    for start in graph:
        stack = [(start, False)]
        while stack:  # the tasks in depth-first postorder (dependencies first)
            key, ready = stack.pop()
            if key in chain:
                continue
            node = graph[key]
            if isinstance(node, DataNode):
                made[key], chain[key] = getattr(node.value, "nbytes", 0), 0
                continue
            deps = [d for d in node.dependencies if d in graph]
            if not ready:
                stack.append((key, True))
                stack.extend((d, False) for d in deps if d not in chain)
                continue
            read = sum(made[d] for d in deps)
            before = max((chain[d] for d in deps), default=0)
            if isinstance(node, Alias):
                made[key], chain[key] = read, before
                continue
            func = node.func if isinstance(node, Task) else None
            if type(func) is not BlockFunction:
                return True
            out = read if func.shape is None else math.prod(func.shape) * np.dtype(func.dtype).itemsize
            work = 0 if func.func is pick else max(out, read)
            made[key] = out
            chain[key] = before + work
            total, longest = total + work, max(longest, before + work)
            if total - longest >= _THREADED_BYTES:
                return True
    return False


_LOCAL_SCHEDULERS = {"cupy": _releasing(_small_in_order(dask.local.get_sync, sequential=True)),
                     "numpy": _releasing(_small_in_order(dask.threaded.get, sequential=False))}


def local_scheduler(backend: str) -> Callable[..., Any]:
    """The default local scheduler of a backend, releasing the computed blocks when a task runs out of memory:
    one thread launching CuPy kernels in order (they run asynchronously on the device's stream), threads for
    NumPy blocks; small graphs in this thread (``_small_in_order``)."""
    return _LOCAL_SCHEDULERS[backend]


def held_keys(graph: dict) -> set:
    """The keys of a cluster graph that are persisted blocks: each its key's own future (in memory: the scheduler
    drops that entry, ``convert_legacy_graph``)."""
    return {key for key, task in graph.items() if isinstance(task, TaskRef) and task.key == key}
