"""The fusion pass: maximal groups of elementwise operations and random draws with the same block grid,
plus the reductions that consume them, become one ``Fused`` expression (one kernel per block).

The pass is a pure function of the expression DAG (``fuse(root) -> root'``). A group is grown by
union-find over producer/consumer edges between fusable nodes with equal chunks and backend; a merge
that would make the group both feed and depend on an outside node (a cycle) is refused. Members used
outside their group (or the root) become outputs of the group's kernel (multi-output), so every value
is computed once. Reductions over a member (sum, prod, min, max, all, any, mean) get their per-block
partial from the same kernel; their combine/finish stages stay tree tasks.

A group of one block finishes its full reductions in the kernel itself (a *total*: the kernel's last thread
block combines the partials), and takes in the elementwise work on those results alone (an *epilogue*:
``(omega / n) * sum(f(x))``, a mean's normalisation, ``sum(a) / sum(b)``), computed by that last thread
block: the whole computation is one kernel and one task. With several blocks the reduction's tree tasks
finish it, and the elementwise work on the result is a task of its own.
"""
from __future__ import annotations

from collections import defaultdict
from dask._expr import Expr
from dask.tokenize import tokenize

from ..codegen import program as _codegen
from ..expr import ArrayExpr, Creation, Elemwise, Fused, FusedOutput, Materialized, Reduction

FUSED_REDUCTIONS = {"sum", "prod", "min", "max", "all", "any", "mean"}


def is_fusable(node: Expr) -> bool:
    """True for nodes the fused kernels can compute element by element."""
    if isinstance(node, Elemwise):
        return _codegen.elemwise_supported(node)
    if isinstance(node, Creation):
        return _codegen.creation_supported(node)
    return False


def _reduction_fusable(node: Expr) -> bool:
    return (
        isinstance(node, Reduction)
        and not node.operand("prereduced")
        and node.operand("kind") in FUSED_REDUCTIONS
        and _codegen.dtype_supported(node.array.dtype)
        and _codegen.dtype_supported(node.dtype)
    )


class _DAG:
    """Nodes of an expression tree in topological order (inputs first), with consumers."""

    def __init__(self, root: ArrayExpr) -> None:
        self.order: list[Expr] = []
        self.consumers: dict[str, list[Expr]] = defaultdict(list)
        seen: set[str] = set()
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                self.order.append(node)
                continue
            if node._name in seen:
                continue
            seen.add(node._name)
            stack.append((node, True))
            for dep in node.dependencies():
                self.consumers[dep._name].append(node)
                stack.append((dep, False))


class _Groups:
    """Union-find over node names, with each group's members."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.members: dict[str, set[str]] = {}

    def find(self, name: str) -> str:
        if name not in self.parent:
            self.parent[name] = name
            self.members[name] = {name}
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if len(self.members[ra]) > len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[ra] = rb
        self.members[rb] |= self.members.pop(ra)


def _creates_cycle(dag: _DAG, groups: _Groups, a: str, b: str) -> bool:
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


def fuse(root: ArrayExpr) -> ArrayExpr:
    """The expression with fusable groups replaced by ``Fused`` kernels (same values, same root shape)."""
    dag = _DAG(root)
    groups = _Groups()
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
        if _reduction_fusable(node) and node.array._name in fusable:
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
    return _rebuild(root, replaced, {})


def _finished_in_kernel(reduction: Reduction) -> bool:
    """Whether a fused reduction is a total: over every axis of a one-block array (of at least one axis)."""
    x = reduction.array
    return x.ndim > 0 and all(n == 1 for n in x.numblocks) and set(reduction.operand("axes")) == set(range(x.ndim))


def _epilogue(dag: _DAG, totals: list[Reduction], fusable: set[str]) -> list[Expr]:
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


def _build_group(dag: _DAG, root: ArrayExpr, nodes: list[Expr], reductions: list[Reduction],
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
    program, inputs, scalars = _codegen.build_program(nodes, [*stores, *finished], partials, totals, epilogue)
    _codegen.record_sources(program, scalars)
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


def _rebuild(node: Expr, replaced: dict[str, Expr], memo: dict[str, Expr]) -> Expr:
    if node._name in memo:
        return memo[node._name]
    if node._name in replaced:
        new = replaced[node._name]
        # the replacement's own inputs are outside the group: rebuild them too
        new = _rebuild_operands(new, replaced, memo)
        memo[node._name] = new
        return new
    new = _rebuild_operands(node, replaced, memo)
    memo[node._name] = new
    return new


def _rebuild_operands(node: Expr, replaced: dict[str, Expr], memo: dict[str, Expr]) -> Expr:
    ops = [
        _rebuild(o, replaced, memo) if isinstance(o, Expr) and not isinstance(o, Materialized) else o
        for o in node.operands
    ]
    if all(a is b for a, b in zip(ops, node.operands)):
        return node
    return type(node)(*ops)


def optimize(root: ArrayExpr) -> ArrayExpr:
    """All graph-optimization passes, in order (stencil grouping, then fusion; when ``gpunumeric.fusion``
    is on)."""
    from .. import config
    from .stencil import stencils

    return fuse(stencils(root)) if config.get("fusion") else root


def explain_groups(root: ArrayExpr) -> list[Fused]:
    """The Fused nodes of the optimized expression (for ``gnp.explain``)."""
    opt = optimize(root)
    return [n for n in _DAG(opt).order if isinstance(n, Fused)]

