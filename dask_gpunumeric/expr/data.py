"""Data in: blocks that already have keys (``FromGraph``), an array-like cut into blocks (``FromArray``), and
blocks computed from their position alone (``Creation``)."""
from __future__ import annotations

import numpy as np
from dask._task_spec import DataNode, GraphNode, Task, _is_dask_future

from ..kernels import blocks as _blocks
from .base import ArrayExpr, Chunks, Index
from .tokens import cached


class FromGraph(ArrayExpr):
    """Blocks that already have keys: persisted results, or a dask.array's graph adopted as is."""

    _parameters = ["layer", "name", "chunks", "dtype", "backend"]

    @classmethod
    def of(cls, layer: dict, name: str, chunks: Chunks, dtype: np.dtype, backend: str) -> FromGraph:
        """``FromGraph(layer, name, chunks, dtype, backend)`` without the constructor's generic steps (on every
        persist)."""
        inst = object.__new__(cls)
        inst.__dict__.update(_determ_token=name, operands=[layer, name, chunks, dtype, backend], _name=name,
                             chunks=chunks, dtype=dtype, backend=backend)
        return inst

    @cached
    def _name(self) -> str:
        return self.operand("name")

    def __dask_tokenize__(self) -> str:
        return self.operand("name")

    @property
    def _leaves(self) -> dict[str, ArrayExpr]:
        return {self._name: self}  # (made on each access: a node's dict holding the node would be a cycle)

    def _layer(self) -> dict:
        # A block persisted on a cluster is a Future of its own key: left as it is, Dask's graph conversion
        # drops it (the scheduler already holds the block) instead of submitting it as a new task.
        return {
            k: v if isinstance(v, GraphNode) or _is_dask_future(v) else DataNode(k, v)
            for k, v in self.operand("layer").items()
        }


class FromArray(ArrayExpr):
    """Data in: a NumPy/CuPy (or any array-like) object cut into blocks."""

    _parameters = ["array", "chunks", "dtype", "backend", "token"]

    @cached
    def _funcname(self) -> str:
        return "array"

    def __dask_tokenize__(self) -> str:
        return self.operand("token")

    @property
    def _leaves(self) -> dict[str, ArrayExpr]:
        return {self._name: self}

    def _block_task(self, index: Index) -> GraphNode:
        slices = tuple(slice(o, o + s) for o, s in zip(self.block_offset(index), self.block_shape(index)))
        piece = self.operand("array")[slices]
        return Task(self.key(index), _blocks.as_block, DataNode(None, piece), self.dtype, self.backend)


class Creation(ArrayExpr):
    """Blocks computed from their position alone: full, arange, linspace, eye, random draws."""

    _parameters = ["kind", "chunks", "dtype", "backend", "params"]

    @cached
    def _funcname(self) -> str:
        return self.operand("kind").replace("_", "-")

    def _block_task(self, index: Index) -> GraphNode:
        return Task(
            self.key(index),
            _blocks.create,
            self.operand("kind"),
            self.block_offset(index),
            self.block_shape(index),
            self.shape,
            self.dtype,
            self.backend,
            self.operand("params"),
        )
