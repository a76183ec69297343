"""Operations called again on operands of the same names, as plain code calls them on every run of a function (a
least-squares fit's ``solve(X.T @ X, X.T @ y)``): the nodes of the result made again from a recipe kept from an earlier
call, without the operation's checks, dtype rules and token texts: what ``accelerate`` does by tracing once, for
the operations that users write on whole arrays, without the decorator.

A recipe is kept from the second call of a key on (a loop that calls an operation on a new array every step keeps
nothing), and only for a call that no guard was asked about (its guard is asked again on every call: the full path's).
Its key is the operation, each Array operand's name, node type and inputs' names (a persisted Array keeps the name of
the expression it came from: its nodes are another tree of the same names), the plain values of the other operands
(by type and value; zeros and NaN, whose equal values have other bits, never), and the settings the operations read.
Its nodes are kept by ``expr.replay`` (holding no data but small host data); the nodes they read that are not made by
the call (an operand, or a node under one, which the operation read through) are found again in the call's operands
by their position, and must be of the same type and name; a call whose result reads any other data is not kept.

``Templates``: the same for builders inside operations (setitem's shifted-slice rewrite, a constant ``pad``), by a
key their callers make."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .. import config
from ..expr import ArrayExpr
from ..expr.replay import Kept, kept_nodes, rebuilt, template_of
from . import guards as _guards
from .array import Array

F = TypeVar("F", bound=Callable[..., Any])

# the settings that the operations kept here may read when they build nodes
_SETTINGS = ("split-every", "chunk-size", "backend")
_KEPT_VALUES = frozenset({int, str, bool, type(None), type(Ellipsis)})  # operands keyed by their value (and type)
# items of tuples and lists keyed by value alone: equal values of these are of one type (not bool: True == 1)
_UNTYPED_ITEMS = frozenset({int, str, type(None), type(Ellipsis)})
_SLOT_DEPTH = 2  # how far under an operand a node read through it is looked for (``x.T @ x`` reads ``x``)


class _Recipe(NamedTuple):
    """The nodes of a result (``kept``); per input of theirs, its slot: (index among the call's Array operands, path
    of operand positions under it, node type, name); and the type of the result (an Array, or a tuple or NamedTuple
    of Arrays)."""

    slots: tuple[tuple[int, tuple[int, ...], type, str], ...]
    kept: Kept
    kind: type


_RECIPES: dict[tuple, Any] = {}  # key -> its recipe, or ``_SEEN`` (once), or ``_NEVER`` (not kept)
_RECIPES_SIZE = 4096  # (as many as elementwise nodes kept: a loop of a few thousand statements, run again, reuses them)


def reused(func: F) -> F:
    """``func`` (an operation returning an Array or a tuple of Arrays, which depend on its Array operands' names and
    types, its plain arguments and ``_SETTINGS`` alone; an ``out`` argument given, it is the full path's) with its
    result made again from a recipe when called again on the same (``_key``)."""
    head = f"{func.__module__}.{func.__qualname__}"  # (gnp.outer and gnp.linalg.outer check other things)
    out = _out_position(func)

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        arrays: list[ArrayExpr] = []
        key = None if len(args) > out or _guards.tracing() else _key(head, args, kwargs, arrays)
        if key is None:
            return func(*args, **kwargs)
        recipe = _RECIPES.get(key)
        if type(recipe) is _Recipe:
            made = _made(recipe, arrays)
            return func(*args, **kwargs) if made is None else made
        if recipe is not _SEEN:  # (seen for the first time, or never kept)
            if recipe is None:
                _keep(key, _SEEN)
            return func(*args, **kwargs)
        with _guards.recorded() as asked:
            result = func(*args, **kwargs)
        kept = None if asked else _recipe(result, arrays)
        _keep(key, _NEVER if kept is None else kept)
        return result

    return call  # type: ignore[return-value]


def _out_position(func: Callable[..., Any]) -> int:
    """The position of ``func``'s ``out`` argument where it may be given by position, else past any position."""
    for position, parameter in enumerate(inspect.signature(func).parameters.values()):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.KEYWORD_ONLY, parameter.VAR_KEYWORD):
            break
        if parameter.name == "out":
            return position
    return 1 << 30


_SEEN, _NEVER, _MISSING = object(), object(), object()
_new_array = object.__new__


def _keep(key: tuple, value: Any) -> None:
    if len(_RECIPES) >= _RECIPES_SIZE:  # (a loop calling operations on new arrays must not grow it without end)
        _RECIPES.clear()
    _RECIPES[key] = value


def _key(head: str, args: tuple, kwargs: dict, arrays: list[ArrayExpr]) -> tuple | None:
    """A call's key (``reused``), its Array operands' expressions appended to ``arrays`` in order; None where its
    result may not be kept: no Array operand, an operand that is neither an Array nor a plain value (a NumPy array,
    a generator's state, a function), an Array whose inputs are not known or whose node is fresh (an elementwise
    node never made before: a loop's next step, which no later call reads again), an Array given as ``out``."""
    key = [head, *config.values(_SETTINGS)]
    for a in args:
        if type(a) is Array:  # (the common operand, inline)
            e = a._expr
            leaves = e._leaves
            if leaves is None or e._fresh:  # (a node never made before: a loop's next step, never called again)
                return None
            key += (e._name, type(e), tuple(leaves))
            arrays.append(e)
        else:
            part = _part(a, arrays)
            if part is None:
                return None
            key.append(part)
    if kwargs:
        if kwargs.get("out") is not None:
            return None
        for name in sorted(kwargs):
            part = _part(kwargs[name], arrays)
            if part is None:
                return None
            key += (name, part)
    return tuple(key) if arrays else None


def _part(value: Any, arrays: list[ArrayExpr]) -> Any:
    """An operand's part of a key (an Array's expression appended to ``arrays``): a plain value's type and value (of
    a tuple or list, its items'; zeros and NaN, whose equal values have other bits, never), or None for any other."""
    kind = type(value)
    if kind in _KEPT_VALUES or kind is type:
        return kind, value
    if kind is Array:
        e = value._expr
        leaves = e._leaves
        if leaves is None or e._fresh:
            return None
        arrays.append(e)
        return e._name, type(e), tuple(leaves)
    if kind is float:
        return None if not value or value != value else (kind, value)
    if kind is tuple or kind is list:
        if _UNTYPED_ITEMS.issuperset(map(type, value)):  # (shapes, axes: items whose value tells their type)
            return kind, tuple(value)
        parts = tuple([_part(v, arrays) for v in value])
        return None if None in parts else (kind, parts)
    if kind is slice:
        parts = (_part(value.start, arrays), _part(value.stop, arrays), _part(value.step, arrays))
        return None if None in parts else (kind, parts)
    if isinstance(value, np.dtype):
        return np.dtype, value
    return None


def _made(recipe: _Recipe, arrays: list[ArrayExpr]) -> Any:
    """The result of a call of these Array operands from ``recipe``, or None where a slot is not found in them."""
    slots = []
    for index, path, kind, name in recipe.slots:
        e = arrays[index]
        for position in path:
            operands = e.operands
            if position >= len(operands):
                return None
            e = operands[position]
        if type(e) is not kind or e._name != name:
            return None
        slots.append(e)
    made = rebuilt(recipe.kept, slots)
    results = []
    for index in recipe.kept.outputs:
        result = _new_array(Array)  # Array(node) without its check: the node is ours
        result._expr = made[index]
        results.append(result)
    kind = recipe.kind
    return results[0] if kind is Array else tuple(results) if kind is tuple else kind(*results)


def _recipe(result: Any, arrays: list[ArrayExpr]) -> _Recipe | None:
    """The recipe of a call's result, or None where it is no Array or tuple of Arrays, or its nodes are not kept
    (``kept_nodes``: an operand returned as it is, data read that is not under its operands)."""
    kind = type(result)
    outputs = [result] if kind is Array else list(result) if isinstance(result, tuple) else []
    if not outputs or any(type(o) is not Array for o in outputs):
        return None
    found: dict[str, tuple[int, tuple[int, ...], type, str]] = {}
    for index, e in enumerate(arrays):
        _find_slots(e, index, (), found)
    kept = kept_nodes([o._expr for o in outputs], found)
    if kept is None:
        return None
    kind = Array if kind is Array else tuple if kind is tuple else kind
    return _Recipe(tuple(found[name] for name in kept.inputs), kept, kind)


def _find_slots(e: ArrayExpr, index: int, path: tuple[int, ...], found: dict) -> None:
    found.setdefault(e._name, (index, path, type(e), e._name))
    if len(path) < _SLOT_DEPTH:
        for position, o in enumerate(e.operands):
            if isinstance(o, ArrayExpr):
                _find_slots(o, index, (*path, position), found)


class Templates:
    """The nodes a builder makes on its inputs (``expr.replay.template_of``), or None (the builder's answer where it
    made none), by a key that names the builder's arguments, its inputs by name; at most ``size``, cleared when full
    (a loop of new names every step must not grow it without end)."""

    def __init__(self, size: int = 1024) -> None:
        self._kept: dict[Hashable, Kept | None] = {}
        self._size = size

    def made(self, key: Hashable | None, inputs: Sequence[ArrayExpr],
             build: Callable[[], Array | None]) -> Array | None:
        """``build()``'s result (an Array made on ``inputs``, or None), made again from the nodes kept under ``key``
        where there are; else built, and its nodes kept where no input is fresh (a time-stepping loop's new node,
        whose key will not come again) and the build asked no guard (so that made again, it asks none, as the full
        path would; like ``reused``'s). ``key`` None: built, nothing kept; nor while a function is traced (the guards
        it asks recorded for its plan)."""
        if key is not None:
            kept = self._kept.get(key, _MISSING)
            if kept is None:  # (the builder's answer: no nodes)
                return None
            if kept is not _MISSING:
                result = _new_array(Array)  # Array(node) without its check: the node is ours
                result._expr = rebuilt(kept, inputs)[kept.outputs[0]]
                return result
        if key is None or _guards.tracing() or any(a._fresh for a in inputs):
            return build()
        with _guards.recorded() as asked:
            result = build()
        kept = None if result is None else template_of(result._expr, inputs)
        if not asked and (result is None or kept is not None):
            if len(self._kept) >= self._size:
                self._kept.clear()
            self._kept[key] = kept
        return result
