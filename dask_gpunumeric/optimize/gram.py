"""The gram pass: the products ``x.T @ x`` and ``x.T @ v`` of one tall-skinny block ``x`` (a plan's least-squares
pair) become one ``GramProducts`` task, which reads ``x`` once on CuPy blocks (``kernels.gram``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..expr import ArrayExpr, FusedOutput, GramProducts, MatMul
from ..kernels import gram as _gram
from .dag import DAG, rebuild


def _reads_transposed_block(node: MatMul) -> bool:
    """Whether ``node`` is ``x.T @ v`` with ``x`` a matrix and ``x``, ``v`` and the product of one block, one
    dtype and on CuPy blocks."""
    if node.operand("transposed") != (True, False):
        return False
    x, v = node.a, node.b
    return (x.ndim == 2 and node.backend == "cupy" and x.numblocks == (1, 1)
            and all(n == 1 for n in v.numblocks) and x.dtype == v.dtype == node.dtype)


def gram_products(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with each ``x.T @ x`` that the gram kernel computes (``kernels.gram.fits``), and the
    products ``x.T @ v`` it can take along, replaced by the outputs of one ``GramProducts`` node."""
    by_operand: dict[str, list[MatMul]] = {}
    for node in DAG.of(root).order:
        if type(node) is MatMul and _reads_transposed_block(node):  # (the type first: on every node)
            by_operand.setdefault(node.a._name, []).append(node)
    replaced: dict[str, ArrayExpr] = {}
    for name, products in by_operand.items():
        x = products[0].a
        dtype = x.dtype
        if not any(p.b._name == name for p in products) or not _gram.fits(x.shape, [], dtype):
            continue
        others: dict[str, ArrayExpr] = {}
        for p in products:
            v = p.b
            if v._name != name and v._name not in others and _gram.fits(
                    x.shape, [o.shape for o in (*others.values(), v)], dtype):
                others[v._name] = v
        node = GramProducts.made([dtype, x, *others.values()], ((x.shape[1],), (x.shape[1],)), dtype, x.backend)
        place = {name: 0, **{n: 1 + q for q, n in enumerate(others)}}
        for p in products:
            if p.b._name in place:
                replaced[p._name] = FusedOutput.of(node, place[p.b._name], p.chunks, dtype)
    return rebuild(root, replaced) if replaced else root
