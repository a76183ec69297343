"""Tools every pass shares: the DAG in topological order with consumers, union-find over node names, and
rebuilding an expression with some of its nodes replaced. All iterative (expressions may be 100,000 deep)."""
from __future__ import annotations

import contextlib
import contextvars
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from dask._expr import Expr

from ..expr import ArrayExpr, Elemwise, Fused, FusedOutput, Materialized, Reduction, cached


class DAG:
    """The nodes of an expression in topological order (inputs first), each node's dependencies and
    consumers, and each node's position in that order (those two made when first asked for)."""

    def __init__(self, root: Expr) -> None:
        order: list[Expr] = []
        dependencies: dict[str, list[Expr]] = {}
        placed: set[str] = set()
        # depth first: a node is placed once its dependencies are (at once when they were already met: a
        # node met but not placed is below it on the stack, so it would be its ancestor, and a DAG has no cycle)
        stack: list[Expr] = [root]
        while stack:
            node = stack[-1]
            name = node._name
            if name in dependencies:
                stack.pop()
                if name not in placed:
                    placed.add(name)
                    order.append(node)
                continue
            deps = dependencies[name] = []
            waiting = False
            for dep in node.operands:  # (one scan: the operands that are expressions, those not met yet stacked)
                if isinstance(dep, Expr):
                    deps.append(dep)
                    if dep._name not in dependencies:
                        stack.append(dep)
                        waiting = True
            if not waiting:
                stack.pop()
                placed.add(name)
                order.append(node)
        self.order, self.dependencies = order, dependencies

    @cached
    def consumers(self) -> dict[str, list[Expr]]:
        """Per node name, the nodes that read it (in topological order)."""
        consumers: dict[str, list[Expr]] = defaultdict(list)
        dependencies = self.dependencies
        for node in self.order:
            for dep in dependencies[node._name]:
                consumers[dep._name].append(node)
        return consumers

    @cached
    def position(self) -> dict[str, int]:
        """Per node name, its index in ``order``."""
        return {node._name: i for i, node in enumerate(self.order)}

    @classmethod
    def of(cls, root: Expr) -> DAG:
        """The DAG of ``root``: inside ``sharing()``, built once per expression (passes that change nothing
        leave the next one the same expression)."""
        shared = _SHARED.get()
        if shared is None:
            return cls(root)
        dag = shared.get(root._name)
        if dag is None:
            dag = shared[root._name] = cls(root)
        return dag


_SHARED: contextvars.ContextVar[dict[str, DAG] | None] = contextvars.ContextVar("gnp_shared_dags", default=None)


@contextlib.contextmanager
def sharing() -> Iterator[None]:
    """Within it, ``DAG.of`` builds the DAG of each expression once (one optimization's passes)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


class UnionFind:
    """Disjoint groups of node names, with each group's members."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}

    def find(self, name: str) -> str:
        """The representative of ``name``'s group (a group of its own the first time it is seen)."""
        parent = self.parent
        up = parent.get(name)
        if up is None:
            parent[name] = name
            self.members[name] = [name]
            return name
        if up is name or parent[up] is up:  # a representative, or right below one (most names)
            return up
        while up != name:
            parent[name] = parent[up]
            name = parent[name]
            up = parent[name]
        return name

    def join(self, name: str, group: str) -> None:
        """Put ``name``, not seen before, in the group whose representative is ``group``."""
        self.parent[name] = group
        self.members[group].append(name)

    def union(self, a: str, b: str) -> str:
        """Merge the groups of ``a`` and ``b``; returns the merged group's representative."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if len(self.members[ra]) > len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[ra] = rb
        self.members[rb] += self.members.pop(ra)
        return rb


class Made(Protocol):
    """Replacements made on demand, given what they read as rebuilt (``rebuild``'s ``made``)."""

    inputs: Sequence[Expr]  # the nodes of the expression they read

    def make(self, inputs: list[Expr]) -> Mapping[str, Expr]:
        """The replacements by the name of the node each replaces, on ``inputs`` as rebuilt."""


def rebuild(root: Expr, replaced: Mapping[str, Expr], made: Mapping[str, Made] | None = None) -> Expr:
    """``root`` with every node named in ``replaced`` swapped for its replacement (whose own inputs are
    rebuilt too) and every node above one rebuilt; ``Materialized`` subtrees are left as they are. ``made``:
    more replacements, made once their inputs are rebuilt (so they are not rebuilt again), by the name of
    each node they replace."""
    return rebuild_all([root], replaced, made)[0]


def rebuild_all(roots: Sequence[Expr], replaced: Mapping[str, Expr], made: Mapping[str, Made] | None = None
                ) -> list[Expr]:
    """``rebuild`` of several roots sharing the work on common nodes."""
    memo: dict[str, Expr] = {}
    same_name: set[str] = set()  # nodes rebuilt here under their own name (a Fused node, what reads only those)
    stack = list(roots)
    while stack:
        node = stack[-1]
        name = node._name
        if name in memo:
            stack.pop()
            continue
        maker = made.get(name) if made else None
        if maker is not None:
            missing = [i for i in maker.inputs if i._name not in memo and not isinstance(i, Materialized)]
            if missing:
                stack += missing
                continue
            stack.pop()
            memo.update(maker.make([memo.get(i._name, i) for i in maker.inputs]))
            continue
        new = replaced.get(name)
        if new is not None and new._name != name:
            if new._name in memo:
                memo[name] = memo[new._name]
                stack.pop()
            else:
                stack.append(new)
            continue
        # the operands as rebuilt, in one scan: those not rebuilt yet go on the stack (the node is seen again)
        ops: list = []
        pending = changed = renamed = False  # renamed: an operand rebuilt under another name
        for o in node.operands:
            if isinstance(o, Expr) and not isinstance(o, Materialized):
                done = memo.get(o._name)
                if done is None:
                    stack.append(o)
                    pending = True
                    continue
                if done is not o:
                    changed = True
                    renamed = renamed or done._name != o._name or o._name not in same_name
                    o = done
            ops.append(o)
        if pending:
            continue
        stack.pop()
        memo[name] = _on_operands(node, ops, renamed, same_name) if changed else node
    return [memo[r._name] for r in roots]


def _on_operands(node: Expr, ops: list, renamed: bool, same_name: set[str]) -> Expr:
    """``node`` on operands ``ops`` (its own, some rebuilt; ``renamed``: one under another name).
    ``same_name`` holds the nodes rebuilt under their own name, and gets this one if it is."""
    if isinstance(node, Fused):  # its token, made of its members' names, still names what it computes
        same_name.add(node._name)
        return node.with_operands(ops, keep_name=True)
    if not renamed and type(node) in _NAMED_BY_OPERANDS:
        # its operands' names are its token's text: the same name, made without tokenizing again
        same_name.add(node._name)
        return node.with_operands(ops, keep_name=True)
    if isinstance(node, ArrayExpr) and all(a is b or _same_blocks(a, b) for a, b in zip(ops, node.operands)):
        return node.with_operands(ops)
    return type(node)(*ops)


def bypass(root: Expr, replaced: Mapping[str, Expr]) -> Expr:
    """``rebuild(root, replaced)`` where each replacement is the one expression operand of the node it replaces
    (``x * 1 -> x``), or a new node on operands final already (built on the replacements of their own
    operands), not ``root``: only the nodes above a replaced one are rebuilt, and inside ``sharing()`` the new
    expression's DAG is made from ``root``'s (the same order, less the nodes replaced, the new nodes placed
    where the ones they replace were). A full ``rebuild`` where a new node is a node of ``root`` (common
    subexpressions met), whose place in the order may come later."""
    dag = DAG.of(root)
    order, dependencies = dag.order, dag.dependencies
    new: dict[str, Expr] = {}  # the nodes rebuilt or replaced, by their old name
    same_name: set[str] = set()
    new_order: list[Expr] = []
    new_dependencies = dict(dependencies)
    placed: dict[str, Expr] = {}  # the new nodes placed, by their name as made

    def place(x: Expr) -> Expr | None:
        """``x``, a new node, placed in the order (with the new nodes below it first), on the rebuilt or
        replaced versions of the old nodes it reads (earlier in the order); None where it, or a node it
        becomes, is a node of ``root`` (whose place may come later)."""
        done = placed.get(x._name)
        if done is not None:
            return done
        if x._name in dependencies:
            return None
        ops: list = []
        changed = renamed = False
        for o in x.operands:
            if isinstance(o, Expr) and not isinstance(o, Materialized):
                r = new.get(o._name, o) if o._name in dependencies else place(o)
                if r is None:
                    return None
                if r is not o:
                    changed = True
                    renamed = renamed or r._name != o._name or o._name not in same_name
                    o = r
            ops.append(o)
        node = _on_operands(x, ops, renamed, same_name) if changed else x
        if node._name in dependencies:
            return None
        if node._name in placed:
            return placed[node._name]
        new_order.append(node)
        new_dependencies[node._name] = [o for o in ops if isinstance(o, Expr)]
        placed[x._name] = placed[node._name] = node
        return node

    for node in order:
        name = node._name
        if name in replaced:
            x = replaced[name]
            (first, *others) = dependencies[name] or [None]
            if x is first and not others:  # an identity: the node's one operand
                new[name] = new.get(x._name, x)
            else:
                made = place(x)
                if made is None:
                    return rebuild(root, replaced)
                new[name] = made
            del new_dependencies[name]
            continue
        if new and any(d._name in new for d in dependencies[name]):
            ops = [new.get(o._name, o) if isinstance(o, Expr) and not isinstance(o, Materialized) else o
                   for o in node.operands]
            renamed = any(a is not b and (a._name != b._name or b._name not in same_name)
                          for a, b in zip(ops, node.operands))
            node = new[name] = _on_operands(node, ops, renamed, same_name)
            if node._name in dependencies or node._name in placed:  # the same as a node there: walk anew
                return rebuild(root, replaced)
            del new_dependencies[name]
            new_dependencies[node._name] = [o for o in ops if isinstance(o, Expr)]
        new_order.append(node)
    out = new_order[-1]
    shared = _SHARED.get()
    if shared is not None:
        derived = object.__new__(DAG)
        derived.order, derived.dependencies = new_order, new_dependencies
        shared[out._name] = derived
    return out


# node types whose token is the text of their operands, expressions by name (``ArrayExpr.__dask_tokenize__``)
_NAMED_BY_OPERANDS = frozenset({Elemwise, FusedOutput, Reduction})


def _same_blocks(a: Expr, b: Expr) -> bool:
    """Whether two expressions have the same chunks, dtype and backend (what a node's own depend on)."""
    return (isinstance(a, ArrayExpr) and isinstance(b, ArrayExpr) and a.chunks == b.chunks and a.dtype == b.dtype
            and a.backend == b.backend)
