"""The row pass: reductions over the trailing axes of arrays whose blocks hold those axes whole, axes kept,
with the elementwise work that feeds them and the elementwise work that reads their results broadcast back
along the rows, become one ``Fused`` row program per block (``codegen.rows``): softmax, logsumexp, layer
norm in one kernel. Where the reduced axes are split across blocks nothing changes here: the fusion pass
fuses as before.

Nodes join groups over producer/consumer edges (``fusion._Grouping``, which keeps the graph of groups
acyclic) within one *space*: the block grid of the reduced arrays (per element) and the same grid with the
reduced axes of length 1 (per row). A group is kept where a member reads a row reduction (a result broadcast
back) or where it holds several row reductions; the other groups are left to the fusion pass.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from dask._expr import Expr

from ..codegen.rows import row_inputs
from ..expr import ArrayExpr, Elemwise, Fused, FusedOutput, Reduction
from ..kernels.fused import record_sources
from ..ops.reductions import FUSABLE, ROW_FUSABLE
from .dag import DAG, rebuild
from .fusion import _Grouping
from .programs import build_program, compute_of, is_fused_reduction, reduced

Space = tuple  # (the reduced arrays' chunks, backend)


def _row_axis(node: Expr) -> int | None:
    """For a reduction a row program computes, its first reduced axis (the others follow it to the last)."""
    if not isinstance(node, Reduction):
        return None
    axes = sorted(node.operand("axes"))
    if not axes or axes[0] == 0:  # (checked first: a reduction over the first axis, or all, is none)
        return None
    # (one that drops its axes is only an output of its group, so it must be one instruction: a fusable one)
    if not (is_fused_reduction(node, ROW_FUSABLE) and (node.operand("keepdims") or node.operand("kind") in FUSABLE)):
        return None
    x = reduced(node)
    if axes != list(range(axes[0], x.ndim)) or any(x.numblocks[d] != 1 for d in axes):
        return None
    n = math.prod(x.chunks[d][0] for d in axes)
    rows = math.prod(max(x.chunks[d]) for d in range(axes[0]))
    if n < 2 or n > SHORT_ROW and rows < MIN_ROWS:  # (rows of one element: nothing to gain)
        return None
    return axes[0]


#: A block of rows longer than ``SHORT_ROW`` elements is a row program only with at least ``MIN_ROWS`` rows:
#: each row is one thread block's work, and a handful of long rows would leave most of a GPU idle.
SHORT_ROW = 4096
MIN_ROWS = 32


def _per_row(chunks: tuple, first: int) -> tuple:
    return chunks[:first] + ((1,),) * (len(chunks) - first)


def fuse_rows(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with row groups replaced by ``Fused`` row programs (same values, same root shape);
    nothing when the ``fusion`` setting is off."""
    if not settings["fusion"]:
        return root
    dag = DAG.of(root)
    order, inputs = dag.order, dag.inputs
    spaces: dict[Space, int] = {}  # space -> its first reduced axis (one per space: the first found)
    rows: set[int] = set()  # (nodes by position in the order)
    flat: set[int] = set()  # those of them that drop their axes
    for i, node in enumerate(order):
        if not isinstance(node, Reduction):  # (most nodes: no call made for them)
            continue
        first = _row_axis(node)
        if first is not None:
            space = (reduced(node).chunks, node.backend)
            if spaces.setdefault(space, first) == first:
                rows.add(i)
                if not node.operand("keepdims"):
                    flat.add(i)
    if not rows:
        return root
    per_row: dict[Space, list[Space]] = defaultdict(list)  # per-row grid -> the spaces it is that of
    for (chunks, backend), first in spaces.items():
        per_row[(_per_row(chunks, first), backend)].append((chunks, backend))
    space_of: dict[int, Space] = {}
    computes: dict[int, str] = {}
    grouping = _Grouping(len(order))
    for i, node in enumerate(order):
        deps = inputs[i]
        space = None
        if i in rows:
            space = (reduced(node).chunks, node.backend)
        elif isinstance(node, Elemwise) and deps:
            key = (node.chunks, node.backend)
            if key in spaces or key in per_row:
                compute = compute_of(node)
                if compute is not None:
                    computes[i] = compute
                    if key in spaces:
                        space = key
                    else:  # per row: in the space of a dependency
                        space = next((space_of[d] for d in deps if space_of.get(d) in per_row[key]), None)
        if space is None:
            grouping.add(i, deps, [])
            continue
        space_of[i] = space
        # (a reduction that drops its axes is read by nothing of the group: what reads it broadcasts along
        # other axes than the rows)
        grouping.add(i, deps, [d for d in deps if space_of.get(d) == space and d not in flat])
    groups: dict[int, list[int]] = defaultdict(list)
    group_of = grouping.group_of
    for i in space_of:  # (in topological order)
        groups[group_of[i]].append(i)
    limit = settings["kernel-size"]
    replaced: dict[str, Expr] = {}
    for members in groups.values():
        if _worth_it(members, rows, inputs) and len(members) <= limit:
            replaced.update(_build_group(members, dag, [computes.get(i) for i in members]))
    return rebuild(root, replaced) if replaced else root


def _worth_it(members: list[int], rows: set[int], inputs: list[list[int]]) -> bool:
    """Whether a group is a row program: it reads a row reduction of its own, or holds several (nodes by
    position in the DAG's order, ``inputs`` the DAG's)."""
    own = {i for i in members if i in rows}
    return len(own) > 1 or bool(own) and any(j in own for i in members for j in inputs[i])


def _build_group(group: list[int], dag: DAG, computes: list[str | None]) -> dict[str, Expr]:
    """The Fused row program of a group's members (positions in ``dag.order``, in topological order;
    ``computes``: their compute dtypes, where known), and what replaces each member read outside it (or the
    root)."""
    order, readers, root = dag.order, dag.readers, len(dag.order) - 1
    inside = set(group)
    members = [order[i] for i in group]
    stores = [order[i] for i in group if i == root or any(c not in inside for c in readers[i])]
    program, inputs, scalars = build_program(members, stores, [], computes=computes)
    first = next(n for n in members if isinstance(n, Reduction))
    elements = reduced(first).chunks
    record_sources(program, scalars, row_inputs([a.shape for a in inputs], first.operand("axes"), len(elements)))
    token = hashlib.sha1("|".join(["rows", *sorted({n._name for n in members})]).encode()).hexdigest()[:32]
    chunks = stores[0].chunks if len(stores) == 1 else elements
    fused = Fused.of(program, chunks, first.backend, tuple(scalars), elements, inputs, token)
    return {node._name: fused if len(stores) == 1 else FusedOutput.of(fused, k, node.chunks, node.dtype)
            for k, node in enumerate(stores)}
