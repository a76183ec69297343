"""Reductions along axes (a tree of partials, combines and a finish) and cumulative scans along one axis."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
from dask._task_spec import Alias, List, Task, TaskRef

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index
from .tokens import cached


class Reduction(ArrayExpr):
    """A tree reduction over ``axes``: a partial per block, partials combined ``split_every`` at a time,
    then finished (mean divides, var normalizes, ...). Partials are dicts of arrays that keep the reduced
    axes with length 1, so combining is concatenation followed by the same reduction."""

    _parameters = ["array", "kind", "axes", "keepdims", "dtype", "split_every", "params", "prereduced"]
    _like = "array"
    _defaults = {"prereduced": False}

    @cached
    def _funcname(self) -> str:
        kind = self.operand("kind")
        return "std" if kind == "var" and self.operand("params")[2] else kind

    @classmethod
    def of(cls, array: ArrayExpr, kind: str, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype,
           split_every: int, params: Any, known: tuple[Chunks, tuple[str, str, str]] | None = None) -> ArrayExpr:
        """``Reduction(array, kind, axes, keepdims, dtype, split_every, params)``, made without the
        constructor's generic steps; in one pass (``on_source``) where ``known`` gives the result's chunks and
        the token texts of a reduction of the same arguments (``source_texts``)."""
        operands = [array, kind, axes, keepdims, dtype, split_every, params, cls._defaults["prereduced"]]
        if known is not None and isinstance(array, ArrayExpr):
            return cls.on_source(operands, array, known[1], known[0], dtype)
        return cls.made(operands, _reduced(array.chunks, axes, keepdims), dtype, array.backend)

    @classmethod
    def of_partials(cls, partials: ArrayExpr, like: Reduction) -> ArrayExpr:
        """The reduction ``like`` (its kind, axes, dtype, ...) finished from ``partials``, its per-block partials
        (``prereduced``; a fused kernel's), with its chunks, dtype and name's words (the partials' backend): made
        without the constructor's generic steps (the fusion pass makes one per kernel)."""
        return cls.on_first(partials, [*like.operands[1:_PREREDUCED], True], like.chunks, like.dtype, like._funcname)

    @cached
    def chunks(self) -> Chunks:
        array, _, axes, keep = self.operands[:4]
        return _reduced(array.chunks, axes, keep)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        # the first stage runs where the input blocks live; combines go wherever the scheduler likes
        x = self.array
        for index in x.block_indices():
            yield (self._stage_name("partial"), 0, *index), index, x.numblocks

    def _stage_name(self, stage: str) -> str:
        return f"{self.operand('kind')}-{stage}-{self.deterministic_token}"

    def _group_sizes(self) -> dict[int, int]:
        """Blocks combined per reduced axis at each level of the tree: ``split_every`` in all, shared among
        the axes that have several blocks (at least 2 each, so that the tree shrinks)."""
        axes = [d for d in self.operand("axes") if self.array.numblocks[d] > 1]
        per_axis = max(2, int(self.operand("split_every") ** (1 / max(len(axes), 1)) + 1e-9))
        return {d: per_axis if d in axes else 1 for d in self.operand("axes")}

    def _layer(self) -> dict:
        x = self.array
        kind, axes, params = self.operand("kind"), self.operand("axes"), self.operand("params")
        layer: dict = {}
        name = self._stage_name("partial")
        numblocks = list(x.numblocks)
        level = 0
        for index in x.block_indices():
            key = (name, level, *index)
            if self.operand("prereduced"):  # the input's blocks are partials already (a fused kernel's)
                layer[key] = Alias(key, x.key(index))
                continue
            layer[key] = Task(
                key, _blocks.reduce_chunk, kind, x.ref(index), axes, self.dtype, params,
                tuple(x.block_offset(index)[d] for d in axes),
            )
        groups = self._group_sizes()
        while any(numblocks[d] > 1 for d in axes):
            new_numblocks = [
                -(-n // groups[d]) if d in axes else n for d, n in enumerate(numblocks)
            ]
            for index in itertools.product(*(range(n) for n in new_numblocks)):
                ranges = [
                    range(i * groups[d], min((i + 1) * groups[d], numblocks[d])) if d in axes else (i,)
                    for d, i in enumerate(index)
                ]
                members = [TaskRef((name, level, *m)) for m in itertools.product(*ranges)]
                grid = tuple(len(r) for r in ranges)
                key = (name, level + 1, *index)
                layer[key] = Task(key, _blocks.reduce_combine, kind, List(*members), grid, axes, params)
            numblocks, level = new_numblocks, level + 1
        keep = self.operand("keepdims")
        for index in self.block_indices():
            rest = iter(index)
            source = tuple(0 if d in axes else next(rest) for d in range(x.ndim)) if not keep else index
            key = self.key(index)
            layer[key] = Task(
                key, _blocks.reduce_finish, kind, TaskRef((name, level, *source)), axes, keep, self.dtype, params
            )
        return layer


_PREREDUCED = Reduction._parameters.index("prereduced")


def _reduced(chunks: Chunks, axes: tuple[int, ...], keepdims: bool) -> Chunks:
    return tuple((1,) if d in axes else c for d, c in enumerate(chunks) if keepdims or d not in axes)


class Scan(ArrayExpr):
    """A cumulative reduction along one axis: each block's local scan plus the carry of the blocks before."""

    _parameters = ["array", "kind", "axis", "dtype"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return self.operand("kind")

    def _layer(self) -> dict:
        x, kind, axis = self.array, self.operand("kind"), self.operand("axis")
        local = f"{kind}-local-{self.deterministic_token}"
        carry = f"{kind}-carry-{self.deterministic_token}"
        layer: dict = {}
        for index in x.block_indices():
            layer[(local, *index)] = Task((local, *index), _blocks.scan_local, kind, x.ref(index), axis, self.dtype)
            key = self.key(index)
            if index[axis] == 0:
                layer[key] = Alias(key, (local, *index))
                continue
            before = (*index[:axis], index[axis] - 1, *index[axis + 1 :])
            carry_key = (carry, *index)
            previous = TaskRef((carry, *before)) if index[axis] > 1 else None
            layer[carry_key] = Task(
                carry_key, _blocks.scan_carry, kind, previous, TaskRef((local, *before)), axis
            )
            layer[key] = Task(key, _blocks.scan_apply, kind, TaskRef((local, *index)), TaskRef(carry_key))
        return layer
