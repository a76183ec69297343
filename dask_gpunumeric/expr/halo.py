"""Blocks extended by halos from their neighbours (``Overlap``, and ``halo_block_inputs`` which stencil groups
share: only the neighbours' strips travel), and the functional update ``SetItem``."""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

from dask._task_spec import Alias, GraphNode, List, Task, TaskRef

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Index
from .layout import Gather, Piece, piece_length
from .tokens import cached


def halo_block_inputs(source: ArrayExpr, axis_pieces: Sequence[Sequence[Piece]],
                      own: Index | None = None) -> tuple[dict, List, tuple]:
    """Task inputs of one block extended by halos, from the pieces of its extended range along each axis
    (slices of ``source``'s blocks, as ``plan.segments_plan`` makes them): the piece of the source block at
    the task's ``own`` position (where the task runs), or else the largest piece, is that whole block, cut
    inside the task; every other piece is a strip cut by a task of its own next to its source block (keyed
    by source, block and bounds, so that users share it), so that only strips travel.
    Returns the strip tasks, the pieces' references and their layout for ``_blocks.halo_block``."""
    name = f"halo-{source.deterministic_token}"
    lengths = [[piece_length(ix) for _, _, ix in pieces] for pieces in axis_pieces]
    starts = [list(itertools.accumulate(ls, initial=0)) for ls in lengths]
    combos = list(itertools.product(*(range(len(pieces)) for pieces in axis_pieces)))
    mine = [c for c in combos if tuple(axis_pieces[d][j][1] for d, j in enumerate(c)) == own]
    main = mine[0] if mine else max(combos, key=lambda combo: math.prod(lengths[d][j] for d, j in enumerate(combo)))
    strips: dict = {}
    refs, places = [], []
    for combo in combos:
        block = tuple(axis_pieces[d][j][1] for d, j in enumerate(combo))
        local = tuple(axis_pieces[d][j][2] for d, j in enumerate(combo))
        dest = tuple(slice(starts[d][j], starts[d][j] + lengths[d][j]) for d, j in enumerate(combo))
        if combo == main:
            refs.append(source.ref(block))
            places.append((local, dest))
            continue
        bounds = tuple(b for ix in local for b in (ix.start, -1 if ix.stop is None else ix.stop, ix.step))
        key = (name, *block, *bounds)
        strips[key] = Task(key, _blocks.cut, source.ref(block), local)
        refs.append(TaskRef(key))
        places.append((None, dest))
    shape = tuple(s[-1] for s in starts)
    return strips, List(*refs), (shape, tuple(places))


def owned_strips(layer: dict, source: ArrayExpr) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
    """(key, source block, source grid) of the halo strips in a layer: they run where their block lives."""
    name = f"halo-{source.deterministic_token}"
    for key in layer:
        if key[0] == name:
            yield key, key[1 : 1 + source.ndim], source.numblocks


class Overlap(Gather):
    """Blocks extended by halos from their neighbours (``map_overlap``): a one-source ``Gather`` whose
    pieces are assembled by ``halo_block_inputs``, so that only the strips of the neighbours travel."""

    @cached
    def _funcname(self) -> str:
        return "overlap"

    @cached
    def _tasks(self) -> dict:
        plan, source = self.operand("plan"), self.sources[0]
        layer: dict = {}
        for index in self.block_indices():
            strips, refs, layout = halo_block_inputs(source, [plan[d][i][0] for d, i in enumerate(index)], index)
            layer.update(strips)
            layer[self.key(index)] = Task(self.key(index), _blocks.halo_block, refs, layout)
        return layer

    def _layer(self) -> dict:
        return dict(self._tasks)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        yield from super()._owned_blocks()
        yield from owned_strips(self._tasks, self.sources[0])


class SetItem(ArrayExpr):
    """Functional update ``x[region] = value``: blocks meeting the region get the matching part of
    ``value`` (already broadcast and chunked like the region), the others are passed through."""

    _parameters = ["array", "value", "region_plan"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return "setitem"

    def _block_task(self, index: Index) -> GraphNode:
        # region_plan: per axis, per input chunk -> (value chunk index, local slice) or None
        plan = self.operand("region_plan")
        hits = [plan[d][i] for d, i in enumerate(index)]
        if any(h is None for h in hits):
            return Alias(self.key(index), self.array.key(index))
        value = self.operand("value")
        local = tuple(h[1] for h in hits)
        if isinstance(value, ArrayExpr):
            value = value.ref(tuple(h[0] for h in hits))
        return Task(self.key(index), _blocks.setitem, self.array.ref(index), local, value)
