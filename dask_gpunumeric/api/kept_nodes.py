"""Elementwise nodes kept from one call of plain code to the next: the same operation on the same operand objects
(and numbers) gives again the node it made before, not a new node of the same name (``api.elementwise._short_path``:
an Array wrapper is all a repeated operation then makes).

A kept node holds its operands, and through them its inputs (``ArrayExpr._leaves``: persisted blocks, host or device
data). So a node is kept only where each of its inputs is held by an Array of the user's too, which is watched: when a
watched Array is freed, or rebound to another node (setitem, ``out=``, in-place ``sort``, ``fill``, ``shuffle``:
``Array._rebind``), every kept node is dropped. Kept nodes never hold data alive on their own."""
from __future__ import annotations

import weakref
from typing import Any

from ..expr import ArrayExpr

# (op, skip, *operand names or (type, value) of numbers), as ``_short_path`` keys its plans -> (the node, the list of
# the operand nodes it was made of, in the operation's order: given again only for the same objects; lists of nodes
# compare by identity, as nodes have no ``__eq__`` of their own), or ``NEVER`` (none kept)
KEPT: dict[tuple, tuple[ArrayExpr, list[ArrayExpr]] | tuple[None, None]] = {}
NEVER = (None, None)
_KEPT_SIZE = 2**14  # (as ``_NODES``: a loop of new names must not grow it without end)
# id of an input node -> a weak reference to an Array pointing to it (alive while the Array points to it)
_WATCHED: dict[int, weakref.ref] = {}


def keep(key: tuple, node: ArrayExpr, operands: tuple[Any, ...]) -> None:
    """Keep ``node``, made of the Arrays among ``operands`` (an operation's: Arrays and numbers), under ``key`` where
    each input under it is held by a watched Array (those operands that point to an input are watched from now on);
    else ``NEVER`` is kept there (nothing to keep for these operands: not tried again until kept nodes are dropped)."""
    if node._fresh:  # (never made before: a loop's next step, or a first call, whose nodes come back made again)
        return
    if len(KEPT) >= _KEPT_SIZE:
        KEPT.clear()
    KEPT[key] = _kept(node, operands)


def _kept(node: ArrayExpr, operands: tuple[Any, ...]) -> tuple[ArrayExpr, list[ArrayExpr]] | tuple[None, None]:
    leaves = node._leaves
    if leaves is None:
        return NEVER
    arrays = []
    for a in operands:
        e = getattr(a, "_expr", None)  # (an Array's node; a number has none)
        if e is None:
            continue
        arrays.append(e)
        if id(e) not in _WATCHED and leaves.get(e._name) is e:
            _WATCHED[id(e)] = weakref.ref(a, forget)
    held = node.operands
    for e in arrays:  # (a rewrite that drops an operand: its id could come back on another object)
        if not any(o is e for o in held):
            return NEVER
    for leaf in leaves.values():
        ref = _WATCHED.get(id(leaf))
        watcher = None if ref is None else ref()
        if watcher is None or watcher._expr is not leaf:
            return NEVER
    return node, arrays


def forget(_ref: Any = None) -> None:
    """Drop every kept node (a watched Array freed or rebound: its input may be held by kept nodes alone)."""
    KEPT.clear()
    _WATCHED.clear()


def rebinding(array: Any) -> None:
    """``array`` (a gnp Array: this module is below ``api.array``) is about to point to another node: where it is
    watched, every kept node is dropped."""
    ref = _WATCHED.get(id(array._expr))
    if ref is not None and ref() is array:
        forget()
