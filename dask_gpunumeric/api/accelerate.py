"""``gnp.accelerate``: trace a function of Arrays once per signature, optimize all of its outputs together,
and reuse that plan on every later call.

Beyond the automatic fusion every computation gets, an accelerated function

* fuses across all of its outputs jointly (``return call, put`` shares one kernel per block: common
  subexpressions are computed once, inputs read once), where separately computed outputs fuse separately;
* skips tracing and optimizing on later calls with the same argument shapes, dtypes, chunks and backends
  (and equal non-array arguments): the optimized task graph is reused with its keys renamed;
* returns only its outputs: intermediates are never materialized or exposed;
* runs as one program per worker (``_region``): on a cluster, one long-running task per worker owning its
  blocks, the workers exchanging halos and reduction partials directly; without one, a single task. With
  ``gpunumeric.region-lowering`` set to "tasks" it runs as one task per block instead (not with loops);
* dispatches at once when its array arguments are already in memory (persisted, or made from arrays) and
  no distributed cluster is active: the call launches the kernels (asynchronously on a GPU, as JAX does)
  and returns persisted outputs, so that Python's work after the call overlaps the device's. With lazy
  arguments, on a cluster, or with the setting ``dispatch="lazy"``, the outputs stay lazy (and fuse with
  what consumes them).

An accelerated function called while another is traced is traced inline, as part of the outer one.
"""
from __future__ import annotations

import contextvars
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import dask.callbacks
import dask.local
import dask.threaded
import numpy as np
from dask._task_spec import Alias, DataNode, GraphNode, Task, _is_dask_future

from .. import config
from ..runtime import cluster as _cluster
from . import guards as _guards
from .array import Array
from ..expr.nodes import ArrayExpr, Bundle, FromArray, FromGraph, cached, flat_keys, graph_of, run_in_order, schedule_of

_CACHE_SIZE = 128
_RETRIES = 3  # times the scheduler re-runs a failed per-worker task (a peer lost mid-region fails them all)
_TRACING = contextvars.ContextVar("gnp_tracing", default=False)


def tracing() -> bool:
    """Whether an accelerated function is being traced in this context."""
    return _TRACING.get()


class Placeholder(ArrayExpr):
    """Argument ``i`` of an accelerated function while it is traced: metadata only, no tasks."""

    _parameters = ["i", "signature", "chunks", "dtype", "backend"]

    @cached
    def _funcname(self) -> str:
        return f"arg{self.operand('i')}"

    def _layer(self) -> dict:
        return {}


class Plan:
    """The optimized expressions of a traced function (over placeholders), their per-block graph with
    placeholder keys, its outputs' metadata, and its per-worker programs for a number of workers."""

    def __init__(self, outputs: list[ArrayExpr], placeholders: list[Placeholder], structure: Any) -> None:
        from ..optimize.fusion import _DAG, optimize
        from .loops import Loop

        bundle = optimize(Bundle(*outputs))
        optimized = list(bundle.operands)
        self.optimized = optimized
        self.inputs = placeholders
        self.has_loops = any(isinstance(n, Loop) for n in _DAG(bundle).order)
        self.graph: dict = {}
        if not self.has_loops:  # a plan with loops runs only as programs
            for out in optimized:
                self.graph.update(graph_of(out))
        self.outputs = [(out._name, out.chunks, out.dtype, out.backend) for out in optimized]
        self.schedule = schedule_of(self.graph, {k for out in optimized for k in flat_keys(out)})
        self.structure = structure
        names = sorted(n._name for n in _DAG(bundle).order)
        self.token = hashlib.sha1(repr(names).encode()).hexdigest()[:16]
        self._built: dict[int, Any] = {}
        self.block_indices = [list(out.block_indices()) for out in optimized]

    def run_local(self, as_programs: bool, inputs: dict) -> dict:
        """The output blocks of a call run now in this thread (no cluster), from the blocks of its arguments,
        all by template keys (placeholders' and outputs' own): the per-worker program of one rank, or the
        per-block tasks in their schedule."""
        from ..runtime.regions import program as _region

        if as_programs:
            (program,) = self.built(0).programs
            env = {k: inputs[k] for k in program.inputs}
            _region.execute(program, env, None)
            return env
        keys = [(name, *index) for (name, *_), indices in zip(self.outputs, self.block_indices) for index in indices]
        return dict(zip(keys, run_in_order(self.graph, self.schedule, keys, inputs)))

    def built(self, n_workers: int) -> Any:
        """The per-worker programs (``_region.Built``) for a cluster of ``n_workers`` (0: no cluster)."""
        from ..runtime.regions import program as _region

        if n_workers not in self._built:
            layout = _region.layout_for(self.optimized, n_workers)
            self._built[n_workers] = _region.build(self.optimized, self.inputs, layout)
        return self._built[n_workers]


def _rename(name: str, salt: str) -> str:
    prefix, _, _ = name.rpartition("-")
    return f"{prefix or name}-{hashlib.sha1(f'{name}|{salt}'.encode()).hexdigest()[:32]}"


def _call_token(plan: Plan, lowering: str, workers: tuple, args: list[ArrayExpr]) -> str:
    """The token of one call of a plan (its Region's): the plan, how it is lowered, where, on what."""
    text = "|".join([plan.token, lowering, *workers, *(a._name for a in args)])
    return hashlib.sha1(text.encode()).hexdigest()


class Region(ArrayExpr):
    """One call of an accelerated function on a cluster of ``workers`` (empty: none).

    As programs (``_region``): one task per worker owning its blocks, each running its part of the plan and
    talking to its peers directly, plus one small task per output block picking it from its worker's
    results. As tasks (``lowering`` "tasks"): the plan's per-block tasks with keys renamed for the call."""

    _parameters = ["plan", "workers", "lowering", "timeout", "transport"]

    @property
    def args(self) -> list[ArrayExpr]:
        return self.operands[len(self._parameters) :]

    def __dask_tokenize__(self) -> str:
        if not self._determ_token:
            self._determ_token = _call_token(self.operand("plan"), self.lowering, self.workers, self.args)
        return self._determ_token

    @cached
    def chunks(self) -> tuple:
        return ()

    dtype = np.dtype(bool)
    backend = "numpy"

    @property
    def as_programs(self) -> bool:
        return self.lowering == "programs" or self.plan.has_loops

    @cached
    def name_map(self) -> dict[str, str]:
        """Template key names -> this call's key names (placeholders -> the arguments' names)."""
        plan = self.operand("plan")
        names = {k[0] if isinstance(k, tuple) else k for k in plan.graph} | {o[0] for o in plan.outputs}
        mapping = {n: _rename(n, self.deterministic_token) for n in names}
        mapping.update(self._argument_names())
        return mapping

    @cached
    def _rename_key(self) -> Callable[[Any], Any]:
        return _renamer(self.name_map)

    def _argument_names(self) -> dict[str, str]:
        return _argument_names(self.plan, self.args)

    def _layer(self) -> dict:
        if self.as_programs:
            from ..runtime.regions import program as _region

            arguments, outputs = self._argument_names(), self.name_map
            return _region.layer(
                self._name, f"{self.plan.token}-{len(self.workers)}", self.plan.built(len(self.workers)),
                _renamer(arguments), _renamer(outputs),
                self.timeout, self.transport, "cupy" if "cupy" in {o[3] for o in self.plan.outputs} else "numpy",
            )
        key = self._rename_key
        layer = {}
        for k, node in self.operand("plan").graph.items():
            new_key = key(k)
            subs = {d: key(d) for d in node.dependencies}
            layer[new_key] = _substitute(node, subs, new_key)
        return layer

    def _owned_blocks(self) -> Iterator[tuple[tuple, tuple[int, ...], tuple[int, ...]]]:
        if self.as_programs:
            from ..runtime.regions import program as _region

            yield from _region.owned(self._name, self.plan.built(len(self.workers)), self._rename_key)
            return
        from ..optimize.fusion import _DAG

        key = self._rename_key
        for node in _DAG(Bundle(*self.plan.optimized)).order:
            for k, index, numblocks in node._owned_blocks():
                yield key(k), index, numblocks

    def _task_annotations(self) -> dict[str, dict]:
        if not self.as_programs or self.plan.built(len(self.workers)).layout.size < 2:
            return {}
        from ..runtime.regions import program as _region

        return {"retries": dict.fromkeys(_region.rank_keys(self._name, self.plan.built(len(self.workers))),
                                         _RETRIES)}

    def schedule(self) -> list[tuple[Any, tuple]]:
        """The plan's schedule (``_expr.run_in_order``) with this call's keys (lowered as tasks)."""
        key = self._rename_key
        return [(key(k), tuple(key(d) for d in done)) for k, done in self.operand("plan").schedule]


def _renamer(mapping: dict[str, str]) -> Callable[[Any], Any]:
    """Renames keys (``(name, i, ...)`` or ``name``) whose name is in ``mapping``."""

    def key(k: Any) -> Any:
        return (mapping.get(k[0], k[0]), *k[1:]) if isinstance(k, tuple) else mapping.get(k, k)

    return key


def _substitute(node: GraphNode, subs: dict, key: Any) -> GraphNode:
    if isinstance(node, Alias):
        return Alias(key, subs.get(node.target, node.target))
    if isinstance(node, (Task, DataNode)):
        return node.substitute(subs, key=key)
    return node


class RegionOutput(ArrayExpr):
    """Output ``k`` of a Region: keys named as the plan's output, renamed for the call."""

    _parameters = ["region", "k"]

    @cached
    def _spec(self) -> tuple:
        return self.region.operand("plan").outputs[self.operand("k")]

    @cached
    def _name(self) -> str:
        return self.region.name_map[self._spec[0]]

    @cached
    def chunks(self) -> tuple:
        return self._spec[1]

    @cached
    def dtype(self) -> np.dtype:
        return self._spec[2]

    @cached
    def backend(self) -> str:
        return self._spec[3]

    def _layer(self) -> dict:
        return {}

    def _owned_blocks(self) -> Iterator[tuple[tuple, tuple[int, ...], tuple[int, ...]]]:
        return iter(())  # the Region places its outputs

    def finalize_compute(self) -> ArrayExpr:
        from ..expr.nodes import Finalize

        return self if all(n == 1 for n in self.numblocks) else Finalize(self)


def _flatten(value: Any, is_leaf: Callable[[Any], bool] = lambda v: isinstance(v, Array)) -> tuple[list[Any], Any]:
    """The leaves (Arrays) of a (nested) tuple/list/dict, and a structure (hashable) to rebuild it."""
    if is_leaf(value):
        return [value], "array"
    if isinstance(value, (tuple, list)):
        arrays: list[Any] = []
        parts = []
        for v in value:
            a, s = _flatten(v, is_leaf)
            arrays += a
            parts.append((len(a), s))
        return arrays, (type(value), tuple(parts))
    if isinstance(value, dict):
        arrays, structure = _flatten(list(value.values()), is_leaf)
        return arrays, (dict, tuple(value), structure)
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
    plans: dict[Any, tuple[Plan, list]] = {}
    lock = threading.Lock()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tracing():  # called by a function being traced: part of its plan
            return func(*args, **kwargs)
        # arrays by position (an int) or keyword (a str); the other arguments with their types; and the
        # optimizer's settings (a plan is optimized when traced)
        named = [*enumerate(args), *sorted(kwargs.items())]
        arrays = [(i, a) for i, a in named if isinstance(a, Array)]
        static = tuple((i, _static_key(a)) for i, a in named if not isinstance(a, Array))
        signature = (tuple((i, a.shape, a.chunks, a.dtype.str, a.backend) for i, a in arrays), static,
                     config.optimizer_settings())
        try:
            hash(signature)
        except TypeError:
            raise TypeError("gnp.accelerate: non-array arguments must be hashable (they select the plan)") from None
        with lock:
            plan, guard_events = plans.get(signature, (None, ()))
        if plan is None:
            with _guards.recorded() as guard_events:
                plan = _trace(func, args, kwargs, arrays, signature)
            with lock:
                if len(plans) >= _CACHE_SIZE:
                    plans.pop(next(iter(plans)))
                plans[signature] = plan, guard_events
        else:  # the guards the trace met, checked again under this call's modes
            _guards.replay(guard_events)
        args = [a.expr for _, a in arrays]
        lowering, transport, timeout = _settings()
        workers = tuple(_cluster.active_workers())
        if not workers and config.get("dispatch") == "auto" and _in_memory(args):
            outputs = _run_now(plan, args, lowering, transport, timeout)
        else:
            region = _region_of(plan, args, workers, lowering, transport, timeout)
            outputs = [RegionOutput(region, k) for k in range(len(plan.outputs))]
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


def _run_now(plan: Plan, args: list[ArrayExpr], lowering: str, transport: str, timeout: float) -> list[FromGraph]:
    """A call run now, in this thread, without a cluster: its outputs as persisted blocks, named as its
    Region's outputs would be. As programs (one rank) or, with CuPy blocks, as tasks in their plan's order
    (the kernels queue on the device), straight from the plan (``Plan.run_local``); with Dask callbacks
    active (they see Dask's scheduler run the tasks), or as tasks on NumPy blocks (threads help), the
    Region's tasks on Dask's local schedulers."""
    as_programs = lowering == "programs" or plan.has_loops
    in_order = as_programs or any(o[3] == "cupy" for o in plan.outputs)
    names = _output_names(plan, _call_token(plan, lowering, (), args), args)
    if in_order and not dask.callbacks.Callback.active:
        blocks = plan.run_local(as_programs, _argument_blocks(plan, args))
    else:
        region = Region(plan, (), lowering, timeout, transport, *args)
        graph = region._layer()
        for a in args:
            graph.update(a._layer())
        renamed = [((new, *index), (o[0], *index)) for o, new, indices in zip(plan.outputs, names, plan.block_indices)
                   for index in indices]
        get = dask.local.get_sync if in_order else dask.threaded.get
        blocks = dict(zip((template for _, template in renamed), get(graph, [key for key, _ in renamed])))
    return [FromGraph({(new, *index): blocks[(name, *index)] for index in indices}, new, chunks, dtype, backend)
            for (name, chunks, dtype, backend), new, indices in zip(plan.outputs, names, plan.block_indices)]


def _argument_blocks(plan: Plan, args: list[ArrayExpr]) -> dict:
    """The blocks of in-memory arguments by their placeholders' keys."""
    blocks = {}
    for p, a in zip(plan.inputs, args):
        layer = a.operand("layer") if isinstance(a, FromGraph) else None
        for index in p.block_indices():
            blocks[p.key(index)] = layer[a.key(index)] if layer is not None else a._block_task(index)({})
    return blocks


def _argument_names(plan: Plan, args: list[ArrayExpr]) -> dict[str, str]:
    """The plan's placeholders' names -> the names of a call's arguments."""
    return {p._name: a._name for p, a in zip(plan.inputs, args)}


def _output_names(plan: Plan, token: str, args: list[ArrayExpr]) -> list[str]:
    """The names of a call's outputs (``Region.name_map``'s, for the outputs alone): an argument returned as
    it is keeps its name."""
    arguments = _argument_names(plan, args)
    return [arguments.get(name) or _rename(name, token) for name, *_ in plan.outputs]


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
    token = _TRACING.set(True)
    try:
        outputs, structure = _flatten(func(*traced_args, **traced_kwargs))
    finally:
        _TRACING.reset(token)
    return Plan([o.expr for o in outputs], placeholders, structure)


def _settings() -> tuple[str, str, float]:
    """How regions are lowered, their transport and their timeout in seconds, checked."""
    from dask.utils import parse_timedelta

    lowering, transport = config.get("region-lowering"), config.get("region-transport")
    if lowering not in ("programs", "tasks"):
        raise ValueError(f"gpunumeric.region-lowering must be 'programs' or 'tasks', got {lowering!r}")
    if transport not in ("auto", "comm", "nccl"):
        raise ValueError(f"gpunumeric.region-transport must be 'auto', 'comm' or 'nccl', got {transport!r}")
    return lowering, transport, float(parse_timedelta(config.get("region-timeout")))


def _region_of(plan: Plan, args: list[ArrayExpr], workers: tuple[str, ...], lowering: str, transport: str,
               timeout: float) -> Region:
    """A call of a plan on ``workers`` (those of the active cluster). Its programs are built here, before
    the Region travels to the scheduler, and the cluster gets the plugins of multi-worker regions (once)."""
    region = Region(plan, workers, lowering, timeout, transport, *args)
    if region.as_programs and plan.built(len(workers)).layout.size > 1:
        from ..runtime.regions.collectives import install

        install()
    return region
