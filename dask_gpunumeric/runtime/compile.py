"""The compile step: an expression tree's optimized graph (the optimizer's passes, then each node's tasks, the
roots' keys kept), cached by the tree's name and the optimizer's settings, with the schedule of a run in one
thread; and what a cluster needs of it (chains of tasks fused, each block placed on its owner worker)."""
from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from dask._expr import Expr
from dask._task_spec import Alias, GraphNode

from ..expr import (ArrayExpr, Bundle, Finalize, FromArray, FromGraph, Materialized, TracedValueError, flat_keys,
                    joined_leaves, walk)
from ..optimize import pipeline as _pipeline
from .cluster import active_workers, owner
from . import reuse as _reuse
from .faults import check_result_fits, label_tasks
from .schedule import fuse_chains, schedule_of, threads_gain

__all__ = ["CompiledGraph", "Layout", "cluster_graph", "compile_tree", "compiled", "compiled_outputs", "graph_of", "optimize",
           "placement", "placement_workers"]


class Layout(NamedTuple):
    """What a cluster needs of an optimized tree besides its graph, kept with the graph so that a call of a
    tree compiled before does not optimize it again: the keys never folded into others (blocks of arrays of
    several, tasks with annotations of their own), each block's (index, block grid) for owner placement, and
    the tasks' other annotations by kind."""

    frozen: frozenset
    owned: dict
    annotations: dict[str, dict]

    def renamed(self, subs: dict) -> Layout:
        """This layout with its keys renamed (keys ``subs`` misses are not in the renamed graph)."""
        return Layout(frozenset(subs[k] for k in self.frozen if k in subs),
                      {subs[k]: v for k, v in self.owned.items() if k in subs},
                      {kind: {subs[k]: v for k, v in values.items() if k in subs}
                       for kind, values in self.annotations.items()})


class CompiledGraph:
    """The optimized graph of an expression tree, and the schedule of a run of it in one thread
    (``schedule_of``) with whether threads could shorten that run (``threads_gain``), each made when first
    asked for. A cached graph leaves out the blocks of the tree's persisted inputs; ``with_inputs`` adds
    those of a call, sharing the schedule."""

    def __init__(self, graph: dict, outputs: list, schedule_of_inputs: CompiledGraph | None = None,
                 layout: Layout | None = None) -> None:
        self.graph = graph
        self._outputs = outputs
        self._schedule: list[tuple[Any, tuple]] | None = None
        self._threads: bool | None = None
        self._layout = layout
        self._shared = schedule_of_inputs  # the cached graph whose schedule this one's is

    def schedule(self) -> list[tuple[Any, tuple]]:
        if self._schedule is None:
            self._schedule = self._made("_schedule", lambda: schedule_of(self.graph, set(self._outputs)))
        return self._schedule

    def threads_gain(self) -> bool:
        """Whether Dask's threads could shorten a run of this graph (``schedule.threads_gain``)."""
        if self._threads is None:
            self._threads = self._made("_threads", lambda: threads_gain(self.graph))
        return self._threads

    def layout(self, optimized: Callable[[], ArrayExpr]) -> Layout:
        """The cluster layout of this graph (``Layout``), made from the ``optimized()`` tree when first asked
        for (kept with the cached graph)."""
        if self._layout is None:
            self._layout = self._made("_layout", lambda: _layout_of(optimized(), self.graph))
        return self._layout

    def _made(self, name: str, make: Callable[[], Any]) -> Any:
        """The shared graph's value of ``name``, else ``make()``, which the shared graph then keeps."""
        shared = self._shared
        value = None if shared is None else getattr(shared, name)
        if value is None:
            value = make()
            if shared is not None:
                setattr(shared, name, value)
        return value

    def with_inputs(self, layers: dict) -> CompiledGraph:
        """This graph with the blocks of the persisted inputs of a call (none: this graph itself)."""
        if not layers:
            return self
        return CompiledGraph({**self.graph, **layers}, self._outputs, self, self._layout)


def compiled(root: ArrayExpr) -> CompiledGraph:
    """The optimized graph of a tree (with its keys), from the cache without making a ``Materialized``
    node when the cache holds it (``gnp.fetch`` of an expression rebuilt on every call)."""
    return _compiled(root, _cache_key(root))


def _compiled(root: ArrayExpr, cacheable: tuple[tuple, tuple] | None) -> CompiledGraph:
    hit = _cached_graph(cacheable)
    return hit if hit is not None else Materialized((root,))._compiled


class _OutputsPlan(NamedTuple):
    """What a call computing or persisting outputs of these names needs besides their blocks: the cached graph
    (without the persisted inputs' blocks), each output's keys, and the names of the persisted inputs it was
    made for."""

    graph: CompiledGraph
    keys: list[list]
    persisted: tuple[str, ...]


_OUTPUTS_PLANS: collections.OrderedDict[tuple, _OutputsPlan] = collections.OrderedDict()


def compiled_outputs(exprs: Sequence[ArrayExpr], finalized: bool) -> tuple[CompiledGraph, list[list]]:
    """The jointly compiled graph of several outputs (``finalized``: each joined into one result, as ``compute``
    gives it; else their blocks, as ``persist`` keeps them), and each output's keys. Plain code rebuilds the same
    outputs (the same names) on every call: their plan is then found by their names, on the same persisted inputs,
    without making their roots (``Finalize``, ``Bundle``) and keying their tree again."""
    names = (tuple([e._name for e in exprs]), finalized, _pipeline.settings_key())
    plan = _lookup(_OUTPUTS_PLANS, names)
    if plan is not None:
        leaves = exprs[0]._leaves
        for e in exprs[1:]:
            leaves = joined_leaves(leaves, e._leaves)
        persisted = None if leaves is None else _persisted_inputs(leaves.values())
        if persisted is not None and tuple(sorted([n._name for n in persisted])) == plan.persisted:
            return plan.graph.with_inputs(_input_layers(persisted)), plan.keys
    roots = [e.finalize_compute() for e in exprs] if finalized else list(exprs)
    keys = [flat_keys(r) for r in roots]
    root = roots[0] if len(roots) == 1 else Bundle.of(*roots)
    cacheable = _cache_key(root)
    graph = _compiled(root, cacheable)
    kept = None if cacheable is None else _GRAPH_CACHE.get(cacheable[0])  # (cached from a tree's second build on)
    if kept is not None:
        _remember(_OUTPUTS_PLANS, names, _OutputsPlan(kept, keys, cacheable[0][2]))
    return graph, keys


def compile_tree(materialized: Materialized) -> CompiledGraph:
    """The graph of a ``Materialized`` node's tree: rebuilding the same expression, as a loop or a benchmark
    does, skips optimizing and lowering (on a cluster too: the scheduler compiles each call's tree)."""
    root = materialized.root
    cacheable = _cache_key(root)
    hit = _cached_graph(cacheable)
    if hit is not None:
        return hit
    nodes = list(walk(root))
    if not all(n.has_value for n in nodes if isinstance(n, ArrayExpr)):
        raise TracedValueError(
            "the value of an array made from an argument of a function being traced (gnp.accelerate, gnp.fori_loop, "
            "gnp.while_loop) is not known while it is traced: compute that value before the call and pass it in (a "
            "Python number), or keep it an Array (gnp.where for a choice)")
    local = not materialized.operand("workers")
    shape = _reuse.structure_of(nodes, (_pipeline.settings_key(), local))  # (a cluster's keeps a layout)
    made = None if shape is None else _from_template(shape, local)
    if made is None:
        if local:  # a local compute() joins its results here
            check_result_fits([r for r in _roots(root) if isinstance(r, Finalize)], to_host=False, call="compute()")
        made = CompiledGraph(_optimized_graph(materialized), [k for r in _roots(root) for k in flat_keys(r)])
        if shape is not None:
            template = _reuse.remember(shape, made.graph, made._outputs)
            if template is not None and not local:  # the layout too, made now from the optimized tree at hand
                _reuse.with_layout(shape, template, made.layout(lambda: materialized._optimized))
    # (a loop persisting each step would fill the cache with trees that never come back)
    if cacheable is None or (cacheable[1] and not _seen_before(cacheable[0])):
        return made
    key, persisted = cacheable
    inputs = _input_layers(persisted)
    kept = CompiledGraph({k: v for k, v in made.graph.items() if k not in inputs}, made._outputs, layout=made._layout)
    kept._schedule, kept._threads = made._schedule, made._threads
    _remember(_GRAPH_CACHE, key, kept)
    return CompiledGraph(made.graph, made._outputs, kept, made._layout) if inputs else kept


def _roots(root: ArrayExpr) -> list[ArrayExpr]:
    return list(root.operands) if isinstance(root, Bundle) else [root]


def _from_template(shape: _reuse.Structure, local: bool) -> CompiledGraph | None:
    """The graph of a tree whose structure was compiled before (``runtime.reuse``), or None; with its schedule
    for a run in one thread where it is ``local`` (a cluster's scheduler orders the graph itself)."""
    template = _reuse.lookup(shape)
    made = None if template is None else _reuse.instantiate(template, shape)
    if made is None:
        return None
    graph, outputs, schedule, subs = made
    layout = None if template.layout is None else template.layout.renamed(subs)
    hit = CompiledGraph(graph, outputs, layout=layout)
    if schedule is None and local:  # made once per template, for every later call of it
        back = {new: old for old, new in subs.items()}
        _reuse.with_schedule(shape, template, [(back[k], tuple(back[d] for d in done)) for k, done in hit.schedule()])
    else:
        hit._schedule = schedule
    return hit


def optimize(root: ArrayExpr) -> ArrayExpr:
    """The optimizer's passes over a tree (looked up at each call: tests replace it)."""
    return _pipeline.optimize(root)


def placement_workers() -> tuple[str, ...]:
    """The workers a lowered tree's blocks are placed on: those of the active distributed client (none
    without one: the local scheduler)."""
    return tuple(active_workers())


def cluster_graph(materialized: Materialized) -> dict:
    """A ``Materialized`` node's graph; on a cluster with the linear chains of its tasks fused (``fuse_chains``:
    a task costs milliseconds there), but for the blocks of arrays of several (each on its owner, named as its
    operation), outputs and tasks with annotations of their own (a region's)."""
    compiled = materialized._compiled
    graph = dict(compiled.graph)
    if not materialized.operand("workers"):
        return graph
    root = materialized.root
    roots = root.operands if isinstance(root, Bundle) else [root]
    frozen = compiled.layout(lambda: materialized._optimized).frozen
    return fuse_chains(graph, {k for r in roots for k in flat_keys(r)}, frozen)


def placement(materialized: Materialized) -> dict[str, dict]:
    """Owner-computes placement on a cluster: each block task on the worker owning that block position
    (``cluster.owner``), so chains of per-block work move no data; other workers may still run it if the
    owner is gone."""
    workers = materialized.operand("workers")
    graph = materialized._graph
    layout = materialized._compiled.layout(lambda: materialized._optimized)
    where = {key: [workers[owner(index, numblocks, len(workers))]]
             for key, (index, numblocks) in layout.owned.items() if key in graph}
    return {"workers": where, "allow_other_workers": dict.fromkeys(where, True),
            **{kind: dict(values) for kind, values in layout.annotations.items()}}


def _layout_of(optimized: ArrayExpr, graph: dict) -> Layout:
    """The cluster layout (``Layout``) of an optimized tree whose graph is ``graph``."""
    frozen, owned, annotations = set(), {}, {}
    for node in walk(optimized):
        for key, index, numblocks in node._owned_blocks():
            if math.prod(numblocks) > 1:
                frozen.add(key)
            if key in graph:
                owned[key] = (index, numblocks)
        for kind, values in node._task_annotations().items():
            frozen.update(values)
            annotations.setdefault(kind, {}).update(values)
    for key, task in graph.items():  # a root's key kept as an alias may take its task's place (``fuse_chains``)
        if isinstance(task, Alias) and task.target in owned and key not in owned:
            owned[key] = owned[task.target]
    return Layout(frozenset(frozen), owned, annotations)


def _optimized_graph(materialized: Materialized) -> dict:
    root = materialized.root
    optimized = materialized._optimized
    graph = graph_of(optimized)
    pairs = zip(root.operands, optimized.operands) if isinstance(root, Bundle) else [(root, optimized)]
    for before, after in pairs:
        if after._name != before._name:  # keep the roots' keys: persist rebuilds from them
            for old, new in zip(flat_keys(before), flat_keys(after)):
                graph[old] = Alias(old, new)
    return graph


def graph_of(root: ArrayExpr) -> dict:
    """The tasks that the blocks of ``root`` (of each root of a ``Bundle``) need, each task naming its block when
    it fails. A node whose blocks are one task each (one that keeps ``ArrayExpr._layer``) makes only the
    blocks read, so that a slice of a large array builds (and runs) only the blocks it needs; other nodes
    (reductions, scans, stencil groups, regions, persisted data) give their whole layer."""
    nodes = {node._name: node for node in walk(root)}
    made: dict[str, dict] = {}  # per node: its tasks made so far
    todo: list = []
    for node in nodes.values():
        if not _per_block(node):
            tasks = made[node._name] = node._layer()
            todo.extend(dep for task in tasks.values() if isinstance(task, GraphNode) for dep in task.dependencies)
    for start in root.operands if isinstance(root, Bundle) else [root]:
        todo.extend(flat_keys(start))
    while todo:
        key = todo.pop()
        node = nodes.get(key[0] if type(key) is tuple else key)
        if node is None or not _per_block(node):
            continue  # made with a whole layer
        tasks = made.setdefault(node._name, {})
        if key not in tasks:
            task = tasks[key] = node._block_task(key[1:])
            todo.extend(task.dependencies)
    graph: dict = {}
    for node in nodes.values():  # in the order the tree's layers had (dask.order breaks ties by it)
        tasks = made.get(node._name)
        if tasks:
            if len(tasks) > 1 and _per_block(node):
                tasks = dict(sorted(tasks.items()))  # C order of the blocks
            graph.update(label_tasks(node, tasks))
    return graph


def _per_block(node: ArrayExpr) -> bool:
    """Whether a node's tasks are one per block, made by ``_block_task`` (``ArrayExpr._layer``)."""
    return type(node)._layer is ArrayExpr._layer


def _cached_graph(cacheable: tuple[tuple, tuple] | None) -> CompiledGraph | None:
    """The cached graph of a tree (``_cache_key``'s key and persisted inputs) with the blocks of those inputs,
    or None when it is not in the cache."""
    if cacheable is None:
        return None
    key, persisted = cacheable
    hit = _lookup(_GRAPH_CACHE, key)
    return None if hit is None else hit.with_inputs(_input_layers(persisted))


def _cache_key(root: ArrayExpr) -> tuple[tuple, tuple] | None:
    """The key of a tree's graph and schedule in the cache, with the tree's persisted inputs (FromGraph),
    or None when they may not be cached. A persisted Array keeps the name of the expression it came from
    (and so do expressions built on it): the names of the persisted inputs are part of the key, so that
    the graph of a tree on them is never that of the same tree computing them; their blocks stay out of
    the cached graph (``_input_layers`` adds those of each call), so that the cache keeps no data alive."""
    leaves = root._leaves  # the tree's inputs, carried by its nodes (None: walk the tree to find them)
    persisted = _persisted_inputs(walk(root) if leaves is None else leaves.values())
    if persisted is None:
        return None
    return (root._name, _pipeline.settings_key(), tuple(sorted(n._name for n in persisted))), persisted


_SEEN: collections.OrderedDict[tuple, None] = collections.OrderedDict()  # keys of trees on persisted inputs


def _seen_before(key: tuple) -> bool:
    """Was the tree of this key (one on persisted inputs) built before? Its graph is cached from its second
    build on: a loop that persists its state makes a new tree every step, whose graph would never be used
    again (only its key is kept, among the last ``_GRAPH_CACHE_SIZE``)."""
    if key in _SEEN:
        return True
    _remember(_SEEN, key, None)
    return False


def _input_layers(persisted: Sequence[FromGraph]) -> dict:
    """The tasks of persisted inputs, as ``graph_of`` makes them."""
    layers: dict = {}
    for node in persisted:
        layers.update(label_tasks(node, node._layer()))
    return layers


_GRAPH_CACHE: collections.OrderedDict[tuple, CompiledGraph] = collections.OrderedDict()
_GRAPH_CACHE_SIZE = 64


def _lookup(cache: collections.OrderedDict, key: tuple | None) -> Any:
    """A cache's value for ``key`` (None: absent, or not cacheable), marked as recently used."""
    value = None if key is None else cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _remember(cache: collections.OrderedDict, key: tuple | None, value: Any) -> None:
    """Keep ``value`` under ``key`` (unless None), dropping the least recently used beyond the cache size."""
    if key is None:
        return
    cache[key] = value
    while len(cache) > _GRAPH_CACHE_SIZE:
        cache.popitem(last=False)


_CACHE_DATA_LIMIT = 2**20


def _persisted_inputs(nodes: Iterable[Expr]) -> tuple[FromGraph, ...] | None:
    """The persisted inputs of a tree whose graph may be cached without them, or None when it may not be:
    each input's layer must be its blocks alone, and the data the graph holds besides them small host data (the
    cache must not keep large arrays, or any device or cluster memory, alive)."""
    held, persisted = 0, []
    for node in nodes:
        if isinstance(node, FromGraph):
            if len(node.operand("layer")) != math.prod(node.numblocks):
                return None  # a graph of more than its blocks (``dask.optimize``'s), named as the blocks persisted
            persisted.append(node)
        elif isinstance(node, FromArray):
            array = node.operand("array")
            if not isinstance(array, np.ndarray):
                return None
            held += array.nbytes
    return tuple(persisted) if held <= _CACHE_DATA_LIMIT else None
