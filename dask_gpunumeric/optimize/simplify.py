"""Algebraic simplification: ``x * 1 -> x`` and ``x + 0 -> x`` where the result is exactly ``x``, bit for bit."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from dask._expr import Expr

from ..expr import ArrayExpr, Bundle, Elemwise
from .dag import DAG, bypass

_REAL_KINDS = "biuf"  # complex x * 1 is not x where a part is infinite (inf * 0 = nan in the product)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


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
    if not isinstance(x, ArrayExpr) or not _is_scalar(c) or c != (1 if op == "multiply" else 0):
        return None
    if (x.dtype != node.dtype or x.dtype.kind not in _REAL_KINDS or x.chunks != node.chunks
            or x.backend != node.backend):
        return None
    return x if op == "multiply" or x.dtype.kind != "f" or np.signbit(c) else None


def simplify(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with every exact identity operation (``_identity_operand``) replaced by its operand;
    the roots stay (their keys are the outputs)."""
    roots = {root._name, *(o._name for o in root.operands if isinstance(o, Expr) and isinstance(root, Bundle))}
    replaced: dict[str, Expr] = {}
    for node in DAG.of(root).order:
        x = _identity_operand(node)
        if x is not None and node._name not in roots:
            replaced[node._name] = x
    return bypass(root, replaced) if replaced else root
