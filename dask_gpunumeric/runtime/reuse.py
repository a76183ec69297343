"""Plans reused by the shape of a tree: a tree built again on other inputs (a loop calling the same function on
each step's result, new arrays of the same chunks) gets the optimized graph of the first such tree, its keys
renamed, without optimizing or lowering again: what ``accelerate`` does for a traced function, for plain code.

A tree's structure is its nodes in ``walk`` order, each with its type and its operands (sub-expressions by
position, plain values by their exact text, other objects by their ``structure_text``), its inputs (``FromGraph``,
``FromArray``) by chunks, dtype and backend alone. The cached graph leaves out the inputs' blocks (it keeps no data
alive); a call adds those of its own inputs, also where a task makes them inside itself (an accelerated call's small
arguments, ``small_host_blocks``: a new value is never an old one's).

The numbers of elementwise nodes that no pass reads (``pipeline.by_type``: a new dt, rate or range) count by type,
with which of them are equal (equal numbers make equal nodes, which the optimizer merges), unless the tree holds
objects of its own kind (a loop's body): the graph of a call takes its tree's values where the first tree's were
(found by identity: a pass passes them on as they are), and is not kept where one was not found, or found inside
something it would not be rebuilt through, or is also an operand counted by value."""
from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

from dask._expr import Expr
from dask._task_spec import GraphNode, Task, TaskRef

from ..expr import ArrayExpr, Elemwise, FromArray, FromGraph, JointOutput, Materialized, small_host_blocks
from ..expr.tokens import _TEXT, _plain_repr
from ..optimize.pipeline import by_type
from .faults import AwaitedTask, label_tasks

__all__ = ["Structure", "Template", "lookup", "remember", "structure_of"]

_INPUTS = (FromGraph, FromArray)


class Structure(NamedTuple):
    """A tree's structure: its key (text hash), its nodes in ``walk`` order and the positions of its inputs; the
    numbers counted by type, each (node position, operand position, class of equal numbers), and each class's
    value in this tree."""

    key: str
    nodes: list[ArrayExpr]
    inputs: list[int]
    numbers: tuple[tuple[int, int, int], ...] = ()
    values: tuple = ()


class Template(NamedTuple):
    """The optimized graph of the first tree of a structure, without its inputs' blocks."""

    names: tuple[str, ...]  # the tree's node names in walk order
    inputs: tuple[int, ...]  # positions of its inputs among them
    input_blocks: tuple[tuple[tuple, ...], ...]  # per input, the block indices the graph reads
    graph: dict
    outputs: list
    schedule: list | None  # the schedule of the graph with its inputs, once made
    layout: Any = None  # on a cluster: its ``compile.Layout`` (keys kept apart, owners, annotations)
    inlined: tuple[tuple[int, tuple], ...] = ()  # (input, block index) of the inputs' blocks made inside tasks
    rebuilt: frozenset = frozenset()  # keys of the tasks holding keys or names as data, inputs' blocks, or numbers
    numbers: tuple[tuple[int, int], ...] = ()  # (id, class) of the numbers counted by type, as the graph holds them


def _text(operand: Any, position: dict[str, int], opaque: list) -> str | None:
    if isinstance(operand, Expr):
        return f"@{position[operand._name]}"
    text = _TEXT.get(type(operand), _plain_repr)(operand)
    if text is None:  # an object that says what of it makes a plan (a traced function's: its token)
        structure = getattr(operand, "structure_text", None)
        if structure is None:
            return None
        opaque.append(operand)
        return f"{type(operand).__qualname__}:{structure}"
    return text


_ARGS = len(Elemwise._parameters)  # an Elemwise node's first argument among its operands


def structure_of(nodes: list[ArrayExpr], settings: tuple, by_types: bool = True) -> Structure | None:
    """The structure of a tree (its nodes in ``walk`` order, the root first; under the optimizer's
    ``settings``), or None when its plan may not be reused: an operand that is no plain value, a node that
    holds a tree of its own, inputs that are tasks (Futures of blocks persisted on a cluster are inputs as
    any others: the template holds none of them). ``by_types``: numbers ``by_type`` count by type, unless the
    tree holds objects of its own kind."""
    position = {node._name: i for i, node in enumerate(nodes)}
    parts, inputs, opaque = [repr(settings)], [], []
    numbers: list[tuple[int, int, int]] = []
    classes: dict[str, int] = {}  # a number's text -> its class (equal numbers, one class)
    values: list = []
    for i, node in enumerate(nodes):
        if isinstance(node, _INPUTS):
            if isinstance(node, FromGraph) and any(isinstance(v, GraphNode) for v in node.operand("layer").values()):
                return None
            inputs.append(i)
            parts.append(f"{type(node).__name__}:{node.chunks!r}:{node.dtype.str}:{node.backend}")
            continue
        if isinstance(node, (Materialized, JointOutput)):
            return None
        operands = node.operands
        texts = [_text(o, position, opaque) for o in operands]
        if None in texts:
            return None
        if by_types and type(node) is Elemwise:
            for j in range(_ARGS, len(operands)):
                if by_type(operands[j]):
                    k = classes.get(texts[j])  # type: ignore[arg-type]
                    if k is None:
                        k = classes[texts[j]] = len(values)  # type: ignore[index]
                        values.append(operands[j])
                    numbers.append((i, j, k))
                    texts[j] = f"{type(operands[j]).__qualname__}#{k}"
        parts.append(f"{type(node).__qualname__}({','.join(texts)})")  # type: ignore[arg-type]
    if numbers and opaque:  # (a loop's body, a region's plan: what they do with a number is not seen here)
        return structure_of(nodes, settings, by_types=False)
    return Structure(hashlib.sha1("\n".join(parts).encode()).hexdigest(), nodes, inputs, tuple(numbers),
                     tuple(values))


_TEMPLATES: collections.OrderedDict[str, Template] = collections.OrderedDict()
_TEMPLATES_SIZE = 64


def remember(shape: Structure, graph: dict, outputs: list) -> Template | None:
    """Keep the graph of a tree of this structure (without its inputs' blocks), the least recently used
    dropped beyond ``_TEMPLATES_SIZE``; None where its numbers counted by type cannot be substituted
    (``_numbers_in``): not kept."""
    input_names = {shape.nodes[i]._name: k for k, i in enumerate(shape.inputs)}
    blocks: list[list[tuple]] = [[] for _ in shape.inputs]
    kept = {}
    for key, task in graph.items():
        k = input_names.get(key[0] if type(key) is tuple else key)
        if k is None:
            kept[key] = task
        else:
            blocks[k].append(tuple(key[1:]))
    names = {n._name for n in shape.nodes}
    inlined: set[tuple[int, tuple]] = set()
    rebuilt = frozenset(key for key, task in kept.items() if isinstance(task, Task)
                        and _holds([task.args, task.kwargs], graph.keys(), names, input_names, inlined))
    numbers = _numbers_in(shape, kept)
    if numbers is None:
        return None
    holding, found = numbers
    template = Template(tuple(n._name for n in shape.nodes), tuple(shape.inputs), tuple(map(tuple, blocks)), kept,
                        outputs, None, None, tuple(sorted(inlined)), rebuilt | holding, tuple(found.items()))
    _TEMPLATES[shape.key] = template
    while len(_TEMPLATES) > _TEMPLATES_SIZE:
        _TEMPLATES.popitem(last=False)
    return template


class _Unsafe(Exception):
    """A number counted by type where a graph made again would not take another (``_numbers_in``)."""


def _numbers_in(shape: Structure, graph: dict) -> tuple[frozenset, dict[int, int]] | None:
    """Where the graph of a tree holds its numbers counted by type: the keys of the tasks holding them, and the
    id of each such object found with its class; None where a call's values could not all take their place: a
    class not found (its value went into something else), one found inside what a rebuilt task keeps as it is
    (a program, a non-plain node), or the object of one also an operand counted by value."""
    if not shape.numbers:
        return frozenset(), {}
    ids = {id(shape.nodes[i].operands[j]): k for i, j, k in shape.numbers}
    places = {(i, j) for i, j, _ in shape.numbers}
    found: dict[int, int] = {}
    holding = set()
    try:
        for i, node in enumerate(shape.nodes):
            if not isinstance(node, _INPUTS):
                for j, operand in enumerate(node.operands):
                    if (i, j) not in places and not isinstance(operand, Expr) and _found(operand, ids, set(), True):
                        return None
        for key, task in graph.items():
            if _found(task, ids, found, type(task) in _REBUILT_TASKS):
                holding.add(key)
    except _Unsafe:
        return None
    if len(set(found.values())) < len(shape.values):
        return None
    return frozenset(holding), found


_REBUILT_TASKS = (Task, AwaitedTask)  # the tasks ``_rebuilt`` makes again as they were made (key, func, arguments)


def _found(value: Any, ids: dict[int, int], found: Any, rebuilt: bool) -> bool:
    """Whether ``value`` holds one of the objects ``ids`` (each added to ``found`` with its class); where it is not
    ``rebuilt`` (where ``_rebuilt`` does not put another), such an object raises ``_Unsafe``."""
    kind = type(value)
    if kind in _CONTAINERS:
        items = value.values() if kind is dict else value
        return any([_found(v, ids, found, rebuilt) for v in items])  # (a list: every one found)
    k = ids.get(id(value))
    if k is not None:
        if not rebuilt:
            raise _Unsafe
        if type(found) is dict:
            found[id(value)] = k
        else:
            found.add(k)
        return True
    if isinstance(value, GraphNode):
        if isinstance(value, Task):
            inside = rebuilt and kind in _REBUILT_TASKS
            return _found([value.args, value.kwargs], ids, found, inside)
        return _found(getattr(value, "value", None), ids, found, False)
    if isinstance(value, tuple):  # a NamedTuple (a program): kept as it is
        return _found(list(value), ids, found, False)
    return False


_CONTAINERS = (tuple, list, dict)


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
    in this tree, the optimizer's to names salted with this tree's root; also where a task holds them as data),
    with the blocks of this tree's inputs (also those a task makes inside itself); its outputs, schedule (None
    when not yet made) and the key renaming. None when a task names a key the renaming misses, or an input made
    inside tasks is no longer small host data (that graph is not reused)."""
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
    inline, own_names = {}, set(template.names)
    numbers = {i: shape.values[k] for i, k in template.numbers}  # the first tree's objects -> this tree's values
    for k, index in template.inlined:  # an input's blocks made inside the tasks reading them: this call's
        name, node = template.names[template.inputs[k]], shape.nodes[template.inputs[k]]
        made = small_host_blocks(node)
        if made is None:
            return None
        inline[(name, *index)] = made[(node._name, *index)]
    graph = {}
    for key, task in template.graph.items():
        new = subs[key]
        if key in template.rebuilt:
            graph[new] = _rebuilt(task, new, subs, renamed, inline, own_names, numbers)
        else:
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


def _holds(value: Any, keys: Any, names: set[str], inputs: dict[str, int], inlined: set[tuple[int, tuple]]) -> bool:
    """Whether a task's arguments ``value`` hold what renaming its dependencies misses: a key of the graph or a
    node's name as data, an object naming them (``with_names``), or a block of an input made inside the task
    (each such block's (input, index) added to ``inlined``)."""
    if isinstance(value, TaskRef):
        return False
    if isinstance(value, GraphNode):
        key = value.key
        k = inputs.get(key[0] if type(key) is tuple else key)
        if k is not None:
            inlined.add((k, tuple(key[1:]) if type(key) is tuple else ()))
            return True
        return isinstance(value, Task) and (_holds(value.args, keys, names, inputs, inlined)
                                            | _holds(value.kwargs, keys, names, inputs, inlined))
    if type(value) is str:
        return value in names or value in keys
    if type(value) is tuple and _hashable(value) and value in keys:
        return True
    if type(value) in (tuple, list):  # (plain containers, as ``_rebuilt`` rebuilds: not a program's NamedTuples)
        return any([_holds(v, keys, names, inputs, inlined) for v in value])  # (a list: every inlined block found)
    if type(value) is dict:
        return any([_holds(v, keys, names, inputs, inlined) for v in value.values()])
    return hasattr(value, "with_names")


def _hashable(value: tuple) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


_PLAIN_LEAVES = frozenset([int, float, bool, type(None), bytes])


def _rebuilt(task: Task, key: Any, subs: dict, renamed: Callable[[str], str], inline: dict, names: set[str],
             numbers: dict[int, Any]) -> Task:
    """A task of a template for a call (``instantiate``): its key, the keys it holds renamed (``subs``) and the
    template tree's node names (``names``, by ``renamed``), the blocks of inputs made inside it this call's
    (``inline``), and the numbers counted by type this call's (``numbers``: by the first tree's objects' ids)."""

    def new(value: Any) -> Any:
        kind = type(value)
        if numbers and id(value) in numbers:
            return numbers[id(value)]
        if kind is TaskRef:
            return TaskRef(subs.get(value.key, value.key))
        if kind is tuple:
            try:
                return subs[value]
            except (KeyError, TypeError):  # (not a key of the graph)
                return tuple(map(new, value))
        if kind is str:
            return subs[value] if value in subs else renamed(value) if value in names else value
        if kind in _PLAIN_LEAVES:
            return value
        if isinstance(value, GraphNode):
            if value.key in inline:
                return inline[value.key]
            if type(value) in _REBUILT_TASKS:
                return _rebuilt(value, value.key, subs, renamed, inline, names, numbers)
            return value.substitute(subs) if isinstance(value, Task) else value  # (a List, a Dict: its references)
        if kind is list:
            return list(map(new, value))
        if kind is dict:
            return {k: new(v) for k, v in value.items()}
        with_names = getattr(value, "with_names", None)
        return value if with_names is None else with_names(renamed)

    return type(task)(key, task.func, *map(new, task.args), _data_producer=task.data_producer,
                      **{k: new(v) for k, v in task.kwargs.items()})


def _input_tasks(node: ArrayExpr, blocks: tuple[tuple, ...]) -> dict:
    """The tasks of the blocks ``blocks`` of an input, as ``graph_of`` makes them."""
    if isinstance(node, FromGraph):
        layer = node._layer()
        return label_tasks(node, {key: layer[key] for key in (node.key(index) for index in blocks)})
    return label_tasks(node, {node.key(index): node._block_task(index) for index in blocks})
