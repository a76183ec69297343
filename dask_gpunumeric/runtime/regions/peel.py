"""Loop peeling: a fori_loop's first iteration traced before it, where an elementwise producer of its initial
state would otherwise be a pass over memory of its own (the kernel of the peeled iteration reading it computes
it where it reads it: an input's salt), and its last iteration traced after it, where its final state is only
reduced (the reductions join the peeled iteration's last kernel, and that state is never stored). The same
operations per element in the same order: the same values. ``plan.Plan`` applies it to the traced outputs of a
region before optimizing them, to loops over blocks where stencil tile kernels run (on NumPy blocks the peeled
iterations' interpreted sweeps cost more host time than the passes they save: docs/benchmarks.md)."""
from __future__ import annotations

from collections.abc import Sequence

from dask._expr import Expr

from ...expr import ArrayExpr, Bundle, Creation, Elemwise, FromArray, FromGraph, Gather, inputs
from ...kernels.stencil import tiles_run
from ...optimize.dag import DAG, rebuild_all
from ...optimize.programs import is_fused_reduction
from .nodes import Loop, LoopOutput, Placeholder


def peeled(outputs: Sequence[ArrayExpr]) -> list[ArrayExpr]:
    """``outputs`` with the first or last iteration of each fori_loop in them peeled where that removes a pass
    (see the module docstring), each loop peeled once."""
    outputs, done = list(outputs), set()
    while True:
        dag = DAG(Bundle(*outputs))
        for node in dag.order:
            if isinstance(node, Loop) and node._name not in done:
                replaced = _peel(node, dag)
                if replaced is not None:
                    outputs = rebuild_all(outputs, replaced[0])
                    done.add(replaced[1])
                    break
                done.add(node._name)
        else:
            return outputs


def _peel(loop: Loop, dag: DAG) -> tuple[dict[str, Expr], str] | None:
    """The replacements of ``loop``'s outputs by those of its peeled form, and the name of the loop left; None
    where peeling removes no pass."""
    body = loop.body
    traced = getattr(body, "traced", None)  # (a plan unpickled on a scheduler has none: never peeled there)
    if loop.kind != "fori" or traced is None or loop.count < 2 or not loop.state or not tiles_run(loop.state[0].backend):
        return None
    n = loop.n_state
    states, index, invariants = body.inputs[:n], body.inputs[n], body.inputs[n + 1:]
    body_dag = DAG(Bundle(*traced))
    if index._name in body_dag.position:  # (the iteration number would shift)
        return None
    outputs = _used_outputs(loop, dag)
    back = any(_only_reduced(o, dag) and _computed(traced[o.operand("k")], states) for o in outputs)
    front = loop.count >= 2 + back and any(
        _pointwise_producer(s, loop, dag) and _read_pointwise(p, body_dag) for s, p in zip(loop.state, states))
    if not (front or back):
        return None
    fixed = dict(zip([p._name for p in invariants], loop.invariants))
    initial = list(loop.state)
    if front:
        initial = _iteration(traced, states, initial, fixed)
    rest = Loop(body, loop.count - front - back, n, loop.kind, *initial, *loop.invariants)
    final = [LoopOutput(rest, k) for k in range(n)]
    if back:
        final = _iteration(traced, states, final, fixed)
    return {o._name: final[o.operand("k")] for o in outputs}, rest._name


def _iteration(traced: Sequence[ArrayExpr], states: Sequence[Expr], values: Sequence[Expr],
               fixed: dict[str, Expr]) -> list[ArrayExpr]:
    """One iteration of the body from the state ``values`` (the invariants' placeholders as in ``fixed``)."""
    return rebuild_all(traced, {**fixed, **{p._name: v for p, v in zip(states, values)}})


def _used_outputs(loop: Loop, dag: DAG) -> list[LoopOutput]:
    return [c for c in dag.consumers[loop._name] if isinstance(c, LoopOutput)]


def _only_reduced(node: Expr, dag: DAG) -> bool:
    """Whether everything ``node`` feeds ends in full reductions that a kernel computing it folds in, through
    elementwise work alone (``sum(x * x)``): nothing stores it."""
    consumers = dag.consumers[node._name]
    return bool(consumers) and all(
        is_fused_reduction(c) and len(c.operand("axes")) == c.array.ndim
        or isinstance(c, Elemwise) and c.ndim and _only_reduced(c, dag) for c in consumers)


def _computed(output: Expr, states: Sequence[Expr]) -> bool:
    """Whether a body's output is elementwise work (a kernel a reduction of it joins), not a state as it was."""
    return isinstance(output, Elemwise) and all(output._name != s._name for s in states)


def _pointwise_producer(initial: Expr, loop: Loop, dag: DAG) -> bool:
    """Whether an initial state element is elementwise work on the region's arguments or data of its own shape
    (and any 0-d values), read by the loop alone: a pass of its own, stored only for the loop's first kernel."""
    if not isinstance(initial, Elemwise) or not initial.ndim or any(
            c._name != loop._name for c in dag.consumers[initial._name]):
        return False
    return all(not d.ndim or d.shape == initial.shape and isinstance(d, (Placeholder, FromArray, FromGraph, Creation))
               for d in inputs(initial))


def _read_pointwise(state: Expr, body: DAG) -> bool:
    """Whether the body reads a state element in elementwise work and shifted views alone (kernels that can
    compute its producer where they read it)."""
    return all(isinstance(c, (Elemwise, Gather)) for c in body.consumers[state._name])
