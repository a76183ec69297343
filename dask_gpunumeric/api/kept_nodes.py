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

# (op, skip, *operand names or (type, value) of numbers), as ``_short_path`` keys its plans -> (the node, the operands
# it was made of as ``_short_path`` lists them: given again only for a list equal to it, the same node objects, as
# nodes compare by identity, having no ``__eq__`` of their own), or a marker (``NEVER``, ``unwatched``: none kept)
KEPT: dict[tuple, tuple[ArrayExpr, list[Any]] | tuple[None, Any]] = {}
_KEPT_SIZE = 2**14  # (as ``_NODES``: a loop of new names must not grow it without end)
# nothing to keep for these operands: other operand objects of the same names came (made anew on each call, or an
# input's Array let go of), or a rewrite dropped an operand
NEVER: tuple[None, Any] = (None, "never")
# an input under the node was watched by no Array: tried again once another Array is watched (a new marker then)
unwatched: tuple[None, Any] = (None, 0)
# id of an input node -> a weak reference to an Array pointing to it (alive while the Array points to it)
_WATCHED: dict[int, weakref.ref] = {}


def keep(key: tuple, node: ArrayExpr, operands: list[Any], wrappers: tuple[Any, ...]) -> None:
    """Keep ``node`` under ``key`` with ``operands`` (the operation's list of operands as ``_short_path`` makes it:
    array operands as nodes), where each input under it is held by a watched Array (among ``wrappers``, the operands
    as given, those Arrays that point to an input are watched from now on); else a marker saying why not."""
    if node._fresh:  # (never made before: a loop's next step, or a first call, whose nodes come back made again)
        return
    if len(KEPT) >= _KEPT_SIZE:
        KEPT.clear()
    KEPT[key] = _kept(node, operands, wrappers)


def _kept(node: ArrayExpr, operands: list[Any], wrappers: tuple[Any, ...]) -> tuple[Any, Any]:
    global unwatched
    leaves = node._leaves
    if leaves is None:
        return NEVER
    held = node.operands
    for e in operands:  # (a rewrite that drops an operand: its id could come back on another object)
        if isinstance(e, ArrayExpr) and not any(o is e for o in held):
            return NEVER
    for w in wrappers:
        e = getattr(w, "_expr", None)  # (an Array's node; a number has none)
        if e is not None and id(e) not in _WATCHED and leaves.get(e._name) is e:
            _WATCHED[id(e)] = weakref.ref(w, forget)
            unwatched = (None, unwatched[1] + 1)
    for leaf in leaves.values():
        ref = _WATCHED.get(id(leaf))
        watcher = None if ref is None else ref()
        if watcher is None or watcher._expr is not leaf:
            return unwatched
    return node, operands


def forget(_ref: Any = None) -> None:
    """Drop every kept node (a watched Array freed or rebound: its input may be held by kept nodes alone). After
    ``_FORGOTTEN`` such drops their keys are kept ``NEVER`` instead (code whose inputs come and go, such as an Array
    made on each call that would be watched and freed again and again: never tried again)."""
    global unwatched, _forgotten
    _forgotten += 1
    if _forgotten <= _FORGOTTEN:
        KEPT.clear()
    else:
        for key, kept in list(KEPT.items()):
            if kept[0] is not None:
                KEPT[key] = NEVER
    _WATCHED.clear()
    unwatched = (None, unwatched[1] + 1)


_FORGOTTEN = 16
_forgotten = 0


def rebinding(array: Any) -> None:
    """``array`` (a gnp Array: this module is below ``api.array``) is about to point to another node: where it is
    watched, every kept node is dropped."""
    ref = _WATCHED.get(id(array._expr))
    if ref is not None and ref() is array:
        forget()
