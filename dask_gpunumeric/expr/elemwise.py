"""``Elemwise``: a NumPy-style elementwise function of N inputs, broadcasting on aligned chunks."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from dask._task_spec import GraphNode, Task

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index, operand_texts
from .tokens import cached


class Elemwise(ArrayExpr):
    """A NumPy-style elementwise function of N inputs (arrays and scalars), broadcasting on aligned chunks.

    Array operands have been rechunked by the caller so that every dimension they share with the output
    (and do not broadcast) has the output's chunks.
    """

    _parameters = ["op", "dtype", "kwargs"]

    @classmethod
    def of_aligned(cls, op: str, dtype: np.dtype, args: list[Any], chunks: Chunks) -> Elemwise:
        """``Elemwise(op, dtype, {}, *args)`` for the common case, on every operation users write: ``args``
        are plain scalars and expressions aligned on the result's chunks ``chunks`` (broadcasting)
        (``ArrayExpr.with_metadata``)."""
        known = _HEADS.get((op, dtype))
        if known is None:
            text = operand_texts((op, dtype, {}))
            known = _HEADS[(op, dtype)] = (0, "") if text is None else (3, text), _funcname(op)
        head, funcname = known
        made = cls.with_metadata([op, dtype, {}, *args], chunks, dtype, _backend(args), head, funcname)
        return cls(op, dtype, {}, *args) if made is None else made

    @cached
    def _funcname(self) -> str:
        return _funcname(self.operands[0])  # operand("op")

    @cached
    def backend(self) -> str:
        return _backend(self.args)

    @cached
    def chunks(self) -> Chunks:
        # (computed for every operation a user writes: one pass, no lists, for the common case)
        first = None
        for a in self.args:
            if isinstance(a, ArrayExpr):
                chunks = a.chunks
                if first is None:
                    first = chunks
                elif chunks is not first and chunks != first:
                    return broadcast_chunks([a.chunks for a in self.args if isinstance(a, ArrayExpr)])
        return first  # the common case: no broadcasting

    def _block_task(self, index: Index) -> GraphNode:
        args = [a.ref(self.operand_block(a, index)) if isinstance(a, ArrayExpr) else a for a in self.args]
        return Task(
            self.key(index), _blocks.elemwise, self.operand("op"), self.dtype, self.operand("kwargs"), *args
        )


def broadcast_chunks(operand_chunks: list[Chunks]) -> Chunks:
    """The chunks of an elementwise result on operands of these (aligned) chunks, broadcasting."""
    ndim = max(len(c) for c in operand_chunks)
    out: list[tuple[int, ...]] = []
    for d in range(ndim):
        dims = [c[d - ndim + len(c)] for c in operand_chunks if d - ndim + len(c) >= 0]
        # a length-1 axis broadcasts against any other length (0 too): prefer the others
        out.append(max(dims, key=lambda c: (sum(c) != 1, len(c))))
    return tuple(out)


# per (op, dtype): the text of the operands (op, dtype, {}) that an ``of_aligned`` node's token starts with, and
# the node's ``_funcname``
_HEADS: dict[tuple[str, np.dtype], tuple[tuple[int, str], str]] = {}


@functools.lru_cache(maxsize=None)
def _funcname(op: str) -> str:
    """The words of an elementwise node's name (its key's task prefix on the dashboard)."""
    return op.replace("_", "-")


def _backend(args: list[Any]) -> str:
    """An elementwise result's backend: CuPy if any operand is on CuPy."""
    for a in args:
        if isinstance(a, ArrayExpr) and a.backend == "cupy":
            return "cupy"
    return "numpy"
