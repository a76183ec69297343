"""Subtrees that plain code builds again call after call, kept as templates and rebuilt on the next inputs of the
same names: every node's name, chunks and operands (plans included) kept, none worked out again.

A builder (a setitem update in its shifted-slice form, a constant ``pad``) makes a few nodes on its inputs; a
Python loop makes the same nodes on every call of the user's function, because its inputs have the same names
call after call. The template holds what those nodes hold with the inputs left out of their operands (so that it
keeps no data alive), and makes them again on the inputs given, as ``ArrayExpr.with_operands`` would with their
names kept."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from dask._expr import Expr

from .base import ArrayExpr, _leaves_of

# one node of a template: its class, its operands with None for those that are inputs or earlier nodes of the
# template, those (position, reference) pairs (a reference numbers the inputs, then the template's nodes), and the
# rest of what the node holds (name, token, chunks, dtype, backend)
_Step = tuple[type, tuple, tuple[tuple[int, int], ...], dict[str, Any]]
Template = tuple[tuple[_Step, ...], int]  # (nodes in order, reference of the result)

_LIMIT = 64  # nodes met at most: a builder that reaches further (past an input not given) gets no template


class _NoTemplate(Exception):
    pass


def template_of(result: ArrayExpr, inputs: Sequence[ArrayExpr]) -> Template | None:
    """The template of ``result``, built on ``inputs``; None where it reads data other than theirs (a host
    array), an expression not ours, or more than ``_LIMIT`` nodes between them."""
    refs: dict[str, int | None] = {a._name: i for i, a in enumerate(inputs)}
    steps: list[_Step] = []
    met = iter(range(_LIMIT))

    def visit(node: ArrayExpr) -> int | None:  # its reference, None where it reads no input
        name = node._name
        if name in refs:
            return refs[name]
        if next(met, None) is None:  # (nodes met on the way down, reading inputs or not)
            raise _NoTemplate
        operands = list(node.operands)
        subs = []
        for position, o in enumerate(operands):
            if isinstance(o, ArrayExpr):
                ref = visit(o)
                if ref is not None:
                    subs.append((position, ref))
                    operands[position] = None
            elif isinstance(o, Expr) or (isinstance(o, (tuple, list)) and any(isinstance(v, Expr) for v in o)):
                raise _NoTemplate
        if not subs:  # kept as it is where it holds no data (constant blocks)
            if node._leaves != {}:
                raise _NoTemplate
            refs[name] = None
            return None
        held = {"_determ_token": node.deterministic_token, "_name": name, "chunks": node.chunks, "dtype": node.dtype,
                "backend": node.backend}
        steps.append((type(node), tuple(operands), tuple(subs), held))
        refs[name] = len(inputs) + len(steps) - 1
        return refs[name]

    try:
        out = visit(result)
    except (_NoTemplate, RecursionError):
        return None
    return None if out is None else (tuple(steps), out)


def replayed(template: Template, inputs: Sequence[ArrayExpr]) -> ArrayExpr:
    """The nodes of ``template`` on ``inputs`` (of the names it was made on), names and metadata kept."""
    steps, out = template
    values: list[Any] = list(inputs)
    for cls, operands, subs, held in steps:
        filled = list(operands)
        for position, ref in subs:
            filled[position] = values[ref]
        inst = object.__new__(cls)
        inst.__dict__.update(held, operands=filled, _leaves=_leaves_of(filled))
        values.append(inst)
    return values[out]


MISSING = object()  # (``Templates.get`` where nothing is kept)


class Templates:
    """Templates (or None: the builder's answer where it made no node) by a key that names the builder's
    arguments, its inputs by name; at most ``size``, cleared when full (a loop of new names every step must
    not grow it without end)."""

    def __init__(self, size: int = 1024) -> None:
        self._kept: dict[Hashable, Template | None] = {}
        self._size = size

    def get(self, key: Hashable) -> Template | None | object:
        """The template kept under ``key``, None, or ``MISSING`` where there is none."""
        return self._kept.get(key, MISSING)

    def keep(self, key: Hashable, result: ArrayExpr | None, inputs: Sequence[ArrayExpr]) -> None:
        """Keep ``result``'s template (None: the builder's None) under ``key``; nothing where an input is fresh
        (never met before: a time-stepping loop's new nodes, whose key will not come again) or where
        ``result`` has no template."""
        if any(a._fresh for a in inputs):
            return
        template = None if result is None else template_of(result, inputs)
        if result is not None and template is None:
            return
        if len(self._kept) >= self._size:
            self._kept.clear()
        self._kept[key] = template

