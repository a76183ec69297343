"""``MatMul``: the matrix product of two 2-d arrays on block grids."""
from __future__ import annotations

import numpy as np
from dask._task_spec import GraphNode, List, Task

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index
from .tokens import cached


class MatMul(ArrayExpr):
    """Matrix product of two 2-d arrays on block grids: output block (i, j) is the sum over k of
    ``a[i, k] @ b[k, j]`` (the caller aligns a's column chunks with b's row chunks)."""

    _parameters = ["a", "b", "dtype"]
    _like = "a"

    @classmethod
    def of(cls, a: ArrayExpr, b: ArrayExpr, dtype: np.dtype) -> ArrayExpr:
        """``MatMul(a, b, dtype)``, made without the constructor's generic steps."""
        return cls.made([a, b, dtype], (a.chunks[0], b.chunks[1]), dtype, a.backend)

    @cached
    def chunks(self) -> Chunks:
        a, b, _ = self.operands
        return (a.chunks[0], b.chunks[1])

    def _block_task(self, index: Index) -> GraphNode:
        i, j = index
        k = range(self.a.numblocks[1])
        return Task(self.key(index), _blocks.matmul_sum, List(*(self.a.ref((i, kk)) for kk in k)),
                    List(*(self.b.ref((kk, j)) for kk in k)), self.dtype)
