"""Nodes that move elements between blocks or within them: ``Transpose``, ``BlockReshape``, ``Broadcast``,
and ``Gather`` (rechunk, basic and integer-array indexing, flip, roll, concatenate; plans in ``expr.plan``)."""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from dask._task_spec import GraphNode, List, Task

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index
from .data import Creation
from .tokens import cached, keep_text


class Transpose(ArrayExpr):
    """Axes permuted, block by block."""

    _parameters = ["array", "axes"]
    _like = "array"

    @classmethod
    def of(cls, array: ArrayExpr, axes: tuple[int, ...]) -> ArrayExpr:
        """``Transpose(array, axes)``, made without the constructor's generic steps (every ``.T`` users write)."""
        return cls.made([array, axes], _permuted(array.chunks, axes), array.dtype, array.backend)

    @cached
    def chunks(self) -> Chunks:
        array, axes = self.operands
        return _permuted(array.chunks, axes)

    def _block_task(self, index: Index) -> GraphNode:
        source = [0] * self.ndim
        for out_axis, in_axis in enumerate(self.axes):
            source[in_axis] = index[out_axis]
        return Task(self.key(index), _blocks.transpose, self.array.ref(tuple(source)), tuple(self.axes))


def _permuted(chunks: Chunks, axes: Sequence[int]) -> Chunks:
    return tuple(chunks[a] for a in axes)


class BlockReshape(ArrayExpr):
    """Each output block is exactly one input block, reshaped (inserting or removing size-1 axes, or
    splitting/merging whole rows when the chunking allows it)."""

    _parameters = ["array", "chunks", "source_of"]
    _like = "array"

    @classmethod
    def of(cls, array: ArrayExpr, chunks: Chunks, source_of: dict[Index, Index]) -> ArrayExpr:
        """``BlockReshape(array, chunks, source_of)``, made without the constructor's generic steps."""
        return cls.made([array, chunks, source_of], chunks, array.dtype, array.backend)

    def _block_task(self, index: Index) -> GraphNode:
        source = self.operand("source_of")[index]
        return Task(self.key(index), _blocks.reshape, self.array.ref(source), self.block_shape(index))


class Broadcast(ArrayExpr):
    """The array broadcast to more (leading) axes or stretched along length-1 axes."""

    _parameters = ["array", "chunks"]
    _like = "array"

    @classmethod
    def of(cls, array: ArrayExpr, chunks: Chunks) -> ArrayExpr:
        """``Broadcast(array, chunks)``, made without the constructor's generic steps."""
        return cls.made([array, chunks], chunks, array.dtype, array.backend)

    @cached
    def _funcname(self) -> str:
        return "broadcast-to"

    def _block_task(self, index: Index) -> GraphNode:
        a = self.array
        source = self.operand_block(a, index)
        return Task(self.key(index), _blocks.broadcast, a.ref(source), self.block_shape(index))


Piece = tuple[int, int, Any]  # (source number, input block index along the axis, slice or int array)


class Gather(ArrayExpr):
    """Output blocks assembled from pieces of input blocks: rechunk, basic and integer-array indexing,
    flip, roll, concatenate.

    ``plan`` is one entry per output axis: for each output chunk along it, ``(pieces, permutation)`` where
    pieces are ``(source, input chunk, local index)`` concatenated in order and ``permutation`` (or None)
    reorders the result along the axis. At most one axis names a source other than 0. Axes listed in
    ``drop`` have a single integer piece and are removed from the output.
    """

    _parameters = ["plan", "drop", "dtype"]

    sources = ArrayExpr.args

    @classmethod
    def of_plan(cls, plan: tuple, drop: tuple, source: ArrayExpr, chunks: Chunks, texts: dict) -> ArrayExpr:
        """``Gather(plan, drop, source.dtype, source)`` for a plan met before (indexing and rolls repeat theirs in
        stencil and time-stepping code), whose result has ``chunks``: made by ``on_source``, its token texts
        kept in ``texts`` per dtype, written once."""
        dtype = source.dtype
        known = texts.get(dtype)
        if known is not None and isinstance(source, ArrayExpr):
            return cls.on_source([plan, drop, dtype, source], source, known, chunks, dtype)
        keep_text(plan)
        made = cls(plan, drop, dtype, source)
        if dtype.names is None:
            texts[dtype] = made.source_texts(3)
        return made

    @cached
    def _funcname(self) -> str:
        return "getitem"

    @cached
    def backend(self) -> str:
        return self.sources[0].backend

    @cached
    def _full_chunks(self) -> Chunks:
        out = []
        for axis_plan in self.operand("plan"):
            out.append(tuple(_pieces_length(p) for p, _ in axis_plan))
        return tuple(out)

    @cached
    def chunks(self) -> Chunks:
        drop = self.operand("drop")
        return tuple(c for d, c in enumerate(self._full_chunks) if d not in drop)

    def _full_index(self, index: Index) -> Index:
        drop = self.operand("drop")
        it = iter(index)
        return tuple(0 if d in drop else next(it) for d in range(len(self._full_chunks)))

    def _block_task(self, index: Index) -> GraphNode:
        plan = self.operand("plan")
        full = self._full_index(index)
        per_axis = [plan[d][i] for d, i in enumerate(full)]
        grid = tuple(len(pieces) for pieces, _ in per_axis)
        refs, locals_ = [], []
        for combo in itertools.product(*(pieces for pieces, _ in per_axis)):
            source = self.sources[max(p[0] for p in combo) if combo else 0]
            block, local = tuple(p[1] for p in combo), tuple(p[2] for p in combo)
            created = _created_piece(source, block, local) if isinstance(source, Creation) else None
            if created is None:
                refs.append(source.ref(block))
                locals_.append(local)
            else:  # the piece computed alone: slicing a large created array makes none of its blocks
                refs.append(created[0])
                locals_.append(created[1])
        perms = tuple(perm for _, perm in per_axis)
        return Task(
            self.key(index), _blocks.assemble, List(*refs), locals_, grid, perms, tuple(self.operand("drop"))
        )


def _created_piece(source: Creation, block: Index, local: tuple) -> tuple[Task, tuple[slice, ...]] | None:
    """An inline task computing only the region of a ``Creation`` block that the slices ``local`` read (its
    values depend only on their position), and the slices relative to that region; None where the region
    is the whole block (its task is made once for all its readers) or a piece is an integer array or empty."""
    shape = source.block_shape(block)
    bounds, relative = [], []
    for ix, n in zip(local, shape):
        if type(ix) is not slice:
            return None
        start, stop, step = ix.indices(n)
        count = len(range(start, stop, step))
        if count == 0:
            return None
        last = start + step * (count - 1)
        lo = min(start, last)
        bounds.append((lo, max(start, last) + 1))
        stop_in_region = start - lo + step * count
        relative.append(slice(start - lo, stop_in_region if stop_in_region >= 0 else None, step))
    if all(hi - lo == n for (lo, hi), n in zip(bounds, shape)):
        return None
    offset = tuple(o + lo for o, (lo, _) in zip(source.block_offset(block), bounds))
    kind, _, _, backend, params = source.operands[:5]
    task = Task(None, _blocks.create, kind, offset, tuple(hi - lo for lo, hi in bounds), source.shape,
                source.dtype, backend, params)
    return task, tuple(relative)


def _pieces_length(pieces: Sequence[Piece]) -> int:
    return sum(piece_length(ix) for _, _, ix in pieces)


def piece_length(ix: Any) -> int:
    return len(range(*ix.indices(2**62))) if isinstance(ix, slice) else len(ix)
