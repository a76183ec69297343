"""Algebraic simplification, exact bit for bit: ``x * 1 -> x`` and ``x + 0 -> x``; float negations moved out of
products, quotients and ``abs`` so that ``f(x)`` and ``f(-x)`` share their work."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from dask._expr import Expr

from ..expr import ArrayExpr, Bundle, Elemwise
from .dag import DAG, bypass

_REAL_KINDS = "biuf"  # complex x * 1 is not x where a part is infinite (inf * 0 = nan in the product)


_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def _identity_operand(node: Expr) -> ArrayExpr | None:
    """The array ``x`` when ``node`` is ``x * 1``, ``1 * x``, ``x + 0`` or ``0 + x`` and gives exactly ``x``
    (same dtype, chunks and backend; ``x + 0.0`` only on integers and booleans, since ``-0.0 + 0.0`` is
    ``0.0``, while ``x + -0.0`` is ``x`` for every float), else None."""
    if not isinstance(node, Elemwise):
        return None
    operands = node.operands  # Elemwise's parameters (op, dtype, kwargs), then its arguments
    if len(operands) != 5:
        return None
    op, _, kwargs, a, b = operands
    if op != "multiply" and op != "add" or kwargs:
        return None
    x, c = (a, b) if isinstance(a, ArrayExpr) else (b, a)
    if not isinstance(x, ArrayExpr) or not isinstance(c, _SCALARS) or c != (1 if op == "multiply" else 0):
        return None
    if (x.dtype != node.dtype or x.dtype.kind not in _REAL_KINDS or x.chunks != node.chunks
            or x.backend != node.backend):
        return None
    return x if op == "multiply" or x.dtype.kind != "f" or np.signbit(c) else None


def _negated(a: Any, node: Elemwise) -> ArrayExpr | None:
    """``x`` where ``a`` is ``-x`` of ``node``'s dtype, chunks and backend, else None."""
    if not isinstance(a, Elemwise) or a.operands[0] != "negative" or a.operands[2]:
        return None
    x = a.operands[3]
    if isinstance(x, ArrayExpr) and x.dtype == node.dtype and x.chunks == node.chunks and x.backend == node.backend:
        return x
    return None


def _negation_moved_out(node: Expr, effective: Callable[[Any], Any]) -> Expr | None:
    """``node`` rewritten exactly with a negation of its float operands moved out of it, on its operands as
    already rewritten (``effective``): ``abs(-x) -> abs(x)``, ``-(-x) -> x``, ``(-x) * y -> -(x * y)``,
    ``x / (-y) -> -(x / y)`` (round-to-nearest is symmetric in sign, so these are equal bit for bit but for
    the sign of a NaN); else None. So ``erf(-x)`` written as ``sign(-x) * g(abs(-x))`` shares ``g(abs(x))``
    with ``erf(x)``."""
    if not isinstance(node, Elemwise):
        return None
    op, _, kwargs, *args = node.operands
    if op not in _MOVES_NEGATION or kwargs or node.dtype.kind != "f":
        return None
    args = [effective(a) for a in args]
    if not any(isinstance(a, Elemwise) and a.operands[0] == "negative" for a in args):
        return None  # (most nodes: no negation read, checked first)
    if not all(a.chunks == node.chunks and a.dtype == node.dtype for a in args if isinstance(a, ArrayExpr)):
        return None  # broadcasting, promotion: left as written
    negated = [_negated(a, node) for a in args]
    if all(n is None for n in negated):
        return None
    if op == "negative":
        return negated[0]

    def make(name: str, operands: list[Any]) -> Elemwise:
        return Elemwise.of_aligned(name, node.dtype, operands, node.chunks)

    inner = make(op, [a if n is None else n for a, n in zip(args, negated)])
    return inner if op == "absolute" or None not in negated else make("negative", [inner])


_MOVES_NEGATION = frozenset({"absolute", "negative", "multiply", "true_divide"})
_IDENTITIES = frozenset({"multiply", "add"})  # the ops of ``_identity_operand``'s nodes
_REWRITTEN = _MOVES_NEGATION | _IDENTITIES  # the ops of the nodes either rewrite may apply to


def simplify(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with every exact identity operation (``_identity_operand``) replaced by its operand and
    float negations moved out (``_negation_moved_out``); the roots stay (their keys are the outputs)."""
    roots = {root._name, *(o._name for o in root.operands if isinstance(o, Expr) and isinstance(root, Bundle))}
    replaced: dict[str, Expr] = {}

    def effective(a: Any) -> Any:
        while replaced and isinstance(a, Expr) and a._name in replaced:  # (an identity's operand may be too)
            a = replaced[a._name]
        return a

    # the nodes that are, or are replaced by, a negation (``_negated``'s op test): the only operands that
    # make ``_negation_moved_out`` rewrite a node, so that most nodes are not asked
    negations: set[str] = set()
    for node in DAG.of(root).order:
        if type(node) is not Elemwise:
            continue
        operands = node.operands
        op = operands[0]
        if op == "negative" and not operands[2]:
            negations.add(node._name)
        if op not in _REWRITTEN:
            continue  # (most nodes: an op no rewrite applies to, checked first)
        x = _identity_operand(node) if op in _IDENTITIES else None
        if x is None and negations and any(isinstance(a, Expr) and a._name in negations for a in operands[3:]):
            x = _negation_moved_out(node, effective)
        if x is not None and node._name not in roots:  # (a root's name read only where a rewrite applies)
            replaced[node._name] = x
            y = effective(x)
            if isinstance(y, Elemwise) and y.operands[0] == "negative" and not y.operands[2]:
                negations.add(node._name)
    return bypass(root, replaced) if replaced else root
