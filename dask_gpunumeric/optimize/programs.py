"""Expression nodes as fused programs: which nodes a kernel computes, and a group's program
(``codegen.program``), for the fusion and stencil passes."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def compute_of(node: Expr) -> str | None:
    """For a node the fused kernels can compute element by element, the ``.str`` of the dtype its op computes
    in ("" for a creation); None for any other node."""
    if isinstance(node, Elemwise):
        operands = node.operands
        if operands[_KWARGS]:
            return _codegen.op_compute(operands[_OP], node.dtype, operands[_KWARGS], operands_of(node))
        # the answer per signature (``codegen.program.op_compute``'s: array dtypes, scalar types, ints' values)
        key = [operands[_OP], node.dtype]
        for a in operands[_ARGS:]:
            if isinstance(a, Expr):
                key.append(a.dtype)
            else:
                key += (_SCALAR, type(a), a) if isinstance(a, int) else (_SCALAR, type(a))
        try:
            return _COMPUTES[tuple(key)]
        except KeyError:
            if len(_COMPUTES) >= 4096:  # keep it bounded
                _COMPUTES.clear()
            compute = _COMPUTES[tuple(key)] = _codegen.op_compute(operands[_OP], node.dtype, {}, operands_of(node))
            return compute
        except TypeError:  # something unhashable
            return _codegen.op_compute(operands[_OP], node.dtype, {}, operands_of(node))
    if isinstance(node, Creation):
        return "" if creation_supported(node) else None
    return None


_COMPUTES: dict[tuple, str | None] = {}
_SCALAR = object()  # marks a scalar's type in those signatures (np.dtype("float64") == float)


def is_fused_reduction(node: Expr) -> bool:
    """True for reductions whose per-block partial a kernel computing their operand can fold in."""
    return (
        isinstance(node, Reduction)
        and not node.operand("prereduced")
        and node.operand("kind") in FUSABLE
        and dtype_supported(reduced(node).dtype)
        and dtype_supported(node.dtype)
    )


_NONE: Mapping[str, str] = {}


def build_program(nodes: Sequence[Expr], stores: Sequence[Expr], reductions: Sequence[Expr],
                  totals: Sequence[Expr] = (), epilogue: Sequence[Expr] = (),
                  computes: Mapping[str, str] = _NONE) -> tuple[Program, list, list]:
    """The program of a group (members in topological order; then its totals and the elementwise nodes on
    them, in topological order), its external inputs and scalar values. ``computes``: the compute dtypes of
    nodes known already (``compute_of``)."""
    builder = _codegen.ProgramBuilder()
    index: dict[str, int] = {}
    inputs: dict[str, Expr] = {}
    scalar, load, op = builder.scalar, builder.load, builder.op

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
            args = []
            for a in operands[_ARGS:]:
                if not isinstance(a, Expr):
                    args.append(scalar(a))
                    continue
                value = index.get(a._name)
                if value is None:
                    inputs[a._name] = a
                    value = index[a._name] = load(a._name, a.dtype)
                args.append(value)
            name = node._name
            compute = computes.get(name)
            index[name] = op(operands[_OP], node.dtype, operands[_KWARGS], args, () if compute else operands_of(node),
                             compute)
    program = builder.program(nodes[-1].ndim, [index[n._name] for n in stores],
                              [(index[reduced(r)._name], r.operand("kind"), r.operand("axes"), r.dtype, r.operand("params"))
                               for r in reductions])
    return program, [inputs[name] for name in builder.inputs], builder.scalars
