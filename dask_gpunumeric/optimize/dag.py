"""Tools every pass shares: the DAG in topological order with consumers, union-find over node names, and
rebuilding an expression with some of its nodes replaced. All iterative (expressions may be 100,000 deep)."""
from __future__ import annotations

import contextlib
import contextvars
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

from dask._expr import Expr

from ..expr import ArrayExpr, Fused, Materialized, inputs


class DAG:
    """The nodes of an expression in topological order (inputs first), each node's dependencies and
    consumers, and each node's position in that order."""

    def __init__(self, root: Expr) -> None:
        order: list[Expr] = []
        dependencies: dict[str, list[Expr]] = {}
        consumers: dict[str, list[Expr]] = defaultdict(list)
        position: dict[str, int] = {}
        # depth first: a node is placed when met on top of the stack again, its dependencies placed
        stack: list[Expr] = [root]
        while stack:
            node = stack[-1]
            name = node._name
            if name in dependencies:
                stack.pop()
                if name not in position:
                    position[name] = len(order)
                    order.append(node)
                continue
            deps = dependencies[name] = inputs(node)
            for dep in deps:
                consumers[dep._name].append(node)
                if dep._name not in dependencies:  # else placed already (a DAG has no cycle)
                    stack.append(dep)
        self.order, self.dependencies, self.consumers, self.position = order, dependencies, consumers, position

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
        self.members: dict[str, set[str]] = {}

    def find(self, name: str) -> str:
        """The representative of ``name``'s group (a group of its own the first time it is seen)."""
        parent = self.parent
        up = parent.get(name)
        if up is None:
            parent[name] = name
            self.members[name] = {name}
            return name
        while up != name:
            parent[name] = parent[up]
            name = parent[name]
            up = parent[name]
        return name

    def join(self, name: str, group: str) -> None:
        """Put ``name``, not seen before, in the group whose representative is ``group``."""
        self.parent[name] = group
        self.members[group].add(name)

    def union(self, a: str, b: str) -> str:
        """Merge the groups of ``a`` and ``b``; returns the merged group's representative."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if len(self.members[ra]) > len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[ra] = rb
        self.members[rb] |= self.members.pop(ra)
        return rb


def rebuild(root: Expr, replaced: Mapping[str, Expr]) -> Expr:
    """``root`` with every node named in ``replaced`` swapped for its replacement (whose own inputs are
    rebuilt too) and every node above one rebuilt; ``Materialized`` subtrees are left as they are."""
    return rebuild_all([root], replaced)[0]


def rebuild_all(roots: Sequence[Expr], replaced: Mapping[str, Expr]) -> list[Expr]:
    """``rebuild`` of several roots sharing the work on common nodes."""
    memo: dict[str, Expr] = {}
    stack = list(roots)
    while stack:
        node = stack[-1]
        name = node._name
        if name in memo:
            stack.pop()
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
        pending = changed = False
        for o in node.operands:
            if isinstance(o, Expr) and not isinstance(o, Materialized):
                done = memo.get(o._name)
                if done is None:
                    stack.append(o)
                    pending = True
                    continue
                changed = changed or done is not o
                o = done
            ops.append(o)
        if pending:
            continue
        stack.pop()
        if not changed:
            memo[name] = node
        elif isinstance(node, Fused):  # its token, made of its members' names, still names what it computes
            memo[name] = Fused(*ops, _determ_token=node.deterministic_token)
        elif isinstance(node, ArrayExpr) and all(a is b or _same_blocks(a, b) for a, b in zip(ops, node.operands)):
            memo[name] = node.with_operands(ops)
        else:
            memo[name] = type(node)(*ops)
    return [memo[r._name] for r in roots]


def _same_blocks(a: Expr, b: Expr) -> bool:
    """Whether two expressions have the same chunks, dtype and backend (what a node's own depend on)."""
    return (isinstance(a, ArrayExpr) and isinstance(b, ArrayExpr) and a.chunks == b.chunks and a.dtype == b.dtype
            and a.backend == b.backend)
