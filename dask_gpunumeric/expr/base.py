"""The base of array expressions: small immutable nodes on ``dask.Expr``, each lowered to one Dask task per
output block; and the roots Dask meets (``Materialized``, ``Bundle``/``JointOutput``, ``Finalize``).

Every node knows its ``chunks``, ``dtype`` and ``backend`` ("numpy" or "cupy") without computing anything.
Its ``_layer()`` gives the tasks of its blocks, keyed ``(name, i, j, ...)`` with ``name`` = "<op-words>-<token>",
so that the Dask dashboard groups tasks by operation.

Dask drives expressions through ``optimize()`` (simplify, then lower). The top-most node of ours in a tree
lowers to a ``Materialized`` node that hides the subtree from Dask and, when Dask asks for the graph (on the
client for the local scheduler, on the scheduler for a distributed cluster), has the runtime's compile step
produce the tasks of the whole subtree with the root's keys unchanged (persist rebuilds collections from them).
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import dask
import numpy as np
from dask._expr import Expr, HLGExpr, HLGFinalizeCompute, _ExprSequence, _unpack_collections
from dask._task_spec import GraphNode, List, Task, TaskRef

from ..kernels import blocks as _blocks
from ..backend import empty_meta
from .tokens import _OWN_OPERANDS, _TEXT, TOKENS, _plain_repr, cached, kept_token, text_token

Chunks = tuple[tuple[int, ...], ...]
Index = tuple[int, ...]


@functools.cache  # (an import statement costs microseconds, on every compute)
def _runtime() -> ModuleType:
    """The runtime's compile step (optimize, lower, cache, placement), which the Dask hooks of the nodes run:
    the one import up the layers (DESIGN.md)."""
    from ..runtime import compile as runtime_compile

    return runtime_compile


class TracedValueError(TypeError):
    """The value of an array made from an argument of a function while it is traced (``gnp.accelerate``, a
    loop's body), when no value exists yet."""


class ArrayExpr(Expr):
    """Base of all array expressions: shape, chunks, dtype and backend, and one task per block."""

    # False on a traced function's argument (``Placeholder``): a tree over one cannot be computed
    has_value = True
    # True on an elementwise node or a view (``on_source``) whose token text was never met before (a time-stepping
    # loop's new nodes, a first call's): its builders keep nothing for the nodes made on it (``api.elementwise._short_path``)
    _fresh = False

    def __new__(cls, *args: Any, _determ_token: str | None = None, **kwargs: Any) -> ArrayExpr:
        # dask's Expr.__new__, without its per-operand search for collections to unpack (an import and
        # an attribute lookup each): our operands are expressions and plain values, and this runs on
        # every operation a user writes
        operands = [o if isinstance(o, _OWN_OPERANDS) else _unpack_collections(o) for o in args]
        for parameter in cls._parameters[len(operands):]:
            value = kwargs.pop(parameter) if parameter in kwargs else cls._defaults[parameter]
            operands.append(value if isinstance(value, _OWN_OPERANDS) else _unpack_collections(value))
        if kwargs:
            raise TypeError(f"{cls.__name__} got unexpected arguments {sorted(kwargs)}")
        inst = object.__new__(cls)
        inst.__dict__.update(_determ_token=_determ_token, operands=operands)
        inst._name  # noqa: B018 - computed once here, as dask does
        # metadata too, while the operands' is known: computed lazily, a chain thousands of operations
        # deep (a Python time-stepping loop) would recurse through every node on first access
        inst.chunks, inst.dtype, inst.backend, inst._leaves  # noqa: B018
        return inst

    @classmethod
    def with_metadata(cls, operands: list[Any], chunks: Chunks, dtype: np.dtype, backend: str,
                      funcname: str | None = None) -> ArrayExpr | None:
        """The node ``cls(*operands)`` makes, name included, given its chunks, dtype and backend, without the
        constructor's generic steps (for the operations users write most; node types named as ``_name``
        names them); None where an operand is no plain value or expression (the constructor's case).
        ``funcname``: the node's ``_funcname`` where the caller knows it."""
        parts = [_TEXT.get(type(o), _plain_repr)(o) for o in operands]  # as __dask_tokenize__ makes them
        if None in parts:
            return None
        key = (cls.__qualname__, *parts)  # (its first part no ``of_aligned`` head, which goes on to "|list(")
        token = TOKENS.get(key) or kept_token(key, f"{cls.__qualname__}|list({','.join(parts)})")
        inst = object.__new__(cls)
        values = inst.__dict__  # (set one by one: faster than update(**) here)
        values["_determ_token"] = token
        values["operands"] = operands
        values["chunks"] = chunks
        values["dtype"] = dtype
        values["backend"] = backend
        values["_leaves"] = _leaves_of(operands)
        values["_name"] = f"{inst._funcname if funcname is None else funcname}-{token}"
        return inst

    @classmethod
    def on_source(cls, operands: list[Any], source: ArrayExpr, texts: tuple[str, str, str | None], chunks: Chunks,
                  dtype: np.dtype) -> ArrayExpr:
        """The node ``cls(*operands)`` of one input ``source`` (an operand) and plain values, made in one pass:
        ``texts`` are its token text before and after ``source``'s name and its ``_funcname`` (None: its class's), as
        ``source_texts`` wrote them for a node of the same plain operands; its backend and inputs are
        ``source``'s (slices, rolls and reductions that users write in loops)."""
        before, after, funcname = texts
        parts = (before, source._name, after, None)  # (None: no ``Elemwise.of_aligned`` parts, all strings)
        token = TOKENS.get(parts)
        inst = object.__new__(cls)
        values = inst.__dict__  # (set one by one: faster than update(**) here)
        if token is None:  # (a view of a loop's new step, as ``Elemwise.of_aligned``'s new nodes)
            token = kept_token(parts, f"{before}{parts[1]}{after}")
            values["_fresh"] = True
        values["_determ_token"] = token
        values["operands"] = operands
        values["chunks"] = chunks
        values["dtype"] = dtype
        values["backend"] = source.backend
        values["_leaves"] = source._leaves
        values["_name"] = f"{funcname or inst._funcname}-{token}"
        return inst

    def source_texts(self, position: int) -> tuple[str, str, str] | None:
        """For ``on_source`` (nodes of the same operands but ``source``, at ``position``): this node's token text
        before and after that operand, and its ``_funcname``; None where another operand is no plain value."""
        operands = self.operands
        around = texts_around(type(self), tuple(operands[:position]), tuple(operands[position + 1:]))
        return None if around is None else (*around, self._name[: -len(self.deterministic_token) - 1])

    @classmethod
    def on_first(cls, first: ArrayExpr, rest: list, chunks: Chunks, dtype: np.dtype,
                 funcname: str | None = None) -> ArrayExpr:
        """``cls(first, *rest)`` (``rest`` plain values) given its chunks, dtype and the words of its name (None: its
        class's), in one pass (``on_source``; the nodes the fusion pass makes per kernel, mostly of the same ``rest``:
        its texts are kept by the identity of its values)."""
        key = (cls, *map(id, rest))
        known = _AROUND.get(key)
        if known is None:
            around = texts_around(cls, (), tuple(rest))
            if around is None:
                return cls(first, *rest)
            if len(_AROUND) >= _AROUND_SIZE:
                _AROUND.clear()
            known = _AROUND[key] = (*around, tuple(rest))  # (the values kept: their ids stay theirs)
        return cls.on_source([first, *rest], first, (known[0], known[1], funcname), chunks, dtype)

    @classmethod
    def made(cls, operands: list[Any], chunks: Chunks, dtype: np.dtype, backend: str) -> ArrayExpr:
        """``cls(*operands)`` (all operands, defaults included) given its chunks, dtype and backend: made by
        ``with_metadata`` where it can, else by the constructor."""
        inst = cls.with_metadata(operands, chunks, dtype, backend)
        return cls(*operands) if inst is None else inst

    def with_operands(self, operands: list[Any], keep_name: bool = False) -> ArrayExpr:
        """This node on other operands of the same chunks, dtypes and backends (a pass's rewrite of what it
        reads): its own chunks, dtype and backend kept rather than computed again; with ``keep_name``, its
        name too (operands of the same names, or a token that does not depend on them)."""
        inst = object.__new__(type(self))
        inst.__dict__.update(_determ_token=self.deterministic_token if keep_name else None, operands=operands,
                             chunks=self.chunks, dtype=self.dtype, backend=self.backend, _leaves=_leaves_of(operands))
        if keep_name:
            inst.__dict__["_name"] = self._name
        else:
            inst._name  # noqa: B018 - computed once here, as __new__ does
        return inst

    @cached
    def _funcname(self) -> str:
        return type(self).__name__.lower()

    @cached
    def _leaves(self) -> dict[str, ArrayExpr] | None:
        """The tree's inputs (``FromGraph``, ``FromArray`` nodes) by name, carried from node to node as they are
        made, so that the graph cache finds a tree's inputs without walking it; None where a node reads an
        expression not ours."""
        return _leaves_of(self.operands)

    @cached
    def _name(self) -> str:
        return f"{self._funcname}-{self.deterministic_token}"

    @property
    def deterministic_token(self) -> str:
        # dask's, keeping the token without going through Expr.__setattr__ (Python code, on every node)
        token = self._determ_token
        if not token:
            token = self.__dask_tokenize__()
            object.__setattr__(self, "_determ_token", token)
        return token

    def __dask_tokenize__(self) -> str:
        # Expressions are made on every operation: hash the operands' exact text where they are plain
        # values and sub-expressions (their names), and use Dask's tokenize only for anything else.
        if not self._determ_token:
            # _plain_repr(self.operands), a call less per operand of a type met before
            parts = [_TEXT.get(type(o), _plain_repr)(o) for o in self.operands]
            if None in parts:
                return super().__dask_tokenize__()
            text = f"{type(self).__qualname__}|list({','.join(parts)})"
            object.__setattr__(self, "_determ_token", text_token(text))
        return self._determ_token

    def __reduce__(self) -> tuple:
        # dask pickles a node as its operands, each pickled in turn: a recursion as deep as the expression.
        # Pickle the whole DAG as one flat list in topological order instead (operands naming earlier entries).
        if dask.config.get("dask-expr-no-serialize", False):
            raise RuntimeError(f"Serializing a {type(self)} object")
        return _unflatten, (_flatten(self),)

    def dependencies(self) -> list[Expr]:
        # Dask's walks (its simplify collects every node's dependents on each compute) have nothing to do
        # below our nodes, whose top-most lowers to a Materialized of its whole tree: they meet the tree
        # below as one node (``_Below``). Our own walks follow ``inputs``.
        for o in self.operands:
            if isinstance(o, Expr):
                return [_Below.of(self)]
        return []

    @property
    def args(self) -> list[Any]:
        """The operands after the named parameters: the node's inputs, as many as it has."""
        return self.operands[len(self._parameters) :]

    def _operands_for_repr(self) -> list[str]:
        return [f"shape={self.shape}", f"dtype={self.dtype}", f"chunks={self.chunksize}"]

    # --- metadata -------------------------------------------------------------------------------------
    # An operand (or property) whose chunks, dtype and backend a node keeps where it has no such
    # parameter of its own.
    _like: str | None = None

    def _meta_attr(self, name: str) -> Any:
        parameters = self._parameters
        if name in parameters:
            return self.operands[parameters.index(name)]
        like = self._like
        if like is None:
            raise NotImplementedError(f"{type(self).__name__} must define {name}")
        # an operand by position (getattr would go through Expr.__getattr__'s search), else a property
        source = self.operands[parameters.index(like)] if like in parameters else getattr(self, like)
        return getattr(source, name)

    @cached
    def chunks(self) -> Chunks:
        return self._meta_attr("chunks")

    @cached
    def dtype(self) -> np.dtype:
        dtype = self._meta_attr("dtype")
        return dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)

    @cached
    def backend(self) -> str:
        return self._meta_attr("backend")

    @cached
    def shape(self) -> tuple[int, ...]:
        return tuple(map(sum, self.chunks))

    @cached
    def ndim(self) -> int:
        return len(self.chunks)

    @cached
    def numblocks(self) -> tuple[int, ...]:
        return tuple(map(len, self.chunks))

    @property
    def chunksize(self) -> tuple[int, ...]:
        return tuple(max(c, default=0) for c in self.chunks)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def _meta(self) -> Any:
        return empty_meta(self.dtype, self.ndim, self.backend)

    # --- keys and tasks -------------------------------------------------------------------------------
    def key(self, index: Index) -> tuple:
        """The Dask key of one block."""
        return (self._name, *index)

    def ref(self, index: Index) -> TaskRef:
        """A reference to one block, for use as a task argument."""
        return TaskRef(self.key(index))

    def block_indices(self) -> Iterator[Index]:
        """All block indices in C order."""
        return itertools.product(*(range(n) for n in self.numblocks))

    def operand_block(self, operand: ArrayExpr, index: Index) -> Index:
        """The block of a broadcasting operand (aligned on trailing axes) that output block ``index`` reads:
        the same position along shared axes, block 0 along axes where the operand has one block."""
        lead = self.ndim - operand.ndim
        return tuple(0 if operand.numblocks[d] == 1 else index[lead + d] for d in range(operand.ndim))

    def block_shape(self, index: Index) -> tuple[int, ...]:
        return tuple(c[i] for c, i in zip(self.chunks, index))

    def block_offset(self, index: Index) -> tuple[int, ...]:
        return tuple(starts[i] for starts, i in zip(self._chunk_starts, index))

    @cached
    def _chunk_starts(self) -> tuple[tuple[int, ...], ...]:
        """Per axis, the start of each chunk (summing chunks for each block would take quadratic time)."""
        return tuple(tuple(itertools.accumulate(c, initial=0)) for c in self.chunks)

    def __dask_keys__(self) -> list:
        if self.ndim == 0:
            return [self.key(())]
        return self._nested_keys(())

    def _nested_keys(self, prefix: Index) -> list | tuple:
        # a method, not a closure that calls itself: that closure and its cell would form a reference cycle
        # holding this node, so every tree computed would wait for the cyclic garbage collector
        depth = len(prefix)
        if depth == self.ndim:
            return self.key(prefix)
        return [self._nested_keys((*prefix, i)) for i in range(self.numblocks[depth])]

    def _layer(self) -> dict:
        return {self.key(i): self._block_task(i) for i in self.block_indices()}

    def _block_task(self, index: Index) -> GraphNode:
        raise NotImplementedError

    # --- hooks into Dask's optimizer ------------------------------------------------------------------
    def _lower(self) -> Expr | None:
        return Materialized.of(self, _runtime().placement_workers())

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        """(key, block index, block grid) of this node's per-block tasks, for placement on owner workers."""
        for index in self.block_indices():
            yield self.key(index), index, self.numblocks

    def _task_annotations(self) -> dict[str, dict]:
        """Other annotations of this node's tasks on a cluster, by kind and key (e.g. ``retries``)."""
        return {}

    def _simplify_up(self, parent: Expr, dependents: Any) -> Expr | None:
        # dask.compute(a, b) / dask.persist(a, b): optimize our arrays together (one fused kernel can
        # serve several outputs), keeping each output's keys. Our arrays alone on the local scheduler: one node
        # (``Outputs``); among other collections or on a cluster: each output a ``JointOutput`` of the joint
        # node, one array lowered here already, so that lowering leaves the sequence as it is (Dask would make
        # it again, tokenize and all)
        if type(parent) is not _ExprSequence:
            return None
        ours = [op for op in parent.operands if isinstance(op, ArrayExpr)]
        if not ours or any(isinstance(op, (JointOutput, Materialized)) for op in ours):
            return None
        if any(isinstance(op, (HLGExpr, HLGFinalizeCompute, dict)) for op in parent.operands):
            return _among_graphs(parent, ours)
        workers = _runtime().placement_workers()
        if not workers and len(ours) == len(parent.operands):
            return Outputs.of(ours)
        if len(ours) == 1:
            lowered = Materialized.of(ours[0], workers)
            operands = [lowered if op is ours[0] else op for op in parent.operands]
        else:
            joint = Materialized.of(Bundle.of(*ours), workers)
            k = iter(range(len(ours)))
            operands = [JointOutput.of(joint, next(k)) if isinstance(op, ArrayExpr) else op for op in parent.operands]
        # named from its operands' names where they are all ours (not by Dask's tokenize, which pickles the
        # sequence's class on every compute)
        token = None
        if all(isinstance(op, ArrayExpr) for op in operands):
            text = f"{type(parent).__qualname__}|" + ",".join(op.deterministic_token for op in operands)
            token = text_token(text)
        return type(parent)(*operands, _determ_token=token)

    def finalize_compute(self) -> Expr:
        return self if set(self.numblocks) <= {1} else Finalize(self)

    # Dask's own passes (simplify, the "tune" rewrite) have nothing to do on our nodes, whose optimizer runs
    # when the graph is made: stop them at our top-most node instead of visiting the whole tree on every
    # compute (a parent of Dask's still asks our nodes' ``_simplify_up``)
    def simplify_once(self, dependents: Any, simplified: dict) -> Expr:
        return self

    def simplify(self) -> Expr:
        return self

    def rewrite(self, kind: str, rewritten: dict) -> Expr:
        return self


def _among_graphs(parent: _ExprSequence, ours: list[ArrayExpr]) -> _ExprSequence:
    """``parent`` among graph-backed collections (dask.array's, delayed): Dask makes each expression there a graph
    whose keys are its graph's leaves (a joint output's graph holds the other outputs too). Ours become graphs that
    name their keys, all on one joint graph; each with an optimizer of its own that leaves the graph as it is (ours
    ran): Dask groups operands of one optimizer together, out of their order."""
    from dask.highlevelgraph import HighLevelGraph

    joint = Materialized.of(ours[0] if len(ours) == 1 else Bundle.of(*ours), _runtime().placement_workers())
    graph = HighLevelGraph.from_collections(joint._name, joint.__dask_graph__(), dependencies=())
    return type(parent)(*(HLGExpr(graph, _AsIs(), op.__dask_keys__()) if isinstance(op, ArrayExpr) else op
                          for op in parent.operands))


class _AsIs:
    """A graph optimizer that leaves the graph as it is (one object per operand: Dask groups by optimizer)."""

    def __call__(self, dsk: Any, keys: Any) -> Any:
        return dsk


class Materialized(ArrayExpr):
    """A whole expression tree as one node, whose graph is the tree's tasks with the root's keys."""

    _parameters = ["wrapped", "workers"]
    _defaults = {"workers": ()}
    _like = "root"
    _pickle_functools_cache = False  # the graph is made where it is needed (the scheduler), not shipped

    @classmethod
    def of(cls, root: ArrayExpr, workers: tuple[str, ...] = ()) -> Materialized:
        """``Materialized((root,), workers)``, made without the constructor's generic steps (on every compute)."""
        return cls.made([(root,), workers], root.chunks, root.dtype, root.backend)

    @property
    def root(self) -> ArrayExpr:
        return self.operands[0][0]

    def __dask_keys__(self) -> list:
        return self.root.__dask_keys__()

    def _lower(self) -> None:
        return None

    def _layer(self) -> dict:
        return self._graph

    @cached
    def _compiled(self) -> Any:
        """The tree's optimized graph and schedule (``runtime.compile.CompiledGraph``), from the graph cache when
        the same tree was built before."""
        return _runtime().compile_tree(self)

    @cached
    def _graph(self) -> dict:
        """The graph; on a cluster with the linear chains of its tasks fused (``runtime.compile.cluster_graph``)."""
        return _runtime().cluster_graph(self)

    def schedule(self) -> list[tuple[Any, tuple]]:
        """The graph's keys in ``dask.order``'s order, each with the keys that no later task needs (to free
        after it): how a run in one thread goes (``run_in_order``); kept with a cached graph."""
        return self._compiled.schedule()

    @cached
    def _optimized(self) -> ArrayExpr:
        return _runtime().optimize(self.root)

    def __dask_annotations__(self) -> dict[str, dict]:
        """Owner-computes placement on a cluster (``runtime.compile.placement``)."""
        return self._placement if self.operand("workers") else {}

    @cached
    def _placement(self) -> dict[str, dict]:
        return _runtime().placement(self)  # (asked for once per output of a joint node)


def flat_keys(expr: ArrayExpr) -> list:
    """The block keys of an expression, flat, in C order."""
    if type(expr).__dask_keys__ is ArrayExpr.__dask_keys__:  # (its blocks' keys: no nested lists made first)
        name = expr._name
        return [(name, *index) for index in itertools.product(*map(range, expr.numblocks))]
    keys = expr.__dask_keys__()
    out: list = []
    stack = [keys]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


_NO_LEAVES: dict[str, ArrayExpr] = {}


# ``on_first``'s token texts, by its node type and the ids of its plain values (kept with them)
_AROUND: dict[tuple, tuple[str, str, tuple]] = {}
_AROUND_SIZE = 256


def texts_around(cls: type, before: tuple, after: tuple) -> tuple[str, str] | None:
    """The token text of a ``cls`` node before and after its one expression operand, whose other operands are the
    plain values ``before`` and ``after`` it (``ArrayExpr.on_source``); None where one is no plain value."""
    head, tail = operand_texts(before), operand_texts(after)
    if head is None or tail is None:
        return None
    return f"{cls.__qualname__}|list({head}{',' if head else ''}", f"{',' if tail else ''}{tail})"


def operand_texts(operands: tuple) -> str | None:
    """The text that ``__dask_tokenize__`` writes of these operands (plain values), joined; None for others."""
    parts = [_plain_repr(o) for o in operands]
    return None if None in parts or any(isinstance(o, Expr) for o in operands) else ",".join(parts)


def _leaves_of(operands: list[Any]) -> dict[str, ArrayExpr] | None:
    """The inputs under a node of these operands (``ArrayExpr._leaves``): its operands' inputs, one dict
    shared where they are the same."""
    leaves = _NO_LEAVES
    for o in operands:
        if isinstance(o, Expr):
            more = o._leaves if isinstance(o, ArrayExpr) else None
            if more is not leaves:
                leaves = joined_leaves(leaves, more)
                if leaves is None:
                    return None
    return leaves


def joined_leaves(leaves: dict[str, ArrayExpr] | None,
                  more: dict[str, ArrayExpr] | None) -> dict[str, ArrayExpr] | None:
    """The inputs under two operands of these inputs (``_leaves_of``): one of the dicts where it holds the other's."""
    if leaves is None or more is None:
        return None
    if not more:
        return leaves
    return more if not leaves else leaves if more.keys() <= leaves.keys() else {**leaves, **more}


class _Entry:
    """An operand standing for entry ``index`` of a flattened expression (``_flatten``)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple:
        return _Entry, (self.index,)


def _flatten(root: ArrayExpr) -> list[tuple]:
    """The nodes under ``root`` (ours, outside tuples) in topological order, each as (type, operands with
    nodes replaced by ``_Entry``, token, cached values), ``root`` last."""
    entries: list[tuple] = []
    index: dict[str, int] = {}
    stack: list[tuple[ArrayExpr, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node._name in index:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((o, False) for o in node.operands if isinstance(o, ArrayExpr) and o._name not in index)
            continue
        values = node.__dict__
        cache = {k: values[k] for k in _pickled_cache_names(type(node)) if k in values}
        operands = [_Entry(index[o._name]) if isinstance(o, ArrayExpr) else o for o in node.operands]
        index[node._name] = len(entries)
        entries.append((type(node), operands, node.deterministic_token, cache))
    return entries


@functools.cache
def _pickled_cache_names(cls: type) -> tuple[str, ...]:
    """The cached properties of a node type that its pickle keeps, as dask's pickling keeps them (the class's
    own ``functools.cached_property`` values, unless ``_pickle_functools_cache`` is off): found once per type,
    not on every node of every call sent to a cluster."""
    if not cls._pickle_functools_cache:
        return ()
    return tuple(k for k, v in cls.__dict__.items() if isinstance(v, functools.cached_property))


def _unflatten(entries: list[tuple]) -> ArrayExpr:
    """The expression of ``_flatten``'s entries, built inputs first."""
    built: list[ArrayExpr] = []
    for cls, operands, token, cache in entries:
        node = cls(*[built[o.index] if isinstance(o, _Entry) else o for o in operands], _determ_token=token)
        node.__dict__.update(cache)
        built.append(node)
    return built[-1]


class _Below(Expr):
    """The nodes below one of ours, as one leaf of Dask's walks (``ArrayExpr.dependencies``); its layer is
    theirs, for a graph Dask makes of a tree it did not lower (``dask.optimize``)."""

    @classmethod
    def of(cls, node: ArrayExpr) -> _Below:
        # not through Expr.__new__ (its tokenizing): made on every compute, for the top-most nodes
        below = object.__new__(cls)
        below.__dict__.update(operands=[], _name=f"below-{node._name}", _node=node)
        return below

    def _layer(self) -> dict:
        top = self.__dict__["_node"]
        return {k: v for node in walk(top) if node is not top for k, v in node._layer().items()}


def inputs(node: Expr) -> list[Expr]:
    """The sub-expressions a node reads (its operands that are expressions): what our walks follow."""
    return [o for o in node.operands if isinstance(o, Expr)]


def walk(root: Expr) -> Iterator[Expr]:
    """Every node of an expression tree once."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        name = node._name
        if name not in seen:
            seen.add(name)
            yield node
            stack.extend(inputs(node))


class Bundle(ArrayExpr):
    """Several roots as one, so that the optimizer sees them together; it has no tasks of its own."""

    _parameters: list[str] = []
    chunks = ()
    dtype = np.dtype(bool)
    backend = "numpy"

    @classmethod
    def of(cls, *roots: ArrayExpr) -> Bundle:
        """``Bundle(*roots)``, made without the constructor's generic steps (on every joint compute or persist)."""
        return cls.made(list(roots), cls.chunks, cls.dtype, cls.backend)

    def _layer(self) -> dict:
        return {}


class JointOutput(ArrayExpr):
    """Root ``k`` of a jointly optimized ``Materialized(Bundle(...))``: the root's own keys, made there."""

    _parameters = ["joint", "k"]
    _like = "_root"

    @classmethod
    def of(cls, joint: Materialized, k: int) -> JointOutput:
        """``JointOutput(joint, k)``, made in one pass from its root's metadata, without the constructor's generic
        steps (on every joint compute or persist on a cluster)."""
        root = joint.root.operands[k]
        inst = object.__new__(cls)
        operands = [joint, k]
        inst.__dict__.update(_determ_token=None, operands=operands, _root=root, _name=root._name, chunks=root.chunks,
                             dtype=root.dtype, backend=root.backend, _leaves=_leaves_of(operands))
        return inst

    @property
    def joint(self) -> Materialized:
        """The joint node (an operand by position: Dask's lookup by name costs microseconds on every compute)."""
        return self.operands[0]

    @cached
    def _root(self) -> ArrayExpr:
        joint, k = self.operands
        return joint.root.operands[k]

    @cached
    def _name(self) -> str:
        return self._root._name

    def __dask_tokenize__(self) -> str:
        joint, k = self.operands
        return f"joint-{joint._name}-{k}"

    def __reduce__(self) -> tuple:
        # the joint node as an object of its own: pickle's memo then sends it once for all outputs (flattened
        # with each, the scheduler would unpickle and compile one copy of the tree per output)
        return JointOutput, tuple(self.operands)

    def __dask_keys__(self) -> list:
        return self._root.__dask_keys__()

    def dependencies(self) -> list[Expr]:
        return [self.operands[0]]

    def _layer(self) -> dict:
        return {}

    def _lower(self) -> None:
        return None

    def _simplify_up(self, parent: Expr, dependents: Any) -> None:
        return None

    def finalize_compute(self) -> Expr:
        return self

    def __dask_annotations__(self) -> dict[str, dict]:
        return self.joint.__dask_annotations__()


class Outputs(_ExprSequence):
    """The Arrays of one ``dask.compute``/``dask.persist`` that holds nothing else, on the local scheduler: their
    roots (its operands, which give its keys), as a single node that Dask's passes leave as it is (they would
    walk, compare and rebuild a sequence of lowered nodes) and that the local scheduler runs from the compiled
    graph of their tree (``compiled``; ``runtime.schedule``)."""

    @classmethod
    def of(cls, roots: list[ArrayExpr]) -> Outputs:
        """The outputs ``roots``, made without Dask's constructor (which tokenizes the class on every compute),
        named after their root (``root``)."""
        inst = object.__new__(cls)
        inst.__dict__["operands"] = list(roots)
        token = inst.root.deterministic_token
        inst.__dict__.update(_determ_token=token, _name=f"outputs-{token}")
        return inst

    @cached
    def root(self) -> ArrayExpr:
        """The one output, or a ``Bundle`` of all."""
        roots = self.operands
        return roots[0] if len(roots) == 1 else Bundle.of(*roots)

    @cached
    def compiled(self) -> Any:
        """The optimized graph of all outputs together (``runtime.compile.CompiledGraph``), from the graph cache
        without making their ``Materialized`` node when the same tree was built before."""
        return _runtime().compiled(self.root)

    def dependencies(self) -> list[Expr]:
        return []

    def _layer(self) -> dict:
        return dict(self.compiled.graph)  # (as a Materialized node's graph without workers: ``cluster_graph``)

    def __dask_annotations__(self) -> dict[str, dict]:
        return {}

    def finalize_compute(self) -> Outputs:
        return self

    def simplify_once(self, dependents: Any, simplified: dict) -> Outputs:
        return self

    def simplify(self) -> Outputs:
        return self

    def rewrite(self, kind: str, rewritten: dict) -> Outputs:
        return self

    def lower_once(self, lowered: dict) -> Outputs:
        return self

    def lower_completely(self) -> Outputs:
        return self


class Finalize(ArrayExpr):
    """All blocks concatenated into one array: what ``compute()`` returns."""

    _parameters = ["array"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return "finalize"

    @cached
    def chunks(self) -> Chunks:
        return tuple((s,) for s in self.array.shape)

    def __dask_keys__(self) -> list:
        return [self.key(())]

    def _layer(self) -> dict:
        a = self.array
        refs = List(*(a.ref(i) for i in a.block_indices()))
        return {self.key(()): Task(self.key(()), _blocks.concatenate_grid, refs, a.numblocks)}
