"""Expression nodes as fused programs: which nodes a kernel computes, and a group's program
(``codegen.program``), for the fusion and stencil passes."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dask._expr import Expr

from ..codegen import program as _codegen
from ..codegen.types import Program, dtype_supported
from ..expr import Creation, Elemwise, Reduction
from ..ops.reductions import FUSABLE


# positions of an Elemwise node's operands (``operand(name)`` searches the parameters on every call)
_OP, _KWARGS, _ARGS = Elemwise._parameters.index("op"), Elemwise._parameters.index("kwargs"), len(Elemwise._parameters)


def reduced(node: Expr) -> Expr:
    """A Reduction node's array (``node.array`` searches the parameters through Dask's ``__getattr__``)."""
    return node.operands[_REDUCED]


_REDUCED = Reduction._parameters.index("array")


def operands_of(node: Expr) -> list[Any]:
    """An Elemwise node's operands as ``codegen.program`` takes them: array dtypes, and scalars."""
    return [a.dtype if isinstance(a, Expr) else a for a in node.operands[_ARGS:]]


def elemwise_supported(node: Expr) -> bool:
    """Can a kernel compute this Elemwise node element by element, exactly as NumPy would?"""
    operands = node.operands
    return _codegen.op_supported(operands[_OP], node.dtype, operands[_KWARGS], operands_of(node))


def creation_supported(node: Expr) -> bool:
    """Creations a kernel can compute per element: random draws and constants."""
    return _codegen.creation_supported(node.operand("kind"), node.dtype, node.operand("params"))


def is_fusable(node: Expr) -> bool:
    """True for nodes the fused kernels can compute element by element."""
    if isinstance(node, Elemwise):
        return elemwise_supported(node)
    if isinstance(node, Creation):
        return creation_supported(node)
    return False


def is_fused_reduction(node: Expr) -> bool:
    """True for reductions whose per-block partial a kernel computing their operand can fold in."""
    return (
        isinstance(node, Reduction)
        and not node.operand("prereduced")
        and node.operand("kind") in FUSABLE
        and dtype_supported(reduced(node).dtype)
        and dtype_supported(node.dtype)
    )


def build_program(nodes: Sequence[Expr], stores: Sequence[Expr], reductions: Sequence[Expr],
                  totals: Sequence[Expr] = (), epilogue: Sequence[Expr] = ()) -> tuple[Program, list, list]:
    """The program of a group (members in topological order; then its totals and the elementwise nodes on
    them, in topological order), its external inputs and scalar values."""
    builder = _codegen.ProgramBuilder()
    index: dict[str, int] = {}
    inputs: dict[str, Expr] = {}

    def value_of(arg: Any) -> int:
        if not isinstance(arg, Expr):
            return builder.scalar(arg)
        if arg._name not in index:
            inputs[arg._name] = arg
            index[arg._name] = builder.load(arg._name, arg.dtype)
        return index[arg._name]

    for node in (*nodes, *totals, *epilogue):
        kind = node.__class__.__name__
        if kind == "Creation":
            kind, params = node.operand("kind"), node.operand("params")
            if kind == "full":
                index[node._name] = builder.full(params[0], node.dtype)
            else:
                key, stream, dist = params
                index[node._name] = builder.random(kind.removeprefix("random-"), node.dtype, key, stream, dist)
        elif kind == "Reduction":
            index[node._name] = builder.total(node.operand("kind"), node.dtype, index[reduced(node)._name],
                                              node.operand("axes"), node.operand("params"), node.operand("keepdims"))
        else:
            operands = node.operands
            args = [value_of(a) for a in operands[_ARGS:]]
            index[node._name] = builder.op(operands[_OP], node.dtype, operands[_KWARGS], args, operands_of(node))
    program = builder.program(nodes[-1].ndim, [index[n._name] for n in stores],
                              [(index[reduced(r)._name], r.operand("kind"), r.operand("axes"), r.dtype, r.operand("params"))
                               for r in reductions])
    return program, [inputs[name] for name in builder.inputs], builder.scalars
