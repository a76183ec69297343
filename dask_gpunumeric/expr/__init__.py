"""Array expressions: immutable nodes with shape, dtype, chunks and backend, one file per family, each lowered
to one Dask task per output block (``base`` has the node all others derive from)."""
from .base import (ArrayExpr, Bundle, Chunks, Finalize, Index, JointOutput, Materialized, Outputs, TracedValueError,
                   flat_keys, inputs, joined_leaves, walk)
from .blockwise import MapBlocks
from .contraction import GramProducts, MatMul
from .data import Creation, FromArray, FromGraph, small_host_blocks, small_host_input
from .elemwise import Elemwise
from .fused import Fused, FusedOutput, Stencil
from .halo import Overlap, SetItem
from .layout import BlockReshape, Broadcast, Gather, Transpose
from .reduction import Reduction, Scan
from .tokens import cached

__all__ = ["ArrayExpr", "BlockReshape", "Broadcast", "Bundle", "Chunks", "Creation", "Elemwise", "Finalize",
           "FromArray", "FromGraph", "Fused", "FusedOutput", "Gather", "GramProducts", "Index", "JointOutput",
           "MapBlocks", "MatMul", "Materialized", "Outputs", "Overlap", "Reduction", "Scan", "SetItem", "Stencil",
           "TracedValueError", "Transpose", "cached", "flat_keys", "inputs", "joined_leaves", "small_host_blocks",
           "small_host_input", "walk"]
