"""The stencil pass: elementwise expressions over shifted slices and rolls of arrays, and the update idiom
``v[1:-1, 1:-1] = expr``, become ``Stencil`` groups: one task per block that receives its source blocks
extended by the halos the group needs and runs one kernel per sweep, several sweeps per task (``_Pass``
lists the steps).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dask._expr import Expr
from dask.tokenize import tokenize

from ..codegen.program import ProgramBuilder
from ..codegen.stencil_plan import tile_runs
from ..codegen.types import FILL, TILE_SWEEPS, WRAP, StencilCode, StencilPlan, Sweep, dtype_supported, scalar_supported
from ..expr import plan as _plan
from ..expr import ArrayExpr, Creation, Elemwise, FusedOutput, Gather, Reduction, SetItem, Stencil, inputs
from ..kernels.stencil import record_sources
from .dag import DAG, UnionFind, rebuild
from .programs import computed_in_readers, elemwise_supported, is_fused_reduction, operands_of

Read = tuple[Expr, tuple[int, ...], tuple[int, ...], Any]  # (target, shift, edge mode per axis, fill value)
RECOMPUTED_OPS = 8  # the most operations of a field that readers compute again instead of reading it stored


# --- views ---------------------------------------------------------------------------------------------


def _axis_shift(axis_plan: _plan.AxisPlan, chunks: Sequence[int]) -> tuple[int, bool] | None:
    """(c, wraps) where a Gather's axis reads positions ``(i + c) mod n`` of its source, else None."""
    n, offsets = sum(chunks), _plan.offsets(chunks)
    first, expected, length = None, 0, 0
    for pieces, permutation in axis_plan:
        if permutation is not None:
            return None
        for source, chunk, local in pieces:
            if source != 0 or not isinstance(local, slice):
                return None
            start, stop, step = local.indices(chunks[chunk])
            count = len(range(start, stop, step))
            if count == 0:
                continue
            if step != 1 and count > 1:
                return None
            position = offsets[chunk] + start
            if first is None:
                first = position
            elif position != expected % n:
                return None
            expected, length = position + count, length + count
    if first is None:
        return 0, False
    if length > n:
        return None
    return first, first + length > n


def _gather_shift(node: Gather) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
    if len(node.sources) != 1 or node.operand("drop") or node.sources[0].ndim != node.ndim:
        return None
    axes = [_axis_shift(p, c) for p, c in zip(node.operand("plan"), node.sources[0].chunks)]
    if any(a is None for a in axes):
        return None
    return tuple(a[0] for a in axes), tuple(a[1] for a in axes)  # type: ignore[index]


def _padding(node: Gather) -> tuple[ArrayExpr, int, int, Any] | None:
    """(source, axis, before, value) where a Gather joins constant blocks of one ``value`` before and after
    the whole of one source along ``axis`` (``pad``'s constant mode, one axis at a time), else None."""
    sources = node.sources
    if len(sources) < 2 or node.operand("drop"):
        return None
    plan = node.operand("plan")
    axes = [d for d, axis_plan in enumerate(plan) if any(p[0] for pieces, _ in axis_plan for p in pieces)]
    main = [i for i, s in enumerate(sources) if not (isinstance(s, Creation) and s.operand("kind") == "full")]
    if len(axes) != 1 or len(main) != 1 or sources[main[0]].ndim != node.ndim:
        return None
    (axis,), (m,) = axes, main
    values = {np.asarray(s.operand("params")[0], dtype=node.dtype).tobytes() for s in sources if s is not sources[m]}
    if len(values) != 1 or any(s.dtype != node.dtype for s in sources):
        return None
    offsets = _plan.offsets(sources[m].chunks[axis])
    position, before, taken = 0, None, 0
    for pieces, permutation in plan[axis]:
        for source, chunk, local in pieces:
            if permutation is not None or not isinstance(local, slice):
                return None
            start, stop, step = local.indices(sources[source].chunks[axis][chunk])
            count = len(range(start, stop, step))
            if source == m and count:
                before = position if before is None else before
                if step != 1 and count > 1 or offsets[chunk] + start != taken or position != before + taken:
                    return None
                taken += count
            position += count
    if before is None or taken != sources[m].shape[axis] or any(
            _axis_shift(plan[d], sources[m].chunks[d]) != (0, False) for d in range(node.ndim) if d != axis):
        return None
    value = next(s for s in sources if s is not sources[m]).operand("params")[0]
    return sources[m], axis, before, np.asarray(value, dtype=node.dtype)[()]


class _Views:
    """Each expression as a read of its base through views (memoized)."""

    def __init__(self) -> None:
        self.memo: dict[str, Read] = {}

    def resolve(self, node: Expr) -> Read:
        if node._name in self.memo:
            return self.memo[node._name]
        read = None
        if isinstance(node, Gather):
            shift = _gather_shift(node)
            padding = None if shift is not None else _padding(node)
            read = (self._shifted(node, shift) if shift is not None else
                    self._padded(node, *padding) if padding is not None else None)
        if read is None:
            read = (node, (0,) * node.ndim, (0,) * node.ndim, None)
        self.memo[node._name] = read
        return read

    def _shifted(self, node: Gather, shift: tuple[tuple[int, ...], tuple[bool, ...]]) -> Read:
        """A shift of a view: of its base, where the two compose (a cyclic view of a whole period)."""
        source = node.sources[0]
        base, inner, edges, fill = self.resolve(source)
        c, modes = [], []
        for d, (outer, wrap) in enumerate(zip(*shift)):
            n = base.shape[d]
            if wrap and (source.shape[d] != n or edges[d] == FILL):  # not a whole period of the base
                return (source, shift[0], tuple(WRAP if w else 0 for w in shift[1]), None)
            position = inner[d] + outer if edges[d] == FILL else (inner[d] + outer) % n if n else 0
            c.append(position)
            modes.append(edges[d] if edges[d] == FILL else WRAP if position + node.shape[d] > n else 0)
        return _settled(base, tuple(c), modes, fill, node.shape)

    def _padded(self, node: Gather, source: ArrayExpr, axis: int, before: int, value: Any) -> Read:
        """A constant padding of a view: a read of its base filled past the base's ends along ``axis``, where
        the view reaches the base's end on each side padded (``pad(g[:-1], ((1, 0),))`` reads ``g`` at -1), and
        any other filling is with the same value."""
        base, inner, edges, fill = self.resolve(source)
        same = fill is None or np.asarray(fill).tobytes() == np.asarray(value).tobytes()  # of one dtype
        after = node.shape[axis] - before - source.shape[axis]
        short = before and inner[axis] > 0 or after and inner[axis] + source.shape[axis] < base.shape[axis]
        if edges[axis] == WRAP or short or not same:
            base, inner, edges = source, (0,) * node.ndim, (0,) * node.ndim
        c = tuple(e - before if d == axis else e for d, e in enumerate(inner))
        return _settled(base, c, [FILL if d == axis else m for d, m in enumerate(edges)], value, node.shape)


def _settled(base: Expr, c: tuple[int, ...], modes: list[int], fill: Any, shape: tuple[int, ...]) -> Read:
    """A read with filling only along the axes where its window leaves the base (else a plain read)."""
    modes = [0 if m == FILL and 0 <= e and e + k <= n else m for m, e, k, n in zip(modes, c, shape, base.shape)]
    return base, c, tuple(modes), fill if FILL in modes else None


# --- pointwise nodes -----------------------------------------------------------------------------------


def _region(node: SetItem) -> tuple[tuple[int, int], ...] | None:
    """The box ``[lo, hi)`` per axis a SetItem writes, or None when it is not a box of step 1."""
    out = []
    for chunks, per_chunk in zip(node.chunks, node.operand("region_plan")):
        offsets = _plan.offsets(chunks)
        first, expected = None, 0
        for chunk, hit in enumerate(per_chunk):
            if hit is None:
                continue
            start, stop, step = hit[1].indices(chunks[chunk])
            count = len(range(start, stop, step))
            if count == 0:
                continue
            if step != 1 and count > 1 or first is not None and offsets[chunk] + start != expected:
                return None
            first = offsets[chunk] + start if first is None else first
            expected = offsets[chunk] + start + count
        if first is None:
            return None
        out.append((first, expected))
    return tuple(out)


def _pointwise_reads(node: Expr, views: _Views) -> list[Read] | None:
    """The reads of a pointwise node (its array operands through views, in order), or None for other nodes.
    A SetItem reads its base, then its value (at the shift that places it in the box)."""
    if not isinstance(node, (Elemwise, SetItem)) or not 1 <= node.ndim <= 3:
        return None
    if not dtype_supported(node.dtype):
        return None
    if isinstance(node, Elemwise):
        arrays = [a for a in node.args if isinstance(a, ArrayExpr)]
        if not elemwise_supported(node) or any(a.shape not in (node.shape, ()) for a in arrays):
            return None
    else:
        region = _region(node)
        value = node.operand("value")
        if region is None or not isinstance(value, ArrayExpr) and not scalar_supported(value):
            return None
        arrays = [node.array] + ([value] if isinstance(value, ArrayExpr) else [])
    if any(a.backend != node.backend or not dtype_supported(a.dtype) for a in arrays):
        return None
    reads = [views.resolve(a) for a in arrays]
    if isinstance(node, SetItem) and len(reads) == 2:
        target, c, modes, fill = reads[1]
        reads[1] = (target, tuple(ci - lo for ci, (lo, _) in zip(c, region)), modes, fill)
    return reads


# --- the pass ------------------------------------------------------------------------------------------


@dataclass
class _Kernel:
    """One sweep kernel of the pass: its fields, level, class and, once built, its code."""

    level: int
    frame: tuple
    fields: list[str]
    region: tuple | None
    stores: list[str] = field(default_factory=list)  # the fields it writes out
    reductions: list[Expr] = field(default_factory=list)  # the full reductions of its fields it computes
    code: tuple = ()
    targets: list[str] = field(default_factory=list)  # per local buffer slot
    modes: list[tuple[int, ...]] = field(default_factory=list)  # per local buffer slot: edge mode per axis
    fills: list[Any] = field(default_factory=list)  # per local buffer slot: the value of FILL reads
    region_values: tuple = ()
    scalars: tuple = ()
    reach: tuple[int, ...] = ()
    after: set[str] = field(default_factory=set)  # fields that sources it reads depend on: earlier groups


@dataclass
class _Group:
    """Consecutive levels of kernels of one frame, run as one task per block (one ``Stencil`` node)."""

    frame: tuple
    kernels: list[_Kernel] = field(default_factory=list)
    fields: set[str] = field(default_factory=set)
    reach: dict[int, tuple[int, ...]] = field(default_factory=dict)  # per level: the largest offsets read
    periodic: set[int] = field(default_factory=set)  # axes along which kernels read the group's fields cyclically

    def cyclic_reads(self, kernel: _Kernel) -> set[int]:
        return {d for t, m in zip(kernel.targets, kernel.modes) if t in self.fields for d, x in enumerate(m) if x == WRAP}

    def fits(self, kernel: _Kernel, limit: Any, nodes: dict[str, Expr]) -> bool:
        """May ``kernel`` join: within the group size rule (``_Pass``), and where fields are read
        cyclically, with nothing that is not (no region restricting that axis, sources of the same length)?"""
        shape, chunks = self.frame[0], self.frame[1]
        periodic = self.periodic | self.cyclic_reads(kernel)
        for k, axes in [(kernel, periodic), *[(k, periodic - self.periodic) for k in self.kernels]]:
            for d in axes:
                if k.region is not None and k.region[d] is not None:
                    return False
                if any(nodes[t].ndim and nodes[t].shape[d] != shape[d] for t in k.targets if t not in self.fields):
                    return False
        if limit != "auto":
            return len({*self.reach, kernel.level}) <= limit
        reach = dict(self.reach)
        reach[kernel.level] = tuple(map(max, reach.get(kernel.level, kernel.reach), kernel.reach))
        for d in range(len(shape)):  # a halo costs work along axes with several blocks (one wraps in place)
            halo = sum(r[d] for r in reach.values())
            if len(chunks[d]) > 1 and halo > min((c for c in chunks[d] if c), default=0) // 8:
                return False
        return True

    def add(self, kernel: _Kernel) -> None:
        self.periodic |= self.cyclic_reads(kernel)
        self.reach[kernel.level] = tuple(map(max, self.reach.get(kernel.level, kernel.reach), kernel.reach))
        self.kernels.append(kernel)
        self.fields |= set(kernel.fields)


class _Pass:
    """The state of one run of the pass over a DAG, in these steps:

    * a *view* is a chain of Gathers reading its base at a constant shift per axis, cyclically or not:
      ``view[i] = base[(i + c) mod n]`` (slices with step 1, ``roll``, rechunks);
    * *pointwise* nodes are fusable ``Elemwise`` nodes whose array operands all have its shape (or none: 0-d
      arrays, read as scalars), and ``SetItem`` nodes over a box (a scalar or an array value); each reads its
      operands through views;
    * a *cluster* is a connected set of pointwise nodes (connected by reads of each other, or of one array
      outside, so that one kernel may compute the readers of an array together) with at least one ``Elemwise``
      and one shifted read;
    * *placement*: a node is computed at position ``p`` of its kernel as ``node[p + t]``. A node that all of
      its readers read at the same shift is inlined into them (``t`` follows), any other is a *field*: stored,
      with ``t = 0`` (a ``SetItem``, a value used outside the cluster, or one read at several shifts, or one
      that fields of several kernels would compute again with more than one array it reads: ``shared_work``);
    * a *kernel* computes the fields of one sweep *level* and class (shape, chunks, region): a field read at a
      nonzero shift, or by a field of another class, is computed one level before its reader, unless the
      reader computes it again where it reads it, a few pointwise operations (``recomputable``, where that
      saves the reader a sweep);
    * a *group* is a run of consecutive levels of one frame (the fields' shape and chunks), lowered to one
      ``Stencil`` node: one task per block running the group's kernels on a shrinking region, so that a group
      of ``k`` sweeps of reach ``r`` reads halos ``k * r`` deep.

    Group size (``gpunumeric.stencil-sweeps``): "auto" adds sweeps to a group while the halo stays within an
    eighth of the smallest block along every axis with several blocks, so that the redundant work on halos
    stays under about 1/8 per such axis while tasks and halo exchanges drop k-fold; an unsplit axis needs no
    halo (fixed boundaries: none is read; periodic ones: reads wrap around the block in the kernel), so a
    single-block array groups all sweeps. An integer ``k`` makes groups of (at most) ``k`` sweeps whatever the
    halo.
    """

    def __init__(self, root: ArrayExpr, settings: Mapping[str, Any]) -> None:
        self.root = root
        self.settings = settings
        self.dag = DAG.of(root)
        self.nodes: dict[str, Expr] = {}  # by name (``run``: where there is a view to read)
        self.views = _Views()
        self.stored_nodes: set[str] = set()  # nodes made fields because several kernels read them (``kernels``)
        self.reads: dict[str, list[Read]] = {}

    # --- clusters and placement ---
    def clusters(self) -> set[str]:
        groups = UnionFind()
        first_reader: dict[str, str] = {}
        for name, reads in self.reads.items():
            groups.find(name)
            for target, *_ in reads:
                if target._name in self.reads:
                    groups.union(name, target._name)
                elif target.ndim:  # readers of one array join: a kernel may compute them all, reading it once
                    groups.union(name, first_reader.setdefault(target._name, name))
        qualifies: dict[str, list[bool]] = defaultdict(lambda: [False, False])
        for name, reads in self.reads.items():
            flags = qualifies[groups.find(name)]
            flags[0] |= isinstance(self.nodes[name], Elemwise)
            flags[1] |= any(any(c) or any(m) for _, c, m, _ in reads)
        return {name for name in self.reads if all(qualifies[groups.find(name)])}

    def used_outside(self) -> dict[str, set[str]]:
        """Cluster nodes read by nodes outside the cluster (or the root: read by ""), with their readers."""
        out: dict[str, set[str]] = defaultdict(set)
        if self.root._name in self.cluster:
            out[self.root._name].add("")
        stack, seen = [self.root], set()
        while stack:
            node = stack.pop()
            if node._name in seen:
                continue
            seen.add(node._name)
            if node._name in self.cluster:
                stack.extend(t for t, *_ in self.reads[node._name])  # its cluster reads too: they read outside
                continue
            for dep in inputs(node):
                if dep._name in self.cluster:
                    out[dep._name].add(node._name)
                stack.append(dep)
        return out

    def place(self) -> None:
        """Placement ``t`` of every cluster node, and which ones are fields."""
        order = [n for n in self.dag.order if n._name in self.cluster]
        self.order = {n._name: i for i, n in enumerate(order)}
        requests: dict[str, set] = defaultdict(set)
        based: set[str] = set()
        self.t: dict[str, tuple[int, ...]] = {}
        self.fields: set[str] = set()
        for node in reversed(order):
            name = node._name
            wanted = requests[name]
            if (isinstance(node, SetItem) or name in self.outside or name in based or name in self.stored_nodes
                    or len(wanted) != 1 or next(iter(wanted))[1]):
                self.fields.add(name)
                self.t[name] = (0,) * node.ndim
            else:
                self.t[name] = next(iter(wanted))[0]
            for k, (target, c, modes, _) in enumerate(self.reads[name]):
                if target._name in self.cluster:  # (where, whether past its ends): a node read there is stored
                    requests[target._name].add((tuple(a + b for a, b in zip(self.t[name], c)), any(modes)))
                    if isinstance(node, SetItem) and k == 0:  # a base is read outside the region: stored
                        based.add(target._name)

    def offset(self, reader: str, read: Read) -> tuple[int, ...]:
        """The offset at which a node placed in a kernel reads a field or source (its ``t`` is 0)."""
        target, c, modes, _ = read
        e = [a + b for a, b in zip(self.t[reader], c)]
        return tuple(((x + n // 2) % n) - n // 2 if m == WRAP and n else x for x, m, n in zip(e, modes, target.shape))

    def frontiers(self) -> dict[str, list[tuple[str, tuple[int, ...], tuple[int, ...]]]]:
        """Per cluster node, the (field or source, offset, edge modes) it reads through the nodes inlined into it."""
        out: dict[str, list[tuple[str, tuple[int, ...], tuple[int, ...]]]] = {}
        for name in sorted(self.cluster, key=self.order.__getitem__):  # producers first
            reads: list = []
            for read in self.reads[name]:
                target = read[0]._name
                if target in self.cluster and target not in self.fields:
                    reads += out[target]
                else:
                    reads.append((target, self.offset(name, read), tuple(read[2])))
            out[name] = list(dict.fromkeys(reads))
        return out

    def inlined(self, fields: Sequence[str]) -> set[str]:
        """The fields and the nodes inlined into them."""
        members = set(fields)
        stack = list(fields)
        while stack:
            for target, *_ in self.reads[stack.pop()]:
                if target._name in self.cluster and target._name not in self.fields and target._name not in members:
                    members.add(target._name)
                    stack.append(target._name)
        return members

    def recomputable(self, frontiers: Mapping[str, list]) -> dict[str, set[str]]:
        """Fields a reader of the same class may compute again where it reads them at a shift, instead of
        reading them stored by an earlier sweep (``gpunumeric.stencil-recompute``), with the fields they read:
        elementwise work of at most ``RECOMPUTED_OPS`` operations on sources and fields read in place, one of
        them an array of the field's shape (whose reads past the ends tell where the field's are: ``build``).
        With the setting off, only fields of sources alone that nothing outside the cluster reads, nor reads
        past a padded end (the elementwise producer of a loop's first input, a salt added to it): computed
        again, they are never stored, which saves the pass that would store them."""
        everywhere = self.settings["stencil-recompute"]
        padded = {t for reads in frontiers.values() for t, _, modes in reads if FILL in modes}
        out = {}
        for name in self.fields:
            node = self.nodes[name]
            reads = frontiers[name]
            if (not isinstance(node, Elemwise) or self.field_class(name)[3] is not None
                    or any(any(e) or any(m) for _, e, m in reads) or len(self.inlined([name])) > RECOMPUTED_OPS):
                continue
            fields_read = {t for t, *_ in reads if t in self.fields}
            if not everywhere and (fields_read or name in self.outside or name in padded):
                continue
            if any(self.nodes[t].shape == node.shape and self.nodes[t].dtype.kind in "biuf" for t, *_ in reads):
                out[name] = fields_read
        return out

    def field_class(self, name: str) -> tuple:
        """(shape, chunks, backend, region): the fields of one sweep with the same class share a kernel; the
        region is None for an elementwise field, per axis a SetItem's box (None where it spans the axis)."""
        node = self.nodes[name]
        if isinstance(node, SetItem):
            region = _region(node)
            return (node.shape, node.chunks, node.backend,
                    tuple(None if r == (0, n) else r for r, n in zip(region, node.shape)))  # type: ignore[arg-type]
        return (node.shape, node.chunks, node.backend, None)

    def fields_below(self) -> dict[str, set[str]]:
        """For each node outside the clusters, the nearest fields it depends on."""
        below: dict[str, set[str]] = {}
        for node in self.dag.order:
            if node._name not in self.cluster:
                below[node._name] = set().union(*[{d._name} if d._name in self.fields else below.get(d._name, set())
                                                  for d in inputs(node)])
        return below

    # --- kernels ---
    def kernels(self) -> list[_Kernel]:
        """The kernels of the fields, built; nodes that several kernels would compute again made fields first."""
        while True:
            frontiers = self.frontiers()
            kernels = self.levels(frontiers)
            shared = self.shared_work(kernels, frontiers)
            if not shared:
                break
            self.stored_nodes |= shared
            self.place()
        self.outputs(kernels, frontiers)
        for kernel in kernels:
            self.build(kernel)
        return kernels

    def shared_work(self, kernels: list[_Kernel], frontiers: Mapping[str, list]) -> set[str]:
        """Nodes inlined into the fields of several kernels whose work reads more than one array: each kernel
        would compute them again with all they read (in an unrolled loop, a chain growing with every
        iteration), so they are stored once instead."""
        users: dict[str, set[int]] = defaultdict(set)
        for k, kernel in enumerate(kernels):
            for f in kernel.fields:
                for m in self.inlined([f]) - {f}:
                    users[m].add(k)
        return {m for m, ks in users.items() if len(ks) > 1 and len({t for t, *_ in frontiers[m] if self.nodes[t].ndim}) > 1}

    def levels(self, frontiers: Mapping[str, list]) -> list[_Kernel]:
        """The kernels of the fields (not yet built): a field read at a shift, or by a field of another class,
        is computed a level before its reader, unless its reader computes it again (``recomputable``)."""
        level: dict[str, int] = {}
        by_key: dict[tuple, _Kernel] = {}
        below = self.fields_below()
        classes = {name: self.field_class(name) for name in self.fields}
        recomputable = self.recomputable(frontiers)
        after_of: dict[str, set[str]] = {}
        self.copies: dict[str, set[str]] = {}  # per field, the fields it computes again where it reads them
        for name in sorted(self.fields, key=self.order.__getitem__):
            cls = classes[name]
            pure = cls[3] is None
            lvl, after, candidates = 0, set(), set()
            for target, e, modes in frontiers[name]:
                if pure and target in recomputable and classes[target] == cls and (
                        any(e) or any(modes)):
                    candidates.add(target)
                elif target in self.fields:
                    same = pure and not any(e) and not any(modes) and classes[target] == cls
                    lvl = max(lvl, level[target] + (0 if same else 1))
                else:  # a source computed from fields (a concatenation, say): after them, in another group
                    after |= below[target]
                    lvl = max([lvl, *[level[f] + 1 for f in below[target]]])
            # computed again where that saves a sweep (the fields it reads, at shifts then, come before it and
            # the reader would come after it otherwise), else read stored
            self.copies[name] = {t for t in candidates if level[t] >= lvl and all(
                level[u] < level[t] for u in recomputable[t])}
            for t in candidates:
                again = t in self.copies[name]
                lvl = max([lvl, level[t] + (not again), *[level[u] + 1 for u in recomputable[t]] * again])
                after |= after_of[t] if again else set()
            level[name], after_of[name] = lvl, after
            key = (lvl, cls)
            if key not in by_key:
                by_key[key] = _Kernel(lvl, cls[:3], [], cls[3])
            by_key[key].fields.append(name)
            by_key[key].after |= after
        if self.settings["stencil-late-reductions"]:
            self.reduced_late(by_key, frontiers, level)
        return sorted(by_key.values(), key=lambda k: (k.level, self.order[k.fields[0]]))

    def reduced_late(self, by_key: dict[tuple, _Kernel], frontiers: Mapping[str, list], level: dict[str, int]) -> None:
        """(``gpunumeric.stencil-late-reductions``) A field that only full reductions read, of what it reads in place,
        moved into the last later kernel of its class reading all of that in place (CG's ``sum(b * b)`` into the
        kernel of ``b . Ab``): the kernel it leaves may then run in one tile kernel with that one, whose last sweep
        alone may have full reductions. No value changes; the reductions' partials are summed in another order."""
        nodes = {n._name: n for n in self.dag.order}
        read_by_fields = {t for f in self.fields for t, *_ in frontiers[f]}
        in_place = {key: {read for f in k.fields for read in frontiers[f] if not any(read[1]) and not any(read[2])}
                    for key, k in by_key.items()}
        for key, kernel in list(by_key.items()):
            for name in list(kernel.fields) if kernel.region is None else ():
                readers = [nodes.get(r) for r in self.outside.get(name, ())]  # ("": the root)
                if name in read_by_fields or not readers or not all(r is not None and
                        is_fused_reduction(r) and r.array._name == name
                        and tuple(r.operand("axes")) == tuple(range(r.array.ndim)) for r in readers):
                    continue
                downstream, stack = set(), [name]  # (a kernel reading what its reductions give cannot take it)
                while stack:
                    for node in self.dag.consumers.get(stack.pop(), ()):
                        if node._name not in downstream:
                            downstream.add(node._name)
                            stack.append(node._name)
                later = [other for other, k in by_key.items() if k.level > level[name] and k.frame == kernel.frame
                         and k.region is None and set(frontiers[name]) <= in_place[other] and not downstream & set(k.fields)]
                if later:
                    kernel.fields.remove(name)
                    by_key[max(later, key=lambda other: by_key[other].level)].fields.append(name)
            if not kernel.fields:
                del by_key[key]

    def outputs(self, kernels: list[_Kernel], frontiers: dict[str, list]) -> None:
        """What each kernel outputs: the fields it stores (read by another kernel, or outside but for full
        reductions), and the full reductions of its fields that it computes (of a kernel without a region)."""
        kernel_of = {f: k for k in kernels for f in k.fields}
        reductions: dict[str, list[Expr]] = defaultdict(list)
        for node in self.dag.order:
            if (is_fused_reduction(node) and node.array._name in kernel_of and kernel_of[node.array._name].region is None
                    and tuple(node.operand("axes")) == tuple(range(node.array.ndim))):
                reductions[node.array._name].append(node)
        stored = {f for f, readers in self.outside.items() if readers - {r._name for r in reductions[f]}}
        stored |= {t for f in kernel_of for t, *_ in frontiers[f] if t in kernel_of and kernel_of[t] is not kernel_of[f]}
        stored |= {u for f in kernel_of for t in self.copies[f] for u, *_ in frontiers[t] if u in kernel_of}
        for k in kernels:
            k.stores = [f for f in k.fields if f in stored]
            k.reductions = [r for f in k.fields for r in reductions[f]]

    def build(self, kernel: _Kernel) -> None:
        """The code of a kernel: its fields' values with the nodes inlined into them, as one program."""
        members = self.inlined(kernel.fields)
        again = set().union(*[self.copies[f] for f in kernel.fields])
        ndim = len(kernel.frame[0])
        builder = ProgramBuilder()
        value: dict[str, int] = {}
        loads: dict[str, tuple[int, tuple[int, ...]]] = {}  # per load's name: (buffer slot, offset)

        def slot(r: Read) -> int:
            """The buffer slot of a read: the first of its target's whose edge modes and fill agree with the
            read's (a new one where none does), those then merged."""
            target, _, modes, fill = r
            key = None if fill is None else np.asarray(fill).tobytes()
            for s, (name, has, filled) in enumerate(zip(kernel.targets, kernel.modes, kernel.fills)):
                if name == target._name and all(a == b or not a or not b for a, b in zip(has, modes)) and (
                        key is None or filled is None or np.asarray(filled).tobytes() == key):
                    break
            else:
                s = len(kernel.targets)
                kernel.targets.append(target._name)
                kernel.modes.append((0,) * target.ndim)
                kernel.fills.append(None)
            kernel.modes[s] = tuple(a or b for a, b in zip(kernel.modes[s], modes))
            kernel.fills[s] = fill if key is not None else kernel.fills[s]
            return s

        def load(r: Read, offset: tuple[int, ...]) -> int:
            where = (slot(r), offset)
            name = repr(where)
            loads[name] = where
            return builder.load(name, r[0].dtype)

        copies: dict[tuple, int] = {}

        def single(r: Read) -> int:
            """A 0-d operand: with ``gpunumeric.stencil-quotients``, a pointwise node of 0-d arrays (CG's alpha =
            rr / pAp) computed where it is read (once per thread, as its own launch would round it), else loaded."""
            node = r[0]
            if not (self.settings["stencil-quotients"] and computed_in_readers(node)):
                return load(r, ())
            return elemwise(node, [load(self.views.resolve(a), ()) if isinstance(a, ArrayExpr) else builder.scalar(a)
                                   for a in node.args])

        def read(reader: str, r: Read) -> int:
            target, offset = r[0], self.offset(reader, r)
            if not target.ndim:
                return single(r)
            if target._name in again and (any(offset) or any(r[2])):
                key = (target._name, offset, tuple(r[2]))
                if key not in copies:
                    copies[key] = computed_again(target._name, offset, r[2], r[3])
                return copies[key]
            if target._name in value:
                return value[target._name]
            return load(r, offset)

        def elemwise(node: Elemwise, args: list[int]) -> int:
            return builder.op(node.operand("op"), node.dtype, node.operand("kwargs"), args, operands_of(node))

        def computed_again(name: str, shift: tuple[int, ...], modes: tuple[int, ...], fill: Any) -> int:
            """Field ``name`` computed at ``shift`` from its sources (read with its reader's edges); past the
            ends (FILL), the reader's fill: where a source of its shape, read with fills 0 and 1, differs."""
            fills = [m if m in (FILL, WRAP) else 0 for m in modes]

            def at(node_name: str) -> int:
                node, reads, args = self.nodes[node_name], iter(self.reads[node_name]), []
                for a in node.args:
                    if not isinstance(a, ArrayExpr):
                        args.append(builder.scalar(a))
                        continue
                    r = next(reads)
                    if r[0]._name in self.cluster and r[0]._name not in self.fields:  # inlined into the field
                        args.append(at(r[0]._name))
                    elif not r[0].ndim:
                        args.append(single(r))
                    else:
                        zero = np.zeros((), r[0].dtype)[()]
                        args.append(load((r[0], (), tuple(fills), zero), tuple(
                            e + d for e, d in zip(self.offset(node_name, r), shift))))
                return elemwise(node, args)

            v = at(name)
            if FILL not in modes:
                return v
            edge = next(r[0] for m in sorted(self.inlined([name])) for r in self.reads[m]
                        if (r[0]._name not in self.cluster or r[0]._name in self.fields)
                        and r[0].shape == self.nodes[name].shape and r[0].dtype.kind in "biuf")
            a, b = (load((edge, (), tuple(fills), np.asarray(k, edge.dtype)[()]), shift) for k in (0, 1))
            inside = builder.op("equal", np.dtype(bool), {}, [a, b], [edge.dtype, edge.dtype])
            if edge.dtype.kind == "f":  # (a NaN read twice differs from itself)
                nan = builder.op("isnan", np.dtype(bool), {}, [a], [edge.dtype])
                inside = builder.op("logical_or", np.dtype(bool), {}, [inside, nan], [np.dtype(bool)] * 2)
            dtype = self.nodes[name].dtype
            return builder.op("where", dtype, {}, [inside, v, builder.scalar(fill)], [np.dtype(bool), dtype, fill])

        bases: dict[str, tuple] = {}
        for name in sorted(members, key=self.order.__getitem__):
            node, reads = self.nodes[name], iter(self.reads[name])
            if isinstance(node, Elemwise):
                value[name] = elemwise(node, [read(name, next(reads)) if isinstance(a, ArrayExpr) else
                                              builder.scalar(a) for a in node.args])
            else:
                base = next(reads)
                v = node.operand("value")
                value[name] = read(name, next(reads)) if isinstance(v, ArrayExpr) else builder.scalar(v)
                bases[name] = (slot(base), self.offset(name, base))
        restricted = tuple(d for d, r in enumerate(kernel.region or ()) if r is not None)
        kernel.region_values = tuple(kernel.region[d] for d in restricted) if kernel.region else ()
        buffer_dtypes = tuple(self.nodes[t].dtype.str for t in kernel.targets)
        program = builder.program(ndim, [value[f] for f in kernel.stores],
                                  [(value[r.array._name], r.operand("kind"), tuple(r.operand("axes")), r.dtype,
                                    r.operand("params")) for r in kernel.reductions])
        load_list = [loads[name] for name in builder.inputs]
        kernel.code = StencilCode(program, buffer_dtypes, tuple(load_list), restricted,
                                  tuple(bases[f] if kernel.region is not None else None for f in kernel.stores),
                                  tuple(self.nodes[f].dtype.str for f in kernel.stores))
        kernel.scalars = tuple(builder.scalars)
        reach = [0] * ndim
        for _, offset in [*load_list, *bases.values()]:
            if offset:  # not a 0-d array
                reach = [max(r, abs(e)) for r, e in zip(reach, offset)]
        kernel.reach = tuple(reach)

    # --- groups ---
    def groups(self, kernels: list[_Kernel]) -> list[_Group]:
        """Kernels in runs of consecutive levels of one frame: a group ends where the next kernel does not
        fit (``fits``), or where a kernel reads a field of an open group of another frame, or a source
        computed from an open group's field (that group must finish first)."""
        limit = self.settings["stencil-sweeps"]
        if limit != "auto" and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"gpunumeric.stencil-sweeps must be 'auto' or a positive int, got {limit!r}")
        groups: list[_Group] = []
        open_groups: dict[tuple, _Group] = {}  # by frame
        group_of: dict[str, _Group] = {}
        for kernel in kernels:
            ended = [group_of[t] for t in kernel.targets if t in group_of and group_of[t].frame != kernel.frame]
            ended += [group_of[f] for f in kernel.after]
            for g in ended:
                if open_groups.get(g.frame) is g:
                    del open_groups[g.frame]
                    open_groups.pop(kernel.frame, None)
            group = open_groups.get(kernel.frame)
            if group is None or not group.fits(kernel, limit, self.nodes):
                group = open_groups[kernel.frame] = _Group(kernel.frame)
                groups.append(group)
            group.add(kernel)
            group_of.update(dict.fromkeys(kernel.fields, group))
        return groups

    def lower(self, groups: list[_Group]) -> dict[str, Expr]:
        """The Stencil node of each group that reads anything at a shift, past an array's ends or inside a
        box (the others are plain elementwise work, left to fusion), and what replaces each field used
        outside its group and each full reduction it computes."""
        read_by: dict[str, set[int]] = defaultdict(set)
        for g, group in enumerate(groups):
            for k in group.kernels:
                for t in k.targets:
                    read_by[t].add(g)
        replaced: dict[str, Expr] = {}
        for g, group in enumerate(groups):
            kernels, periodic = group.kernels, group.periodic
            if not periodic and all(not any(k.reach) and k.region is None and not any(map(any, k.modes))
                                    for k in kernels):
                continue
            fields = [f for k in kernels for f in k.stores]
            sources = list(dict.fromkeys(t for k in kernels for t in k.targets if t not in group.fields))
            number = {name: i for i, name in enumerate([*sources, *fields])}
            outputs = [f for f in fields if f in self.outside or read_by[f] - {g}]
            reductions = [(j, len(k.stores) + i, r) for j, k in enumerate(kernels) for i, r in enumerate(k.reductions)]
            ndim = len(kernels[0].frame[0])
            wraps = {s: [d in periodic for d in range(self.nodes[s].ndim)] for s in sources}
            for k in kernels:
                for t, modes in zip(k.targets, k.modes):
                    if t in wraps:
                        wraps[t] = [a or b == WRAP for a, b in zip(wraps[t], modes)]

            def edges(k: _Kernel) -> tuple:
                """Per slot: what reads past the ends of its buffer give along each axis, the fill, the extent."""
                return tuple((tuple(FILL if m == FILL else WRAP if (wraps[t][d] if t in wraps else d in periodic)
                                    else 0 for d, m in enumerate(modes)), fill, self.nodes[t].shape)
                             for t, modes, fill in zip(k.targets, k.modes, k.fills))

            plan = StencilPlan(ndim, kernels[0].frame[0],
                               tuple(Sweep(k.code, tuple(number[t] for t in k.targets), k.region_values, edges(k))
                                     for k in kernels),
                               tuple(number[f] for f in outputs), tuple(d in periodic for d in range(ndim)),
                               tuple(tuple(wraps[s]) for s in sources), tuple((j, out) for j, out, _ in reductions))
            plan = plan._replace(tiles=tile_runs(plan, self.tile_sweeps(ndim)) if self.settings["stencil-tiles"] else ())
            record_sources(plan)
            token = tokenize(fields, [r._name for _, _, r in reductions], [k.scalars for k in kernels])
            node = Stencil(plan, kernels[0].frame[1], kernels[0].frame[2], tuple(k.scalars for k in kernels),
                           *[self.nodes[s] for s in sources], _determ_token=token)
            n_out = len(outputs) + len(reductions)
            for j, f in enumerate(outputs):
                field_node = self.nodes[f]
                replaced[f] = node if n_out == 1 else FusedOutput(node, j, field_node.chunks, field_node.dtype)
            for j, (_, _, r) in enumerate(reductions, start=len(outputs)):
                partial = node if n_out == 1 else FusedOutput(node, j, r.array.chunks, r.array.dtype)
                replaced[r._name] = Reduction(partial, *r.operands[1:len(Reduction._parameters) - 1], True)
        return replaced

    def tile_sweeps(self, ndim: int) -> int:
        """The most sweeps per tile kernel of ``ndim`` axes (``gpunumeric.stencil-tile-sweeps``, checked; None:
        ``TILE_SWEEPS``)."""
        limit = self.settings["stencil-tile-sweeps"]
        if limit is None:
            return TILE_SWEEPS.get(ndim, 2)  # (no tile kernels of other dimensions: ``link``)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 2:
            raise ValueError(f"gpunumeric.stencil-tile-sweeps must be None or an int of at least 2, got {limit!r}")
        return limit

    def run(self) -> ArrayExpr:
        if not any(issubclass(kind, (Gather, SetItem)) for kind in set(map(type, self.dag.order))):
            return self.root  # no view to read at a shift: no stencil
        self.nodes = {n._name: n for n in self.dag.order}
        self.reads = {}
        for node in self.dag.order:
            reads = _pointwise_reads(node, self.views)
            if reads is not None:
                self.reads[node._name] = reads
        self.cluster = self.clusters()
        if not self.cluster:
            return self.root
        self.outside = self.used_outside()
        self.place()
        kernels = self.kernels()
        return rebuild(self.root, self.lower(self.groups(kernels)))


def stencils(root: ArrayExpr, settings: Mapping[str, Any]) -> ArrayExpr:
    """The expression with its stencil clusters replaced by ``Stencil`` groups (same values, same root);
    nothing when the ``fusion`` setting is off."""
    return _Pass(root, settings).run() if settings["fusion"] else root
