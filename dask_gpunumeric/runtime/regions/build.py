"""Building a region's per-worker programs from its optimized expressions.

Placement follows the block owners (``cluster.owner``): a block's task runs on the rank owning the block.
Small tasks (0-d values, reduction combines and finishes) whose inputs live on several ranks run on every
rank that needs them (*replicated*), after their inputs are gathered there. Tasks are then grouped in
*levels* by the exchanges their inputs need, so that each level is one exchange followed by local work: an
iteration of conjugate gradients is three exchanges (a halo and two reductions), whatever its kernels.
A region on one worker (or without a cluster) is one program with no exchanges.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dask._task_spec import GraphNode, List, Task, TaskRef, _is_dask_future

from ...expr import ArrayExpr, Bundle, Creation, Reduction
from ...kernels import blocks as _blocks
from ...optimize.dag import DAG
from ..cluster import owner
from .nodes import Loop, LoopOutput
from .program import AllReduce, Collective, Exchange, Free, Key, Program, Repeat, Run

# reductions whose combine of one partial per rank is an element-wise operation of the partials' arrays (of
# equal shapes: their reduced axes have length 1), which NCCL's all-reduce can do
_ALL_REDUCE_OPS = {"sum": "sum", "prod": "prod"}


@dataclass(frozen=True)
class Layout:
    """The ranks of a region: rank ``r`` runs on worker ``workers[r]`` of the ``n_workers`` workers whose
    order decides block owners (``cluster.owner``)."""

    n_workers: int
    workers: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.workers)

    @property
    def everywhere(self) -> frozenset[int]:
        return frozenset(range(self.size))

    def rank_of(self, index: Sequence[int], numblocks: Sequence[int]) -> int:
        """The rank owning a block."""
        return self.workers.index(owner(index, numblocks, self.n_workers))

    @property
    def home(self) -> int:
        """The rank that keeps a replicated output: worker 0's (the owner of 0-d blocks) where it takes part."""
        return self.workers.index(0) if 0 in self.workers else 0


def layout_for(outputs: Sequence[ArrayExpr], n_workers: int) -> Layout:
    """The ranks of a region: the workers owning any of its blocks (one rank without a cluster)."""
    if n_workers < 2:
        return Layout(1, (0,))
    used = {owner(index, numblocks, n_workers) for node in _all_nodes(outputs)
            for _, index, numblocks in node._owned_blocks() if numblocks}
    return Layout(n_workers, tuple(sorted(used)) or (0,))


def _all_nodes(outputs: Sequence[ArrayExpr]) -> Iterable[ArrayExpr]:
    """Every node of a region, loop bodies included."""
    for node in DAG(Bundle(*outputs)).order:
        yield node
        if isinstance(node, Loop):
            yield from _all_nodes(node.body.optimized)


@dataclass
class _Unit:
    """A task or a loop of a scope, with the ranks that run it and its level."""

    key: Key
    task: GraphNode | None = None
    loop: _LoopUnit | None = None
    ranks: frozenset[int] = frozenset()
    level: int = 0

    def needs(self, rank: int) -> Iterable[Key]:
        return self.task.dependencies if self.task is not None else self.loop.needs[rank]

    def produces(self) -> Iterable[Key]:
        return (self.key,) if self.task is not None else self.loop.produces


@dataclass
class _LoopUnit:
    """A loop as the enclosing scope sees it: one Repeat step per rank, the outer keys each rank needs, and
    where its results are."""

    steps: list[Repeat]
    needs: list[list[Key]]
    produces: dict[Key, frozenset[int]]


@dataclass
class Built:
    """The programs of a region, one per rank, and what explain() reports about them."""

    layout: Layout
    programs: list[Program]
    placement: dict[Key, frozenset[int]]  # where each output ends up
    external: dict[Key, Any]  # input blocks the cluster holds already (Futures)
    sizes: dict[Key, tuple[int, int]] = field(default_factory=dict)  # estimated (bytes, elements) of values


def build(outputs: Sequence[ArrayExpr], inputs: Sequence[ArrayExpr], layout: Layout) -> Built:
    """The per-rank programs computing ``outputs`` (optimized expressions) from the blocks of ``inputs``
    (placeholders; and blocks that are Futures already), each output block left on one rank."""
    builder = _Scope(layout, itertools.count(1), {})
    programs = builder.build(outputs, inputs, required=None)
    return Built(layout, programs, builder.required, builder.external, builder.sizes)


class _Scope:
    """Builds the programs of one scope: a region, or a loop body."""

    def __init__(self, layout: Layout, steps: Iterable[int], sizes: dict[Key, tuple[int, int]]) -> None:
        self.layout = layout
        self.steps = steps  # exchange numbers, shared with nested scopes
        self.sizes = sizes  # shared with nested scopes
        self.placement: dict[Key, frozenset[int]] = {}
        self.units: list[_Unit] = []
        self.inputs: list[Key] = []
        self.owned: dict[Key, int] = {}
        self.external: dict[Key, Any] = {}
        self.required: dict[Key, frozenset[int]] = {}  # where each output must end up
        self.anywhere: set[Key] = set()  # inputs given to whichever ranks need them (a loop's invariants)

    # -- placement -------------------------------------------------------------------------------------
    def _own(self, nodes: Iterable[ArrayExpr]) -> None:
        """Record the owners of the nodes' blocks (0-d values have none: they are wherever they are needed)."""
        for node in nodes:
            for key, index, numblocks in node._owned_blocks():
                if numblocks:
                    self.owned[key] = self.layout.rank_of(index, numblocks)

    def _static(self, key: Key) -> frozenset[int]:
        """Where a block with no task of its own is: on its owner; a 0-d value everywhere."""
        return frozenset({self.owned[key]}) if key in self.owned else self.layout.everywhere

    def _place(self, key: Key, task: GraphNode, node: ArrayExpr) -> frozenset[int]:
        everywhere = self.layout.everywhere
        if isinstance(node, Creation) and node.operand("kind") == "full" or task.dependencies and all(
                self.placement[d] == everywhere for d in task.dependencies):
            return everywhere  # constants, and what is made of them and of replicated values: made where needed
        if _is_gather(task):
            near = self._nearest(task)
            if near is not None:
                return frozenset({near})
        if key in self.owned:
            return frozenset({self.owned[key]})
        located = {r for d in task.dependencies if len(self.placement[d]) == 1 for r in self.placement[d]}
        if len(located) == 1:
            return frozenset(located)
        return everywhere  # no inputs, or inputs on several ranks: replicated

    def _nearest(self, task: Task) -> int | None:
        """The rank holding most of the elements a gather takes (a block moved, or one of a rechunk whose
        blocks straddle ranks, is assembled where its data is), or None where its inputs are not located."""
        refs, locals_ = task.args[0].args, task.args[1]
        elements: dict[int, int] = defaultdict(int)
        for ref, local in zip(refs, locals_):
            where = self.placement[ref.key]
            if len(where) != 1:
                return None
            elements[min(where)] += _piece_size(self.sizes[ref.key], local)[1]
        return max(sorted(elements), key=lambda r: elements[r]) if elements else None

    # -- the scope ---------------------------------------------------------------------------------------
    def build(self, outputs: Sequence[ArrayExpr], inputs: Sequence[ArrayExpr],
              required: dict[Key, frozenset[int]] | None) -> list[Program]:
        input_names = {i._name for i in inputs}
        nodes = [n for n in DAG(Bundle(*outputs)).order if not isinstance(n, Bundle)]
        self._own([*inputs, *nodes])
        for node in nodes:
            if node._name in input_names:
                for index in node.block_indices():
                    self._add_input(node.key(index), _block_size(node, index))
            elif isinstance(node, Loop):
                self._add_loop(node)
            elif not isinstance(node, LoopOutput):  # a loop's outputs are made by the loop
                for key, task in _ordered(node._layer()):
                    if _is_dask_future(task):  # a block held by the cluster already: an input
                        self.external[key] = task
                        self._add_input(key, _block_size(node, key[1:]))
                    else:
                        self.placement[key] = self._place(key, task, node)
                        self.units.append(_Unit(key, task))
                        self.sizes.setdefault(key, self._size(node, key, task))
        self._push_pieces_to_producers()
        out_keys = [k for o in outputs for k in _block_keys(o)]
        if required is None:  # a region's output: where it is made, one rank for a replicated one
            required = {k: self.placement[k] if len(self.placement[k]) == 1 else frozenset({self.layout.home})
                        for k in out_keys}
        self.required = required
        self._prune(required)
        return self._programs(required)

    def _size(self, node: ArrayExpr, key: Key, task: GraphNode) -> tuple[int, int]:
        """Estimated (bytes, elements) of a task's value: a strip cut from a block (a halo), or see ``_task_size``."""
        if getattr(task, "func", None) is _blocks.cut:
            source, local = task.args
            return _piece_size(self.sizes[source.key], local)
        return _task_size(node, key)

    def _add_input(self, key: Key, size: tuple[int, int]) -> None:
        self.placement[key] = self.layout.everywhere if key in self.anywhere else self._static(key)
        self.inputs.append(key)
        self.sizes.setdefault(key, size)

    def _add_loop(self, loop: Loop) -> None:
        body = loop.body
        placeholders = body.inputs
        states = placeholders[: loop.n_state]
        body_outputs = body.optimized
        flag_out = body_outputs[loop.n_state] if loop.is_while else None
        index_ph = placeholders[loop.n_state] if not loop.is_while else None
        invariant_phs = placeholders[loop.n_state + (0 if loop.is_while else 1):]
        inner = _Scope(self.layout, self.steps, self.sizes)
        inner._own(placeholders)
        # an invariant goes once, before the loop, to each rank whose part of the body reads it
        inner.anywhere = {ph.key(i) for ph in invariant_phs for i in ph.block_indices()}
        required: dict[Key, frozenset[int]] = defaultdict(frozenset)
        for ph, out in zip(states, body_outputs):
            for index in ph.block_indices():
                required[out.key(index)] |= inner._static(ph.key(index))
        if flag_out is not None:
            required[flag_out.key(())] = self.layout.everywhere
        programs = inner.build(body_outputs, placeholders, dict(required))
        steps: list[Repeat] = []
        needs: list[list[Key]] = []
        produces: dict[Key, frozenset[int]] = {}
        where = {ph.key(i): inner._static(ph.key(i)) for ph in states for i in ph.block_indices()}
        for j, ph in enumerate(states):
            for index in ph.block_indices():
                produces[LoopOutput(loop, j).key(index)] = where[ph.key(index)]
                self.sizes.setdefault(LoopOutput(loop, j).key(index), _block_size(ph, index))
        for rank, program in enumerate(programs):
            taken = set(program.inputs)
            state = tuple((o.key(i), p.key(i)) for o, p in zip(loop.state, states) for i in p.block_indices()
                          if rank in where[p.key(i)])
            invariants = tuple((o.key(i), p.key(i)) for o, p in zip(loop.invariants, invariant_phs)
                               for i in p.block_indices() if p.key(i) in taken)
            carry = tuple((out.key(i), ph.key(i)) for ph, out in zip(states, body_outputs)
                          for i in ph.block_indices() if rank in where[ph.key(i)])
            results = tuple((ph.key(i), LoopOutput(loop, j).key(i)) for j, ph in enumerate(states)
                            for i in ph.block_indices() if rank in where[ph.key(i)])
            index_key = index_ph.key(()) if index_ph is not None and index_ph.key(()) in taken else None
            flag = loop.flag.key(()) if loop.is_while else None
            steps.append(Repeat(program, loop.count, state, invariants, carry, results, index_key, flag,
                                flag_out.key(()) if flag_out is not None else None,
                                index_ph.backend if index_ph is not None else "numpy"))
            needs.append([o for o, _ in state + invariants] + ([flag] if flag is not None else []))
        unit = _Unit((loop._name, "loop"), loop=_LoopUnit(steps, needs, produces))
        self.placement.update(produces)
        self.units.append(unit)

    def _push_pieces_to_producers(self) -> None:
        """A gather that needs a piece of a block on another rank (a halo, a shifted slice) gets just that
        piece, cut where the block is, instead of the whole block."""
        units: list[_Unit] = []
        for unit in self.units:
            task = unit.task
            if task is None or not _is_gather(task) or len(self.placement[unit.key]) != 1:
                units.append(unit)
                continue
            (here,) = self.placement[unit.key]
            refs, locals_, *rest = task.args
            new_refs, new_locals = [], []
            for i, (ref, local) in enumerate(zip(refs.args, locals_)):
                where = self.placement[ref.key]
                if len(where) == 1 and here not in where:
                    piece = (f"piece-{_name_of(unit.key)}", *_index_of(unit.key), i)
                    nd = len(local)
                    cut = Task(piece, _blocks.assemble, List(ref), [local], (1,) * nd, (None,) * nd, ())
                    self.placement[piece] = where
                    self.sizes[piece] = _piece_size(self.sizes[ref.key], local)
                    units.append(_Unit(piece, cut))
                    ref, local = TaskRef(piece), (slice(None),) * nd
                new_refs.append(ref)
                new_locals.append(local)
            if new_refs != list(refs.args):
                unit = _Unit(unit.key, Task(unit.key, _blocks.assemble, List(*new_refs), new_locals, *rest))
            units.append(unit)
        self.units = units

    def _prune(self, required: dict[Key, frozenset[int]]) -> None:
        """A replicated task runs only on the ranks that need it (or drops out when none does)."""
        needed: dict[Key, set[int]] = defaultdict(set)
        for key, ranks in required.items():
            needed[key] |= ranks
        everywhere = self.layout.everywhere
        kept: list[_Unit] = []
        for unit in reversed(self.units):
            if unit.task is not None:
                placed = self.placement[unit.key]
                if placed == everywhere and self.layout.size > 1:
                    placed = frozenset(needed[unit.key])
                    self.placement[unit.key] = placed
                    if not placed:
                        continue
                unit.ranks = placed
            else:
                unit.ranks = everywhere  # every rank runs a loop: its body exchanges among all of them
            for rank in unit.ranks:
                for d in unit.needs(rank):
                    needed[d].add(rank)
            kept.append(unit)
        self.units = kept[::-1]
        self.inputs = [k for k in self.inputs if needed[k] or k in required]
        for k in self.anywhere & set(self.inputs):
            self.placement[k] = frozenset(needed[k])

    def _programs(self, required: dict[Key, frozenset[int]]) -> list[Program]:
        level: dict[Key, int] = dict.fromkeys(self.inputs, 0)
        order = {k: i for i, k in enumerate(self.inputs)}
        for unit in self.units:
            unit.level = max((level[d] + (rank not in self.placement[d])
                              for rank in unit.ranks for d in unit.needs(rank)), default=0)
            for k in unit.produces():
                level[k] = unit.level
                order[k] = len(order)
        end = max((level[k] + (r not in self.placement[k]) for k, ranks in required.items() for r in ranks),
                  default=0)
        moves: dict[tuple[Key, int], int] = {}  # (value, rank it must reach) -> the exchange that moves it

        def need(key: Key, rank: int, at: int) -> None:
            if rank not in self.placement[key]:
                moves[(key, rank)] = min(moves.get((key, rank), at), at)

        for unit in self.units:
            for rank in unit.ranks:
                for d in unit.needs(rank):
                    need(d, rank, unit.level)
        for key, ranks in required.items():
            for rank in ranks:
                need(key, rank, end)
        last = max([end, *(u.level for u in self.units)])
        exchange_ids = {lv: next(self.steps) for lv in range(1, last + 1)}
        by_level: dict[int, list[tuple[Key, int, int]]] = defaultdict(list)
        for (key, dst), lv in sorted(moves.items(), key=lambda m: (m[1], order[m[0][0]], m[0][1])):
            by_level[lv].append((key, min(self.placement[key]), dst))
        reductions = {unit.key: r for unit in self.units if (r := self._all_reduce(unit, moves)) is not None}
        programs = []
        for rank in range(self.layout.size):
            steps: list[Run | Exchange | Collective | Repeat] = []
            for lv in range(last + 1):
                collective = tuple(reductions[u.key] for u in self.units if u.level == lv and u.key in reductions)
                if by_level[lv]:
                    sends = _grouped((dst, k) for k, src, dst in by_level[lv] if src == rank)
                    recvs = _grouped((src, k) for k, src, dst in by_level[lv] if dst == rank)
                    if collective:  # (every rank sends and receives partials at this level)
                        steps.append(Collective(Exchange(exchange_ids[lv], sends, recvs), collective))
                    elif sends or recvs:
                        steps.append(Exchange(exchange_ids[lv], sends, recvs))
                for unit in self.units:
                    if unit.level == lv and rank in unit.ranks and unit.key not in reductions:
                        steps.append(Run(unit.key, unit.task) if unit.task is not None else unit.loop.steps[rank])
            inputs = tuple(k for k in self.inputs if rank in self.placement[k])
            outputs = tuple(dict.fromkeys(k for k, ranks in required.items() if rank in ranks))
            programs.append(Program(inputs, _with_frees(steps, inputs, outputs), outputs))
        return programs


    def _all_reduce(self, unit: _Unit, moves: dict[tuple[Key, int], int]) -> AllReduce | None:
        """The unit as an all-reduce: a reduction's combine (of a kind in ``_ALL_REDUCE_OPS``) run on every rank
        over one partial from each rank, each partial brought to the others by the exchange of the unit's
        level; else None."""
        task, everywhere = unit.task, self.layout.everywhere
        if (task is None or getattr(task, "func", None) is not _blocks.reduce_combine or self.layout.size < 2
                or task.args[0] not in _ALL_REDUCE_OPS or unit.ranks != everywhere):
            return None
        members = task.args[1]
        if not isinstance(members, List) or not all(isinstance(m, TaskRef) for m in members.args):
            return None
        by_rank: dict[int, Key] = {}
        for member in members.args:
            where = self.placement[member.key]
            if len(where) != 1:
                return None
            (rank,) = where
            if rank in by_rank:
                return None
            by_rank[rank] = member.key
        if set(by_rank) != everywhere or any(moves.get((k, r)) != unit.level for k in by_rank.values()
                                             for r in everywhere - {min(self.placement[k])}):
            return None
        return AllReduce(Run(unit.key, task), tuple(by_rank[r] for r in sorted(by_rank)), _ALL_REDUCE_OPS[task.args[0]])


def _is_gather(task: GraphNode) -> bool:
    """Whether a task assembles a block from pieces of others (``Gather``'s tasks)."""
    return getattr(task, "func", None) is _blocks.assemble


def _grouped(pairs: Iterable[tuple[int, Key]]) -> tuple[tuple[int, tuple[Key, ...]], ...]:
    groups: dict[int, list[Key]] = defaultdict(list)
    for peer, key in pairs:
        groups[peer].append(key)
    return tuple((peer, tuple(keys)) for peer, keys in sorted(groups.items()))


def _uses(step: Run | Exchange | Collective | Repeat) -> Iterable[Key]:
    if isinstance(step, Run):
        return step.task.dependencies
    if isinstance(step, Exchange):
        return (k for _, keys in step.sends for k in keys)
    if isinstance(step, Collective):
        return [*_uses(step.exchange), *(k for r in step.reductions for k in r.combine.task.dependencies)]
    return [o for o, _ in step.state + step.invariants] + ([step.flag] if step.flag is not None else [])


def _makes(step: Run | Exchange | Collective | Repeat) -> Iterable[Key]:
    if isinstance(step, Run):
        return (step.key,)
    if isinstance(step, Exchange):
        return (k for _, keys in step.recvs for k in keys)
    if isinstance(step, Collective):
        return [*_makes(step.exchange), *(r.combine.key for r in step.reductions)]
    return (o for _, o in step.results)


def _with_frees(steps: list[Run | Exchange | Collective | Repeat], inputs: Sequence[Key], outputs: Sequence[Key]) -> tuple:
    """The steps with a Free after the last use of every value that is not an output."""
    last: dict[Key, int] = {k: -1 for k in inputs}
    for i, step in enumerate(steps):
        for k in _makes(step):
            last.setdefault(k, i)
        for k in _uses(step):
            last[k] = i
    keep = set(outputs)
    frees: dict[int, list[Key]] = defaultdict(list)
    for k, i in last.items():
        if k not in keep:
            frees[i].append(k)
    out: list[Any] = [Free(tuple(frees[-1]))] if frees[-1] else []
    for i, step in enumerate(steps):
        out.append(step)
        if frees[i]:
            out.append(Free(tuple(frees[i])))
    return tuple(out)


def _ordered(layer: dict[Key, Any]) -> list[tuple[Key, Any]]:
    """A node's tasks with each after the tasks of the same node it depends on."""
    done: set[Key] = set()
    out: list[tuple[Key, Any]] = []

    def visit(key: Key) -> None:
        stack = [(key, False)]
        while stack:
            k, expanded = stack.pop()
            if k in done:
                continue
            if expanded:
                done.add(k)
                out.append((k, layer[k]))
                continue
            stack.append((k, True))
            task = layer[k]
            deps = task.dependencies if isinstance(task, GraphNode) else ()
            stack.extend((d, False) for d in deps if d in layer and d not in done)

    for key in layer:
        visit(key)
    return out


def _block_keys(expr: ArrayExpr) -> list[Key]:
    return [expr.key(index) for index in expr.block_indices()]


def _name_of(key: Key) -> str:
    return key[0] if isinstance(key, tuple) else str(key)


def _index_of(key: Key) -> tuple:
    return key[1:] if isinstance(key, tuple) else ()


def _block_size(node: ArrayExpr, index: Sequence[int]) -> tuple[int, int]:
    elements = math.prod(node.block_shape(tuple(index)))
    return elements * node.dtype.itemsize, elements


def _task_size(node: ArrayExpr, key: Key) -> tuple[int, int]:
    """Estimated (bytes, elements) of a task's value: a block, or a reduction partial (a block of the input,
    one element along the reduced axes)."""
    index = _index_of(key)
    if _name_of(key) == node._name and len(index) == node.ndim:
        return _block_size(node, index)
    if isinstance(node, Reduction) and len(index) == node.array.ndim + 1:
        shape = node.array.block_shape(tuple(min(i, n - 1) for i, n in zip(index[1:], node.array.numblocks)))
        axes = node.operand("axes")
        elements = math.prod(1 if d in axes else s for d, s in enumerate(shape))
        return elements * node.dtype.itemsize, elements
    return node.dtype.itemsize, 1


def _piece_size(block: tuple[int, int], local: tuple) -> tuple[int, int]:
    """Estimated (bytes, elements) of a piece cut from a block by ``local`` (bounded slices or indices)."""
    nbytes, elements = block
    if not elements or any(isinstance(ix, slice) and (ix.start is None or ix.stop is None) for ix in local):
        return block
    piece = math.prod(len(range(ix.start, ix.stop, ix.step or 1)) if isinstance(ix, slice) else len(ix)
                      for ix in local)
    return nbytes * piece // elements, piece

