"""``MatMul``: the matrix product of two 2-d arrays on block grids."""
from __future__ import annotations

from dask._task_spec import GraphNode, List, Task

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index
from .tokens import cached


class MatMul(ArrayExpr):
    """Matrix product of two 2-d arrays on block grids: output block (i, j) is the sum over k of
    ``a[i, k] @ b[k, j]`` (the caller aligns a's column chunks with b's row chunks)."""

    _parameters = ["a", "b", "dtype"]
    _like = "a"

    @cached
    def chunks(self) -> Chunks:
        return (self.a.chunks[0], self.b.chunks[1])

    def _block_task(self, index: Index) -> GraphNode:
        i, j = index
        k = range(self.a.numblocks[1])
        return Task(self.key(index), _blocks.matmul_sum, List(*(self.a.ref((i, kk)) for kk in k)),
                    List(*(self.b.ref((kk, j)) for kk in k)), self.dtype)
