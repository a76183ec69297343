"""A traced function's plan (its optimized expressions over placeholders, their per-block graph, and its
per-worker programs), and its calls as expression nodes: a ``Region`` and its ``RegionOutput``s."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from dask._task_spec import Alias, DataNode, GraphNode, Task

from ...expr import (ArrayExpr, Bundle, Finalize, FromArray, FromGraph, cached, flat_keys, small_host_blocks,
                     small_host_input)
from ...optimize import optimize, settings_key
from ...optimize.dag import DAG
from ..compile import graph_of
from ..schedule import run_in_order, schedule_of
from . import build as _build
from . import lower as _lower
from . import store as _store
from .nodes import Loop, Placeholder
from .peel import peeled
from .program import execute, talks_to_peers

RETRIES = 3  # times the scheduler re-runs a failed per-worker task (a peer lost mid-region fails them all)


class Plan:
    """The optimized expressions of a traced function (over placeholders), their per-block graph with
    placeholder keys, its outputs' metadata, and its per-worker programs for a number of workers."""

    def __init__(self, outputs: list[ArrayExpr], placeholders: list[Placeholder], structure: Any) -> None:
        self.traced = peeled(outputs)  # (what a loop of this body peels: kept on the client only)
        bundle = optimize(Bundle(*self.traced))
        optimized = list(bundle.operands)
        self.optimized = optimized
        self.inputs = placeholders
        self.has_loops = any(isinstance(n, Loop) for n in DAG(bundle).order)
        self.graph: dict = {}
        if not self.has_loops:  # a plan with loops runs only as programs
            for out in optimized:
                self.graph.update(graph_of(out))
        self.outputs = [(out._name, out.chunks, out.dtype, out.backend) for out in optimized]
        self.schedule = schedule_of(self.graph, {k for out in optimized for k in flat_keys(out)})
        self.structure = structure
        names = sorted(n._name for n in DAG(bundle).order)
        self.token = hashlib.sha1(repr(names).encode()).hexdigest()[:16]
        self._built: dict[int, Any] = {}
        self.block_indices = [list(out.block_indices()) for out in optimized]
        self.input_indices = [list(p.block_indices()) for p in placeholders]  # (a local call's blocks by these)

    def __reduce__(self) -> tuple:
        # for a scheduler holding it (``store``), a plan is its token: a call sends no programs again
        if _store.published(self.token):
            return _store.plan, (self.token,)
        return _store.restored, (self.token, {k: v for k, v in self.__dict__.items() if k != "traced"}, Plan)

    def __dask_tokenize__(self) -> str:
        return self.token

    @property
    def structure_text(self) -> str:
        """What of a plan makes a call's tree what it is (``runtime.reuse``): its token."""
        return self.token

    def run_local(self, as_programs: bool, inputs: dict) -> dict:
        """The output blocks of a call run now in this thread (no cluster), from the blocks of its arguments,
        all by template keys (placeholders' and outputs' own): the per-worker program of one rank, or the
        per-block tasks in their schedule."""
        if as_programs:
            (program,) = self.built(0).programs
            env = {k: inputs[k] for k in program.inputs}
            execute(program, env, None)
            return env
        keys = [(name, *index) for (name, *_), indices in zip(self.outputs, self.block_indices) for index in indices]
        return dict(zip(keys, run_in_order(self.graph, self.schedule, keys, inputs)))

    def built(self, n_workers: int) -> Any:
        """The per-worker programs (``build.Built``) for a cluster of ``n_workers`` (0: no cluster)."""
        if n_workers not in self._built:
            layout = _build.layout_for(self.optimized, n_workers)
            self._built[n_workers] = _build.build(self.optimized, self.inputs, layout)
        return self._built[n_workers]


_PLANS: OrderedDict[tuple, Plan] = OrderedDict()  # plans by what they are made of (``plan_of``)
_PLANS_SIZE = 128
_PLANS_LOCK = threading.Lock()


def plan_of(outputs: list[ArrayExpr], placeholders: list[Placeholder], structure: Any) -> Plan:
    """``Plan(outputs, placeholders, structure)``, the same plan again for the same traced expressions under the
    same optimizer settings: nodes are named by what they are, so equal names are equal expressions (a loop body
    traced again on every call, from a function made anew each time, is optimized once). Plans that read data
    other than small host inputs (``expr.data.small_host_input``) are not kept, so that no plan keeps memory alive."""
    key = (tuple(o._name for o in outputs), tuple(p._name for p in placeholders), structure, settings_key())
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
            return plan
    plan = Plan(outputs, placeholders, structure)
    if not holds_data(outputs):
        with _PLANS_LOCK:
            _PLANS[key] = plan
            if len(_PLANS) > _PLANS_SIZE:
                _PLANS.popitem(last=False)
    return plan


def holds_data(outputs: list[ArrayExpr]) -> bool:
    """Whether these expressions read data other than small host inputs (persisted blocks, device arrays, host
    arrays over ``SMALL_HOST_BYTES``)."""
    return any(isinstance(n, (FromArray, FromGraph)) and not small_host_input(n) for n in DAG(Bundle(*outputs)).order)


def _rename(name: str, salt: str) -> str:
    prefix, _, _ = name.rpartition("-")
    return f"{prefix or name}-{hashlib.sha1(f'{name}|{salt}'.encode()).hexdigest()[:32]}"


def call_token(plan: Plan, lowering: str, workers: tuple, args: list[ArrayExpr]) -> str:
    """The token of one call of a plan (its Region's): the plan, how it is lowered, where, on what."""
    text = "|".join([plan.token, lowering, *workers, *(a._name for a in args)])
    return hashlib.sha1(text.encode()).hexdigest()


class Region(ArrayExpr):
    """One call of an accelerated function on a cluster of ``workers`` (empty: none).

    As programs (``build``, ``lower``): one task per worker owning its blocks, each running its part of the plan and
    talking to its peers directly, plus one small task per output block picking it from its worker's
    results. As tasks (``lowering`` "tasks"): the plan's per-block tasks with keys renamed for the call."""

    _parameters = ["plan", "workers", "lowering", "timeout", "transport"]


    def __dask_tokenize__(self) -> str:
        if not self._determ_token:
            plan, workers, lowering = self.operands[:3]  # (by position: Dask's lookup by name is slower)
            self._determ_token = call_token(plan, lowering, workers, self.args)
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
        mapping.update(self._arguments())
        return mapping

    @cached
    def output_names(self) -> list[str]:
        """This call's output names (``name_map``'s for the outputs alone: all a client needs of it, the rest of the
        plan's keys being renamed where the Region is lowered)."""
        return output_names(self.operands[0], self.deterministic_token, self.args)

    @cached
    def _rename_key(self) -> Callable[[Any], Any]:
        return _renamer(self.name_map)

    def _arguments(self) -> dict[str, str]:
        return _argument_names(self.plan, self.args)

    def _layer(self) -> dict:
        if self.as_programs:
            arguments, outputs = self._arguments(), self.name_map
            return _lower.layer(
                self._name, f"{self.plan.token}-{len(self.workers)}", self.plan.built(len(self.workers)),
                _renamer(arguments), _renamer(outputs),
                self.timeout, self.transport, "cupy" if "cupy" in {o[3] for o in self.plan.outputs} else "numpy",
                self.workers, self._small_arguments() if self.workers else {},
            )
        key = self._rename_key
        layer = {}
        for k, node in self.operand("plan").graph.items():
            new_key = key(k)
            subs = {d: key(d) for d in node.dependencies}
            layer[new_key] = _substitute(node, subs, new_key)
        return layer

    def _small_arguments(self) -> dict:
        """The block tasks of arguments that are small host data (``small_host_blocks``: a 0-d rate, a salt), by
        key: made inside the tasks reading them (on a cluster a task of their own is a scheduler round trip more)."""
        small: dict = {}
        for a in self.args:
            small.update(small_host_blocks(a) or {})
        return small

    def _owned_blocks(self) -> Iterator[tuple[tuple, tuple[int, ...], tuple[int, ...]]]:
        if self.as_programs:
            yield from _lower.owned(self._name, self.plan.built(len(self.workers)), self._rename_key)
            return
        key = self._rename_key
        for node in DAG(Bundle(*self.plan.optimized)).order:
            for k, index, numblocks in node._owned_blocks():
                yield key(k), index, numblocks

    def _task_annotations(self) -> dict[str, dict]:
        if not self.as_programs or self.plan.built(len(self.workers)).layout.size < 2:
            return {}
        return {"retries": dict.fromkeys(_lower.rank_keys(self._name, self.plan.built(len(self.workers))),
                                         RETRIES)}

    def direct_requests(self, wanted: set) -> list[tuple[str, dict]] | None:
        """The requests that run this call on its workers directly (``runtime.direct``) and leave its output blocks
        ``wanted``: per rank, its worker's address and the request's arguments (its program by the plan's token, its
        input blocks' keys or small values, its output blocks' plan keys and keys); None where the call cannot run
        so: not lowered as programs, a rank that talks to its peers, an input block that is neither small host data
        nor a block this client persisted, an argument returned as it is."""
        from distributed import Future

        if not self.as_programs or not self.workers:
            return None
        plan, workers = self.operand("plan"), self.workers
        built = plan.built(len(workers))
        if built.layout.size > 1 and any(map(talks_to_peers, built.programs)):
            return None
        input_key, output_key = _renamer(self._arguments()), self._rename_key
        inline = self._small_arguments()
        held = {k for a in self.args if isinstance(a, FromGraph)
                for k, v in a.operand("layer").items() if isinstance(v, Future) and v.key == k}
        requests = []
        for rank, program in enumerate(built.programs):
            inputs = []
            for k in program.inputs:
                actual = input_key(k)
                if actual in inline:
                    inputs.append((False, inline[actual]({})))
                elif actual in held:
                    inputs.append((True, actual))
                else:
                    return None
            names = {output_key(t): t for t, (r,) in built.placement.items() if r == rank}
            if any(is_key and key in names for is_key, key in inputs):
                return None
            outputs = [(t, k) for k, t in names.items() if k in wanted]
            if outputs:
                requests.append((workers[built.layout.workers[rank]],
                                 {"plan": f"{plan.token}-{len(workers)}", "rank": rank, "inputs": inputs,
                                  "outputs": outputs}))
        covered = {k for _, r in requests for _, k in r["outputs"]}
        return requests if covered == wanted else None

    def schedule(self) -> list[tuple[Any, tuple]]:
        """The plan's schedule (``runtime.schedule.run_in_order``) with this call's keys (lowered as tasks)."""
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
        region, k = self.operands
        return region.operands[0].outputs[k]

    @cached
    def _name(self) -> str:
        region, k = self.operands
        return region.output_names[k]

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
        return self if all(n == 1 for n in self.numblocks) else Finalize(self)

    @property
    def region_call(self) -> Region:
        """The call this is an output of (which ``runtime.direct`` may run on the workers directly)."""
        return self.operand("region")


def _argument_names(plan: Plan, args: list[ArrayExpr]) -> dict[str, str]:
    """The plan's placeholders' names -> the names of a call's arguments."""
    return {p._name: a._name for p, a in zip(plan.inputs, args)}


def output_names(plan: Plan, token: str, args: list[ArrayExpr]) -> list[str]:
    """The names of a call's outputs (``Region.name_map``'s, for the outputs alone): an argument returned as
    it is keeps its name."""
    arguments = _argument_names(plan, args)
    return [arguments.get(name) or _rename(name, token) for name, *_ in plan.outputs]
