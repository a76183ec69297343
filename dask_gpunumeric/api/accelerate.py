"""``gnp.accelerate``: trace a function of Arrays once per signature, optimize all of its outputs together,
and reuse that plan on every later call.

Beyond the automatic fusion every computation gets, its outputs fuse jointly (shared subexpressions computed
once), later calls with the same argument shapes, dtypes, chunks and backends skip tracing and optimizing,
intermediates are never materialized, and the call runs as one program per worker (``runtime.regions``).
With its array arguments in memory and no cluster, a call dispatches at once and returns persisted outputs.
What each of these means for users: docs/fusion.md."""
from __future__ import annotations

import contextlib
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

from .. import config
from ..expr import ArrayExpr, Bundle, FromArray, FromGraph, TracedValueError
from ..kernels.checks import Deferral, unread_checks, verify, with_checks
from ..optimize import settings_key
from ..optimize.dag import DAG
from ..runtime import cluster as _cluster
from ..runtime.regions.nodes import Loop, Placeholder
from ..runtime.regions.plan import Plan, Region, RegionOutput, call_token, output_names
from . import guards as _guards
from .array import Array
from .scalars import KINDS, Param, Scalars, ScalarTrace

_CACHE_SIZE = 128
_PLAIN = "plain"  # the plan of a signature whose trace needed an argument's value: the function run as plain code
_TRACING = contextvars.ContextVar("gnp_tracing", default=False)


class AccelerateWarning(UserWarning):
    """An accelerated function that cannot be traced for some arguments runs as plain code for them."""


def tracing() -> bool:
    """Whether an accelerated function is being traced in this context."""
    return _TRACING.get()


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
    and reuse the optimized plan on later calls (see the module docstring for what this adds). Python and
    NumPy scalar arguments select the plan by type, their values given at each call (``scalars``), except
    those whose values a trace needed: by value from then on."""
    plans: dict[Any, tuple[Plan, list]] = {}
    scalar_inputs: dict[Any, Scalars] = {}  # per signature whose plan has scalar placeholders
    by_value: set[int | str] = set()  # the scalar arguments whose values a trace needed
    plain: set[tuple] = set()  # the array arguments' signatures whose values a trace needed: run as plain code
    lock = threading.Lock()

    def plan_for(named: list, arrays: list, scalars: list, args: tuple, kwargs: dict) -> tuple[Plan, Scalars | None]:
        # arrays by position (an int) or keyword (a str); scalars traced by type; the other arguments with
        # their types; and the optimizer's settings (a plan is optimized when traced)
        traced = {i for i, _ in scalars}
        static = tuple((i, _TRACED, type(a)) if i in traced else (i, _static_key(a))
                       for i, a in named if not isinstance(a, Array))
        try:
            hash(static)  # (the rest is hashable: the whole signature is hashed once, by the lookup)
        except TypeError:
            raise TypeError("gnp.accelerate: non-array arguments must be hashable (they select the plan)") from None
        signature = (tuple((i, a.shape, a.chunks, a.dtype.str, a.backend) for i, a in arrays), static,
                     settings_key())
        if signature[0] in plain:
            return _PLAIN, None
        with lock:
            plan, guard_events = plans.get(signature, (None, ()))
            inputs = scalar_inputs.get(signature) if scalar_inputs else None
        if plan is not None:  # the guards the trace met, checked again under this call's modes
            _guards.replay(guard_events)
            return plan, inputs
        with _guards.recorded() as guard_events:
            traced_plan = _trace(func, args, kwargs, arrays, scalars, signature)
        if traced_plan is _PLAIN:  # whatever the scalars (plain code meets the guards itself)
            with lock:
                plain.add(signature[0])
            return _PLAIN, None
        if isinstance(traced_plan, frozenset):  # scalars whose values were needed: by value from now on
            by_value.update(traced_plan)
            return plan_for(named, arrays, [(i, a) for i, a in scalars if i not in traced_plan], args, kwargs)
        plan, inputs = traced_plan
        with lock:
            if len(plans) >= _CACHE_SIZE:
                scalar_inputs.pop(oldest := next(iter(plans)), None)
                plans.pop(oldest)
            plans[signature] = plan, guard_events
            if inputs is not None:
                scalar_inputs[signature] = inputs
        return plan, inputs

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tracing():  # called by a function being traced: part of its plan
            return func(*args, **kwargs)
        named = [*enumerate(args), *sorted(kwargs.items())]
        arrays = [(i, a) for i, a in named if isinstance(a, Array)]
        scalars = [(i, a) for i, a in named if type(a) in KINDS and i not in by_value]
        plan, inputs = plan_for(named, arrays, scalars, args, kwargs)
        if plan is _PLAIN:
            return func(*args, **kwargs)
        extra = [] if inputs is None else inputs.arguments([a for _, a in scalars])
        if extra is None:  # values this plan does not take: a plan of their own
            plan, _ = plan_for(named, arrays, [], args, kwargs)
            extra = []
        outputs = call_plan(plan, [a.expr for _, a in arrays], extra)
        return _unflatten([Array(o) for o in outputs], plan.structure)

    wrapper.plans = plans  # type: ignore[attr-defined]
    return wrapper


def call_plan(plan: Plan, args: list[ArrayExpr], extra: list[ArrayExpr]) -> list[ArrayExpr]:
    """The outputs of one call of ``plan`` on the expressions of its array arguments and of its scalar inputs
    (``extra``), in its placeholders' order: run now, in this thread, where the arrays are in memory and no cluster
    is active (``dispatch`` "auto"), else the outputs of a Region."""
    local = _in_memory(args)  # (the scalars' arguments are)
    args = [*args, *extra]
    lowering, transport, timeout = _settings()
    workers = tuple(_cluster.active_workers())
    if not workers and config.get("dispatch") == "auto" and local:
        return _run_now(plan, args, lowering, transport, timeout)
    region = _region_of(plan, args, workers, lowering, transport, timeout)
    return [RegionOutput(region, k) for k in range(len(plan.outputs))]


@contextlib.contextmanager
def traced() -> Iterator[None]:
    """A function traced in this context (``tracing()``): operations build a plan's expressions."""
    token = _TRACING.set(True)
    try:
        yield
    finally:
        _TRACING.reset(token)


_TRACED = "traced"  # a scalar argument's entry in a signature: by type
_GUARD_ERRORS = (_guards.PromotionError, _guards.FetchError, _guards.ScalarIndexingError)


def _in_memory(args: list[ArrayExpr]) -> bool:
    """Are these expressions blocks already in this process (persisted locally, or cut from an array)?"""
    return all(isinstance(a, FromArray) or isinstance(a, FromGraph) and a.in_memory for a in args)


def _run_now(plan: Plan, args: list[ArrayExpr], lowering: str, transport: str, timeout: float) -> list[FromGraph]:
    """A call run now, in this thread, without a cluster: its outputs as persisted blocks, named as its
    Region's outputs would be. As programs (one rank) or, with CuPy blocks, as tasks in their plan's order
    (the kernels queue on the device), straight from the plan (``Plan.run_local``); with Dask callbacks
    active (they see Dask's scheduler run the tasks), or as tasks on NumPy blocks (threads help), the
    Region's tasks on Dask's local schedulers."""
    as_programs = lowering == "programs" or plan.has_loops
    in_order = as_programs or any(o[3] == "cupy" for o in plan.outputs)
    with Deferral() as deferral:  # device checks left by the tasks (a solve's status), carried by the outputs
        if in_order and not dask.callbacks.Callback.active:
            blocks = plan.run_local(as_programs, _argument_blocks(plan, args))
            names = _output_names(plan, lowering, args)  # (worked out while the device runs the kernels)
        else:
            names = _output_names(plan, lowering, args)
            region = Region(plan, (), lowering, timeout, transport, *args)
            graph = region._layer()
            for a in args:
                graph.update(a._layer())
            renamed = [((new, *index), (o[0], *index)) for o, new, indices in
                       zip(plan.outputs, names, plan.block_indices) for index in indices]
            get = dask.local.get_sync if in_order else dask.threaded.get
            blocks = dict(zip((template for _, template in renamed), get(graph, [key for key, _ in renamed])))
    checks = [*deferral.checks,
              *(c for a in args if isinstance(a, FromGraph) for c in unread_checks(a.operand("layer")))]
    if len(plan.outputs) > 1:  # which output a check belongs to is not known: read them now
        verify(checks)
    return [FromGraph.of(with_checks({(new, *index): blocks[(name, *index)] for index in indices}, checks), new,
                         chunks, dtype, backend)
            for (name, chunks, dtype, backend), new, indices in zip(plan.outputs, names, plan.block_indices)]


def _output_names(plan: Plan, lowering: str, args: list[ArrayExpr]) -> list[str]:
    """The names of a local call's outputs, as its Region's would be."""
    return output_names(plan, call_token(plan, lowering, (), args), args)


def _argument_blocks(plan: Plan, args: list[ArrayExpr]) -> dict:
    """The blocks of in-memory arguments by their placeholders' keys."""
    blocks = {}
    for p, indices, a in zip(plan.inputs, plan.input_indices, args):
        held = p._name
        if isinstance(a, FromGraph):
            layer, name = a.operand("layer"), a._name
            for index in indices:
                blocks[(held, *index)] = layer[(name, *index)]
        else:
            for index in indices:
                blocks[(held, *index)] = a.block(index)
    return blocks


def _static_key(value: Any) -> Any:
    """A non-array argument as part of a plan's key: its value with its type, through tuples (1, 1.0 and
    True are equal in Python but trace to different dtypes), and a float or complex by its text (0.0 == -0.0, of
    one hash, but a plan traced on one holds that zero; complex(1, -0.0) == complex(1, 0.0); NaN != NaN)."""
    if isinstance(value, tuple):
        return type(value), tuple(_static_key(v) for v in value)
    if isinstance(value, (float, complex, np.inexact)):  # (by its text: the signs of zeros, NaN equal to itself)
        return type(value), repr(value)
    return type(value), value


def _trace(func: Callable[..., Any], args: tuple, kwargs: dict, arrays: list[tuple[int | str, Array]],
           scalars: list[tuple[int | str, Any]], signature: Any) -> tuple[Plan, Scalars | None] | frozenset | str:
    """The plan of ``func`` traced on placeholders of its arrays and Params of its ``scalars``, with what calls
    make the scalar placeholders from; or the positions of the scalars to trace by value instead: those whose
    values the trace needed, or all of them where it failed otherwise (by value, an error is the function's
    own); or ``_PLAIN`` where it needed the value of an array argument, with a warning."""
    sig_token = hashlib.sha1(repr(signature).encode()).hexdigest()[:16]
    placeholders = [Placeholder(i, sig_token, a.chunks, a.dtype, a.backend) for i, a in arrays]
    trace = ScalarTrace(sig_token, [v for _, v in scalars]) if scalars else None
    traced_args, traced_kwargs = list(args), dict(kwargs)
    for i, value in [*zip((i for i, _ in arrays), map(Array, placeholders)),
                     *zip((i for i, _ in scalars), trace.leaves if trace else ())]:
        if isinstance(i, str):
            traced_kwargs[i] = value
        else:
            traced_args[i] = value
    try:
        with traced():
            outputs, structure = _flatten(func(*traced_args, **traced_kwargs))
    except Exception as error:
        if trace is None and isinstance(error, TracedValueError):
            _guards.warn_at_user_site(
                f"gnp.accelerate: {getattr(func, '__qualname__', func)} needs the value of an array computed from "
                f"its arguments while it is traced, so it runs as plain code (unfused, traced on every call) for "
                f"arguments like these. To accelerate it, compute that value before the call and pass it in as "
                f"a Python number, or keep it an Array (gnp.where for a choice)", AccelerateWarning)
            return _PLAIN
        if trace is None or isinstance(error, _GUARD_ERRORS) and not trace.needed:
            raise  # (a guard's error depends on types alone: the same by value)
        return _needed(scalars, trace.needed)
    exprs = [o.expr for o in outputs]
    if trace is None:
        return Plan(exprs, placeholders, structure), None
    if trace.needed or _holds_param(exprs):
        return _needed(scalars, trace.needed)
    return Plan(exprs, [*placeholders, *trace.inputs.values()], structure), trace.scalars() if trace.inputs else None


def _needed(scalars: list[tuple[int | str, Any]], leaves: set[int]) -> frozenset:
    """The positions of the scalar arguments ``leaves`` (all of them where none is named)."""
    return frozenset(i for k, (i, _) in enumerate(scalars) if not leaves or k in leaves)


def _holds_param(exprs: list[ArrayExpr]) -> bool:
    """Does any node of these expressions (loop bodies included) hold a traced scalar other than through its
    placeholders (a keyword, a parameter)?"""
    def holds(value: Any) -> bool:
        if type(value) is Param:
            return True
        if isinstance(value, (tuple, list)):
            return any(map(holds, value))
        return isinstance(value, dict) and (holds(list(value)) or holds(list(value.values())))

    for node in DAG(Bundle(*exprs)).order:
        if isinstance(node, Loop) and _holds_param(node.body.optimized):
            return True
        if any(holds(o) for o in node.operands if not isinstance(o, ArrayExpr)):
            return True
    return False


_REGION_SETTINGS = ("region-lowering", "region-transport", "region-timeout")
_CHECKED_SETTINGS: dict[tuple, tuple[str, str, float]] = {}  # the settings' values -> ``_settings``' answer


def _settings() -> tuple[str, str, float]:
    """How regions are lowered, their transport and their timeout in seconds, checked (once per set of values:
    read on every call)."""
    values = config.values(_REGION_SETTINGS)
    try:
        return _CHECKED_SETTINGS[values]
    except (KeyError, TypeError):  # (TypeError: an unhashable value, refused below)
        pass
    from dask.utils import parse_timedelta

    lowering, transport, timeout = values
    if lowering not in ("programs", "tasks"):
        raise ValueError(f"gpunumeric.region-lowering must be 'programs' or 'tasks', got {lowering!r}")
    if transport not in ("auto", "comm", "nccl"):
        raise ValueError(f"gpunumeric.region-transport must be 'auto', 'comm' or 'nccl', got {transport!r}")
    checked = lowering, transport, float(parse_timedelta(timeout))
    if len(_CHECKED_SETTINGS) < 64 and isinstance(timeout, (str, int, float)):  # (a few sets of values met)
        _CHECKED_SETTINGS[values] = checked
    return checked


def _region_of(plan: Plan, args: list[ArrayExpr], workers: tuple[str, ...], lowering: str, transport: str,
               timeout: float) -> Region:
    """A call of a plan on ``workers`` (those of the active cluster). Its programs are built here, before
    the Region travels to the scheduler (which keeps the plan: later calls name it), and the cluster gets the
    plugins of the plan store, of sibling outputs and of multi-worker regions (once)."""
    region = Region(plan, workers, lowering, timeout, transport, *args)
    if workers:
        if region.as_programs and plan.built(len(workers)).layout.size > 1:  # (built before it is handed over)
            from ..runtime.regions.transport import install

            install()
        from ..runtime.regions.store import watch
        from ..runtime.regions.reports import report_siblings_together

        watch()  # later calls name the plan once the scheduler holds it
        report_siblings_together()  # a region's output blocks reported to the scheduler in one message
    return region
