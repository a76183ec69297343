"""Operations called again on operands of the same names, as plain code calls them on every run of a function (a
least-squares fit's ``solve(X.T @ X, X.T @ y)``): the nodes of the result made again from a recipe kept from an earlier
call, without the operation's checks, dtype rules and token texts: what ``accelerate`` does by tracing once, for
the operations that users write on whole arrays, without the decorator.

A recipe is kept from the second call of a key on (a loop that calls an operation on a new array every step keeps
nothing), and only for a call that no guard was asked about (its guard is asked again on every call: the full path's).
Its key is the operation, each Array operand's name, node type and inputs' names (a persisted Array keeps the name of
the expression it came from: its nodes are another tree of the same names), the plain values of the other operands
(by type and value; zeros and NaN, whose equal values have other bits, never), and the settings the operations read.
The recipe holds no data: the nodes it reads that are not made by the call (an operand, or a node under one, which
the operation read through) are found again in the call's operands by their position, and must be of the same type
and name; a call whose result reads any other data is not kept."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from .. import config
from ..expr import ArrayExpr, FromArray, FromGraph, small_host_blocks
from ..expr.base import _leaves_of
from . import guards as _guards
from .array import Array

F = TypeVar("F", bound=Callable[..., Any])

_SETTINGS = ("split-every",)  # the settings the operations kept here read when they build nodes
_KEPT_VALUES = frozenset({int, str, bool, type(None)})  # plain operands keyed by their value (and their type)
_SLOT_DEPTH = 2  # how far under an operand a node read through it is looked for (``x.T @ x`` reads ``x``)


class _Node(NamedTuple):
    """How one node of a result is made: its type, its operands (``None`` where ``fill`` puts a node), and for
    each such operand its position with where it comes from (a slot: True, a node made before: False) and the index
    there; the values the node's dict holds but its operands and inputs."""

    kind: type
    operands: tuple
    fill: tuple[tuple[int, bool, int], ...]
    values: dict


class _Recipe(NamedTuple):
    """The nodes of a result, made in order (the last one the result), and its slots: per slot, (operand index, path
    of operand positions under it, node type, name)."""

    slots: tuple[tuple[int, tuple[int, ...], type, str], ...]
    nodes: tuple[_Node, ...]


_RECIPES: dict[tuple, Any] = {}  # key -> its recipe, or ``_SEEN`` (once), or ``_NEVER`` (not kept)
_RECIPES_SIZE = 4096


def reused(func: F) -> F:
    """``func`` (an operation returning one Array, whose result depends on its operands' names and types, its plain
    arguments and ``_SETTINGS`` alone) with its result made again from a recipe when called again on the same
    (``_key``)."""
    head = func.__qualname__

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        key = _key(head, args, kwargs)
        if key is None or _guards.tracing():
            return func(*args, **kwargs)
        recipe = _RECIPES.get(key)
        if type(recipe) is _Recipe:
            made = _made(recipe, args)
            if made is not None:
                result = _new_array(Array)
                result._expr = made
                return result
            return func(*args, **kwargs)
        if recipe is not _SEEN:  # (seen for the first time, or never kept)
            if recipe is None:
                _keep(key, _SEEN)
            return func(*args, **kwargs)
        with _guards.recorded() as asked:
            result = func(*args, **kwargs)
        kept = None if asked or type(result) is not Array else _recipe(result, args)
        _keep(key, _NEVER if kept is None else kept)
        return result

    return call  # type: ignore[return-value]


_SEEN, _NEVER = object(), object()
_new_array = object.__new__


def _keep(key: tuple, value: Any) -> None:
    if len(_RECIPES) >= _RECIPES_SIZE:  # (a loop calling operations on new arrays must not grow it without end)
        _RECIPES.clear()
    _RECIPES[key] = value


def _key(head: str, args: tuple, kwargs: dict) -> tuple | None:
    """A call's key (``reused``), or None where its result may not be kept: keywords (``out=``, NumPy's gufunc
    keywords: the full path's), no Array operand, an operand that is neither an Array nor a plain value, an Array
    whose inputs are not known."""
    if kwargs:
        return None
    key = [head, *config.values(_SETTINGS)]
    arrays = False
    for a in args:
        if type(a) is Array:  # (the common operand, inline)
            e = a._expr
            leaves = e._leaves
            if leaves is None:
                return None
            key += (e._name, type(e), tuple(leaves))
            arrays = True
        else:
            part = _part(a)
            if part is None:
                return None
            key.append(part)
    return tuple(key) if arrays else None


def _part(value: Any) -> Any:
    """A plain operand's part of a key: its type and value (of a tuple, its items'), or None for any other."""
    kind = type(value)
    if kind in _KEPT_VALUES:
        return kind, value
    if kind is float:
        return None if not value or value != value else (kind, value)
    if kind is tuple:
        parts = tuple(map(_part, value))
        return None if None in parts else (kind, parts)
    return None


def _made(recipe: _Recipe, args: tuple) -> ArrayExpr | None:
    """The result of a call of these operands from ``recipe``, or None where a slot is not found in them."""
    slots = []
    for index, path, kind, name in recipe.slots:
        e = args[index]._expr
        for position in path:
            operands = e.operands
            if position >= len(operands):
                return None
            e = operands[position]
        if type(e) is not kind or e._name != name:
            return None
        slots.append(e)
    made: list[ArrayExpr] = []
    for node in recipe.nodes:
        operands = list(node.operands)
        for position, from_slot, index in node.fill:
            operands[position] = slots[index] if from_slot else made[index]
        inst = object.__new__(node.kind)
        values = inst.__dict__
        values.update(node.values)
        values["operands"] = operands
        values["_leaves"] = _leaves_of(operands)
        made.append(inst)
    return made[-1]


_COPIED = ("_determ_token", "_name", "chunks", "dtype", "backend", "_funcname")  # what a node's dict must hold


def _recipe(result: Array, args: tuple) -> _Recipe | None:
    """The recipe of a call's result, or None where it reads data not under its operands, or a node holds a node
    elsewhere than among its operands."""
    found: dict[str, tuple[int, tuple[int, ...], type, str]] = {}
    for index, a in enumerate(args):
        if type(a) is Array:
            _find_slots(a._expr, index, (), found)
    slots: dict[str, int] = {}
    order: dict[str, int] = {}
    nodes: list[_Node] = []
    slot_list: list[tuple[int, tuple[int, ...], type, str]] = []

    def visit(e: ArrayExpr) -> tuple[bool, int] | None:
        name = e._name
        if name in slots:
            return True, slots[name]
        if name in order:
            return False, order[name]
        if name in found:
            slots[name] = len(slot_list)
            slot_list.append(found[name])
            return True, slots[name]
        if isinstance(e, FromGraph) or isinstance(e, FromArray) and small_host_blocks(e) is None:
            return None  # data the call did not get as an operand
        fill = []
        operands = list(e.operands)
        for position, o in enumerate(operands):
            if isinstance(o, ArrayExpr):
                place = visit(o)
                if place is None:
                    return None
                fill.append((position, *place))
                operands[position] = None
            elif _holds_node(o):
                return None
        values = {k: e.__dict__[k] for k in _COPIED if k in e.__dict__}
        if len(values) < len(_COPIED) - 1:
            return None  # a node made without its metadata at hand (the constructor's): not made again here
        order[name] = len(nodes)
        nodes.append(_Node(type(e), tuple(operands), tuple(fill), values))
        return False, order[name]

    top = visit(result._expr)
    if top is None or top[0]:
        return None  # (an operand returned as it is: nothing to make)
    return _Recipe(tuple(slot_list), tuple(nodes))


def _find_slots(e: ArrayExpr, index: int, path: tuple[int, ...], found: dict) -> None:
    found.setdefault(e._name, (index, path, type(e), e._name))
    if len(path) < _SLOT_DEPTH:
        for position, o in enumerate(e.operands):
            if isinstance(o, ArrayExpr):
                _find_slots(o, index, (*path, position), found)


def _holds_node(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_holds_node(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_node(v) for v in value.values())
    return isinstance(value, ArrayExpr)
