"""``MapBlocks``: an opaque per-block function (the ``Blockwise`` primitive)."""
from __future__ import annotations

from dask._task_spec import GraphNode, Task

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Index
from .tokens import cached


class MapBlocks(ArrayExpr):
    """An opaque per-block function (the ``Blockwise`` primitive): output block ``i`` is
    ``func(*input blocks i, **kwargs)``, the inputs sharing the output's block grid (inputs with one block
    along an axis are broadcast along it). With ``offsets=True`` the function also gets ``block_offset=``
    and ``global_shape=`` of the output block. ``func`` is a top-level function that works on NumPy and
    CuPy blocks alike."""

    _parameters = ["func", "name", "chunks", "dtype", "kwargs", "offsets"]

    inputs = ArrayExpr.args

    @cached
    def _funcname(self) -> str:
        return self.operand("name")

    @cached
    def backend(self) -> str:
        return self.inputs[0].backend

    def _block_task(self, index: Index) -> GraphNode:
        kwargs = dict(self.operand("kwargs"))
        if self.operand("offsets"):
            kwargs.update(block_offset=self.block_offset(index), global_shape=self.shape)
        refs = [a.ref(self.operand_block(a, index)) for a in self.inputs]
        return Task(self.key(index), _blocks.apply, self.operand("func"), kwargs, self.dtype, *refs)
