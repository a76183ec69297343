"""Tools every pass shares: the DAG in topological order with consumers, union-find over node names, and
rebuilding an expression with some of its nodes replaced. All iterative (expressions may be 100,000 deep)."""
from __future__ import annotations

import contextlib
import contextvars
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Protocol

from dask._expr import Expr

from ..expr import ArrayExpr, Elemwise, Fused, FusedOutput, Materialized, Reduction, cached


class DAG:
    """The nodes of an expression in topological order (inputs first); per node, by its position in that
    order, the positions of its dependencies (``inputs``, one per expression operand, in operand order) and
    of its readers; per node name, its position and its consumers. (Passes keep what they find per node by
    position: lists and dicts of ints stay in the caches where lookups by name, on 100,000s of nodes, miss
    at every step.)"""

    def __init__(self, root: Expr) -> None:
        order: list[Expr] = []
        position: dict[str, int] = {}  # -1 for a node met and not placed yet
        inputs: list[list[int]] = []
        # depth first: a node is placed once its dependencies are (when it is on top of the stack again, or at
        # once: a node met but not placed is below it on the stack, so it would be its ancestor, and a DAG has
        # no cycle)
        stack: list[Expr] = [root]
        while stack:
            node = stack[-1]
            name = node._name
            at = position.get(name)
            if at is None:
                position[name] = -1
                waiting = False
                for dep in node.operands:
                    if isinstance(dep, Expr) and dep._name not in position:
                        stack.append(dep)
                        waiting = True
                if waiting:
                    continue
            elif at >= 0:  # (placed already: it was on the stack twice)
                stack.pop()
                continue
            stack.pop()
            position[name] = len(order)
            order.append(node)
            # (its dependencies were placed just now, mostly: their entries are still in the caches)
            inputs.append([position[d._name] for d in node.operands if isinstance(d, Expr)])
        self.order, self.inputs = order, inputs
        self.__dict__["position"] = position  # (the cached property's value)

    @cached
    def readers(self) -> list[list[int]]:
        """Per node, by position, the positions of the nodes that read it (in topological order, once per
        operand)."""
        readers: list[list[int]] = [[] for _ in self.order]
        for i, deps in enumerate(self.inputs):
            for j in deps:
                readers[j].append(i)
        return readers

    @cached
    def consumers(self) -> dict[str, list[Expr]]:
        """Per node name, the nodes that read it (in topological order, once per operand)."""
        consumers: dict[str, list[Expr]] = defaultdict(list)
        order = self.order
        for node, deps in zip(order, self.inputs):
            for j in deps:
                consumers[order[j]._name].append(node)
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
    """Disjoint groups of node names (or of other keys: positions), with each group's members."""

    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}
        self.members: dict[Hashable, list[Hashable]] = {}

    def find(self, name: Hashable) -> Hashable:
        """The representative of ``name``'s group (a group of its own the first time it is seen)."""
        parent = self.parent
        up = parent.get(name)
        if up is None:
            parent[name] = name
            self.members[name] = [name]
            return name
        if up == name or parent[up] == up:  # a representative, or right below one (most names)
            return up
        while up != name:
            parent[name] = parent[up]
            name = parent[name]
            up = parent[name]
        return name

    def join(self, name: Hashable, group: Hashable) -> None:
        """Put ``name``, not seen before, in the group whose representative is ``group``."""
        self.parent[name] = group
        self.members[group].append(name)

    def union(self, a: Hashable, b: Hashable) -> Hashable:
        """Merge the groups of ``a`` and ``b``; returns the merged group's representative."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if len(self.members[ra]) > len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[ra] = rb
        self.members[rb] += self.members.pop(ra)
        return rb


def rebuild(root: Expr, replaced: Mapping[str, Expr]) -> Expr:
    """``root`` with every node named in ``replaced`` swapped for its replacement (whose own inputs are
    rebuilt too) and every node above one rebuilt; ``Materialized`` subtrees are left as they are."""
    return rebuild_all([root], replaced)[0]


def rebuild_all(roots: Sequence[Expr], replaced: Mapping[str, Expr]) -> list[Expr]:
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


class Made(Protocol):
    """Replacements of some nodes of a DAG, made on what they read as rebuilt (``rebuild_made``)."""

    inputs: Sequence[int]  # the positions in the DAG's order of the nodes they read
    replaces: Sequence[int]  # those of the nodes they replace

    def make(self, inputs: list[Expr]) -> list[Expr]:
        """The replacements, in the order of ``replaces``, on ``inputs`` as rebuilt."""


def rebuild_made(dag: DAG, made: Mapping[int, Made]) -> Expr:
    """The DAG's root with the nodes that ``made`` replaces (by position, each ``Made`` under every position it
    replaces) swapped for its replacements, made once what they read is rebuilt, and every node above one
    rebuilt (``rebuild``'s, by position: on 100,000s of nodes, lookups by name miss the caches)."""
    order, inputs = dag.order, dag.inputs
    memo: list = [None] * len(order)  # per node, what it becomes (_WAITING: for what it reads)
    same_name: set[str] = set()  # (as in ``rebuild_all``)
    stack = [len(order) - 1]
    while stack:
        i = stack[-1]
        done = memo[i]
        if done is not None and done is not _WAITING:
            stack.pop()
            continue
        maker = made.get(i)
        deps = inputs[i] if maker is None else maker.inputs
        if done is None:  # (seen again, it finds what it reads made: the stack held it above)
            missing = [j for j in deps if memo[j] is None]
            if missing:
                memo[i] = _WAITING
                stack += missing
                continue
        stack.pop()
        if maker is not None:
            for j, new in zip(maker.replaces, maker.make([memo[j] for j in deps])):
                memo[j] = new
            continue
        node = order[i]
        changed = renamed = False  # renamed: an operand rebuilt under another name
        for j in deps:
            new, old = memo[j], order[j]
            if new is not old:
                changed = True
                renamed = renamed or new._name != old._name or old._name not in same_name
        if not changed:
            memo[i] = node
            continue
        at = iter(deps)  # (the expressions among the operands, in order)
        ops = [memo[next(at)] if isinstance(o, Expr) else o for o in node.operands]
        memo[i] = _on_operands(node, ops, renamed, same_name)
    return memo[-1]


_WAITING = object()  # (``rebuild_made``: a node whose dependencies are being made)


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
        if type(node) is Elemwise and not ops[_KWARGS] and ops[_DTYPE] is node.dtype:
            # the constructor of the operations users write (its name made in one pass, as tokenizing makes it)
            return Elemwise.of_aligned(ops[_OP], ops[_DTYPE], ops[_ARGS:], node.chunks)
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
    order, inputs, position = dag.order, dag.inputs, dag.position
    new: dict[str, Expr] = {}  # the nodes rebuilt or replaced, by their old name
    changed: set[int] = set()  # the same, by their old position
    moved = list(range(len(order)))  # per old position, the new one of the node or of what replaces it
    shifted = False  # whether any node moved yet
    same_name: set[str] = set()
    new_order: list[Expr] = []
    new_inputs: list[list[int]] = []
    placed: dict[str, tuple[Expr, int]] = {}  # the new nodes placed, with their new position, by their name as made
    now = 0  # the old position being replaced (the nodes before it are placed already)

    def place(x: Expr) -> tuple[Expr, int] | None:
        """``x``, a new node, placed in the order (with the new nodes below it first), on the rebuilt or
        replaced versions of the old nodes it reads (earlier in the order); with its new position; None where
        it, or a node it becomes, is a node of ``root`` (whose place may come later)."""
        done = placed.get(x._name)
        if done is not None:
            return done
        if x._name in position:
            return None
        ops: list = []
        at: list[int] = []  # the new positions of the expressions among them
        differs = renamed = False
        for o in x.operands:
            if isinstance(o, Expr):
                j = position.get(o._name)
                if j is not None:
                    if j >= now:  # a node of root not placed yet (later in the order): walk anew
                        return None
                    at.append(moved[j])
                    r = o if isinstance(o, Materialized) else new.get(o._name, o)
                elif isinstance(o, Materialized):
                    return None
                else:
                    made = place(o)
                    if made is None:
                        return None
                    r = made[0]
                    at.append(made[1])
                if r is not o:
                    differs = True
                    renamed = renamed or r._name != o._name or o._name not in same_name
                    o = r
            ops.append(o)
        node = _on_operands(x, ops, renamed, same_name) if differs else x
        if node._name in position:
            return None
        if node._name in placed:
            return placed[node._name]
        done = placed[x._name] = placed[node._name] = (node, len(new_order))
        new_order.append(node)
        new_inputs.append(at)
        return done

    try:
        replaced_at = {position[name] for name in replaced if name in position}  # (no node's name read to test it)
        for i, node in enumerate(order):
            if i in replaced_at:
                name = node._name
                x = replaced[name]
                if len(inputs[i]) == 1 and any(o is x for o in node.operands):  # an identity: its one operand
                    new[name] = new.get(x._name, x)
                    moved[i] = moved[inputs[i][0]]
                else:
                    now = i
                    made = place(x)
                    if made is None:
                        return rebuild(root, replaced)
                    new[name], moved[i] = made
                changed.add(i)
                shifted = True
                continue
            if changed and not changed.isdisjoint(inputs[i]):
                name = node._name
                ops = [new.get(o._name, o) if isinstance(o, Expr) and not isinstance(o, Materialized) else o
                       for o in node.operands]
                renamed = any(a is not b and (a._name != b._name or b._name not in same_name)
                              for a, b in zip(ops, node.operands))
                node = new[name] = _on_operands(node, ops, renamed, same_name)
                if node._name in position or node._name in placed:  # the same as a node there: walk anew
                    return rebuild(root, replaced)
                changed.add(i)
            if shifted:
                moved[i] = len(new_order)
                new_inputs.append([moved[j] for j in inputs[i]])
            else:  # (every node so far in its place)
                new_inputs.append(inputs[i])
            new_order.append(node)
        out = new_order[-1]
        shared = _SHARED.get()
        if shared is not None:
            derived = object.__new__(DAG)
            derived.order, derived.inputs = new_order, new_inputs
            shared[out._name] = derived
        return out
    finally:
        del place  # (it calls itself: a reference cycle that would keep the new DAG until a collection)


_OP, _DTYPE, _KWARGS = (Elemwise._parameters.index(p) for p in ("op", "dtype", "kwargs"))
_ARGS = len(Elemwise._parameters)

# node types whose token is the text of their operands, expressions by name (``ArrayExpr.__dask_tokenize__``)
_NAMED_BY_OPERANDS = frozenset({Elemwise, FusedOutput, Reduction})


def _same_blocks(a: Expr, b: Expr) -> bool:
    """Whether two expressions have the same chunks, dtype and backend (what a node's own depend on)."""
    return (isinstance(a, ArrayExpr) and isinstance(b, ArrayExpr) and a.chunks == b.chunks and a.dtype == b.dtype
            and a.backend == b.backend)
