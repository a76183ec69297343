"""The fusion pass: groups of elementwise operations and random draws with the same block grid, plus the
reductions that consume them, become one ``Fused`` expression (one kernel per block).

A group grows by union-find over producer/consumer edges between fusable nodes with equal chunks and
backend, refusing a merge that would make the group both feed and depend on an outside node (a cycle).
Members used outside their group become outputs of its kernel, so every value is computed once.
Reductions over a member get their per-block partial from the same kernel; their combine stays tree tasks.
A group of one block also finishes its full reductions in the kernel (*totals*) and the elementwise work on
those results alone (its *epilogue*, run by the kernel's last thread block).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from dask._expr import Expr
from dask.tokenize import tokenize

from ..expr.nodes import ArrayExpr, Elemwise, Fused, FusedOutput, Reduction
from ..kernels.fused import record_sources
from .dag import DAG, UnionFind, rebuild
from .programs import build_program, is_fusable, is_fused_reduction


def _creates_cycle(dag: DAG, groups: UnionFind, a: str, b: str) -> bool:
    """Would merging the groups of ``a`` and ``b`` make a cycle between kernels? Walks downstream from the
    merged group, a reached group counting as a whole (it becomes one task), and looks for a way back."""
    members = groups.members[groups.find(a)] | groups.members[groups.find(b)]
    stack = [c._name for m in members for c in dag.consumers[m] if c._name not in members]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        for n in groups.members[groups.find(name)] if name in groups.parent else (name,):
            seen.add(n)
            for c in dag.consumers[n]:
                if c._name in members:
                    return True
                if c._name not in seen:
                    stack.append(c._name)
    return False


def fuse(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with fusable groups replaced by ``Fused`` kernels (same values, same root shape);
    nothing when the ``fusion`` setting is off."""
    if not settings["fusion"]:
        return root
    dag = DAG(root)
    groups = UnionFind()
    fusable = {n._name for n in dag.order if is_fusable(n)}
    for node in dag.order:
        if node._name not in fusable:
            continue
        groups.find(node._name)
        for dep in node.dependencies():
            if (
                dep._name in fusable
                and dep.chunks == node.chunks
                and dep.backend == node.backend
                and groups.find(dep._name) != groups.find(node._name)
                and not _creates_cycle(dag, groups, dep._name, node._name)
            ):
                groups.union(dep._name, node._name)
    members: dict[str, list[Expr]] = defaultdict(list)
    for node in dag.order:
        if node._name in fusable:
            members[groups.find(node._name)].append(node)
    reductions: dict[str, list[Reduction]] = defaultdict(list)
    for node in dag.order:
        if is_fused_reduction(node) and node.array._name in fusable:
            reductions[groups.find(node.array._name)].append(node)
    totals: dict[str, list[Reduction]] = {}
    epilogues: dict[str, list[Expr]] = {}
    for g, nodes in members.items():
        finished = [r for r in reductions.get(g, []) if _finished_in_kernel(r)]
        if finished:
            totals[g] = finished
            epilogues[g] = _epilogue(dag, finished, fusable)
    taken = {n._name for e in epilogues.values() for n in e}  # no longer members of their own groups
    members = {g: kept for g, m in members.items() if (kept := [n for n in m if n._name not in taken])}
    reductions = {g: [r for r in rs if r.array._name not in taken] for g, rs in reductions.items()}
    # a lone node with nothing to fuse stays as it is (one task per block either way)
    plans = {g: m for g, m in members.items() if len(m) > 1 or reductions.get(g)}
    if not plans:
        return root
    replaced: dict[str, Expr] = {}
    for g, nodes in plans.items():
        replaced.update(_build_group(dag, root, nodes, reductions.get(g, []), totals.get(g, []),
                                     epilogues.get(g, [])))
    return rebuild(root, replaced)


def _finished_in_kernel(reduction: Reduction) -> bool:
    """Whether a fused reduction is a total: over every axis of a one-block array (of at least one axis)."""
    x = reduction.array
    return x.ndim > 0 and all(n == 1 for n in x.numblocks) and set(reduction.operand("axes")) == set(range(x.ndim))


def _epilogue(dag: DAG, totals: list[Reduction], fusable: set[str]) -> list[Expr]:
    """The elementwise nodes computed from the totals alone (and from each other, and scalars), in
    topological order: what the kernel's last thread block computes after finishing the totals."""
    inside = {t._name for t in totals}
    out: list[Expr] = []
    for node in dag.order:
        if node._name not in fusable or not isinstance(node, Elemwise):
            continue
        arrays = [a for a in node.args if isinstance(a, Expr)]
        if arrays and all(a._name in inside for a in arrays):
            inside.add(node._name)
            out.append(node)
    return out


def _build_group(dag: DAG, root: ArrayExpr, nodes: list[Expr], reductions: list[Reduction],
                 totals: list[Reduction], epilogue: list[Expr]) -> dict[str, Expr]:
    """The Fused node of one group (its members, its totals and their epilogue), and what replaces each of
    them used outside it."""
    names = {n._name for n in (*nodes, *totals, *epilogue)}
    reduced_names = {r._name for r in reductions}

    def used_outside(n: Expr, inside: set[str]) -> bool:
        return n._name == root._name or any(c._name not in inside for c in dag.consumers[n._name])

    stores = [n for n in nodes if used_outside(n, names | reduced_names)]
    finished = [n for n in (*totals, *epilogue) if used_outside(n, names)]
    partials = [r for r in reductions if r._name not in names]
    program, inputs, scalars = build_program(nodes, [*stores, *finished], partials, totals, epilogue)
    record_sources(program, scalars)
    first = nodes[-1]
    n_out = len(stores) + len(finished) + len(partials)
    # the token of a group is that of its members (cheaper than tokenizing the program)
    token = tokenize(sorted(names), [r._name for r in reductions])
    # a kernel of one output has that output's blocks (a total's: 0-d), made from the elements' blocks
    chunks = finished[0].chunks if n_out == 1 and finished else first.chunks
    fused = Fused(program, chunks, first.backend, tuple(scalars), first.chunks, *inputs, _determ_token=token)
    out: dict[str, Expr] = {}
    for k, node in enumerate([*stores, *finished]):
        out[node._name] = fused if n_out == 1 else FusedOutput(fused, k, node.chunks, node.dtype)
    for k, red in enumerate(partials, start=len(stores) + len(finished)):
        partial = fused if n_out == 1 else FusedOutput(fused, k, red.array.chunks, red.array.dtype)
        out[red._name] = Reduction(partial, *red.operands[1:len(Reduction._parameters) - 1], True)
    return out
