"""Array expressions: small immutable nodes on ``dask.Expr``, each lowered to one Dask task per output block.

Every node knows its ``chunks``, ``dtype`` and ``backend`` ("numpy" or "cupy") without computing anything.
Its ``_layer()`` gives the tasks of its blocks, keyed ``(name, i, j, ...)`` with ``name`` = "<op-words>-<token>",
so that the Dask dashboard groups tasks by operation. The primitives here are the whole vocabulary of the
library; the public API (``_array``, ``_creation``, ``_elementwise``, ...) only validates arguments and builds
them.

Dask drives expressions through ``optimize()`` (simplify, then lower). The top-most node of ours in a tree
lowers to a ``Materialized`` node that hides the subtree from Dask and, when Dask asks for the graph (on the
client for the local scheduler, on the scheduler for a distributed cluster), produces the tasks of the whole
subtree with the root's keys unchanged (persist rebuilds collections from those keys).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from dask._expr import Expr, _unpack_collections
from dask._task_spec import Alias, DataNode, GraphNode, List, Task, TaskRef, _is_dask_future

from .. import config
from ..kernels import blocks as _blocks
from . import plan as _plan
from ..kernels.backend import empty_meta
from ..runtime.cluster import active_workers, owner

Chunks = tuple[tuple[int, ...], ...]
Index = tuple[int, ...]


_PLAIN = (str, int, float, complex, bool, type(None), slice, np.dtype, np.generic)


# the types operands mostly are, the most met first (isinstance tries them in order; a bool is an int)
_OWN_OPERANDS = (Expr, str, np.dtype, dict, float, int, tuple, type(None), np.generic)


class cached:  # noqa: N801 - used like functools.cached_property
    """``functools.cached_property`` without its lock (Python 3.11 takes one on the first access of every
    value, and expressions are made on every operation a user writes; 3.12 dropped it): the value is
    computed once and kept in the instance's ``__dict__``, where later lookups find it first."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func
        self.attrname = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.attrname = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value


_INT = frozenset({int})

# texts of tuples of ints by identity, each kept with its tuple (so that the id is not reused): the chunks of
# new nodes are mostly the same objects (normalize_chunks' cache, a parent's chunks), and writing out the
# lengths of hundreds of blocks takes microseconds
_INT_TUPLE_TEXT: dict[int, tuple[tuple, str]] = {}
_INT_TUPLE_TEXT_SIZE = 256


def _sequence_text(value: tuple | list) -> str | None:
    if type(value) is tuple:
        known = _INT_TUPLE_TEXT.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if _INT.issuperset(map(type, value)):  # chunks and shapes: the common case
            if len(_INT_TUPLE_TEXT) >= _INT_TUPLE_TEXT_SIZE:
                _INT_TUPLE_TEXT.clear()
            text = f"tuple{value!r}"
            _INT_TUPLE_TEXT[id(value)] = (value, text)
            return text
    parts = [_TEXT.get(type(v), _plain_repr)(v) for v in value]  # _plain_repr, a call less per element
    return None if None in parts else f"{type(value).__name__}({','.join(parts)})"


def _dict_text(value: dict) -> str | None:
    if not value:
        return "dict()"
    parts = [(_plain_repr(k), _plain_repr(v)) for k, v in value.items()]
    return None if any(None in p for p in parts) else "dict(" + ",".join(f"{k}={v}" for k, v in parts) + ")"


@functools.lru_cache(maxsize=1024)
def _dtype_text(value: np.dtype) -> str:
    # .str names byte order, kind, size and datetime unit (not the fields of a structured dtype)
    return f"dtype:{value.str}" if value.names is None else f"{type(value).__name__}:{value!r}"


# exact type -> text form, for the types operands mostly are (others are added as they are met)
_TEXT: dict[type, Callable[[Any], str | None]] = {
    int: lambda v: f"int:{v!r}",
    str: lambda v: f"str:{v!r}",
    float: lambda v: f"float:{struct.pack('<d', v).hex()}",  # exact bits: repr() is "nan" for every NaN
    bool: lambda v: f"bool:{v!r}",
    type(None): lambda v: "NoneType:None",
    tuple: _sequence_text,
    list: _sequence_text,
    dict: _dict_text,
}


def _plain_repr(value: Any) -> str | None:
    """An exact text form of small plain values (what tokens are made of), or None for anything else."""
    text = _TEXT.get(type(value))
    if text is not None:
        return text(value)
    if isinstance(value, Expr):
        _TEXT[type(value)] = lambda v: v._name
        return value._name
    if isinstance(value, np.dtype):
        _TEXT[type(value)] = _dtype_text
        return _dtype_text(value)
    if isinstance(value, (float, complex, np.inexact)):
        return f"{type(value).__name__}:{np.asarray(value).tobytes().hex()}"
    if isinstance(value, _PLAIN):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list)):
        return _sequence_text(value)
    if isinstance(value, dict):
        return _dict_text(value)
    return None


class ArrayExpr(Expr):
    """Base of all array expressions: shape, chunks, dtype and backend, and one task per block."""

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
        return inst

    @cached
    def _funcname(self) -> str:
        return type(self).__name__.lower()

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
            object.__setattr__(self, "_determ_token", hashlib.sha1(text.encode()).hexdigest()[:32])
        return self._determ_token

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
        return np.dtype(self._meta_attr("dtype"))

    @cached
    def backend(self) -> str:
        return self._meta_attr("backend")

    @cached
    def shape(self) -> tuple[int, ...]:
        return tuple(map(sum, self.chunks))

    @property
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
        return tuple(sum(c[:i]) for c, i in zip(self.chunks, index))

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
        return Materialized((self,), tuple(active_workers()))

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        """(key, block index, block grid) of this node's per-block tasks, for placement on owner workers."""
        for index in self.block_indices():
            yield self.key(index), index, self.numblocks

    def _task_annotations(self) -> dict[str, dict]:
        """Other annotations of this node's tasks on a cluster, by kind and key (e.g. ``retries``)."""
        return {}

    def _simplify_up(self, parent: Expr, dependents: Any) -> Expr | None:
        # dask.compute(a, b) / dask.persist(a, b): optimize our arrays together (one fused kernel can
        # serve several outputs), keeping each output's keys.
        if type(parent).__name__ != "_ExprSequence":
            return None
        ours = [op for op in parent.operands if isinstance(op, ArrayExpr)]
        if len(ours) < 2 or any(isinstance(op, JointOutput) for op in ours):
            return None
        joint = Materialized((Bundle(*ours),), tuple(active_workers()))
        k = iter(range(len(ours)))
        return type(parent)(*[JointOutput(joint, next(k)) if isinstance(op, ArrayExpr) else op
                              for op in parent.operands])

    def finalize_compute(self) -> Expr:
        return self if set(self.numblocks) <= {1} else Finalize(self)


class Materialized(ArrayExpr):
    """A whole expression tree as one node, whose graph is the tree's tasks with the root's keys."""

    _parameters = ["wrapped", "workers"]
    _defaults = {"workers": ()}
    _like = "root"
    _pickle_functools_cache = False  # the graph is made where it is needed (the scheduler), not shipped

    @property
    def root(self) -> ArrayExpr:
        return self.operand("wrapped")[0]

    def __dask_keys__(self) -> list:
        return self.root.__dask_keys__()

    def _lower(self) -> None:
        return None

    def _layer(self) -> dict:
        return self._graph

    @cached
    def _compiled(self) -> CompiledGraph:
        # rebuilding the same expression, as a loop or a benchmark does, skips optimizing and lowering
        cacheable = _cache_key(self.root)
        hit = _cached_graph(cacheable)
        if hit is not None:
            return hit
        graph, outputs = self._optimized_graph(), flat_keys(self.root)
        # (a loop persisting each step would fill the cache with trees that never come back)
        if cacheable is None or (cacheable[1] and not _seen_before(cacheable[0])):
            return CompiledGraph(graph, outputs)
        key, persisted = cacheable
        inputs = _input_layers(persisted)
        cached = CompiledGraph({k: v for k, v in graph.items() if k not in inputs}, outputs)
        _remember(_GRAPH_CACHE, key, cached)
        return CompiledGraph(graph, outputs, cached) if inputs else cached

    @cached
    def _graph(self) -> dict:
        """The graph; on a cluster with the linear chains of its tasks fused (``fuse_chains``: a task costs
        milliseconds there), but for the blocks of arrays of several (each on its owner, named as its
        operation), outputs and tasks with annotations of their own (a region's)."""
        graph = dict(self._compiled.graph)
        if not self.operand("workers"):
            return graph
        roots = self.root.operands if isinstance(self.root, Bundle) else [self.root]
        frozen = set()
        for node in _walk(self._optimized):
            frozen.update(key for key, _, numblocks in node._owned_blocks() if math.prod(numblocks) > 1)
            frozen.update(key for values in node._task_annotations().values() for key in values)
        return fuse_chains(graph, {k for root in roots for k in flat_keys(root)}, frozen)

    def schedule(self) -> list[tuple[Any, tuple]]:
        """The graph's keys in ``dask.order``'s order, each with the keys that no later task needs (to free
        after it): how a run in one thread goes (``run_in_order``); kept with a cached graph."""
        return self._compiled.schedule()

    @cached
    def _optimized(self) -> ArrayExpr:
        from ..optimize import optimize

        return optimize(self.root)

    def __dask_annotations__(self) -> dict[str, dict]:
        """Owner-computes placement on a cluster: each block task on the worker owning that block position
        (``_cluster.owner``), so chains of per-block work move no data; other workers may still run it
        if the owner is gone."""
        workers = self.operand("workers")
        if not workers:
            return {}
        graph = self._graph
        placement = {}
        annotations: dict[str, dict] = {}
        for node in _walk(self._optimized):
            for key, index, numblocks in node._owned_blocks():
                if key in graph:
                    placement[key] = [workers[owner(index, numblocks, len(workers))]]
            for kind, values in node._task_annotations().items():
                annotations.setdefault(kind, {}).update(values)
        return {"workers": placement, "allow_other_workers": dict.fromkeys(placement, True), **annotations}

    def _optimized_graph(self) -> dict:
        root = self.root
        optimized = self._optimized
        graph = graph_of(optimized)
        pairs = zip(root.operands, optimized.operands) if isinstance(root, Bundle) else [(root, optimized)]
        for before, after in pairs:
            if after._name != before._name:  # keep the roots' keys: persist rebuilds from them
                for old, new in zip(flat_keys(before), flat_keys(after)):
                    graph[old] = Alias(old, new)
        return graph


def flat_keys(expr: ArrayExpr) -> list:
    """The block keys of an expression, flat, in C order."""
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


class Bundle(ArrayExpr):
    """Several roots as one, so that the optimizer sees them together; it has no tasks of its own."""

    _parameters: list[str] = []
    chunks = ()
    dtype = np.dtype(bool)
    backend = "numpy"

    def _layer(self) -> dict:
        return {}


class JointOutput(ArrayExpr):
    """Root ``k`` of a jointly optimized ``Materialized(Bundle(...))``: the root's own keys, made there."""

    _parameters = ["joint", "k"]
    _like = "_root"

    @property
    def _root(self) -> ArrayExpr:
        return self.joint.root.operands[self.operand("k")]

    @cached
    def _name(self) -> str:
        return self._root._name

    def __dask_tokenize__(self) -> str:
        return f"joint-{self.joint._name}-{self.operand('k')}"

    def __dask_keys__(self) -> list:
        return self._root.__dask_keys__()

    def dependencies(self) -> list[Expr]:
        return [self.joint]

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


class CompiledGraph:
    """The optimized graph of an expression tree, and the schedule of a run of it in one thread
    (``schedule_of``, made when first asked for). A cached graph leaves out the blocks of the tree's
    persisted inputs; ``with_inputs`` adds those of a call, sharing the schedule."""

    def __init__(self, graph: dict, outputs: list, schedule_of_inputs: CompiledGraph | None = None) -> None:
        self.graph = graph
        self._outputs = outputs
        self._schedule: list[tuple[Any, tuple]] | None = None
        self._shared = schedule_of_inputs  # the cached graph whose schedule this one's is

    def schedule(self) -> list[tuple[Any, tuple]]:
        if self._schedule is None:
            shared = self._shared
            if shared is not None and shared._schedule is not None:
                self._schedule = shared._schedule
            else:
                self._schedule = schedule_of(self.graph, set(self._outputs))
                if shared is not None:
                    shared._schedule = self._schedule
        return self._schedule

    def with_inputs(self, layers: dict) -> CompiledGraph:
        """This graph with the blocks of the persisted inputs of a call (none: this graph itself)."""
        if not layers:
            return self
        return CompiledGraph({**self.graph, **layers}, self._outputs, self)


def compiled(root: ArrayExpr) -> CompiledGraph:
    """The optimized graph of a tree (with its keys), from the cache without making a ``Materialized``
    node when the cache holds it (``gnp.fetch`` of an expression rebuilt on every call)."""
    hit = _cached_graph(_cache_key(root))
    return hit if hit is not None else Materialized((root,))._compiled


def _cached_graph(cacheable: tuple[tuple, tuple] | None) -> CompiledGraph | None:
    """The cached graph of a tree (``_cache_key``'s key and persisted inputs) with the blocks of those inputs,
    or None when it is not in the cache."""
    if cacheable is None:
        return None
    key, persisted = cacheable
    hit = _lookup(_GRAPH_CACHE, key)
    return None if hit is None else hit.with_inputs(_input_layers(persisted))


def _cache_key(root: ArrayExpr) -> tuple[tuple, tuple] | None:
    """The key of a tree's graph and schedule in the cache, with the tree's persisted inputs (FromGraph),
    or None when they may not be cached. A persisted Array keeps the name of the expression it came from
    (and so do expressions built on it): the names of the persisted inputs are part of the key, so that
    the graph of a tree on them is never that of the same tree computing them; their blocks stay out of
    the cached graph (``_input_layers`` adds those of each call), so that the cache keeps no data alive."""
    from ..optimize import settings_key

    persisted = _persisted_inputs(root)
    if persisted is None:
        return None
    return (root._name, settings_key(), tuple(sorted(n._name for n in persisted))), persisted


_SEEN: collections.OrderedDict[tuple, None] = collections.OrderedDict()  # keys of trees on persisted inputs


def _seen_before(key: tuple) -> bool:
    """Was the tree of this key (one on persisted inputs) built before? Its graph is cached from its second
    build on: a loop that persists its state makes a new tree every step, whose graph would never be used
    again (only its key is kept, among the last ``_GRAPH_CACHE_SIZE``)."""
    if key in _SEEN:
        return True
    _remember(_SEEN, key, None)
    return False


def _input_layers(persisted: Sequence[FromGraph]) -> dict:
    """The tasks of persisted inputs, as ``graph_of`` makes them."""
    from ..runtime.faults import label_tasks

    layers: dict = {}
    for node in persisted:
        layers.update(label_tasks(node, node._layer()))
    return layers


_GRAPH_CACHE: collections.OrderedDict[tuple, CompiledGraph] = collections.OrderedDict()
_GRAPH_CACHE_SIZE = 64


def _lookup(cache: collections.OrderedDict, key: tuple | None) -> Any:
    """A cache's value for ``key`` (None: absent, or not cacheable), marked as recently used."""
    if key is None or key not in cache:
        return None
    cache.move_to_end(key)
    return cache[key]


def _remember(cache: collections.OrderedDict, key: tuple | None, value: Any) -> None:
    """Keep ``value`` under ``key`` (unless None), dropping the least recently used beyond the cache size."""
    if key is None:
        return
    cache[key] = value
    while len(cache) > _GRAPH_CACHE_SIZE:
        cache.popitem(last=False)


def schedule_of(graph: dict, outputs: set) -> list[tuple[Any, tuple]]:
    """The keys of a graph in ``dask.order``'s order, each with the keys (not among ``outputs``) whose last
    use it is."""
    from dask.order import order

    priority = order(graph)
    keys = sorted(graph, key=priority.__getitem__)
    last_use = {dep: i for i, k in enumerate(keys) for dep in graph[k].dependencies}
    release: dict[int, list] = collections.defaultdict(list)
    for dep, i in last_use.items():
        if dep not in outputs:
            release[i].append(dep)
    return [(k, tuple(release[i])) for i, k in enumerate(keys)]


def _skip_aliases(graph: dict, keep: set) -> dict:
    """The graph without its aliases of other keys (but of ``keep``), their dependents reading those keys."""
    skipped = {key: node.target for key, node in graph.items() if isinstance(node, Alias) and key not in keep}
    if not skipped:
        return graph

    def resolve(key: Any) -> Any:
        while key in skipped:
            key = skipped[key]
        return key

    subs = {key: resolve(key) for key in skipped}
    return {key: node.substitute(subs) if isinstance(node, GraphNode) else node
            for key, node in graph.items() if key not in skipped}


def fuse_chains(graph: dict, keep: set, frozen: set) -> dict:
    """The graph with each linear chain of its tasks made one task.

    A task is folded into its dependent when that is its only dependent and it is the dependent's only
    dependency, and neither is in ``frozen`` nor the task in ``keep`` (data and Futures stay as they are):
    on a cluster every task costs a scheduler round trip of milliseconds, so a reduction's combine, its
    finish and the scalar work after it run as one task. The fused task keeps the key of the chain's last
    task. Aliases (but of ``keep``) are skipped first: their dependents read the aliased key."""
    graph = _skip_aliases(graph, keep)
    tasks = {key for key, node in graph.items() if isinstance(node, GraphNode) and not isinstance(node, DataNode)}
    dependents: dict = collections.defaultdict(list)
    for key in tasks:
        for dep in graph[key].dependencies:
            dependents[dep].append(key)

    def foldable(key: Any) -> Any:
        """The dependent ``key`` folds into, or None."""
        after = dependents.get(key, ())
        if key in keep or key in frozen or key not in tasks or len(after) != 1:
            return None
        (nxt,) = after
        return nxt if nxt not in frozen and graph[nxt].dependencies == {key} else None

    into = {key: nxt for key in graph if (nxt := foldable(key)) is not None}
    if not into:
        return graph
    fused = {}
    for key, node in graph.items():
        if key in into:
            continue  # folded into a later task
        if key not in tasks:
            fused[key] = node
            continue
        chain = [key]
        while len(graph[chain[0]].dependencies) == 1 and (dep := next(iter(graph[chain[0]].dependencies))) in into:
            chain.insert(0, dep)
        if len(chain) == 1:
            fused[key] = node
        else:
            fused[key] = Task.fuse(*(graph[k] for k in chain), key=key)
    return fused


def run_in_order(graph: dict, schedule: list[tuple[Any, tuple]], keys: list, inputs: dict | None = None) -> list:
    """Run a graph in this thread in its schedule's order (what ``dask.local.get_sync`` does, without its
    per-call ordering and bookkeeping: what a handful of tasks launching GPU kernels needs), freeing each
    intermediate after its last use; the values of ``keys``. ``inputs`` holds values the graph's tasks
    read that it has no tasks for."""
    cache: dict = dict(inputs or {})
    for key, done in schedule:
        cache[key] = graph[key](cache)
        for dep in done:
            cache.pop(dep, None)  # a block used under two names (f(x, x)) is released once
    return [cache[k] for k in keys]


_CACHE_DATA_LIMIT = 2**20


def _persisted_inputs(root: Expr) -> tuple[FromGraph, ...] | None:
    """The persisted inputs of a tree whose graph may be cached without them, or None when it may not be:
    the data the graph holds besides them must be small host data (the cache must not keep large arrays,
    or any device or cluster memory, alive)."""
    held, persisted = 0, []
    for node in _walk(root):
        if isinstance(node, FromGraph):
            persisted.append(node)
        elif isinstance(node, FromArray):
            array = node.operand("array")
            if not isinstance(array, np.ndarray):
                return None
            held += array.nbytes
    return tuple(persisted) if held <= _CACHE_DATA_LIMIT else None


def _walk(root: Expr) -> Iterator[Expr]:
    """Every node of an expression tree once."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        name = node._name
        if name not in seen:
            seen.add(name)
            yield node
            stack.extend(node.dependencies())


def graph_of(root: ArrayExpr) -> dict:
    """All tasks of an expression tree, each node's layer once, each task naming its block when it fails."""
    from ..runtime.faults import label_tasks

    layers: dict = {}
    for node in _walk(root):
        layers.update(label_tasks(node, node._layer()))
    return layers


class FromGraph(ArrayExpr):
    """Blocks that already have keys: persisted results, or a dask.array's graph adopted as is."""

    _parameters = ["layer", "name", "chunks", "dtype", "backend"]

    @cached
    def _name(self) -> str:
        return self.operand("name")

    def __dask_tokenize__(self) -> str:
        return self.operand("name")

    def _layer(self) -> dict:
        # A block persisted on a cluster is a Future of its own key: left as it is, Dask's graph conversion
        # drops it (the scheduler already holds the block) instead of submitting it as a new task.
        return {
            k: v if isinstance(v, GraphNode) or _is_dask_future(v) else DataNode(k, v)
            for k, v in self.operand("layer").items()
        }


class FromArray(ArrayExpr):
    """Data in: a NumPy/CuPy (or any array-like) object cut into blocks."""

    _parameters = ["array", "chunks", "dtype", "backend", "token"]

    @cached
    def _funcname(self) -> str:
        return "array"

    def __dask_tokenize__(self) -> str:
        return self.operand("token")

    def _block_task(self, index: Index) -> GraphNode:
        slices = tuple(slice(o, o + s) for o, s in zip(self.block_offset(index), self.block_shape(index)))
        piece = self.operand("array")[slices]
        return Task(self.key(index), _blocks.as_block, DataNode(None, piece), self.dtype, self.backend)


class Creation(ArrayExpr):
    """Blocks computed from their position alone: full, arange, linspace, eye, random draws."""

    _parameters = ["kind", "chunks", "dtype", "backend", "params"]

    @cached
    def _funcname(self) -> str:
        return self.operand("kind").replace("_", "-")

    def _block_task(self, index: Index) -> GraphNode:
        return Task(
            self.key(index),
            _blocks.create,
            self.operand("kind"),
            self.block_offset(index),
            self.block_shape(index),
            self.shape,
            self.dtype,
            self.backend,
            self.operand("params"),
        )


class Elemwise(ArrayExpr):
    """A NumPy-style elementwise function of N inputs (arrays and scalars), broadcasting on aligned chunks.

    Array operands have been rechunked by the caller so that every dimension they share with the output
    (and do not broadcast) has the output's chunks.
    """

    _parameters = ["op", "dtype", "kwargs"]

    @property
    def args(self) -> list[Any]:
        return self.operands[len(self._parameters) :]

    @cached
    def _funcname(self) -> str:
        return self.operands[0].replace("_", "-")  # operand("op")

    @cached
    def backend(self) -> str:
        backends = {a.backend for a in self.args if isinstance(a, ArrayExpr)}
        return "cupy" if "cupy" in backends else "numpy"

    @cached
    def chunks(self) -> Chunks:
        arrays = [a for a in self.args if isinstance(a, ArrayExpr)]
        if len(arrays) == 1:
            return arrays[0].chunks
        ndim = max(a.ndim for a in arrays)
        out: list[tuple[int, ...]] = []
        for d in range(ndim):
            dims = [a.chunks[d - ndim + a.ndim] for a in arrays if d - ndim + a.ndim >= 0]
            # a length-1 axis broadcasts against any other length (0 too): prefer the others
            out.append(max(dims, key=lambda c: (sum(c) != 1, len(c))))
        return tuple(out)

    def _block_task(self, index: Index) -> GraphNode:
        args = [a.ref(self.operand_block(a, index)) if isinstance(a, ArrayExpr) else a for a in self.args]
        return Task(
            self.key(index), _blocks.elemwise, self.operand("op"), self.dtype, self.operand("kwargs"), *args
        )


class Transpose(ArrayExpr):
    """Axes permuted, block by block."""

    _parameters = ["array", "axes"]
    _like = "array"

    @cached
    def chunks(self) -> Chunks:
        return tuple(self.array.chunks[a] for a in self.axes)

    def _block_task(self, index: Index) -> GraphNode:
        source = [0] * self.ndim
        for out_axis, in_axis in enumerate(self.axes):
            source[in_axis] = index[out_axis]
        return Task(self.key(index), _blocks.transpose, self.array.ref(tuple(source)), tuple(self.axes))


class BlockReshape(ArrayExpr):
    """Each output block is exactly one input block, reshaped (inserting or removing size-1 axes, or
    splitting/merging whole rows when the chunking allows it)."""

    _parameters = ["array", "chunks", "source_of"]
    _like = "array"

    def _block_task(self, index: Index) -> GraphNode:
        source = self.operand("source_of")[index]
        return Task(self.key(index), _blocks.reshape, self.array.ref(source), self.block_shape(index))


class Broadcast(ArrayExpr):
    """The array broadcast to more (leading) axes or stretched along length-1 axes."""

    _parameters = ["array", "chunks"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return "broadcast-to"

    def _block_task(self, index: Index) -> GraphNode:
        a = self.array
        source = self.operand_block(a, index)
        return Task(self.key(index), _blocks.broadcast, a.ref(source), self.block_shape(index))


Piece = tuple[int, int, Any]  # (source number, input block index along the axis, slice or int array)


class Gather(ArrayExpr):
    """Output blocks assembled from pieces of input blocks: rechunk, basic and integer-array indexing,
    flip, roll, concatenate.

    ``plan`` is one entry per output axis: for each output chunk along it, ``(pieces, permutation)`` where
    pieces are ``(source, input chunk, local index)`` concatenated in order and ``permutation`` (or None)
    reorders the result along the axis. At most one axis names a source other than 0. Axes listed in
    ``drop`` have a single integer piece and are removed from the output.
    """

    _parameters = ["plan", "drop", "dtype"]

    @property
    def sources(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    @cached
    def _funcname(self) -> str:
        return "getitem"

    @cached
    def backend(self) -> str:
        return self.sources[0].backend

    @cached
    def _full_chunks(self) -> Chunks:
        out = []
        for axis_plan in self.operand("plan"):
            out.append(tuple(_pieces_length(p) for p, _ in axis_plan))
        return tuple(out)

    @cached
    def chunks(self) -> Chunks:
        drop = self.operand("drop")
        return tuple(c for d, c in enumerate(self._full_chunks) if d not in drop)

    def _full_index(self, index: Index) -> Index:
        drop = self.operand("drop")
        it = iter(index)
        return tuple(0 if d in drop else next(it) for d in range(len(self._full_chunks)))

    def _block_task(self, index: Index) -> GraphNode:
        plan = self.operand("plan")
        full = self._full_index(index)
        per_axis = [plan[d][i] for d, i in enumerate(full)]
        grid = tuple(len(pieces) for pieces, _ in per_axis)
        refs, locals_ = [], []
        for combo in itertools.product(*(pieces for pieces, _ in per_axis)):
            source = max(p[0] for p in combo) if combo else 0
            refs.append(self.sources[source].ref(tuple(p[1] for p in combo)))
            locals_.append(tuple(p[2] for p in combo))
        perms = tuple(perm for _, perm in per_axis)
        return Task(
            self.key(index), _blocks.assemble, List(*refs), locals_, grid, perms, tuple(self.operand("drop"))
        )


def _pieces_length(pieces: Sequence[Piece]) -> int:
    return sum(_piece_length(ix) for _, _, ix in pieces)


def _piece_length(ix: Any) -> int:
    return len(range(*ix.indices(2**62))) if isinstance(ix, slice) else len(ix)


def halo_block_inputs(source: ArrayExpr, axis_pieces: Sequence[Sequence[Piece]],
                      own: Index | None = None) -> tuple[dict, List, tuple]:
    """Task inputs of one block extended by halos, from the pieces of its extended range along each axis
    (slices of ``source``'s blocks, as ``_plan.segments_plan`` makes them): the piece of the source block at
    the task's ``own`` position (where the task runs), or else the largest piece, is that whole block, cut
    inside the task; every other piece is a strip cut by a task of its own next to its source block (keyed
    by source, block and bounds, so that users share it), so that only strips travel.
    Returns the strip tasks, the pieces' references and their layout for ``_blocks.halo_block``."""
    name = f"halo-{source.deterministic_token}"
    lengths = [[_piece_length(ix) for _, _, ix in pieces] for pieces in axis_pieces]
    starts = [list(itertools.accumulate(ls, initial=0)) for ls in lengths]
    combos = list(itertools.product(*(range(len(pieces)) for pieces in axis_pieces)))
    mine = [c for c in combos if tuple(axis_pieces[d][j][1] for d, j in enumerate(c)) == own]
    main = mine[0] if mine else max(combos, key=lambda combo: math.prod(lengths[d][j] for d, j in enumerate(combo)))
    strips: dict = {}
    refs, places = [], []
    for combo in combos:
        block = tuple(axis_pieces[d][j][1] for d, j in enumerate(combo))
        local = tuple(axis_pieces[d][j][2] for d, j in enumerate(combo))
        dest = tuple(slice(starts[d][j], starts[d][j] + lengths[d][j]) for d, j in enumerate(combo))
        if combo == main:
            refs.append(source.ref(block))
            places.append((local, dest))
            continue
        bounds = tuple(b for ix in local for b in (ix.start, -1 if ix.stop is None else ix.stop, ix.step))
        key = (name, *block, *bounds)
        strips[key] = Task(key, _blocks.cut, source.ref(block), local)
        refs.append(TaskRef(key))
        places.append((None, dest))
    shape = tuple(s[-1] for s in starts)
    return strips, List(*refs), (shape, tuple(places))


def _owned_strips(layer: dict, source: ArrayExpr) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
    """(key, source block, source grid) of the halo strips in a layer: they run where their block lives."""
    name = f"halo-{source.deterministic_token}"
    for key in layer:
        if key[0] == name:
            yield key, key[1 : 1 + source.ndim], source.numblocks


class Overlap(Gather):
    """Blocks extended by halos from their neighbours (``map_overlap``): a one-source ``Gather`` whose
    pieces are assembled by ``halo_block_inputs``, so that only the strips of the neighbours travel."""

    @cached
    def _funcname(self) -> str:
        return "overlap"

    @cached
    def _tasks(self) -> dict:
        plan, source = self.operand("plan"), self.sources[0]
        layer: dict = {}
        for index in self.block_indices():
            strips, refs, layout = halo_block_inputs(source, [plan[d][i][0] for d, i in enumerate(index)], index)
            layer.update(strips)
            layer[self.key(index)] = Task(self.key(index), _blocks.halo_block, refs, layout)
        return layer

    def _layer(self) -> dict:
        return dict(self._tasks)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        yield from super()._owned_blocks()
        yield from _owned_strips(self._tasks, self.sources[0])


class SetItem(ArrayExpr):
    """Functional update ``x[region] = value``: blocks meeting the region get the matching part of
    ``value`` (already broadcast and chunked like the region), the others are passed through."""

    _parameters = ["array", "value", "region_plan"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return "setitem"

    def _block_task(self, index: Index) -> GraphNode:
        # region_plan: per axis, per input chunk -> (value chunk index, local slice) or None
        plan = self.operand("region_plan")
        hits = [plan[d][i] for d, i in enumerate(index)]
        if any(h is None for h in hits):
            return Alias(self.key(index), self.array.key(index))
        value = self.operand("value")
        local = tuple(h[1] for h in hits)
        if isinstance(value, ArrayExpr):
            value = value.ref(tuple(h[0] for h in hits))
        return Task(self.key(index), _blocks.setitem, self.array.ref(index), local, value)


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


class Reduction(ArrayExpr):
    """A tree reduction over ``axes``: a partial per block, partials combined ``split_every`` at a time,
    then finished (mean divides, var normalizes, ...). Partials are dicts of arrays that keep the reduced
    axes with length 1, so combining is concatenation followed by the same reduction."""

    _parameters = ["array", "kind", "axes", "keepdims", "dtype", "split_every", "params", "prereduced"]
    _like = "array"
    _defaults = {"prereduced": False}

    @cached
    def _funcname(self) -> str:
        kind = self.operand("kind")
        return "std" if kind == "var" and self.operand("params")[2] else kind

    @cached
    def chunks(self) -> Chunks:
        array, _, axes, keep = self.operands[:4]
        return tuple((1,) if d in axes else c for d, c in enumerate(array.chunks) if keep or d not in axes)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        # the first stage runs where the input blocks live; combines go wherever the scheduler likes
        x = self.array
        for index in x.block_indices():
            yield (self._stage_name("partial"), 0, *index), index, x.numblocks

    def _stage_name(self, stage: str) -> str:
        return f"{self.operand('kind')}-{stage}-{self.deterministic_token}"

    def _group_sizes(self) -> dict[int, int]:
        """Blocks combined per reduced axis at each level of the tree: ``split_every`` in all, shared among
        the axes that have several blocks (at least 2 each, so that the tree shrinks)."""
        axes = [d for d in self.operand("axes") if self.array.numblocks[d] > 1]
        per_axis = max(2, int(self.operand("split_every") ** (1 / max(len(axes), 1)) + 1e-9))
        return {d: per_axis if d in axes else 1 for d in self.operand("axes")}

    def _layer(self) -> dict:
        x = self.array
        kind, axes, params = self.operand("kind"), self.operand("axes"), self.operand("params")
        layer: dict = {}
        name = self._stage_name("partial")
        numblocks = list(x.numblocks)
        level = 0
        for index in x.block_indices():
            key = (name, level, *index)
            if self.operand("prereduced"):  # the input's blocks are partials already (a fused kernel's)
                layer[key] = Alias(key, x.key(index))
                continue
            layer[key] = Task(
                key, _blocks.reduce_chunk, kind, x.ref(index), axes, self.dtype, params,
                tuple(x.block_offset(index)[d] for d in axes),
            )
        groups = self._group_sizes()
        while any(numblocks[d] > 1 for d in axes):
            new_numblocks = [
                -(-n // groups[d]) if d in axes else n for d, n in enumerate(numblocks)
            ]
            for index in itertools.product(*(range(n) for n in new_numblocks)):
                ranges = [
                    range(i * groups[d], min((i + 1) * groups[d], numblocks[d])) if d in axes else (i,)
                    for d, i in enumerate(index)
                ]
                members = [TaskRef((name, level, *m)) for m in itertools.product(*ranges)]
                grid = tuple(len(r) for r in ranges)
                key = (name, level + 1, *index)
                layer[key] = Task(key, _blocks.reduce_combine, kind, List(*members), grid, axes, params)
            numblocks, level = new_numblocks, level + 1
        keep = self.operand("keepdims")
        for index in self.block_indices():
            rest = iter(index)
            source = tuple(0 if d in axes else next(rest) for d in range(x.ndim)) if not keep else index
            key = self.key(index)
            layer[key] = Task(
                key, _blocks.reduce_finish, kind, TaskRef((name, level, *source)), axes, keep, self.dtype, params
            )
        return layer


class Scan(ArrayExpr):
    """A cumulative reduction along one axis: each block's local scan plus the carry of the blocks before."""

    _parameters = ["array", "kind", "axis", "dtype"]
    _like = "array"

    @cached
    def _funcname(self) -> str:
        return self.operand("kind")

    def _layer(self) -> dict:
        x, kind, axis = self.array, self.operand("kind"), self.operand("axis")
        local = f"{kind}-local-{self.deterministic_token}"
        carry = f"{kind}-carry-{self.deterministic_token}"
        layer: dict = {}
        for index in x.block_indices():
            layer[(local, *index)] = Task((local, *index), _blocks.scan_local, kind, x.ref(index), axis, self.dtype)
            key = self.key(index)
            if index[axis] == 0:
                layer[key] = Alias(key, (local, *index))
                continue
            before = (*index[:axis], index[axis] - 1, *index[axis + 1 :])
            carry_key = (carry, *index)
            previous = TaskRef((carry, *before)) if index[axis] > 1 else None
            layer[carry_key] = Task(
                carry_key, _blocks.scan_carry, kind, previous, TaskRef((local, *before)), axis
            )
            layer[key] = Task(key, _blocks.scan_apply, kind, TaskRef((local, *index)), TaskRef(carry_key))
        return layer


class Fused(ArrayExpr):
    """A group of elementwise operations, random draws and reduction partials run as one kernel per block
    (made by the fusion pass; ``_codegen`` describes ``program``) of the elements' chunks ``elements``. Its
    blocks are the program's output, or a tuple of outputs picked by ``FusedOutput``: the elements' blocks,
    except for a kernel whose one output is a total of a one-block array (or the epilogue's), 0-d."""

    _parameters = ["program", "chunks", "backend", "scalars", "elements"]

    @property
    def inputs(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    @cached
    def _funcname(self) -> str:
        from ..codegen.program import describe

        return "fused-" + describe(self.operand("program"))

    @cached
    def dtype(self) -> np.dtype:
        _, _, instrs, outputs = self.operand("program")
        return np.dtype(instrs[outputs[0][1]][2]) if outputs[0][0] == "store" else np.dtype(outputs[0][4])

    def geometry(self, index: Index) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(offset, shape, global shape) of the elements the kernel of block ``index`` runs over."""
        if self.operand("elements") == self.chunks:
            return self.block_offset(index), self.block_shape(index), self.shape
        shape = tuple(sum(c) for c in self.operand("elements"))  # a total's one block of elements
        return (0,) * len(shape), shape, shape

    def _block_task(self, index: Index) -> GraphNode:
        from ..kernels.fused import run

        if self.operand("elements") == self.chunks:
            refs = [a.ref(self.operand_block(a, index)) for a in self.inputs]
        else:
            refs = [a.ref((0,) * a.ndim) for a in self.inputs]
        return Task(self.key(index), run, self.operand("program"), self.operand("scalars"), *self.geometry(index),
                    self.backend, *refs)


class Stencil(ArrayExpr):
    """A group of stencil sweeps run as one task per block (made by the stencil pass; ``kernels.stencil``
    describes ``plan``): each task gets its source blocks extended by the halos the group needs (only the
    strips of the neighbours travel) and runs the group's kernels, one per sweep, on shrinking regions.
    Its blocks are the group's output, or a tuple of outputs picked by ``FusedOutput``."""

    _parameters = ["plan", "chunks", "backend", "scalars"]

    @property
    def sources(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    @cached
    def _funcname(self) -> str:
        from ..codegen.stencil_plan import describe

        return "stencil-" + describe(self.operand("plan"))

    @cached
    def dtype(self) -> np.dtype:
        from ..codegen.stencil_plan import output_dtypes

        return output_dtypes(self.operand("plan"))[0]

    @cached
    def _tasks(self) -> dict:
        """Per block: a task for its interior (``codegen.stencil_plan.split``), then one for the bands around
        it that writes them into the interior's output blocks (each is the block's task when alone), and
        the halo strips the bands read."""
        from ..codegen import stencil_plan as _stencil_plan
        from ..kernels import stencil as _stencil_kernels

        plan, sources, backend = self.operand("plan"), self.sources, self.backend
        inner_name = f"{self._funcname}-interior-{self.deterministic_token}"
        layer: dict = {}

        def part(target: tuple, index: Index) -> tuple[tuple, list]:
            kernel_boxes, source_boxes = _stencil_plan.boxes(plan, [s.shape for s in sources], target)
            refs, layouts, origins = [], [], []
            for source, box, axis_pieces in zip(sources, source_boxes,
                                                _plan.source_pieces(plan.wraps, sources, source_boxes)):
                if box is None:
                    refs.append(List())
                    layouts.append(None)
                    origins.append(None)
                    continue
                own = index if source.numblocks == self.numblocks else None
                strips, pieces, layout = halo_block_inputs(source, axis_pieces, own)
                layer.update(strips)
                refs.append(pieces)
                layouts.append(layout)
                origins.append(tuple(lo for lo, _ in box))
            return (target, tuple(kernel_boxes), tuple(origins), tuple(layouts)), refs

        for index in self.block_indices():
            block = tuple((o, o + n) for o, n in zip(self.block_offset(index), self.block_shape(index)))
            interior, bands = _stencil_plan.split(plan, sources, self.chunks, block)
            inner = None
            if interior is not None:
                key = (inner_name, *index) if bands else self.key(index)
                spec, refs = part(interior, index)
                layer[key] = Task(key, _stencil_kernels.run, plan, self.operand("scalars"), block, backend, None,
                                  (spec,), *refs)
                inner = TaskRef(key)
            if bands:
                specs, refs = zip(*[part(band, index) for band in bands])
                layer[self.key(index)] = Task(self.key(index), _stencil_kernels.run, plan, self.operand("scalars"),
                                              block, backend, inner, specs, *[r for rs in refs for r in rs])
        return layer

    def _layer(self) -> dict:
        return dict(self._tasks)

    def _owned_blocks(self) -> Iterator[tuple[tuple, Index, tuple[int, ...]]]:
        yield from super()._owned_blocks()
        inner_name = f"{self._funcname}-interior-{self.deterministic_token}"
        for key in self._tasks:
            if key[0] == inner_name:
                yield key, key[1:], self.numblocks
        for source in self.sources:
            yield from _owned_strips(self._tasks, source)


class FusedOutput(ArrayExpr):
    """Output ``k`` of a multi-output ``Fused`` or ``Stencil`` node."""

    _parameters = ["fused", "k", "chunks", "dtype"]
    _like = "fused"

    @cached
    def _funcname(self) -> str:
        return f"{self.fused._funcname}-out"

    def _block_task(self, index: Index) -> GraphNode:
        from ..kernels.fused import pick

        # a total (or the epilogue's value) is 0-d (or keepdims), from the one block of the elements
        source = index if self.chunks == self.fused.chunks else (0,) * self.fused.ndim
        return Task(self.key(index), pick, self.fused.ref(source), self.operand("k"))


class MatMul(ArrayExpr):
    """Matrix product of two 2-d arrays on block grids: output block (i, j) is the sum over k of
    ``a[i, k] @ b[k, j]`` (the caller aligns a's column chunks with b's row chunks)."""

    _parameters = ["a", "b", "dtype"]
    _like = "a"

    @cached
    def chunks(self) -> Chunks:
        return (self.a.chunks[0], self.b.chunks[1])

    def _block_task(self, index: Index) -> GraphNode:
        i, j = index
        k = range(self.a.numblocks[1])
        return Task(self.key(index), _blocks.matmul_sum, List(*(self.a.ref((i, kk)) for kk in k)),
                    List(*(self.b.ref((kk, j)) for kk in k)), self.dtype)


class MapBlocks(ArrayExpr):
    """An opaque per-block function (the ``Blockwise`` primitive): output block ``i`` is
    ``func(*input blocks i, **kwargs)``, the inputs sharing the output's block grid (inputs with one block
    along an axis are broadcast along it). With ``offsets=True`` the function also gets ``block_offset=``
    and ``global_shape=`` of the output block. ``func`` is a top-level function that works on NumPy and
    CuPy blocks alike."""

    _parameters = ["func", "name", "chunks", "dtype", "kwargs", "offsets"]

    @property
    def inputs(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    @cached
    def _funcname(self) -> str:
        return self.operand("name")

    @cached
    def backend(self) -> str:
        return self.inputs[0].backend

    def _block_task(self, index: Index) -> GraphNode:
        kwargs = dict(self.operand("kwargs"))
        if self.operand("offsets"):
            kwargs.update(block_offset=self.block_offset(index), global_shape=self.shape)
        refs = [a.ref(self.operand_block(a, index)) for a in self.inputs]
        return Task(self.key(index), _blocks.apply, self.operand("func"), kwargs, self.dtype, *refs)
