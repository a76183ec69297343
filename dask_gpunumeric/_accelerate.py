"""``gnp.accelerate``: trace a function of Arrays once per signature, optimize all of its outputs together,
and reuse that plan on every later call.

Beyond the automatic fusion every computation gets, an accelerated function

* fuses across all of its outputs jointly (``return call, put`` shares one kernel per block: common
  subexpressions are computed once, inputs read once), where separately computed outputs fuse separately;
* skips tracing and optimizing on later calls with the same argument shapes, dtypes, chunks and backends
  (and equal non-array arguments): the optimized task graph is reused with its keys renamed;
* returns only its outputs: intermediates are never materialized or exposed;
* dispatches at once when its array arguments are already in memory (persisted, or made from arrays) and
  no distributed cluster is active: the call launches the kernels (asynchronously on a GPU, as JAX does)
  and returns persisted outputs, so that Python's work after the call overlaps the device's. With lazy
  arguments, on a cluster, or with the setting ``dispatch="lazy"``, the outputs stay lazy (and fuse with
  what consumes them).
"""
from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from typing import Any

import dask.local
import dask.threaded
import numpy as np
from dask._task_spec import Alias, DataNode, GraphNode, Task, _is_dask_future

from . import _cluster, config
from ._array import Array
from ._expr import ArrayExpr, Bundle, FromArray, FromGraph, graph_of

_CACHE_SIZE = 128


class Placeholder(ArrayExpr):
    """Argument ``i`` of an accelerated function while it is traced: metadata only, no tasks."""

    _parameters = ["i", "signature", "chunks", "dtype", "backend"]

    @functools.cached_property
    def _funcname(self) -> str:
        return f"arg{self.operand('i')}"

    def _layer(self) -> dict:
        return {}


class Plan:
    """The optimized graph of a traced function, with placeholder keys, and its outputs' metadata."""

    def __init__(self, outputs: list[ArrayExpr], placeholders: list[Placeholder], structure: Any) -> None:
        from ._fusion import optimize

        bundle = optimize(Bundle(*outputs))
        optimized = list(bundle.operands)
        self.optimized = optimized
        self.graph: dict = {}
        for out in optimized:
            self.graph.update(graph_of(out))
        self.outputs = [(out._name, out.chunks, out.dtype, out.backend) for out in optimized]
        self.placeholders = [p._name for p in placeholders]
        self.structure = structure
        self.token = hashlib.sha1(repr(sorted(self.graph, key=repr)).encode()).hexdigest()[:16]


def _rename(name: str, salt: str) -> str:
    prefix, _, _ = name.rpartition("-")
    return f"{prefix or name}-{hashlib.sha1(f'{name}|{salt}'.encode()).hexdigest()[:32]}"


class Region(ArrayExpr):
    """One call of an accelerated function: the plan's tasks with keys renamed for these arguments."""

    _parameters = ["plan"]

    @property
    def args(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    def __dask_tokenize__(self) -> str:
        if not self._determ_token:
            plan = self.operand("plan")
            text = plan.token + "|" + "|".join(a._name for a in self.args)
            self._determ_token = hashlib.sha1(text.encode()).hexdigest()
        return self._determ_token

    @functools.cached_property
    def chunks(self) -> tuple:
        return ()

    dtype = np.dtype(bool)
    backend = "numpy"

    def name_map(self) -> dict[str, str]:
        """Template key names -> this call's key names (placeholders -> the arguments' names)."""
        plan = self.operand("plan")
        names = {k[0] if isinstance(k, tuple) else k for k in plan.graph}
        mapping = {n: _rename(n, self.deterministic_token) for n in names}
        mapping.update({p: a._name for p, a in zip(plan.placeholders, self.args)})
        return mapping

    def _layer(self) -> dict:
        mapping = self.name_map()

        def key(k: Any) -> Any:
            return (mapping.get(k[0], k[0]), *k[1:]) if isinstance(k, tuple) else mapping.get(k, k)

        layer = {}
        for k, node in self.operand("plan").graph.items():
            new_key = key(k)
            subs = {d: key(d) for d in node.dependencies}
            layer[new_key] = _substitute(node, subs, new_key)
        return layer


def _substitute(node: GraphNode, subs: dict, key: Any) -> GraphNode:
    if isinstance(node, Alias):
        return Alias(key, subs.get(node.target, node.target))
    if isinstance(node, (Task, DataNode)):
        return node.substitute(subs, key=key)
    return node


class RegionOutput(ArrayExpr):
    """Output ``k`` of a Region: keys named as the plan's output, renamed for the call."""

    _parameters = ["region", "k"]

    @functools.cached_property
    def _spec(self) -> tuple:
        return self.region.operand("plan").outputs[self.operand("k")]

    @functools.cached_property
    def _name(self) -> str:
        return self.region.name_map()[self._spec[0]]

    @functools.cached_property
    def chunks(self) -> tuple:
        return self._spec[1]

    @functools.cached_property
    def dtype(self) -> np.dtype:
        return self._spec[2]

    @functools.cached_property
    def backend(self) -> str:
        return self._spec[3]

    def _layer(self) -> dict:
        return {}

    def finalize_compute(self) -> ArrayExpr:
        from ._expr import Finalize

        return self if all(n == 1 for n in self.numblocks) else Finalize(self)


def _flatten(value: Any) -> tuple[list[Array], Any]:
    """Arrays in a (nested) tuple/list/dict, and a structure to rebuild it."""
    if isinstance(value, Array):
        return [value], "array"
    if isinstance(value, (tuple, list)):
        arrays: list[Array] = []
        parts = []
        for v in value:
            a, s = _flatten(v)
            arrays += a
            parts.append((len(a), s))
        return arrays, (type(value), parts)
    if isinstance(value, dict):
        arrays, structure = _flatten(list(value.values()))
        return arrays, (dict, list(value), structure)
    raise TypeError(f"gnp.accelerate: a function must return Arrays (or tuples/lists/dicts of them), "
                    f"got {type(value).__name__}")


def _unflatten(arrays: list[Array], structure: Any) -> Any:
    if structure == "array":
        return arrays[0]
    if structure[0] is dict:
        values = _unflatten(arrays, structure[2])
        return dict(zip(structure[1], values))
    kind, parts = structure
    out, i = [], 0
    for n, s in parts:
        out.append(_unflatten(arrays[i : i + n], s))
        i += n
    return kind(out)


def accelerate(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: trace ``func`` once per argument signature, fuse across its statements and outputs,
    and reuse the optimized plan on later calls (see the module docstring for what this adds)."""
    plans: dict[Any, Plan] = {}
    lock = threading.Lock()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # arrays by position (an int) or keyword (a str); the other arguments with their types; and whether
        # fusion is on (a plan is optimized when traced)
        named = [*enumerate(args), *sorted(kwargs.items())]
        arrays = [(i, a) for i, a in named if isinstance(a, Array)]
        static = tuple((i, _static_key(a)) for i, a in named if not isinstance(a, Array))
        signature = (tuple((i, a.shape, a.chunks, a.dtype.str, a.backend) for i, a in arrays), static,
                     bool(config.get("fusion")))
        try:
            hash(signature)
        except TypeError:
            raise TypeError("gnp.accelerate: non-array arguments must be hashable (they select the plan)") from None
        with lock:
            plan = plans.get(signature)
        if plan is None:
            plan = _trace(func, args, kwargs, arrays, signature)
            with lock:
                if len(plans) >= _CACHE_SIZE:
                    plans.pop(next(iter(plans)))
                plans[signature] = plan
        region = Region(plan, *[a.expr for _, a in arrays])
        outputs = [RegionOutput(region, k) for k in range(len(plan.outputs))]
        if config.get("dispatch") == "auto" and _in_memory(region.args) and not _cluster.active_workers():
            outputs = _run_now(region, outputs)
        return _unflatten([Array(o) for o in outputs], plan.structure)

    wrapper.plans = plans  # type: ignore[attr-defined]
    return wrapper


def _in_memory(args: list[ArrayExpr]) -> bool:
    """Are these expressions blocks already in this process (persisted locally, or cut from an array)?"""
    return all(
        isinstance(a, FromArray)
        or isinstance(a, FromGraph) and not any(isinstance(v, GraphNode) or _is_dask_future(v)
                                                for v in a.operand("layer").values())
        for a in args
    )


def _run_now(region: Region, outputs: list[RegionOutput]) -> list[FromGraph]:
    """Run a region on the local scheduler now; its outputs as persisted blocks."""
    graph = region._layer()
    for a in region.args:
        graph.update(a._layer())
    keys = [o.key(index) for o in outputs for index in o.block_indices()]
    scheduler = dask.local.get_sync if any(o.backend == "cupy" for o in outputs) else dask.threaded.get
    blocks = dict(zip(keys, scheduler(graph, keys)))
    return [FromGraph({o.key(i): blocks[o.key(i)] for i in o.block_indices()}, o._name, o.chunks, o.dtype, o.backend)
            for o in outputs]


def _static_key(value: Any) -> Any:
    """A non-array argument as part of a plan's key: its value with its type, through tuples (1, 1.0 and
    True are equal in Python but trace to different dtypes)."""
    if isinstance(value, tuple):
        return type(value), tuple(_static_key(v) for v in value)
    return type(value), value


def _trace(func: Callable[..., Any], args: tuple, kwargs: dict, arrays: list[tuple[int | str, Array]],
           signature: Any) -> Plan:
    sig_token = hashlib.sha1(repr(signature).encode()).hexdigest()[:16]
    placeholders = [Placeholder(i, sig_token, a.chunks, a.dtype, a.backend) for i, a in arrays]
    traced_args, traced_kwargs = list(args), dict(kwargs)
    for (i, _), p in zip(arrays, placeholders):
        if isinstance(i, str):
            traced_kwargs[i] = Array(p)
        else:
            traced_args[i] = Array(p)
    outputs, structure = _flatten(func(*traced_args, **traced_kwargs))
    return Plan([o.expr for o in outputs], placeholders, structure)
