"""The fusion pass: groups of elementwise operations and random draws with the same block grid, plus the
reductions that consume them, become one ``Fused`` expression (one kernel per block).

Groups grow by merging along producer/consumer edges between fusable nodes with equal chunks and
backend, refusing a merge that would make a group both feed and depend on an outside node (a cycle;
``_Grouping``). A group of more than ``kernel-size`` operations is cut into kernels run one after the other
(``_cut``). Members used outside their kernel become its outputs, so every value is computed once.
Reductions over a member get their per-block partial from the same kernel; their combine stays tree tasks.
A group of one block also finishes its full reductions in the kernel (*totals*) and the elementwise work on
those results alone (its *epilogue*, run by the kernel's last thread block).
"""
from __future__ import annotations

import hashlib
import heapq
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
from dask._expr import Expr

from ..expr import ArrayExpr, Elemwise, Fused, FusedOutput, Reduction
from ..kernels.fused import record_sources, recording
from .dag import DAG, rebuild_made
from .programs import Programs, is_fused_reduction, reduced, signature_of


class _Grouping:
    """Greedy union of fusable nodes into groups, in topological order, keeping the graph of groups (and
    unfused nodes) acyclic in time linear in practice: each group has a potential that increases along
    every edge between groups, so a merge needs no search unless it must raise the potentials downstream
    of one side; that search, bounded by the potentials, is also the exact cycle check. Nodes are the
    positions ``0 .. size - 1`` of the DAG's order; a group is named by one of its members, and every node's
    group is kept (``group_of``: a merge renames the smaller group's members, so finding a group is a list
    lookup)."""

    def __init__(self, size: int) -> None:
        self.group_of = list(range(size))  # per node, its group (a node not processed yet: its own)
        self.members: dict[int, list[int]] = {}  # per group of processed nodes, its members
        self.potential: dict[int, int] = {}
        self.exits: dict[int, set[int]] = {}  # per group: the processed nodes outside it that read it

    def join(self, i: int, group: int) -> None:
        """Put node ``i`` (being processed) in ``group``."""
        self.group_of[i] = group
        self.members[group].append(i)

    def add(self, name: int, dependencies: list[int], candidates: list[int]) -> None:
        """Process node ``name`` (its ``dependencies`` processed already), merging it with as many of the
        groups of ``candidates`` (its fusable dependencies with its blocks) as stay acyclic."""
        group_of, potential, exits = self.group_of, self.potential, self.exits
        if not candidates:  # a node of its own: above every group it reads
            exits[name] = set()
            self.members[name] = [name]
            top = -1
            for d in dependencies:
                group = group_of[d]
                exits[group].add(name)
                if potential[group] > top:
                    top = potential[group]
            potential[name] = top + 1
            return
        groups = [group_of[d] for d in dependencies]
        deps = set(groups)
        if len(deps) == 1:
            # it reads one group alone (a chain's next operation): joining it makes no path leave the group and
            # come back, and changes no potential
            self.join(name, groups[0])
            return
        # (its candidates are some of its dependencies, in the same order)
        tried = deps if len(candidates) == len(dependencies) else {group_of[c] for c in candidates}
        if len(tried) > 1:
            # in decreasing potential: a path between two of them goes from a lower to a higher one, so it is
            # found when the lower one is tried (after the higher one joined or was refused)
            tried = sorted(tried, key=potential.__getitem__, reverse=True)
        if len(deps) == len(tried):
            # it reads only groups it may join: it joins the first at once (read by nothing yet, it makes no
            # path leave that group and come back, and changes no potential), the others are merged with that
            first, *tried = tried
            self.join(name, first)
            for d in tried:
                exits[d].add(name)
        else:
            exits[name] = set()
            self.members[name] = [name]
            potential[name] = max([potential[d] + 1 for d in deps if d not in tried], default=0)
            for d in deps:
                exits[d].add(name)
        for group in tried:
            if not self._merge(group, group_of[name]):
                self._raise(group_of[name], potential[group] + 1)

    def _merge(self, a: int, b: int) -> bool:
        """Merge two groups unless that makes a cycle."""
        potential, members, group_of = self.potential, self.members, self.group_of
        pa, pb = potential[a], potential[b]
        if pa != pb:  # the lower one raised to the other's potential, with what is downstream of it
            low, q = (a, pb) if pa < pb else (b, pa)
            log: list[tuple[int, int]] = []
            if not self._shift(low, q - potential[low], (a, b), log):
                for group, value in reversed(log):
                    potential[group] = value
                return False
        else:
            q = pa
        # the union is named by the larger group
        small, big = (a, b) if len(members[a]) <= len(members[b]) else (b, a)
        exits = self.exits[big]
        if len(exits) < len(members[small]):  # big's exits in small: found from the fewer of the two
            exits.difference_update([e for e in exits if group_of[e] == small])
        else:
            exits.difference_update(members[small])
        outside_small = self.exits.pop(small)
        if outside_small:
            exits.update([e for e in outside_small if group_of[e] != a and group_of[e] != b])
        moved = members.pop(small)
        for i in moved:
            group_of[i] = big
        members[big] += moved
        potential[big] = q
        return True

    def _raise(self, group: int, q: int) -> None:
        """Raise a group's potential to ``q`` (and what is downstream, where needed)."""
        if q > self.potential[group]:
            self._shift(group, q - self.potential[group], (group,), [])
            self.potential[group] = q

    def _shift(self, group: int, delta: int, merging: tuple[int, ...], log: list[tuple[int, int]]) -> bool:
        """Raise by ``delta`` the potential of every node or group downstream of ``group`` that would not stay
        above its producer's: False, changing nothing, where that reaches one of ``merging`` (a path that
        leaves the merged group and comes back)."""
        if delta <= 0:
            return True
        group_of, potential = self.group_of, self.potential
        limit = potential[group] + delta
        stack = [g for g in {group_of[e] for e in self.exits[group]} if g not in merging and potential[g] <= limit]
        seen: set[int] = set()
        while stack:
            g = stack.pop()
            if g in seen:
                continue
            seen.add(g)
            for e in self.exits[g]:
                h = group_of[e]
                if h in merging:
                    return False
                if h not in seen and potential[h] <= potential[g] + delta:
                    stack.append(h)
        for g in seen:
            log.append((g, potential[g]))
            potential[g] += delta
        return True


# a lone elementwise node on these backends' blocks of at least this many elements gets a kernel
LONE_KERNEL_BACKENDS = frozenset({"cupy"})  # (the CPU kernel emulator's tests add "numpy")
LONE_KERNEL_ELEMENTS = 2**22


def _kernel_pays(node: Expr) -> bool:
    """Whether a lone elementwise node is better run as a generated kernel than as the backend's ufunc: on
    large CuPy blocks, where CuPy's elementwise kernels move about half the bytes per second of ours
    (docs/benchmarks.md)."""
    return (node.backend in LONE_KERNEL_BACKENDS
            and math.prod(max(c, default=0) for c in node.chunks) >= LONE_KERNEL_ELEMENTS)


def fuse(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with fusable groups replaced by ``Fused`` kernels (same values, same root shape);
    nothing when the ``fusion`` setting is off."""
    if not settings["fusion"]:
        return root
    dag = DAG.of(root)
    # nodes by their position in the DAG's order (lists and dicts of ints: on 100,000s of nodes, lookups by
    # name miss the caches at every step)
    order, inputs = dag.order, dag.inputs
    grouping = _Grouping(len(order))
    # one walk: which nodes are fusable (dependencies first) with their ops' compute dtypes, their groups,
    # and the reductions to fold in
    computes: list[str | None] = [None] * len(order)  # per fusable node, its op's compute dtype
    signatures: list[int | None] = [None] * len(order)  # (``signature_of``)
    foldable: list[int] = []
    add, join, group_of = grouping.add, grouping.join, grouping.group_of
    for i, node in enumerate(order):
        deps = inputs[i]
        compute, signature = signature_of(node)
        if compute is not None:
            computes[i] = compute
            signatures[i] = signature
            if deps:
                chunks, backend = node.chunks, node.backend
                if len(deps) == 1:  # (no list made for a chain's next operation)
                    j = deps[0]
                    d = order[j]
                    if computes[j] is not None and (d.chunks is chunks or d.chunks == chunks) and d.backend == backend:
                        join(i, group_of[j])  # it joins its group (``add``'s first case)
                        continue
                    add(i, deps, _NO_CANDIDATES)
                    continue
                fused_with = []  # its fusable dependencies with its blocks
                for j in deps:
                    if computes[j] is not None:
                        d = order[j]
                        if (d.chunks is chunks or d.chunks == chunks) and d.backend == backend:
                            fused_with.append(j)
                add(i, deps, fused_with)
                continue
        elif is_fused_reduction(node):
            foldable.append(i)
        add(i, deps, _NO_CANDIDATES)
    limit = settings["kernel-size"]
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"gpunumeric.kernel-size must be a positive int, got {limit!r}")
    # the groups of fusable nodes (a node of its own is never merged), each in topological order, in the order of
    # their first members
    grown = sorted([sorted(m) for g, m in grouping.members.items() if computes[g] is not None])
    members: dict[int, list[int]] = {}  # per kernel, its members (in topological order)
    kernel_of: list[int | None] = [None] * len(order)
    for group in grown:
        for run in _cut(group, inputs, limit):
            k = len(members)
            members[k] = run
            for i in run:
                kernel_of[i] = k
    reductions: dict[int, list[int]] = defaultdict(list)
    for i in foldable:
        x = inputs[i][_REDUCED]  # (the position of the array it reduces)
        if computes[x] is not None:
            reductions[kernel_of[x]].append(i)
    totals: dict[int, list[int]] = {}
    epilogues: dict[int, list[int]] = {}
    for k, rs in reductions.items():
        finished = [r for r in rs if _finished_in_kernel(order[r])]
        if finished:
            totals[k] = finished
            epilogues[k] = _epilogue(dag, finished, computes)
    taken = {i for e in epilogues.values() for i in e}  # no longer members of their own groups
    if taken:
        members = {k: kept for k, m in members.items() if (kept := [i for i in m if i not in taken])}
        reductions = {k: [r for r in rs if inputs[r][_REDUCED] not in taken]
                      for k, rs in reductions.items()}
    # a lone node with nothing to fuse stays as it is (one task per block either way), but for large
    # blocks on a GPU, where a generated kernel moves the data faster than the library's ufunc
    plans = {k: m for k, m in members.items() if len(m) > 1 or reductions.get(k) or _kernel_pays(order[m[0]])}
    if not plans:
        return root
    finished_in: set[int] = set()
    for k in totals:
        for i in (*totals[k], *epilogues[k]):
            kernel_of[i] = k
            finished_in.add(i)
    outside = _used_outside(inputs, plans, kernel_of, reductions, finished_in)
    kernels: dict[int, _Kernel] = {}  # by the position of each node a kernel replaces
    programs = Programs(order, inputs, computes, signatures)
    # per program, by its id (kernels share programs): the first Fused node made, and the words of its outputs' names
    described: dict[int, tuple[Fused, str | None]] = {}
    record = recording()  # (asked once: reading the environment costs more than most steps of a kernel)
    for k, run in plans.items():
        kernel = _Kernel(order, programs, run, reductions.get(k, []), totals.get(k, []), epilogues.get(k, []),
                         outside, described)
        if record:
            record_sources(kernel.program, kernel.scalars)
        kernels.update(dict.fromkeys(kernel.replaces, kernel))
    return rebuild_made(dag, kernels)


_NO_CANDIDATES: list[int] = []  # (shared, never changed)
_FIRST = (None, None)  # (``_Kernel.make``: no kernel of its program made before)
_REDUCED = 0  # a Reduction's array: its first operand (``Reduction._parameters``), so first in ``DAG.inputs``
_AXES = Reduction._parameters.index("axes")  # (a Reduction's operand by position: ``operand`` searches)


def _used_outside(inputs: list[list[int]], plans: Mapping[int, list[int]], kernel_of: list[int | None],
                  reductions: Mapping[int, list[int]], finished: set[int]) -> set[int]:
    """The nodes of the kernels (``plans``; ``kernel_of`` gives each node's, totals and epilogues included) read
    outside their kernel, or the root (the last node); nodes by position, ``inputs`` the DAG's. A member is read
    inside by its kernel's nodes and the reductions of it the kernel computes; a total or an epilogue node
    (``finished``) by its kernel's nodes."""
    partial_of = {r: k for k, rs in reductions.items() for r in rs}
    outside = {len(inputs) - 1}
    for i, deps in enumerate(inputs):
        own = kernel_of[i]
        for j in deps:
            k = kernel_of[j]
            if k is None or k == own or k not in plans:
                continue
            if j in finished or partial_of.get(i) != k:
                outside.add(j)
    return outside


def _finished_in_kernel(reduction: Reduction) -> bool:
    """Whether a fused reduction is a total: over every axis of a one-block array (of at least one axis)."""
    chunks = reduced(reduction).chunks  # (its blocks per axis: no property of a node made for it)
    return (len(chunks) > 0 and all(len(c) == 1 for c in chunks)
            and set(reduction.operands[_AXES]) == set(range(len(chunks))))


def _epilogue(dag: DAG, totals: list[int], computes: list[str | None]) -> list[int]:
    """The elementwise nodes computed from the totals alone (and from each other, and scalars), in
    topological order: what the kernel's last thread block computes after finishing the totals. Nodes by
    position; ``computes``: per fusable node, its compute dtype."""
    order, inputs, readers = dag.order, dag.inputs, dag.readers
    inside = set(totals)
    waiting = [c for t in totals for c in readers[t]]
    heapq.heapify(waiting)
    out: list[int] = []
    while waiting:
        i = heapq.heappop(waiting)
        if i in inside or computes[i] is None or not isinstance(order[i], Elemwise):
            continue
        if all(j in inside for j in inputs[i]):
            inside.add(i)
            out.append(i)
            for c in readers[i]:
                heapq.heappush(waiting, c)
    return out


def _cut(names: list[int], inputs: list[list[int]], limit: int) -> list[list[int]]:
    """A group's members (positions, in topological order) in consecutive runs of at most ``limit``, each ending
    where the fewest values made before are used after (each such value is stored by one kernel and read by
    a later one; runs of a topological order depend only on earlier runs). ``inputs``: per node, its dependencies (the DAG's;
    those in the group are the ones it was fused with)."""
    if len(names) <= limit:
        return [names]
    index = dict(zip(names, range(len(names))))
    last = list(range(len(names)))  # at i: the last member reading member i (its readers come after it)
    for j, name in enumerate(names):
        for dep in inputs[name]:
            i = index.get(dep)
            if i is not None:
                last[i] = j
    made, used = np.arange(len(names)), np.array(last)
    later = used > made  # values used after the member making them: they cross the cuts in between
    size = len(names) + 1
    # at k: the values made before k and used at k or later
    crossing = np.cumsum(np.bincount(made[later] + 1, minlength=size) - np.bincount(used[later] + 1, minlength=size))
    runs, start = [], 0
    while len(names) - start > limit:
        # the last of the fewest crossings in the window
        window = crossing[start + (limit + 1) // 2:start + limit + 1]
        end = start + limit - int(np.argmin(window[::-1]))
        runs.append(names[start:end])
        start = end
    runs.append(names[start:])
    return runs


class _Kernel:
    """The kernel of one group (its members, its totals and their epilogue: positions in ``order``), and what
    replaces each of them used outside it (``outside``), made once its inputs are rebuilt (``dag.Made``)."""

    __slots__ = ("program", "inputs", "scalars", "stores", "partials", "first", "token", "finished", "replaces",
                 "described")  # (one per kernel: no dict each)

    def __init__(self, order: list[Expr], programs: Programs, members: list[int], reductions: list[int],
                 totals: list[int], epilogue: list[int], outside: set[int],
                 described: dict[int, tuple[Fused, str | None]]) -> None:
        computed, stored, partials = members, [i for i in members if i in outside], reductions
        finished: list[int] = []
        if totals:  # (a kernel of one block: its totals and their epilogue are computed too)
            computed = members + totals + epilogue
            finished = [i for i in totals + epilogue if i in outside]
            stored += finished
            partials = [r for r in reductions if r not in totals]
        self.program, self.inputs, self.scalars = programs.of(members, stored, partials, totals, epilogue)
        self.stores = [order[i] for i in stored]
        self.partials = [order[r] for r in partials]
        self.first = order[members[-1]]
        # the token of a group is that of its members (cheaper than tokenizing the program)
        names = sorted([order[i]._name for i in computed])
        names.append("")
        names += [order[r]._name for r in reductions]
        self.token = hashlib.sha1("|".join(names).encode()).hexdigest()[:32]
        self.finished = bool(finished)
        self.replaces = stored + partials
        self.described = described

    def make(self, inputs: list[Expr]) -> list[Expr]:
        """The Fused node on ``inputs`` (the program's, rebuilt), and what replaces each node used outside (in
        the order of ``replaces``)."""
        stores, partials, first = self.stores, self.partials, self.first
        n_out = len(stores) + len(partials)
        # a kernel of one output has that output's blocks (a total's: 0-d), made from the elements' blocks
        chunks = stores[0].chunks if n_out == 1 and self.finished else first.chunks
        like, words = self.described.get(id(self.program), _FIRST)
        fused = Fused.of(self.program, chunks, first.backend, tuple(self.scalars), first.chunks, inputs, self.token,
                         like)
        if n_out == 1:
            if like is None:
                self.described[id(self.program)] = (fused, None)
            return [fused if stores else Reduction.of_partials(fused, partials[0])]
        # (the words of the outputs' names are their kernel's: the same for every kernel of a program)
        out: list[Expr] = []
        for k, node in enumerate(stores):
            out.append(FusedOutput.of(fused, k, node.chunks, node.dtype, words))
            words = words or out[-1]._funcname
        for k, reduction in enumerate(partials, len(stores)):
            x = reduced(reduction)
            partial = FusedOutput.of(fused, k, x.chunks, x.dtype, words)
            words = words or partial._funcname
            out.append(Reduction.of_partials(partial, reduction))
        if like is None:
            self.described[id(self.program)] = (fused, words)
        return out
