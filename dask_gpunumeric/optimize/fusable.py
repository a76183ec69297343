"""What a generated kernel can compute: the nodes it evaluates element by element and the reductions whose
per-block partials it folds in."""
from __future__ import annotations

from dask._expr import Expr

from ..codegen import program as _codegen
from ..expr.nodes import Creation, Elemwise, Reduction

FUSED_REDUCTIONS = {"sum", "prod", "min", "max", "all", "any", "mean"}


def is_fusable(node: Expr) -> bool:
    """True for nodes the fused kernels can compute element by element."""
    if isinstance(node, Elemwise):
        return _codegen.elemwise_supported(node)
    if isinstance(node, Creation):
        return _codegen.creation_supported(node)
    return False


def is_fused_reduction(node: Expr) -> bool:
    """True for reductions whose per-block partial a kernel computing their operand can fold in."""
    return (
        isinstance(node, Reduction)
        and not node.operand("prereduced")
        and node.operand("kind") in FUSED_REDUCTIONS
        and _codegen.dtype_supported(node.array.dtype)
        and _codegen.dtype_supported(node.dtype)
    )
