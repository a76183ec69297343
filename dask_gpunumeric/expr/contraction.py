"""``MatMul``: the matrix product of matrices and vectors on block grids, ``MatMulTree`` where the summed axis
has several pieces; ``GramProducts``: the products of one tall-skinny block's transpose in one task."""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator

import numpy as np
from dask._task_spec import GraphNode, List, Task, TaskRef

from ..kernels import blocks as _blocks
from ..kernels import gram as _gram
from .base import ArrayExpr, Chunks, Index
from .tokens import cached

# one piece of the summed axis: (block of a, slice of it or None for all of it, the same for b)
Piece = tuple[int, slice | None, int, slice | None]


def _pieces(inner_a: tuple[int, ...], inner_b: tuple[int, ...]) -> tuple[Piece, ...]:
    """The pieces of the summed axis that lie within one block of each operand (the coarsest common
    refinement of the two chunkings; zero-length pieces left out unless the axis is empty)."""
    if len(inner_a) == 1 and len(inner_b) == 1:  # (most products: built on every call of plain code)
        return ((0, None, 0, None),)
    starts_a = list(itertools.accumulate(inner_a, initial=0))
    starts_b = list(itertools.accumulate(inner_b, initial=0))
    bounds = sorted(set(starts_a) | set(starts_b))
    pieces = []
    for start, stop in zip(bounds, bounds[1:]):
        ia = bisect.bisect_right(starts_a, start) - 1
        ib = bisect.bisect_right(starts_b, start) - 1
        pieces.append((ia, _local(starts_a, ia, start, stop), ib, _local(starts_b, ib, start, stop)))
    return tuple(pieces) or ((0, None, 0, None),)


def _local(starts: list[int], block: int, start: int, stop: int) -> slice | None:
    """``[start, stop)`` within the block (None where it is the whole block)."""
    if starts[block] == start and starts[block + 1] == stop:
        return None
    return slice(start - starts[block], stop - starts[block])


class MatMul(ArrayExpr):
    """``op(a) @ op(b)`` on block grids, ``op`` transposing a matrix operand where its flag in ``transposed`` is
    set (the block task takes the transposed view: the library's product with a transpose flag, no copy). A
    1-d ``a`` is a row vector and a 1-d ``b`` a column vector, removed from the result, as in NumPy. The summed
    axis is cut where either operand's blocks end (``_pieces``): with one piece, each output block is one task,
    one library product; ``of`` makes a ``MatMulTree`` otherwise."""

    _parameters = ["a", "b", "dtype", "transposed", "split_every"]
    _like = "a"

    @classmethod
    def of(cls, a: ArrayExpr, b: ArrayExpr, dtype: np.dtype, transposed: tuple[bool, bool],
           split_every: int) -> ArrayExpr:
        """The product, made without the constructor's generic steps: a ``MatMul`` where the summed axis is
        one piece, else a ``MatMulTree``."""
        inner_a, inner_b = _inner_chunks(a, b, transposed)
        kind = cls if len(_pieces(inner_a, inner_b)) == 1 else MatMulTree
        return kind.made([a, b, dtype, transposed, split_every], _product_chunks(a, b, transposed), dtype,
                         a.backend)

    @cached
    def _funcname(self) -> str:
        return "matmul"

    @cached
    def chunks(self) -> Chunks:
        return _product_chunks(self.a, self.b, self.operand("transposed"))

    @cached
    def pieces(self) -> tuple[Piece, ...]:
        """The pieces of the summed axis (``_pieces``)."""
        return _pieces(*_inner_chunks(self.a, self.b, self.operand("transposed")))

    def _operand_blocks(self, index: Index, piece: Piece) -> tuple[tuple, tuple]:
        """The blocks of ``a`` and ``b`` that one piece of output block ``index`` multiplies."""
        a, b = self.a, self.b
        ta, tb = self.operand("transposed")
        ia, _, ib, _ = piece
        row = index[:1] if a.ndim == 2 else ()
        col = index[-1:] if b.ndim == 2 else ()
        block_a = (ia,) if a.ndim == 1 else (ia, *row) if ta else (*row, ia)
        block_b = (ib,) if b.ndim == 1 else (*col, ib) if tb else (ib, *col)
        return block_a, block_b

    def _product_task(self, key: tuple, index: Index, piece: Piece) -> Task:
        block_a, block_b = self._operand_blocks(index, piece)
        _, local_a, _, local_b = piece
        ta, tb = self.operand("transposed")
        return Task(key, _blocks.matmul_piece, self.a.ref(block_a), self.b.ref(block_b),
                    (_along_summed(self.a, ta, local_a), ta), (_along_summed(self.b, not tb, local_b), tb),
                    self.dtype)

    def _block_task(self, index: Index) -> GraphNode:
        return self._product_task(self.key(index), index, self.pieces[0])


class MatMulTree(MatMul):
    """A ``MatMul`` whose summed axis has several pieces: a product task per piece (where the operands' blocks
    are), summed ``split_every`` at a time in a tree."""

    def _stage_name(self) -> str:
        return f"matmul-piece-{self.deterministic_token}"

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        # the products run where the blocks of ``a`` are; the sums go wherever the scheduler likes
        for index in self.block_indices():
            for p, piece in enumerate(self.pieces):
                yield (self._stage_name(), 0, *index, p), self._operand_blocks(index, piece)[0], self.a.numblocks

    def _layer(self) -> dict:
        name, split = self._stage_name(), max(2, self.operand("split_every"))
        layer: dict = {}
        for index in self.block_indices():
            keys = [(name, 0, *index, p) for p in range(len(self.pieces))]
            for key, piece in zip(keys, self.pieces):
                layer[key] = self._product_task(key, index, piece)
            level = 0
            while len(keys) > 1:
                level += 1
                groups = [keys[g : g + split] for g in range(0, len(keys), split)]
                keys = [self.key(index) if len(groups) == 1 else group[0] if len(group) == 1 else
                        (name, level, *index, g) for g, group in enumerate(groups)]  # one left over: as it is
                for key, group in zip(keys, groups):
                    if len(group) > 1:
                        layer[key] = Task(key, _blocks.sum_blocks, List(*(TaskRef(k) for k in group)))
        return layer


class GramProducts(ArrayExpr):
    """``x.T @ x``, then ``x.T @ v`` for each further operand ``v`` (vectors or matrices over the rows of ``x``),
    ``x`` and every ``v`` of one block, in one task: one pass over ``x`` on CuPy blocks
    (``kernels.gram.products``). Its outputs are ``FusedOutput``s, in that order (the gram pass makes them)."""

    _parameters = ["dtype", "x"]
    _like = "x"

    @cached
    def _funcname(self) -> str:
        return "matmul-gram"

    @cached
    def chunks(self) -> Chunks:
        k = self.x.shape[1]
        return ((k,), (k,))

    def _block_task(self, index: Index) -> GraphNode:
        operands = (self.x, *self.args)
        return Task(self.key(index), _gram.products, self.backend, self.dtype,
                    *(e.ref((0,) * e.ndim) for e in operands))


def _inner_chunks(a: ArrayExpr, b: ArrayExpr, transposed: tuple[bool, bool]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The chunks of the summed axis in ``a`` and in ``b``."""
    ta, tb = transposed
    return a.chunks[0 if a.ndim == 1 or ta else 1], b.chunks[1 if b.ndim == 2 and tb else 0]


def _product_chunks(a: ArrayExpr, b: ArrayExpr, transposed: tuple[bool, bool]) -> Chunks:
    ta, tb = transposed
    rows = (a.chunks[1 if ta else 0],) if a.ndim == 2 else ()
    cols = (b.chunks[0 if tb else 1],) if b.ndim == 2 else ()
    return rows + cols


def _along_summed(x: ArrayExpr, first: bool, local: slice | None) -> tuple[slice, ...] | None:
    """The index of a piece in a block of ``x`` whose summed axis is its first (``first``) or last axis."""
    if local is None:
        return None
    return (local,) if x.ndim == 1 or first else (slice(None), local)
