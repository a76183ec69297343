"""A call of gnp Arrays sent to a distributed scheduler as one graph with its tasks' priorities.

``Client.persist``/``Client.get`` send an expression through Dask's collection machinery (``collections_to_expr``,
the generic ``optimize``, tokenizing a sequence node) and without priorities, so that the scheduler orders the
materialized graph with ``dask.order`` in a second trip through its offload thread. Our Arrays need neither: their
lowered node is one ``Materialized`` tree, made here at once, and that node (``Ordered``) orders its graph where
the scheduler makes it, in the offload thread it runs in anyway; the update-graph carries a priority mapping
(``GraphOrder``) that reads that order, so the scheduler skips its own ordering and its trip. Futures, who has each
block, the dashboard and recomputation are the scheduler's as for any graph (distributed's ``_graph_to_futures``,
a private method: public ones send no priorities).
"""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dask.order
from dask._task_spec import GraphNode, Task, convert_legacy_graph

from ..expr import ArrayExpr, Bundle, Finalize, JointOutput, Materialized, flat_keys
from .schedule import held_keys

FIFO_TIMEOUT = "60s"  # Client.persist's and Client.get's default


class Ordered(Materialized):
    """A ``Materialized`` tree sent with ``GraphOrder``: making its graph (on the scheduler) also orders it."""

    def _layer(self) -> dict:
        graph = self._graph
        _remember(self._name, graph)
        return graph


_ORDERS: dict[str, dict] = {}  # (on the scheduler) an Ordered node's name -> its graph's priorities
_ORDERS_KEPT = 16  # (read right after the making; a few updates may be made in between)


def combined_here(root: ArrayExpr, workers: tuple[str, ...]) -> Task | None:
    """The task of ``root``'s one block where it combines the blocks of a level of tasks computed on several
    ``workers`` (a reduction's partials), for the client to run on them, pushed to it: one level of tasks less;
    None where the work needs more levels, runs no plain function (a region's) or one worker does it all. The
    graph is the one the scheduler makes of the call (``Ordered``; compiled here, cached)."""
    if len(workers) < 2:
        return None
    keys, leaves = flat_keys(root), root._leaves
    if len(keys) != 1 or leaves and all(set(x.numblocks) <= {1} for x in leaves.values()):
        return None  # (inputs of one block each: nothing computed on several workers; no compile here)
    graph = Ordered.of(root, workers)._graph
    task, held = graph.get(keys[0]), held_keys(graph)
    if (type(task) is not Task or inspect.iscoroutinefunction(task.func) or len(task.dependencies) < 2
            or task.dependencies & held):
        return None
    level = [graph.get(k) for k in task.dependencies]
    return task if all(type(t) is Task and t.dependencies <= held for t in level) else None


def _remember(name: str, graph: dict) -> None:
    """Keep the priorities of an ``Ordered`` node's graph for its update-graph (``GraphOrder``): each task's position
    in the graph where no task of it reads another (one level: no order to choose), else ``dask.order``'s."""
    held = held_keys(graph)
    computed = graph.keys() - held
    one_level = all(isinstance(task, GraphNode) and not task.dependencies & computed
                    for key, task in graph.items() if key not in held)
    _ORDERS[name] = ({key: i for i, key in enumerate(graph)} if one_level
                     else dask.order.order(convert_legacy_graph(graph)))
    while len(_ORDERS) > _ORDERS_KEPT:  # (several updates of one name share an entry: never popped while read)
        del _ORDERS[next(iter(_ORDERS))]


class GraphOrder(Mapping):
    """The ``internal_priority`` of an update-graph whose expression is an ``Ordered`` node: the priorities its
    graph was given when the scheduler made it, read when the scheduler sets them; any key it does not know gets
    0 (``Scheduler._set_priorities`` leaves a task without a priority where its key is not in the mapping)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._order: dict | None = None

    def __reduce__(self) -> tuple:
        return GraphOrder, (self.name,)

    def _priorities(self) -> dict:
        if self._order is None:
            self._order = _ORDERS.get(self.name, {})
        return self._order

    def __getitem__(self, key: Any) -> int:
        return self._priorities().get(key, 0)

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator:
        return iter(self._priorities())

    def __len__(self) -> int:
        return len(self._priorities())

    def __bool__(self) -> bool:  # (an update-graph without priorities is ordered by the scheduler)
        return True


def is_array(x: Any) -> bool:
    """Whether ``x`` is a gnp Array (the api layer's), by its expression."""
    return isinstance(getattr(x, "expr", None), ArrayExpr)


def computed_roots(expr: Any) -> list[ArrayExpr] | None:
    """The Arrays whose values ``dask.compute`` of gnp Arrays alone asks of a distributed client (its optimized
    sequence: each a ``Materialized`` root or a ``JointOutput`` of their joint one, finalized), unfinalized; None
    for any other expression."""
    operands = getattr(expr, "operands", None)
    if type(expr).__name__ != "_ExprSequence" or not operands:
        return None
    roots = []
    for op in operands:
        if isinstance(op, JointOutput):
            root = op._root
        elif isinstance(op, Materialized):
            root = op.root
        else:
            return None
        roots.append(root.array if isinstance(root, Finalize) else root)
    return roots


def submit(client: Any, roots: Sequence[ArrayExpr], workers: tuple[str, ...], keys: Sequence | None = None) -> dict:
    """Send the graph of ``roots`` (optimized together, blocks placed on ``workers``: ``placement_workers``) to
    ``client``'s scheduler as Dask's persist or compute of them would, with the current ``dask.annotate``
    annotations, in one update-graph with its priorities; the futures of their blocks (or of the graph's ``keys``,
    the tasks the scheduler then runs) by key."""
    from distributed.client import SpanMetadata
    from distributed.protocol import ToPickle

    if keys is None:  # (a persist, ``Client.compute``: the outputs of an accelerated call may be made directly)
        from .direct import persisted

        made = persisted(client, roots)
        if made is not None:
            return made
    root = roots[0] if len(roots) == 1 else Bundle.of(*roots)
    node = Ordered.of(root, workers)
    keys = [key for r in roots for key in flat_keys(r)] if keys is None else list(keys)
    return client._graph_to_futures(node, keys, SpanMetadata(collections=[{"type": "Array"}] * len(roots)),
                                    internal_priority=ToPickle(GraphOrder(node._name)), fifo_timeout=FIFO_TIMEOUT)


def persist(client: Any, arrays: Sequence[Any], workers: tuple[str, ...]) -> list:
    """``client.persist(arrays)`` of gnp Arrays (no other arguments): the same Arrays of futures, sent by ``submit``."""
    exprs = [a.expr for a in arrays]
    futures = submit(client, exprs, workers)
    out = []
    for a, e in zip(arrays, exprs):
        rebuild, state = a.__dask_postpersist__()
        out.append(rebuild({k: futures[k] for k in flat_keys(e)}, *state))
    return out

