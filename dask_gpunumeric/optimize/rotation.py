"""Loop rotation: a loop body that ends with an elementwise update of a state element from the other results
(CG's ``p = r + beta * p``) computes that update at the start of the next iteration instead, where the
stencil pass that first reads the element computes it on the fly and stores it once: one pass over the
vectors less per iteration. The same operations in the same order per element: the same values, bit for bit.
``api.loops`` applies it (setting ``gpunumeric.loop-rotation``) with ``rotated_body``."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from dask._expr import Expr

from ..expr import ArrayExpr, Bundle, Elemwise, Gather
from .dag import DAG, rebuild_all
from .programs import computed_in_readers


class Rotation(NamedTuple):
    """State element ``k`` of a loop, updated last in its body by ``update``: elementwise of element ``k``
    itself, of other outputs of the body, and of ``values`` computed in it (carried as more state): 0-d values,
    and arrays of one block that the body reads elsewhere too, at a shift (an unrolled body's previous ``p``)."""

    k: int
    update: ArrayExpr
    values: list[ArrayExpr]


def rotation_of(outputs: Sequence[ArrayExpr], states: Sequence[ArrayExpr], fixed: Sequence[ArrayExpr],
                quotients: bool = False) -> Rotation | None:
    """The first state element a loop body (``outputs`` over the ``states`` placeholders) may update at the
    start of the next iteration: one block (a halo of the updated element would be one more exchange per
    iteration between blocks), read at a shift by the body (a stencil reads it: the rotated update fuses
    into that pass), updated by an elementwise expression that nothing else in the body reads. None where
    there is none, or where the body reads any of ``fixed`` (the iteration number: it would shift). ``quotients``:
    0-d values the update's kernel computes itself are not carried (``_leaf_values``)."""
    dag = DAG(Bundle(*outputs))
    if any(f._name in dag.position for f in fixed):
        return None
    position = {o._name: j for j, o in enumerate(outputs)}
    shifted = {s._name for node in dag.order if isinstance(node, Gather) for s in node.sources}
    for k, (update, state) in enumerate(zip(outputs, states)):
        if not isinstance(update, Elemwise) or not update.ndim or state._name not in shifted or any(
                o._name == state._name for o in outputs) or any(n != 1 for n in state.numblocks):
            continue
        others = DAG(Bundle(*[o for j, o in enumerate(outputs) if j != k])) if len(outputs) > 1 else None
        if others is not None and update._name in others.position:
            continue
        values = _leaf_values(update, state, position, k, dag.consumers, shifted, quotients)
        if values is not None:
            return Rotation(k, update, values)
    return None


def _leaf_values(update: ArrayExpr, state: ArrayExpr, position: dict[str, int], k: int,
                 consumers: Mapping[str, list[Expr]], shifted: set[str], quotients: bool = False
                 ) -> list[ArrayExpr] | None:
    """The values an elementwise ``update`` reads, where its other leaves are ``state`` or other outputs: 0-d
    values, and arrays of one block that nodes of the body (``consumers``) other than the update's read too, one
    of them at a shift (``shifted``: stored by the body anyway, carried, not computed again); else None. With
    ``quotients``, a 0-d value its kernel computes from 0-d operands (``computed_in_readers``: CG's beta = rr_new /
    rr) is not carried but its operands are, so that it costs no launch of its own."""
    own = DAG(update).position
    values: dict[str, ArrayExpr] = {}
    stack, seen = [update], set()
    while stack:
        node = stack.pop()
        if node._name in seen:
            continue
        seen.add(node._name)
        if node is not update and (node._name == state._name or position.get(node._name, k) != k):
            continue
        if not node.ndim and not (quotients and computed_in_readers(node)):
            values[node._name] = node
        elif node is not update and node._name in shifted and any(
                c._name not in own for c in consumers.get(node._name, ())):
            if any(n != 1 for n in node.numblocks):
                return None
            values[node._name] = node
        elif isinstance(node, Elemwise):
            stack.extend(a for a in node.args if isinstance(a, ArrayExpr))
        else:
            return None
    return list(values.values())


def accumulated(outputs: Sequence[ArrayExpr], states: Sequence[ArrayExpr], k: int) -> bool:
    """Whether a loop body (``outputs`` over the ``states`` placeholders) has an array state element other than ``k``
    that is only accumulated: its elementwise update reads it, and nothing else in the body reads it or the update
    (CG's ``x``). Unrolled, the updates of its steps are one pass over it (``stencil``: computed where the last reads
    the stored operands of them all)."""
    for j, (update, state) in enumerate(zip(outputs, states)):
        if j == k or not state.ndim or not isinstance(update, Elemwise) or state._name not in DAG(update).position:
            continue
        others = DAG(Bundle(*[o for i, o in enumerate(outputs) if i != j]))
        if state._name not in others.position and update._name not in others.position:
            return True
    return False


def rotated_body(outputs: Sequence[ArrayExpr], states: Sequence[ArrayExpr], rotation: Rotation,
                 previous: ArrayExpr, carried: Sequence[ArrayExpr]) -> tuple[ArrayExpr, list[ArrayExpr]]:
    """The rotated body: ``(head, outputs)``. ``head`` is the update over the state placeholders (the other
    outputs read as their elements), ``previous`` (element ``k`` before its last update) and ``carried``
    (placeholders of the values, from the previous iteration); ``outputs`` are the body's with element
    ``k`` read as ``head`` and its output ``head`` itself, then the values for the next iteration."""
    k, update, values = rotation
    carry = {v._name: c for v, c in zip(values, carried)}
    # an output whose state element is itself carried (CG's rr_new, whose state rr beta's carried rr_old is):
    # replaced in a second pass, or the rebuild would follow its state on to the carried value
    late = [j for j, s in enumerate(states) if j != k and s._name in carry]
    replaced: dict[str, Expr] = {o._name: s for j, (o, s) in enumerate(zip(outputs, states)) if j != k and j not in late}
    replaced.update(carry)
    replaced[states[k]._name] = previous
    head, *rebuilt = rebuild_all([update, *[outputs[j] for j in late]], replaced)
    if late:
        (head,) = rebuild_all([head], {r._name: states[j] for r, j in zip(rebuilt, late)})
    new = rebuild_all([*outputs, *values], {states[k]._name: head})
    return head, [head if j == k else o for j, o in enumerate(new[: len(outputs)])] + new[len(outputs):]


def substituted(roots: Sequence[ArrayExpr], placeholders: Sequence[ArrayExpr], values: Sequence[ArrayExpr]
                ) -> list[ArrayExpr]:
    """``roots`` with each placeholder replaced by its value."""
    return rebuild_all(roots, {p._name: v for p, v in zip(placeholders, values)})
