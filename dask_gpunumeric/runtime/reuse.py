"""Plans reused by the shape of a tree: a tree built again on other inputs (a loop calling the same function on
each step's result, new arrays of the same chunks) gets the optimized graph of the first such tree, its keys
renamed, without optimizing or lowering again: what ``accelerate`` does for a traced function, for plain code.

A tree's structure is its nodes in ``walk`` order, each with its type and its operands (sub-expressions by
position, plain values by their exact text), its inputs (``FromGraph``, ``FromArray``) by chunks, dtype and
backend alone. The cached graph leaves out the inputs' blocks (it keeps no data alive); a call adds those of its
own inputs."""
from __future__ import annotations

import collections
import hashlib
from typing import Any, NamedTuple

from dask._expr import Expr
from dask._task_spec import GraphNode

from ..expr import ArrayExpr, FromArray, FromGraph, JointOutput, Materialized
from ..expr.tokens import _TEXT, _plain_repr
from .faults import label_tasks

__all__ = ["Structure", "Template", "lookup", "remember", "structure_of"]

_INPUTS = (FromGraph, FromArray)


class Structure(NamedTuple):
    """A tree's structure: its key (text hash), its nodes in ``walk`` order and the positions of its inputs."""

    key: str
    nodes: list[ArrayExpr]
    inputs: list[int]


class Template(NamedTuple):
    """The optimized graph of the first tree of a structure, without its inputs' blocks."""

    names: tuple[str, ...]  # the tree's node names in walk order
    inputs: tuple[int, ...]  # positions of its inputs among them
    input_blocks: tuple[tuple[tuple, ...], ...]  # per input, the block indices the graph reads
    graph: dict
    outputs: list
    schedule: list | None  # the schedule of the graph with its inputs, once made
    layout: Any = None  # on a cluster: its ``compile.Layout`` (keys kept apart, owners, annotations)


def _text(operand: Any, position: dict[str, int]) -> str | None:
    if isinstance(operand, Expr):
        return f"@{position[operand._name]}"
    return _TEXT.get(type(operand), _plain_repr)(operand)


def structure_of(nodes: list[ArrayExpr], settings: tuple) -> Structure | None:
    """The structure of a tree (its nodes in ``walk`` order, the root first; under the optimizer's
    ``settings``), or None when its plan may not be reused: an operand that is no plain value, a node that
    holds a tree of its own, inputs that are tasks (Futures of blocks persisted on a cluster are inputs as
    any others: the template holds none of them)."""
    position = {node._name: i for i, node in enumerate(nodes)}
    parts, inputs = [repr(settings)], []
    for i, node in enumerate(nodes):
        if isinstance(node, _INPUTS):
            if isinstance(node, FromGraph) and any(isinstance(v, GraphNode) for v in node.operand("layer").values()):
                return None
            inputs.append(i)
            parts.append(f"{type(node).__name__}:{node.chunks!r}:{node.dtype.str}:{node.backend}")
            continue
        if isinstance(node, (Materialized, JointOutput)):
            return None
        texts = [_text(o, position) for o in node.operands]
        if None in texts:
            return None
        parts.append(f"{type(node).__qualname__}({','.join(texts)})")  # type: ignore[arg-type]
    return Structure(hashlib.sha1("\n".join(parts).encode()).hexdigest(), nodes, inputs)


_TEMPLATES: collections.OrderedDict[str, Template] = collections.OrderedDict()
_TEMPLATES_SIZE = 64


def remember(shape: Structure, graph: dict, outputs: list) -> Template:
    """Keep the graph of a tree of this structure (without its inputs' blocks), the least recently used
    dropped beyond ``_TEMPLATES_SIZE``."""
    input_names = {shape.nodes[i]._name: k for k, i in enumerate(shape.inputs)}
    blocks: list[list[tuple]] = [[] for _ in shape.inputs]
    kept = {}
    for key, task in graph.items():
        k = input_names.get(key[0] if type(key) is tuple else key)
        if k is None:
            kept[key] = task
        else:
            blocks[k].append(tuple(key[1:]))
    template = Template(tuple(n._name for n in shape.nodes), tuple(shape.inputs), tuple(map(tuple, blocks)), kept,
                        outputs, None)
    _TEMPLATES[shape.key] = template
    while len(_TEMPLATES) > _TEMPLATES_SIZE:
        _TEMPLATES.popitem(last=False)
    return template


def lookup(shape: Structure) -> Template | None:
    """The kept graph of this structure, marked as recently used, or None."""
    template = _TEMPLATES.get(shape.key)
    if template is not None:
        _TEMPLATES.move_to_end(shape.key)
    return template


def with_layout(shape: Structure, template: Template, layout: Any) -> None:
    """Keep the cluster layout of the graph of this template (by the template's own keys)."""
    if _TEMPLATES.get(shape.key) is template:
        _TEMPLATES[shape.key] = template._replace(layout=layout)


def with_schedule(shape: Structure, template: Template, schedule: list) -> None:
    """Keep the schedule made for a graph of this template (renamed back: any call of it can use it)."""
    if _TEMPLATES.get(shape.key) is template:
        _TEMPLATES[shape.key] = template._replace(schedule=schedule)


def instantiate(template: Template, shape: Structure) -> tuple[dict, list, list | None, dict] | None:
    """The template's graph for the tree of ``shape``: its keys renamed (the tree's own nodes to their names
    in this tree, the optimizer's to names salted with this tree's root), with the blocks of this tree's
    inputs; its outputs, schedule (None when not yet made) and the key renaming. None when a task names a
    key the renaming misses (that graph is not reused)."""
    salt = shape.nodes[0]._name
    names = dict(zip(template.names, (n._name for n in shape.nodes)))
    # the template's own tree built again keeps the optimizer's names: a scheduler given its root's keys twice
    # (two calls in flight) must get the same tasks
    own = salt == template.names[0]

    def renamed(name: str) -> str:
        new = names.get(name)
        if new is None:
            prefix = name.rpartition("-")[0] or name
            new = names[name] = name if own else f"{prefix}-{hashlib.sha1(f'{name}|{salt}'.encode()).hexdigest()[:32]}"
        return new

    def rekey(key: Any) -> Any:
        return (renamed(key[0]), *key[1:]) if type(key) is tuple else renamed(key)

    subs = {key: rekey(key) for key in template.graph}
    for i, blocks in zip(template.inputs, template.input_blocks):
        name = template.names[i]
        subs.update({(name, *index): (names[name], *index) for index in blocks})
    graph = {}
    for key, task in template.graph.items():
        new = subs[key]
        graph[new] = task.substitute(subs, key=new) if isinstance(task, GraphNode) else task
    try:
        for i, blocks in zip(template.inputs, template.input_blocks):
            graph.update(_input_tasks(shape.nodes[i], blocks))
    except KeyError:  # a persisted input without a block the template's reads
        return None
    if any(not task.dependencies <= graph.keys() for task in graph.values() if isinstance(task, GraphNode)):
        return None
    schedule = template.schedule
    if schedule is not None:
        schedule = [(subs[key], tuple(subs[d] for d in done)) for key, done in schedule]
    return graph, [subs[k] for k in template.outputs], schedule, subs


def _input_tasks(node: ArrayExpr, blocks: tuple[tuple, ...]) -> dict:
    """The tasks of the blocks ``blocks`` of an input, as ``graph_of`` makes them."""
    if isinstance(node, FromGraph):
        layer = node._layer()
        return label_tasks(node, {key: layer[key] for key in (node.key(index) for index in blocks)})
    return label_tasks(node, {node.key(index): node._block_task(index) for index in blocks})
