"""Nodes that plain code builds again call after call, kept without their inputs and made again on the next inputs
of the same names: every node's name, chunks and operands (plans included) kept, none worked out again.

A builder (an operation called again on operands of the same names, a setitem update in its shifted-slice form, a
constant ``pad``) makes a few nodes on its inputs; a Python loop makes the same nodes on every call of the user's
function, because its inputs have the same names call after call. ``kept_nodes`` keeps what those nodes hold with
the inputs left out of their operands, and ``rebuilt`` makes them again on the inputs given, as
``ArrayExpr.with_operands`` would with their names kept.

What is kept holds no data but small host data (``_holds_data``): it may outlive every array of the call."""
from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, NamedTuple

import numpy as np
from dask._expr import Expr

from .base import ArrayExpr, _leaves_of
from .data import SMALL_HOST_BYTES, FromArray, FromGraph, small_host_input

# One node made again: its class, its operands with None for those that are inputs or nodes made before it, those
# (position, reference) pairs (a reference numbers the inputs, then the nodes made), and the rest of what the node
# holds (name, token, chunks, dtype, backend). Nodes that read no input are held as they are, among the operands.
_Step = tuple[type, tuple, tuple[tuple[int, int], ...], dict[str, Any]]

_LIMIT = 64  # nodes met at most: results that reach further (a long history past an input not given) are not kept
_PLAIN_ITEMS = frozenset({int, str, bool, type(None), type(Ellipsis)})  # (tuples of these hold no data: shapes, axes)


class Kept(NamedTuple):
    """The nodes of some results without their inputs (``kept_nodes``): made in order by ``rebuilt``."""

    steps: tuple[_Step, ...]
    outputs: tuple[int, ...]  # the results' references
    inputs: tuple[str, ...]  # the names of the inputs read, in the order of their references (``rebuilt``'s inputs)


class _NotKept(Exception):
    pass


def kept_nodes(results: Sequence[ArrayExpr], inputs: Container[str]) -> Kept | None:
    """The nodes of ``results`` made on the nodes named in ``inputs`` (those read are the ``Kept``'s inputs, in the
    order first met), for ``rebuilt``; None where a result is an input or reads none, where a node holds data
    (``_holds_data``) or reads data but small host data not among the inputs, or where more than ``_LIMIT`` nodes
    lie between the results and their inputs."""
    refs: dict[str, int | None] = {}  # by name: its reference (inputs: ~ their number, until all are known)
    read: list[str] = []
    steps: list[_Step] = []
    met = iter(range(_LIMIT))

    def visit(node: ArrayExpr) -> int | None:  # its reference, None where it reads no input
        name = node._name
        if name in refs:
            return refs[name]
        if name in inputs:
            refs[name] = ~len(read)
            read.append(name)
            return refs[name]
        if next(met, None) is None:  # (nodes met on the way down, reading inputs or not)
            raise _NotKept
        if isinstance(node, (FromArray, FromGraph)):  # data not among the inputs: held where small
            if not small_host_input(node):
                raise _NotKept
            refs[name] = None
            return None
        operands = list(node.operands)
        fill = []
        for position, o in enumerate(operands):
            if isinstance(o, ArrayExpr):
                ref = visit(o)
                if ref is not None:
                    fill.append((position, ref))
                    operands[position] = None
            elif _holds_data(o):
                raise _NotKept
        if not fill:  # held as it is (constant blocks)
            refs[name] = None
            return None
        held = {"_determ_token": node.deterministic_token, "_name": name, "chunks": node.chunks, "dtype": node.dtype,
                "backend": node.backend}
        steps.append((type(node), tuple(operands), tuple(fill), held))
        refs[name] = len(steps) - 1
        return refs[name]

    try:
        outputs = [visit(r) for r in results]
    except (_NotKept, RecursionError):
        return None
    if any(ref is None or ref < 0 for ref in outputs):
        return None
    n = len(read)  # references of inputs are their numbers, those of nodes made come after

    def final(ref: int) -> int:
        return ~ref if ref < 0 else n + ref

    steps = [(cls, operands, tuple((p, final(ref)) for p, ref in fill), held) for cls, operands, fill, held in steps]
    return Kept(tuple(steps), tuple(map(final, outputs)), tuple(read))


def rebuilt(kept: Kept, inputs: Sequence[ArrayExpr]) -> list[ArrayExpr]:
    """The nodes of ``kept`` made on ``inputs`` (of its inputs' names, in their order), names and metadata kept,
    after the inputs: by reference (its results at ``kept.outputs``)."""
    values: list[Any] = [*inputs]
    for cls, operands, fill, held in kept.steps:
        filled = list(operands)
        for position, ref in fill:
            filled[position] = values[ref]
        inst = object.__new__(cls)
        known = inst.__dict__  # (set one by one: faster than update(**) here)
        known.update(held)
        known["operands"] = filled
        known["_leaves"] = _leaves_of(filled)
        values.append(inst)
    return values


def template_of(result: ArrayExpr, inputs: Sequence[ArrayExpr]) -> Kept | None:
    """``kept_nodes`` of one result on ``inputs``, where it reads each of them, first met in their order (a builder's
    template: ``rebuilt`` on the next inputs given in that order)."""
    kept = kept_nodes((result,), {a._name for a in inputs})
    return kept if kept is not None and kept.inputs == tuple(a._name for a in inputs) else None


def _holds_data(value: Any) -> bool:
    """Whether a plain operand holds data that kept nodes must not keep alive: an expression (a node not walked),
    device memory, or a host array over ``SMALL_HOST_BYTES`` (in a tuple, list or dict too)."""
    if isinstance(value, (tuple, list)):
        return not _PLAIN_ITEMS.issuperset(map(type, value)) and any(_holds_data(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_data(v) for v in value.values())
    if isinstance(value, np.ndarray):
        return value.nbytes > SMALL_HOST_BYTES
    return isinstance(value, Expr) or hasattr(value, "__cuda_array_interface__")
