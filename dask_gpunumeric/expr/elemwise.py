"""``Elemwise``: a NumPy-style elementwise function of N inputs, broadcasting on aligned chunks."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from dask._expr import Expr
from dask._task_spec import GraphNode, Task

from ..kernels import blocks as _blocks
from .base import _NO_LEAVES, ArrayExpr, Chunks, Index, joined_leaves, operand_texts
from .tokens import _TEXT, FLOAT_TEXT, TOKENS, _plain_repr, cached, float_text, kept_token


class Elemwise(ArrayExpr):
    """A NumPy-style elementwise function of N inputs (arrays and scalars), broadcasting on aligned chunks.

    Array operands have been rechunked by the caller so that every dimension they share with the output
    (and do not broadcast) has the output's chunks.
    """

    _parameters = ["op", "dtype", "kwargs"]

    @classmethod
    def of_aligned(cls, op: str, dtype: np.dtype, args: list[Any], chunks: Chunks,
                   known: tuple[str, str] | None = None) -> Elemwise:
        """``Elemwise(op, dtype, {}, *args)`` for the common case, on every operation users write: ``args``
        are plain scalars and expressions aligned on the result's chunks ``chunks`` (broadcasting); its token
        text written here as ``__dask_tokenize__`` writes it, in one pass over ``args``. ``known``: ``token_head(op,
        dtype)``, where the caller keeps it."""
        head, funcname = known or token_head(op, dtype)
        texts = [head]
        backend = "numpy"
        leaves: Any = _UNSET
        for a in args:
            kind = type(a)
            if kind is float:
                texts.append(FLOAT_TEXT.get(a) or float_text(a))
            elif isinstance(a, ArrayExpr):
                texts.append(a._name)
                if a.backend == "cupy":
                    backend = "cupy"
                more = a._leaves
                leaves = more if leaves is _UNSET else joined_leaves(leaves, more) if more is not leaves else leaves
            else:
                text = _TEXT.get(kind, _plain_repr)(a)
                if text is None or isinstance(a, Expr):  # no plain value, or an expression not ours
                    return cls(op, dtype, {}, *args)
                texts.append(text)
        parts = tuple(texts)
        token = TOKENS.get(parts)
        fresh = token is None
        if fresh:
            token = kept_token(parts, f"{head}{','.join(texts[1:])})")
        node = cls.named([op, dtype, NO_KWARGS, *args], chunks, (token, f"{funcname}-{token}", backend),
                         _NO_LEAVES if leaves is _UNSET else leaves)
        if fresh:
            node.__dict__["_fresh"] = True
        return node

    @classmethod
    def named(cls, operands: list[Any], chunks: Chunks, named: tuple[str, str, str],
              leaves: dict[str, ArrayExpr] | None) -> Elemwise:
        """``of_aligned``'s node of these ``operands`` (op, dtype, ``NO_KWARGS``, then the arguments) where its (token,
        name, backend) are known (``named``: those of a node made before of the same operation and operands, the same
        names and numbers), its operands' inputs ``leaves`` joined."""
        # (the node made here, as ``with_metadata`` makes it: a call less on every operation)
        inst = _new(cls)
        values = inst.__dict__  # (set one by one: faster than update(**) here)
        values["_determ_token"], values["_name"], values["backend"] = named
        values["operands"] = operands
        values["chunks"] = chunks
        values["dtype"] = operands[1]
        values["_leaves"] = leaves
        return inst

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


def token_head(op: str, dtype: np.dtype) -> tuple[str, str]:
    """The start of the token text of an ``Elemwise.of_aligned`` node of ``op`` and ``dtype`` (its type and operands
    (op, dtype, {})), and the node's ``_funcname``."""
    known = _HEADS.get((op, dtype))
    if known is None:
        known = _HEADS[(op, dtype)] = f"Elemwise|list({operand_texts((op, dtype, {}))},", _funcname(op)
    return known


_HEADS: dict[tuple[str, np.dtype], tuple[str, str]] = {}
_UNSET = object()
_new = object.__new__
# the keywords of the nodes users build (none): one dict, never changed, shared by them all (an allocation less on
# every operation)
NO_KWARGS: dict[str, Any] = {}


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
