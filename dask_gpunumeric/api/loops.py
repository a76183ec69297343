"""``gnp.fori_loop`` and ``gnp.while_loop``: loops that run inside a region, their body traced once.

A Python loop over lazy operations grows the expression by one copy of its body per iteration; these
trace the body once, optimize it on its own (one set of fused kernels), and run it ``n`` times (or while a
condition holds) inside the region's program on each worker (``runtime.regions``): a 10,000-step loop is one
region, not 10,000 graph layers. The condition of a ``while_loop`` is computed on the workers (replicated:
every worker gets the same value) and read there, without a round trip to the client.

While its body is traced, everything it computes from values that do not change between iterations
(arrays captured from outside, or computed from them) is hoisted out: computed once before the loop and
read by every iteration; constants (``full``) stay in the body, where they cost nothing in kernels.

Outside ``gnp.accelerate`` a loop is a region of its own.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from ..codegen.types import TILE_SWEEPS
from ..expr import ArrayExpr, Bundle, Creation, Elemwise, FromArray, FromGraph, Gather, SetItem, inputs
from ..kernels.stencil import tiles_run
from ..optimize import settings_key
from ..optimize.dag import DAG, rebuild_all
from ..optimize.rotation import Rotation, accumulated, rotated_body, rotation_of, substituted
from ..runtime.regions.nodes import Loop, LoopOutput, Placeholder
from ..runtime.regions.plan import plan_of
from . import guards as _guards
from .accelerate import _flatten, _unflatten, call_plan, traced, tracing
from .function_keys import function_key
from .array import Array


def fori_loop(n: int, body: Callable[[Array, Any], Any], state: Any, *, unroll: int | str = "auto") -> Any:
    """``for i in range(n): state = body(i, state)``, with ``body`` traced once and the loop run inside the
    region on the workers (see the module docstring).

    ``state`` is an Array or a tuple/list/dict of Arrays (numbers become 0-d Arrays); ``body`` takes the
    iteration number ``i`` (a 0-d int64 Array) and the state, and returns a state of the same structure,
    shapes and dtypes. ``n`` is a Python int: for a count known only from data, use ``while_loop``.

    ``unroll`` (as in ``jax.lax.fori_loop``): steps traced into one iteration of the loop (the last
    ``n % unroll`` steps run after it), the same results; a body of stencil sweeps then gives the
    optimizer ``unroll`` consecutive sweeps to group into one task and fewer kernels. ``"auto"`` (the default)
    chooses by the body, traced once, where stencil tile kernels run (CuPy blocks): ``AUTO_UNROLL`` steps where the
    loop is rotated and a state element is only accumulated (CG's ``x``: updated once per iteration from every step's
    stored ``p``); as many steps as a tile kernel takes sweeps (``TILE_SWEEPS``) where each step is one stencil sweep
    of the state (Gray-Scott's; heat's, with a coefficient field captured from outside or written by setitem); else
    one step. Either from two iterations' worth of steps on."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"fori_loop: the number of iterations must be a Python int, got {type(n).__name__}; "
                        "for a number known only from data, use gnp.while_loop")
    if n < 0:
        raise ValueError(f"fori_loop: the number of iterations must be non-negative, got {n}")
    n = int(n)
    if isinstance(unroll, str) and unroll == "auto":
        return _loop("fori", body, None, state, n, auto=True)
    if isinstance(unroll, bool) or not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise ValueError(f"fori_loop: unroll must be a positive int or 'auto', got {unroll!r}")
    return _unrolled(n, body, state, int(unroll))


AUTO_UNROLL = 3  # steps per iteration of a rotated loop that accumulates, under unroll="auto"


def _unrolled(n: int, body: Callable[[Array, Any], Any], state: Any, unroll: int) -> Any:
    """``fori_loop`` of ``unroll`` steps per iteration, then the last ``n % unroll`` steps."""
    if unroll == 1 or n < unroll:
        return _loop("fori", body, None, state, n)
    from .creation import asarray

    def steps(i: Array, state: Any) -> Any:
        for j in range(unroll):
            state = body(i * unroll + j, state)
        return state

    steps.__qualname__ = f"{getattr(body, '__qualname__', repr(body))}*{unroll}"  # names the traced loop
    state = _loop("fori", steps, None, state, n // unroll)
    for i in range(n - n % unroll, n):  # the iteration number as the loop's: a 0-d int64 Array
        state = body(asarray(np.int64(i)), state)
    return state


def while_loop(cond: Callable[[Any], Array], body: Callable[[Any], Any], state: Any, *,
               max_iter: int | None = None) -> Any:
    """``while cond(state): state = body(state)``, at most ``max_iter`` times (None: no bound), with
    ``cond`` and ``body`` traced once and the loop run inside the region on the workers, which evaluate the
    condition themselves (see the module docstring).

    ``cond`` returns a 0-d boolean Array (for example ``gnp.sum(r * r) > tol ** 2``); ``body`` returns a
    state of the same structure, shapes and dtypes as it takes."""
    if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer))
                                 or max_iter < 0):
        raise ValueError(f"while_loop: max_iter must be a non-negative int or None, got {max_iter!r}")
    return _loop("while", body, cond, state, None if max_iter is None else int(max_iter))


def _loop(kind: str, body: Callable[..., Any], cond: Callable[..., Any] | None, state: Any,
          count: int | None, auto: bool = False) -> Any:
    """The loop's final state; ``auto``: unrolled as the traced body suggests (``fori_loop``'s "auto")."""
    arrays, structure = _state_arrays(kind, state)
    if not tracing():  # a region of its own
        return _unflatten(_standalone(kind, body, cond, count, structure, auto, *arrays), structure)
    return _unflatten(_traced_loop(kind, body, cond, count, arrays, structure, auto), structure)


def _standalone(kind: str, body: Callable[..., Any], cond: Callable[..., Any] | None, count: int | None,
                structure: Any, auto: bool, *arrays: Array) -> list[Array]:
    """A loop outside ``accelerate``: a region of its own. The data the traced loop reads (the state, arrays the body
    captured) are the region's arguments, placeholders in its plan, which so holds no data and serves later calls on
    other data of the same shapes. Its plan is made once for the same traced expressions (``plan_of``: a body made
    anew on every call, as a lambda is, traces to the same ones), and the trace itself is skipped where the body (and
    condition) are functions of the same key (``function_key``) as a call's before, which captured no data (the
    guards that trace met checked again)."""
    signature = (kind, count, auto, tuple((a.chunks, a.dtype.str, a.backend) for a in arrays), settings_key())
    key = _functions_key(body, cond)
    with _TRACES_LOCK:
        known = None if key is None else _TRACES.get((signature, structure, key))
        if known is not None:
            _TRACES.move_to_end((signature, structure, key))
    if known is not None:
        plan, guard_events = known
        _guards.replay(guard_events)
        return [Array(o) for o in call_plan(plan, [a.expr for a in arrays], [])]
    token = hashlib.sha1(repr(signature).encode()).hexdigest()[:16]
    states = [Placeholder(j, f"{token}-standalone", a.chunks, a.dtype, a.backend) for j, a in enumerate(arrays)]
    with _guards.recorded() as guard_events, traced():
        outputs = [o.expr for o in _traced_loop(kind, body, cond, count, [Array(p) for p in states], structure, auto)]
    captured = [n for n in DAG(Bundle(*outputs)).order if isinstance(n, (FromArray, FromGraph))]
    held = [Placeholder(m, f"{token}-captured", n.chunks, n.dtype, n.backend) for m, n in enumerate(captured)]
    outputs = rebuild_all(outputs, {n._name: p for n, p in zip(captured, held)})
    plan = plan_of(outputs, [*states, *held], None)
    if key is not None and not captured:
        with _TRACES_LOCK:
            _TRACES[signature, structure, key] = plan, guard_events
            if len(_TRACES) > _TRACES_SIZE:
                _TRACES.popitem(last=False)
    return [Array(o) for o in call_plan(plan, [*(a.expr for a in arrays), *captured], [])]


_TRACES: OrderedDict[tuple, tuple[Any, list]] = OrderedDict()  # loops outside accelerate: plans by function keys
_TRACES_SIZE = 128
_TRACES_LOCK = threading.Lock()


def _functions_key(body: Callable[..., Any], cond: Callable[..., Any] | None) -> Any:
    """The key of a loop's body and condition (``function_key``), or None where either has none."""
    keys = (function_key(body), None if cond is None else function_key(cond))
    if keys[0] is None or cond is not None and keys[1] is None:
        return None
    try:
        hash(keys)
    except TypeError:  # (a value of a kind keys take that is no key: a NumPy scalar of a structured dtype)
        return None
    return keys


def _traced_loop(kind: str, body: Callable[..., Any], cond: Callable[..., Any] | None, count: int | None,
                 arrays: list[Array], structure: Any, auto: bool) -> list[Array]:
    """The loop's results, as the outputs of a Loop node (while a region is traced)."""
    text = "|".join([kind, getattr(body, "__qualname__", repr(body)), repr(count), *(a.name for a in arrays)])
    signature = hashlib.sha1(text.encode()).hexdigest()[:16]
    states = [Placeholder(j, f"{signature}-state", a.chunks, a.dtype, a.backend) for j, a in enumerate(arrays)]
    traced = _unflatten([Array(p) for p in states], structure)
    extra: list[Placeholder] = []
    if kind == "fori":
        backend = arrays[0].backend if arrays else "numpy"
        index = Placeholder(0, f"{signature}-index", (), np.dtype(np.int64), backend)
        extra.append(index)
        result = body(Array(index), traced)
    else:
        result = body(traced)
    outputs = _matching_state(kind, result, arrays, structure)
    rotates = kind == "fori" and count >= 2 and _rotates(backend)
    rotation = rotation_of(outputs, states, extra, bool(config.get("stencil-quotients"))) if rotates else None
    steps = _auto_steps(outputs, states, extra, rotation, backend) if auto else 1
    if steps > 1 and count >= 2 * steps:
        final = _unrolled(count, body, _unflatten(arrays, structure), steps)
        return [Array(e) for e in _matching_state(kind, final, arrays, structure)]
    if rotation is not None:
        return _rotated_loop(rotation, outputs, states, extra, arrays, count, signature)
    flag: list[ArrayExpr] = []
    if cond is not None:
        flag = [_condition(cond(_unflatten(arrays, structure))).expr]
        outputs.append(_condition(cond(_unflatten([Array(o) for o in outputs], structure))).expr)
    return _loop_outputs(kind, outputs, [*states, *extra], [a.expr for a in arrays], flag, count, signature,
                         len(arrays))


def _auto_steps(outputs: list[ArrayExpr], states: list[Placeholder], extra: list[Placeholder],
                rotation: Rotation | None, backend: str) -> int:
    """``fori_loop``'s "auto" unroll for a body of these ``outputs`` (see there); 1: not unrolled."""
    if rotation is not None and accumulated(outputs, states, rotation.k):
        return AUTO_UNROLL
    if not tiles_run(backend):
        return 1
    ndim = _one_sweep(outputs, states, extra)
    return 1 if ndim is None else TILE_SWEEPS.get(ndim, 1)


def _one_sweep(outputs: list[ArrayExpr], states: list[Placeholder], extra: list[Placeholder]) -> int | None:
    """The number of axes of a body each of whose outputs is one stencil sweep of the state: elementwise work on
    the states, on values that do not change between iterations (fields captured from outside: a coefficient
    array) and on 0-d values, the states read in place or through views (slices, rolls, pads) of the states and
    such values alone, one view at least, the result possibly written into a region of such work (setitem);
    else None."""
    names = {s._name for s in states}
    varying = _varying(DAG(Bundle(*outputs)), [*states, *extra])
    viewed = False
    stack, seen = list(outputs), set()
    while stack:
        node = stack.pop()
        if node._name in seen or node._name in names or node._name not in varying or not node.ndim:
            continue
        seen.add(node._name)
        if isinstance(node, Elemwise):
            stack.extend(a for a in node.args if isinstance(a, ArrayExpr))
        elif isinstance(node, SetItem):  # ``v = u.copy(); v[1:-1, 1:-1] = ...``: a sweep of the interior
            stack.extend(a for a in (node.operand("array"), node.operand("value")) if isinstance(a, ArrayExpr))
        elif isinstance(node, Gather) and all(s._name in names or s._name not in varying for s in node.sources):
            viewed = True
        else:
            return None
    return max(o.ndim for o in outputs) if viewed else None


def _varying(dag: DAG, placeholders: list[Placeholder]) -> set[str]:
    """The names of the nodes of ``dag`` that depend on a placeholder: what changes from one iteration to the next."""
    varying = {p._name for p in placeholders}
    for node in dag.order:
        if any(d._name in varying for d in inputs(node)):
            varying.add(node._name)
    return varying


def _rotates(backend: str) -> bool:
    """Whether a fori_loop over blocks of ``backend`` is rotated (``gpunumeric.loop-rotation``): always, never, or
    ("auto") where stencil tile kernels run, which make the update and the stencil reading it one kernel (on
    NumPy blocks the rotated plan costs more host time than it saves)."""
    setting = config.get("loop-rotation")
    if setting == "auto":
        return tiles_run(backend)
    if not isinstance(setting, bool):
        raise ValueError(f"gpunumeric.loop-rotation must be 'auto', True or False, got {setting!r}")
    return setting


def _loop_outputs(kind: str, outputs: list[ArrayExpr], placeholders: list[Placeholder], initial: list[ArrayExpr],
                  flag: list[ArrayExpr], count: int | None, signature: str, n_state: int) -> list[Array]:
    """The final state of a loop of ``outputs`` over ``placeholders`` (the state's first) from ``initial``."""
    outputs, invariants = _hoist_invariants(outputs, placeholders, signature)
    plan = plan_of(outputs, [*placeholders, *(ph for ph, _ in invariants)], None)
    loop = Loop(plan, count, len(initial), kind, *initial, *flag, *(e for _, e in invariants))
    return [Array(LoopOutput(loop, j)) for j in range(n_state)]


def _rotated_loop(rotation: Rotation, outputs: list[ArrayExpr], states: list[Placeholder], index: list[Placeholder],
                  arrays: list[Array], count: int, signature: str) -> list[Array]:
    """A fori_loop rotated (``optimize.rotation``): its first iteration as it is, then ``count - 1`` whose body
    starts with the update of element ``k`` that the previous one ended with, then that update once more.
    The rotated loop's state: element ``k`` before its update, the others as they are, then the values
    the update reads."""
    k, _, values = rotation
    previous = Placeholder(k, f"{signature}-previous", states[k].chunks, states[k].dtype, states[k].backend)
    carried = [Placeholder(len(states) + m, f"{signature}-state", v.chunks, v.dtype, v.backend)
               for m, v in enumerate(values)]
    head, body = rotated_body(outputs, states, rotation, previous, carried)
    first = substituted([*outputs, *values], states, [a.expr for a in arrays])
    initial = [a.expr if j == k else o for j, (o, a) in enumerate(zip(first, arrays))] + first[len(arrays):]
    placeholders = [previous if j == k else s for j, s in enumerate(states)] + carried
    final = _loop_outputs("fori", body, [*placeholders, *index], initial, [], count - 1, signature, len(body))
    (last,) = substituted([head], placeholders, [f.expr for f in final])
    return [Array(last) if j == k else f for j, f in enumerate(final[: len(states)])]


def _is_leaf(value: Any) -> bool:
    """Whether a value is an element of a loop's state: an Array or a number."""
    return isinstance(value, (Array, bool, int, float, complex, np.generic)) or (
        isinstance(value, np.ndarray) and value.ndim == 0)


def _state_arrays(kind: str, state: Any) -> tuple[list[Array], Any]:
    """The Arrays of a state (numbers made 0-d Arrays) and its structure."""
    from .creation import asarray

    try:
        leaves, structure = _flatten(state, _is_leaf)
    except TypeError:
        raise TypeError(f"{kind}_loop: the state must hold Arrays or numbers, in tuples, lists or dicts; "
                        f"got {state!r:.200}") from None
    return [v if isinstance(v, Array) else asarray(v) for v in leaves], structure


def _matching_state(kind: str, result: Any, arrays: list[Array], structure: Any) -> list[ArrayExpr]:
    """The body's returned state as expressions, checked against the state it took (chunks made equal)."""
    from .creation import full

    try:
        leaves, got = _flatten(result, _is_leaf)
    except TypeError:
        got = None
    if got != structure:
        raise TypeError(f"{kind}_loop: body must return a state of the structure it takes; it took "
                        f"{_describe(structure)} and returned {result!r:.200}")
    out = []
    for j, (new, old) in enumerate(zip(leaves, arrays)):
        if not isinstance(new, Array):
            new = full((), new, dtype=old.dtype)
        if new.shape != old.shape or new.dtype != old.dtype:
            raise TypeError(f"{kind}_loop: body must keep each state element's shape and dtype; element {j} "
                            f"went from {old.dtype}{list(old.shape)} to {new.dtype}{list(new.shape)}")
        out.append((new if new.chunks == old.chunks else new.rechunk(old.chunks)).expr)
    return out


def _describe(structure: Any) -> str:
    return "one Array" if structure == "array" else f"a {structure[0].__name__}"


def _condition(value: Any) -> Array:
    if not isinstance(value, Array) or value.shape != () or value.dtype != np.bool_:
        what = (f"shape {value.shape} dtype {value.dtype}" if isinstance(value, Array) else type(value).__name__)
        raise TypeError(f"while_loop: cond must return a 0-d boolean Array (for example gnp.sum(r * r) > tol), "
                        f"got {what}")
    return value


def _hoist_invariants(outputs: list[ArrayExpr], placeholders: list[Placeholder], signature: str
                      ) -> tuple[list[ArrayExpr], list[tuple[Placeholder, ArrayExpr]]]:
    """The body's outputs with every largest subexpression that depends on no placeholder (the loop
    invariants) replaced by a placeholder of its own, and those (placeholder, invariant) pairs."""
    dag = DAG(Bundle(*outputs))
    varying = _varying(dag, placeholders)
    output_names = {o._name for o in outputs}
    hoisted = [n for n in dag.order if n._name not in varying and not isinstance(n, Bundle) and not _constant(n) and (
        n._name in output_names or any(c._name in varying for c in dag.consumers[n._name]))]
    invariants = [(Placeholder(m, f"{signature}-invariant", n.chunks, n.dtype, n.backend), n)
                  for m, n in enumerate(hoisted)]
    replaced = {n._name: ph for ph, n in invariants}
    return rebuild_all(outputs, replaced), invariants


def _constant(node: ArrayExpr) -> bool:
    """A constant array (``full``) used inside the loop: kept there, where kernels take it as a scalar and
    the stencil pass sees it (the edges of ``pad``), rather than hoisted as an opaque invariant."""
    return isinstance(node, Creation) and node.operand("kind") == "full"
