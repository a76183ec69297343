"""Expression nodes as fused programs: which nodes a kernel computes, and a group's program
(``codegen.program``), for the fusion and stencil passes."""
from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from dask._expr import Expr

from ..codegen import program as _codegen
from ..codegen.types import Program, dtype_supported
from ..expr import ArrayExpr, Creation, Elemwise, Reduction
from ..ops.reductions import FUSABLE, REDUCTIONS, ROW_FUSABLE


# positions of an Elemwise node's operands (``operand(name)`` searches the parameters on every call)
_OP, _KWARGS, _ARGS = Elemwise._parameters.index("op"), Elemwise._parameters.index("kwargs"), len(Elemwise._parameters)


def reduced(node: Expr) -> Expr:
    """A Reduction node's array (``node.array`` searches the parameters through Dask's ``__getattr__``)."""
    return node.operands[_REDUCED]


_REDUCED, _KIND, _AXES, _PREREDUCED = (Reduction._parameters.index(p) for p in ("array", "kind", "axes", "prereduced"))


def operands_of(node: Expr) -> list[Any]:
    """An Elemwise node's operands as ``codegen.program`` takes them: array dtypes, and scalars."""
    return [a.dtype if isinstance(a, Expr) else a for a in node.operands[_ARGS:]]


def elemwise_supported(node: Expr) -> bool:
    """Can a kernel compute this Elemwise node element by element, exactly as NumPy would?"""
    operands = node.operands
    return _codegen.op_supported(operands[_OP], node.dtype, operands[_KWARGS], operands_of(node))


def computed_in_readers(node: Expr) -> bool:
    """Whether the stencil kernels reading a 0-d node can compute it themselves from its operands (a launch less;
    ``gpunumeric.stencil-quotients``): a supported Elemwise of 0-d arrays only (CG's alpha = rr / pAp), computed
    once per thread (``codegen.stencil``: values of 0-d reads alone before the loops)."""
    if not isinstance(node, Elemwise) or node.ndim or not dtype_supported(node.dtype) or not elemwise_supported(node):
        return False
    arrays = [a for a in node.args if isinstance(a, ArrayExpr)]
    return all(not a.ndim and a.backend == node.backend and dtype_supported(a.dtype) for a in arrays)


def creation_supported(node: Expr) -> bool:
    """Creations a kernel can compute per element: random draws and constants."""
    return _codegen.creation_supported(node.operand("kind"), node.dtype, node.operand("params"))


def compute_of(node: Expr) -> str | None:
    """For a node the fused kernels can compute element by element, the ``.str`` of the dtype its op computes
    in ("" for a creation); None for any other node."""
    return signature_of(node)[0]


def signature_of(node: Expr) -> tuple[str | None, int | None]:
    """``compute_of``'s answer, and for an Elemwise node without keywords a number equal for the nodes of one
    signature (op, dtype, per operand: an array's dtype or a scalar's type, its value too unless a float or a
    NumPy scalar), else None: what a member adds to its kernel's structure (``Programs``), besides what it reads."""
    if isinstance(node, Elemwise):
        operands = node.operands
        if operands[_KWARGS]:
            return _codegen.op_compute(operands[_OP], node.dtype, operands[_KWARGS], operands_of(node)), None
        # the answer per signature (``codegen.program.op_compute``'s depends on array dtypes, scalar types, ints' values)
        key = [operands[_OP], node.dtype]
        for a in operands[_ARGS:]:
            if isinstance(a, Expr):
                key.append(a.dtype)
            else:
                kind = type(a)
                key += ((_SCALAR, kind) if (kind is float or issubclass(kind, np.generic)) and not isinstance(a, int)
                        else (_SCALAR, kind, a))
        try:
            return _SIGNATURES[tuple(key)]
        except KeyError:
            if len(_SIGNATURES) >= 4096:  # keep it bounded (numbers are never reused)
                _SIGNATURES.clear()
            known = _SIGNATURES[tuple(key)] = (
                _codegen.op_compute(operands[_OP], node.dtype, {}, operands_of(node)), next(_NUMBERS))
            return known
        except TypeError:  # something unhashable
            return _codegen.op_compute(operands[_OP], node.dtype, {}, operands_of(node)), None
    if isinstance(node, Creation):
        return ("" if creation_supported(node) else None), None
    return None, None


_SIGNATURES: dict[tuple, tuple[str | None, int]] = {}
_NUMBERS = itertools.count()
_SCALAR = object()  # marks a scalar's type in those signatures (np.dtype("float64") == float)


def is_fused_reduction(node: Expr, kinds: frozenset[str] = FUSABLE) -> bool:
    """True for reductions whose per-block partial a kernel computing their operand can fold in; with ``kinds``
    ``ROW_FUSABLE``, for those a row program computes (``optimize.rows``)."""
    if not isinstance(node, Reduction):
        return False
    operands = node.operands  # (by position: ``operand(name)`` searches the parameters)
    return (not operands[_PREREDUCED] and operands[_KIND] in kinds and dtype_supported(operands[_REDUCED].dtype)
            and dtype_supported(node.dtype))


class _RowOps:
    """What a reduction made of others (``ops.reductions``: ``rows``) builds a row program's values with."""

    def __init__(self, builder: _codegen.ProgramBuilder, axes: tuple[int, ...]) -> None:
        self.builder, self.axes = builder, axes

    def dtype(self, value: int) -> np.dtype:
        return np.dtype(self.builder.instrs[value].dtype)

    def row(self, kind: str, value: int, dtype: Any, params: tuple) -> int:
        return self.builder.row(kind, np.dtype(dtype), value, self.axes, params)

    def scalar(self, value: Any) -> int:
        return self.builder.scalar(value)

    def op(self, func: str, *values: int) -> int:
        """Ufunc ``func`` of ``values`` in NumPy's result dtype (of arithmetic: scalars are weak, NEP 50)."""
        instrs, scalars = self.builder.instrs, self.builder.scalars
        operands = [scalars[instrs[v].slot] if instrs[v].tag == "scalar" else np.dtype(instrs[v].dtype) for v in values]
        dtype = np.result_type(*[np.empty(0, o) if isinstance(o, np.dtype) else o for o in operands])
        return self.builder.op(func, dtype, {}, values, operands)


def build_program(nodes: Sequence[Expr], stores: Sequence[Expr], reductions: Sequence[Expr],
                  totals: Sequence[Expr] = (), epilogue: Sequence[Expr] = (),
                  computes: Sequence[str | None] = ()) -> tuple[Program, list, list]:
    """The program of a group (members in topological order, row reductions among them (``optimize.rows``);
    then its totals and the elementwise nodes on them, in topological order), its external inputs and scalar
    values. ``computes``: the compute dtypes of those nodes (``compute_of``), in that order, where known (None
    or left out where not)."""
    builder = _codegen.ProgramBuilder()
    index: dict[str, int] = {}
    inputs: dict[str, Expr] = {}
    scalar, load, op = builder.scalar, builder.load, builder.op

    known = len(computes)
    for k, node in enumerate((*nodes, *totals, *epilogue)):
        kind = node.__class__.__name__
        if kind == "Creation":
            kind, params = node.operand("kind"), node.operand("params")
            if kind == "full":
                index[node._name] = builder.full(params[0], node.dtype)
            else:
                key, stream, dist = params
                index[node._name] = builder.random(kind.removeprefix("random-"), node.dtype, key, stream, dist)
        elif kind == "Reduction":
            x = reduced(node)
            value = index.get(x._name)
            if value is None:  # a row reduction of an input
                inputs[x._name] = x
                value = index[x._name] = load(x._name, x.dtype)
            kind, axes, params = node.operand("kind"), node.operand("axes"), node.operand("params")
            if len(axes) == x.ndim:
                index[node._name] = builder.total(kind, node.dtype, value, axes, params, node.operand("keepdims"))
            elif kind in FUSABLE:
                index[node._name] = builder.row(kind, node.dtype, value, tuple(sorted(axes)), params,
                                                node.operand("keepdims"))
            else:  # a row reduction made of fusable ones
                ops = _RowOps(builder, tuple(sorted(axes)))
                count = math.prod(x.chunks[d][0] for d in axes)
                value = REDUCTIONS[kind].rows(ops, value, count, node.dtype, params)
                if ops.dtype(value) != node.dtype:
                    value = builder.op("astype", node.dtype, {}, (value,), (ops.dtype(value),))
                index[node._name] = value
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
            compute = computes[k] if k < known else None
            index[node._name] = op(operands[_OP], node.dtype, operands[_KWARGS], args,
                                   () if compute else operands_of(node), compute)
    last = nodes[-1]  # (a row program may end with a reduction that drops its axes)
    program = builder.program(reduced(last).ndim if isinstance(last, Reduction) else last.ndim, [index[n._name] for n in stores],
                              [(index[reduced(r)._name], r.operand("kind"), r.operand("axes"), r.dtype, r.operand("params"))
                               for r in reductions])
    return program, [inputs[name] for name in builder.inputs], builder.scalars


class Programs:
    """The programs of one pass's kernels, each built once per structure (a loop's body, repeated, makes kernels
    of one program on other inputs and scalar values); nodes by position in the DAG's order. A kernel's structure
    is read only once another kernel of its size has come (most of a small graph's kernels are alone)."""

    def __init__(self, order: list[Expr], inputs: list[list[int]], computes: list[str | None],
                 signatures: list[int | None]) -> None:
        self.order, self.inputs, self.computes, self.signatures = order, inputs, computes, signatures
        self.built: dict[tuple, Program] = {}
        # per kernel size (members, stores, partials): the one kernel of that size met and its program, or None
        # once there were more
        self.first: dict[tuple[int, int, int], tuple | None] = {}

    def of(self, members: list[int], stored: list[int], partials: list[int], totals: list[int],
           epilogue: list[int]) -> tuple[Program, list[int], list]:
        """The program of a kernel (``build_program``'s of its nodes, by position), the positions of its inputs
        (in the program's order) and its scalar values."""
        found = None
        if not totals:
            size = (len(members), len(stored), len(partials))
            if size not in self.first:
                program, reads, scalars = self._build(members, stored, partials, totals, epilogue)
                self.first[size] = (members, stored, partials, program)
                return program, reads, scalars
            first = self.first[size]
            if first is not None:  # a second kernel of this size: the first one's program is kept by structure
                self.first[size] = None
                self._keep(*first)
            found = self._structure(members, stored, partials)
            if found is not None:
                key, reads, scalars = found
                try:
                    program = self.built.get(key)
                except TypeError:  # an unhashable parameter
                    found = program = None
                if program is not None:
                    return program, reads, scalars
        program, reads, scalars = self._build(members, stored, partials, totals, epilogue)
        if found is not None:
            self.built[found[0]] = program
        return program, reads, scalars

    def _build(self, members: list[int], stored: list[int], partials: list[int], totals: list[int],
               epilogue: list[int]) -> tuple[Program, list[int], list]:
        """``of``'s answer, built."""
        order, computes = self.order, self.computes
        program, _, scalars = build_program(
            [order[i] for i in members], [order[i] for i in stored], [order[r] for r in partials],
            [order[i] for i in totals], [order[i] for i in epilogue],
            [*(computes[i] for i in members), *(None for _ in totals), *(computes[i] for i in epilogue)])
        inside = {*members, *totals, *epilogue}
        reads = [j for i in (*members, *totals, *epilogue) for j in self.inputs[i] if j not in inside]
        return program, list(dict.fromkeys(reads)), scalars  # (loaded at their first use)

    def _keep(self, members: list[int], stored: list[int], partials: list[int], program: Program) -> None:
        """Keep a program built already under its kernel's structure."""
        found = self._structure(members, stored, partials)
        if found is not None:
            try:
                self.built.setdefault(found[0], program)
            except TypeError:  # an unhashable parameter
                pass

    def _structure(self, members: list[int], stored: list[int], partials: list[int]
                   ) -> tuple[tuple, list[int], list] | None:
        """What a program of elementwise members without keywords is made of (a key equal for equal programs),
        with its inputs' positions and its scalars; None for other kernels. Per member: its signature
        (``signature_of``: op, dtypes, scalars' types), then per array it reads: a member (its index) or an input
        (its negative index)."""
        order, inputs, signatures = self.order, self.inputs, self.signatures
        key: list = []
        # the members' indices and the inputs' negative ones, by position (a member reads earlier members only)
        index = dict(zip(members, range(len(members))))
        reads: list[int] = []  # the inputs' positions, in order
        scalars: list = []
        for i in members:
            signature = signatures[i]
            if signature is None:
                return None
            key.append(signature)
            deps = inputs[i]
            for j in deps:
                k = index.get(j)
                if k is None:  # an input, numbered as first read
                    k = index[j] = -1 - len(reads)
                    reads.append(j)
                key.append(k)
            operands = order[i].operands
            if len(operands) - _ARGS != len(deps):  # (scalars among them)
                scalars += [a for a in operands[_ARGS:] if not isinstance(a, Expr)]
        outputs = tuple(index[i] for i in stored)
        # (a reduction's array is its first operand, so the first of its inputs)
        reduces = tuple((index[inputs[r][0]], *_reduce_fields(order[r].operands)) for r in partials)
        return (order[members[-1]].ndim, tuple(key), outputs, reduces), reads, scalars


# a fused reduction's fields that its program's output reads (``build_program``), from its operands
_reduce_fields = operator.itemgetter(*(Reduction._parameters.index(f) for f in ("kind", "axes", "dtype", "params")))
