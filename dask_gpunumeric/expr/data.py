"""Data in: blocks that already have keys (``FromGraph``), an array-like cut into blocks (``FromArray``), and
blocks computed from their position alone (``Creation``)."""
from __future__ import annotations

import numpy as np
from dask._task_spec import DataNode, GraphNode, Task, _is_dask_future

from ..kernels import blocks as _blocks
from ..kernels.checks import checked_block, unread_checks
from .base import ArrayExpr, Chunks, Index
from .tokens import cached


class FromGraph(ArrayExpr):
    """Blocks that already have keys: persisted results, or a dask.array's graph adopted as is."""

    _parameters = ["layer", "name", "chunks", "dtype", "backend"]

    @classmethod
    def of(cls, layer: dict, name: str, chunks: Chunks, dtype: np.dtype, backend: str) -> FromGraph:
        """``FromGraph(layer, name, chunks, dtype, backend)`` (``dtype`` a NumPy dtype), made without the
        constructor's generic steps (on every persist)."""
        inst = object.__new__(cls)
        inst.__dict__.update(operands=[layer, name, chunks, dtype, backend], _determ_token=name, _name=name,
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

    @cached
    def in_memory(self) -> bool:
        """Whether its blocks are values in this process (no tasks, no Futures of a cluster's)."""
        return not any(isinstance(v, GraphNode) or _is_dask_future(v) for v in self.operand("layer").values())

    def _layer(self) -> dict:
        # A block persisted on a cluster is a Future of its own key: left as it is, Dask's graph conversion
        # drops it (the scheduler already holds the block) instead of submitting it as a new task.
        known = self.__dict__.get("_plain_layer")
        if known is not None:
            return dict(known)
        layer = self.operand("layer")
        checks = unread_checks(layer)
        if checks:  # blocks whose run left device checks unread: a task hands them to the run reading them
            held = DataNode(None, checks)
            return {k: v if isinstance(v, GraphNode) or _is_dask_future(v) else
                    Task(k, checked_block, DataNode(None, v), held) for k, v in layer.items()}
        plain = {k: v if isinstance(v, GraphNode) or _is_dask_future(v) else DataNode(k, v) for k, v in layer.items()}
        # (kept for the next call of a tree on these blocks: checks once read stay read, and none are added)
        self.__dict__["_plain_layer"] = plain
        return dict(plain)


class FromArray(ArrayExpr):
    """Data in: a NumPy/CuPy (or any array-like) object cut into blocks."""

    _parameters = ["array", "chunks", "dtype", "backend", "token"]

    @classmethod
    def of_scalar(cls, array: np.ndarray, dtype: np.dtype, backend: str, token: str) -> FromArray:
        """``FromArray(array, (), dtype, backend, token)`` of a 0-d host array (``dtype`` a NumPy dtype), made
        without the constructor's generic steps (an accelerated call's salt or rate, made on every call)."""
        inst = object.__new__(cls)
        inst.__dict__.update(operands=[array, (), dtype, backend, token], _determ_token=token, _name=f"array-{token}",
                             chunks=(), dtype=dtype, backend=backend)
        return inst

    @cached
    def _funcname(self) -> str:
        return "array"

    def __dask_tokenize__(self) -> str:
        return self.operand("token")

    @property
    def _leaves(self) -> dict[str, ArrayExpr]:
        return {self._name: self}

    def _block_task(self, index: Index) -> GraphNode:
        return Task(self.key(index), _blocks.as_block, DataNode(None, self._piece(index)), self.dtype, self.backend)

    def block(self, index: Index) -> object:
        """Block ``index`` itself, made now (what its task gives)."""
        return _blocks.as_block(self._piece(index), self.dtype, self.backend)

    def _piece(self, index: Index) -> object:
        if not index:  # a 0-d array's one block (an accelerated call's salt, on every call)
            return self.operand("array")[()]
        slices = tuple(slice(o, o + s) for o, s in zip(self.block_offset(index), self.block_shape(index)))
        return self.operand("array")[slices]


# Host data this small costs nothing worth counting to copy or to keep: an input's blocks of at most this many bytes
# are made inside the tasks reading them, and nodes kept for later calls (``expr.replay``) may hold it alive
SMALL_HOST_BYTES = 2**16


def small_host_input(node: ArrayExpr) -> bool:
    """Whether ``node`` is an input that is small host data: a 0-d rate, a salt (an array in memory of at most
    ``SMALL_HOST_BYTES``), or a NumPy scalar persisted as a 0-d block."""
    if isinstance(node, FromArray):
        array = node.operand("array")
        return isinstance(array, np.ndarray) and array.nbytes <= SMALL_HOST_BYTES
    if isinstance(node, FromGraph) and node.ndim == 0:
        # (an accelerated function's number argument)
        return isinstance(node.operand("layer").get(node.key(())), np.generic)
    return False


def small_host_blocks(node: ArrayExpr) -> dict | None:
    """The block tasks, by key, of an input that is small host data (``small_host_input``), which a cluster's
    tasks make inside the tasks reading them (a task of their own is a scheduler round trip more); None for
    others."""
    if not small_host_input(node):
        return None
    if isinstance(node, FromArray):
        return {node.key(index): node._block_task(index) for index in node.block_indices()}
    key = node.key(())
    return {key: DataNode(key, node.operand("layer")[key])}


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
