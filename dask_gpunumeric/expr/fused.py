"""What the optimizer makes: ``Fused`` (elementwise work, random draws and reduction partials as one kernel per
block), ``Stencil`` (a group of stencil sweeps per block with halos) and ``FusedOutput`` (one of several outputs)."""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from dask._task_spec import GraphNode, List, Task, TaskRef

from ..codegen.program import describe
from .base import ArrayExpr, Index, _leaves_of
from .halo import halo_block_inputs, owned_strips
from .tokens import cached


class Fused(ArrayExpr):
    """A group of elementwise operations, random draws and reduction partials run as one kernel per block
    (made by the fusion pass; ``codegen.program`` describes ``program``) of the elements' chunks ``elements``. Its
    blocks are the program's output, or a tuple of outputs picked by ``FusedOutput``: the elements' blocks,
    except for a kernel whose one output is a total of a one-block array (or the epilogue's), 0-d."""

    _parameters = ["program", "chunks", "backend", "scalars", "elements"]

    inputs = ArrayExpr.args

    @classmethod
    def of(cls, program: tuple, chunks: tuple, backend: str, scalars: tuple, elements: tuple, inputs: list[ArrayExpr],
           token: str, like: Fused | None = None) -> Fused:
        """``Fused(program, chunks, backend, scalars, elements, *inputs, _determ_token=token)``, made without the
        constructor's generic steps (the fusion pass makes one per kernel); ``like``: a Fused node of the same
        program, whose dtype and name's words it takes."""
        inst = object.__new__(cls)
        values = inst.__dict__  # (set one by one: faster than update(**) here)
        values["_determ_token"] = token
        values["operands"] = [program, chunks, backend, scalars, elements, *inputs]
        values["chunks"] = chunks
        values["backend"] = backend
        values["_leaves"] = _leaves_of(inputs)
        if like is not None:
            values["dtype"] = like.dtype
            values["_funcname"] = words = like._funcname
            values["_name"] = f"{words}-{token}"
            return inst
        inst.dtype, inst._name  # noqa: B018 - computed once here, as the constructor does
        return inst

    @cached
    def _funcname(self) -> str:
        return "fused-" + describe(self.operands[0])  # the program (by position: no parameter search)

    @cached
    def dtype(self) -> np.dtype:
        _, _, instrs, (first, *_) = self.operands[0]
        return np.dtype(instrs[first.value].dtype if first.tag == "store" else first.dtype)

    def geometry(self, index: Index) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(offset, shape, global shape) of the elements the kernel of block ``index`` runs over."""
        elements = self.operand("elements")
        if elements == self.chunks:
            return self.block_offset(index), self.block_shape(index), self.shape
        at = self._elements_block(index)
        return (tuple(starts[i] for starts, i in zip(self._element_starts, at)),
                tuple(c[i] for c, i in zip(elements, at)), tuple(starts[-1] for starts in self._element_starts))

    @cached
    def _element_starts(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(itertools.accumulate(c, initial=0)) for c in self.operand("elements"))

    def _elements_block(self, index: Index) -> Index:
        """The block of the elements that block ``index`` is made from: the same place, where the blocks are
        those of the elements with trailing axes reduced (a row program's values of one per row); else a total's
        one block."""
        elements = self.operand("elements")
        grid = tuple(map(len, elements))
        if grid[:self.ndim] == self.numblocks and all(n == 1 for n in grid[self.ndim:]):
            return (*index, *(0,) * (len(elements) - self.ndim))
        return (0,) * len(elements)

    def _block_task(self, index: Index) -> GraphNode:
        from ..kernels.fused import run

        if self.operand("elements") == self.chunks:
            refs = [a.ref(self.operand_block(a, index)) for a in self.inputs]
        else:
            at = self._elements_block(index)
            lead = len(at)
            refs = [a.ref(tuple(0 if a.numblocks[d] == 1 else at[lead - a.ndim + d] for d in range(a.ndim)))
                    for a in self.inputs]
        return Task(self.key(index), run, self.operand("program"), self.operand("scalars"), *self.geometry(index),
                    self.backend, *refs)


class Stencil(ArrayExpr):
    """A group of stencil sweeps run as one task per block (made by the stencil pass; ``kernels.stencil``
    describes ``plan``): each task gets its source blocks extended by the halos the group needs (only the
    strips of the neighbours travel) and runs the group's kernels, one per sweep, on shrinking regions.
    Its blocks are the group's output, or a tuple of outputs picked by ``FusedOutput``."""

    _parameters = ["plan", "chunks", "backend", "scalars"]

    sources = ArrayExpr.args

    @cached
    def dtype(self) -> np.dtype:
        from ..codegen.stencil_plan import output_dtypes

        return output_dtypes(self.operand("plan"))[0]

    @cached
    def _funcname(self) -> str:
        from ..codegen.stencil_plan import describe

        return "stencil-" + describe(self.operand("plan"))

    @cached
    def _tasks(self) -> dict:
        """Per block: a task for its interior (``codegen.stencil_plan.split``), then one for the bands around
        it that writes them into the interior's output blocks (each is the block's task when alone), and
        the halo strips the bands read."""
        from ..codegen import stencil_plan as _stencil_plan
        from ..kernels import stencil as _stencil_kernels
        from . import plan as _plan

        plan, sources, backend = self.operand("plan"), self.sources, self.backend
        inner_name = f"{self._funcname}-interior-{self.deterministic_token}"
        layer: dict = {}

        def part(target: tuple, index: Index) -> tuple[tuple, list]:
            kernel_boxes, source_boxes = _stencil_plan.boxes(plan, [s.shape for s in sources], target)
            refs, layouts, origins = [], [], []
            for source, box, axis_pieces in zip(sources, source_boxes,
                                                _plan.source_pieces(plan.wraps, sources, source_boxes)):
                if box is None:
                    refs.append(List())
                    layouts.append(None)
                    origins.append(None)
                    continue
                own = index if source.numblocks == self.numblocks else None
                strips, pieces, layout = halo_block_inputs(source, axis_pieces, own)
                layer.update(strips)
                refs.append(pieces)
                layouts.append(layout)
                origins.append(tuple(lo for lo, _ in box))
            return (target, tuple(kernel_boxes), tuple(origins), tuple(layouts)), refs

        for index in self.block_indices():
            block = tuple((o, o + n) for o, n in zip(self.block_offset(index), self.block_shape(index)))
            interior, bands = _stencil_plan.split(plan, sources, self.chunks, block)
            inner = None
            if interior is not None:
                key = (inner_name, *index) if bands else self.key(index)
                spec, refs = part(interior, index)
                layer[key] = Task(key, _stencil_kernels.run, plan, self.operand("scalars"), block, backend, None,
                                  (spec,), *refs)
                inner = TaskRef(key)
            if bands:
                specs, refs = zip(*[part(band, index) for band in bands])
                layer[self.key(index)] = Task(self.key(index), _stencil_kernels.run, plan, self.operand("scalars"),
                                              block, backend, inner, specs, *[r for rs in refs for r in rs])
        return layer

    def _layer(self) -> dict:
        return dict(self._tasks)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        yield from super()._owned_blocks()
        inner_name = f"{self._funcname}-interior-{self.deterministic_token}"
        for key in self._tasks:
            if key[0] == inner_name:
                yield key, key[1:], self.numblocks
        for source in self.sources:
            yield from owned_strips(self._tasks, source)


class FusedOutput(ArrayExpr):
    """Output ``k`` of a multi-output ``Fused``, ``Stencil`` or ``GramProducts`` node."""

    _parameters = ["fused", "k", "chunks", "dtype"]
    _like = "fused"

    @classmethod
    def of(cls, fused: ArrayExpr, k: int, chunks: tuple, dtype: np.dtype, funcname: str | None = None) -> ArrayExpr:
        """``FusedOutput(fused, k, chunks, dtype)``, made without the constructor's generic steps (the fusion pass
        makes one per output of a kernel of several); ``funcname``: the words of its name where known (those of
        another output of ``fused``)."""
        return cls.on_first(fused, [k, chunks, dtype], chunks, dtype, funcname)

    @cached
    def _funcname(self) -> str:
        return f"{self.operands[0]._funcname}-out"  # the fused node's (by position: no Expr.__getattr__)

    def _block_task(self, index: Index) -> GraphNode:
        from ..kernels.fused import pick

        # a total (or the epilogue's value) is 0-d (or keepdims), from the one block of the elements
        grid = self.fused.numblocks  # a row program's values of one per row, or a total of one block
        source = (*index, *(0,) * (len(grid) - self.ndim)) if grid[:self.ndim] == self.numblocks else (0,) * len(grid)
        return Task(self.key(index), pick, self.fused.ref(source), self.operand("k"))
