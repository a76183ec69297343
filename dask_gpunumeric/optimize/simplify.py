"""Algebraic simplification: ``x * 1 -> x`` and ``x + 0 -> x`` where the result is exactly ``x``, bit for bit."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from dask._expr import Expr

from ..expr import ArrayExpr, Bundle, Elemwise
from .dag import DAG, rebuild

_REAL_KINDS = "biuf"  # complex x * 1 is not x where a part is infinite (inf * 0 = nan in the product)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def _identity_operand(node: Expr) -> ArrayExpr | None:
    """The array ``x`` when ``node`` is ``x * 1``, ``1 * x``, ``x + 0`` or ``0 + x`` and gives exactly ``x``
    (same dtype, chunks and backend; ``x + 0.0`` only on integers and booleans, since ``-0.0 + 0.0`` is
    ``0.0``, while ``x + -0.0`` is ``x`` for every float), else None."""
    if not isinstance(node, Elemwise):
        return None
    op, _, kwargs, *args = node.operands  # Elemwise's parameters, then its arguments
    if op not in ("multiply", "add") or kwargs:
        return None
    if len(args) != 2:
        return None
    arrays = [a for a in args if isinstance(a, ArrayExpr)]
    scalars = [a for a in args if _is_scalar(a)]
    if len(arrays) != 1 or len(scalars) != 1:
        return None
    (x,), (c,) = arrays, scalars
    if (x.dtype != node.dtype or x.dtype.kind not in _REAL_KINDS or x.chunks != node.chunks
            or x.backend != node.backend):
        return None
    if op == "multiply":
        return x if c == 1 else None
    return x if c == 0 and (x.dtype.kind != "f" or np.signbit(c)) else None


def simplify(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with every exact identity operation (``_identity_operand``) replaced by its operand;
    the roots stay (their keys are the outputs)."""
    roots = {root._name, *(o._name for o in root.operands if isinstance(o, Expr) and isinstance(root, Bundle))}
    replaced: dict[str, Expr] = {}
    for node in DAG.of(root).order:
        x = None if node._name in roots else _identity_operand(node)
        if x is not None:
            replaced[node._name] = x
    return rebuild(root, replaced) if replaced else root
