"""The fusion pass: maximal groups of elementwise operations and random draws with the same block grid,
plus the reductions that consume them, become one ``Fused`` expression (one kernel per block).

The pass is a pure function of the expression DAG (``fuse(root) -> root'``). A group is grown by
union-find over producer/consumer edges between fusable nodes with equal chunks and backend; a merge
that would make the group both feed and depend on an outside node (a cycle) is refused. Members used
outside their group (or the root) become outputs of the group's kernel (multi-output), so every value
is computed once. Reductions over a member (sum, prod, min, max, all, any, mean) get their per-block
partial from the same kernel; their combine/finish stages stay tree tasks.
"""
from __future__ import annotations

from collections import defaultdict
from dask._expr import Expr
from dask.tokenize import tokenize

from . import _codegen
from ._expr import ArrayExpr, Creation, Elemwise, Fused, FusedOutput, Materialized, Reduction

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
    # a lone node with nothing to fuse stays as it is (one task per block either way)
    plans = {g: m for g, m in members.items() if len(m) > 1 or reductions.get(g)}
    if not plans:
        return root
    replaced: dict[str, Expr] = {}
    for g, nodes in plans.items():
        replaced.update(_build_group(dag, root, nodes, reductions.get(g, []), groups))
    return _rebuild(root, replaced, {})


def _build_group(dag: _DAG, root: ArrayExpr, nodes: list[Expr], reductions: list[Reduction],
                 groups: _Groups) -> dict[str, Expr]:
    """The Fused node of one group, and what replaces each member used outside it."""
    names = {n._name for n in nodes}
    reduced_names = {r._name for r in reductions}
    stores = [
        n for n in nodes
        if n._name == root._name or any(c._name not in names and c._name not in reduced_names
                                        for c in dag.consumers[n._name])
    ]
    program, inputs, scalars = _codegen.build_program(nodes, stores, reductions)
    _codegen.record_sources(program)
    first = nodes[-1]
    n_out = len(stores) + len(reductions)
    # the token of a group is that of its members (cheaper than tokenizing the program)
    token = tokenize(sorted(names), [r._name for r in reductions])
    fused = Fused(program, first.chunks, first.backend, tuple(scalars), *inputs, _determ_token=token)
    out: dict[str, Expr] = {}
    for k, node in enumerate(stores):
        out[node._name] = fused if n_out == 1 else FusedOutput(fused, k, node.chunks, node.dtype)
    for k, red in enumerate(reductions, start=len(stores)):
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
    from . import config
    from ._stencil import stencils

    return fuse(stencils(root)) if config.get("fusion") else root


def explain_groups(root: ArrayExpr) -> list[Fused]:
    """The Fused nodes of the optimized expression (for ``gnp.explain``)."""
    opt = optimize(root)
    return [n for n in _DAG(opt).order if isinstance(n, Fused)]

