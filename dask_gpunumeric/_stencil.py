"""The stencil pass: elementwise expressions over shifted slices and rolls of arrays, and the update idiom
``v[1:-1, 1:-1] = expr``, become ``Stencil`` groups: one task per block that receives its source blocks
extended by the halos the group needs and runs one kernel per sweep, several sweeps per task.

The pass is a pure function of the expression DAG (``stencils(root) -> root'``), run before fusion:

* a *view* is a chain of Gathers reading its base at a constant shift per axis, cyclically or not:
  ``view[i] = base[(i + c) mod n]`` (slices with step 1, ``roll``, rechunks);
* *pointwise* nodes are fusable ``Elemwise`` nodes whose array operands all have its shape (or none: 0-d
  arrays, read as scalars), and ``SetItem`` nodes over a box (a scalar or an array value); each reads its
  operands through views;
* a *cluster* is a connected set of pointwise nodes with at least one ``Elemwise`` and one shifted read;
* *placement*: a node is computed at position ``p`` of its kernel as ``node[p + t]``. A node that all of
  its readers read at the same shift is inlined into them (``t`` follows), any other is a *field*: stored,
  with ``t = 0`` (a ``SetItem``, a value used outside the cluster, or one read at several shifts);
* a *kernel* computes the fields of one sweep *level* and class (shape, chunks, region): a field read at a
  nonzero shift, or by a field of another class, is computed one level before its reader;
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
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dask._expr import Expr
from dask.tokenize import tokenize

from . import _codegen, _plan, _stencil_kernels
from ._expr import ArrayExpr, Elemwise, FusedOutput, Gather, SetItem, Stencil

Read = tuple[Expr, tuple[int, ...], tuple[bool, ...]]  # (target, shift, wraps per axis)


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


class _Views:
    """Each expression as a read of its base through views (memoized)."""

    def __init__(self) -> None:
        self.memo: dict[str, Read] = {}

    def resolve(self, node: Expr) -> Read:
        if node._name in self.memo:
            return self.memo[node._name]
        shift = _gather_shift(node) if isinstance(node, Gather) else None
        if shift is None:
            read: Read = (node, (0,) * node.ndim, (False,) * node.ndim)
        else:
            source = node.sources[0]
            base, inner, _ = self.resolve(source)
            c, wraps = [], []
            for d, (outer, wrap) in enumerate(zip(*shift)):
                n = base.shape[d]
                if wrap and source.shape[d] != n:  # a cyclic view of a part of the base: not a shift of it
                    base = None
                    break
                position = (inner[d] + outer) % n if n else 0
                c.append(position)
                wraps.append(position + node.shape[d] > n)
            read = (base, tuple(c), tuple(wraps)) if base is not None else (source, shift[0], shift[1])
        self.memo[node._name] = read
        return read


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
    if not _codegen.dtype_supported(node.dtype):
        return None
    if isinstance(node, Elemwise):
        arrays = [a for a in node.args if isinstance(a, ArrayExpr)]
        if not _codegen.elemwise_supported(node) or any(a.shape not in (node.shape, ()) for a in arrays):
            return None
    else:
        region = _region(node)
        value = node.operand("value")
        if region is None or not isinstance(value, ArrayExpr) and not _codegen._scalar_supported(value):
            return None
        arrays = [node.array] + ([value] if isinstance(value, ArrayExpr) else [])
    if any(a.backend != node.backend or not _codegen.dtype_supported(a.dtype) for a in arrays):
        return None
    reads = [views.resolve(a) for a in arrays]
    if isinstance(node, SetItem) and len(reads) == 2:
        target, c, wraps = reads[1]
        reads[1] = (target, tuple(ci - lo for ci, (lo, _) in zip(c, region)), wraps)
    return reads


# --- the pass ------------------------------------------------------------------------------------------


@dataclass
class _Kernel:
    """One sweep kernel of the pass: its fields, level, class and, once built, its code."""

    level: int
    frame: tuple
    fields: list[str]
    region: tuple | None
    code: tuple = ()
    targets: list[str] = field(default_factory=list)  # per local buffer slot
    wraps: list[tuple[bool, ...]] = field(default_factory=list)  # per local buffer slot: any cyclic read
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
        return {d for t, w in zip(kernel.targets, kernel.wraps) if t in self.fields for d, x in enumerate(w) if x}

    def fits(self, kernel: _Kernel, limit: Any, nodes: dict[str, Expr]) -> bool:
        """May ``kernel`` join: within the group size rule (module docstring), and where fields are read
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
    """The state of one run of the pass over a DAG (see the module docstring for the steps)."""

    def __init__(self, root: ArrayExpr) -> None:
        from ._fusion import _DAG

        self.root = root
        self.dag = _DAG(root)
        self.nodes = {n._name: n for n in self.dag.order}
        self.views = _Views()
        self.reads: dict[str, list[Read]] = {}
        for node in self.dag.order:
            reads = _pointwise_reads(node, self.views)
            if reads is not None:
                self.reads[node._name] = reads

    # --- clusters and placement ---
    def clusters(self) -> set[str]:
        from ._fusion import _Groups

        groups = _Groups()
        for name, reads in self.reads.items():
            groups.find(name)
            for target, _, _ in reads:
                if target._name in self.reads:
                    groups.union(name, target._name)
        qualifies: dict[str, list[bool]] = defaultdict(lambda: [False, False])
        for name, reads in self.reads.items():
            flags = qualifies[groups.find(name)]
            flags[0] |= isinstance(self.nodes[name], Elemwise)
            flags[1] |= any(any(c) or any(w) for _, c, w in reads)
        return {name for name in self.reads if all(qualifies[groups.find(name)])}

    def used_outside(self) -> set[str]:
        """Cluster nodes read by nodes outside the cluster (or the root)."""
        out = {self.root._name} & self.cluster
        stack, seen = [self.root], set()
        while stack:
            node = stack.pop()
            if node._name in seen:
                continue
            seen.add(node._name)
            if node._name in self.cluster:
                stack.extend(t for t, _, _ in self.reads[node._name] if t._name not in self.cluster)
                continue
            for dep in node.dependencies():
                if dep._name in self.cluster:
                    out.add(dep._name)
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
            if (isinstance(node, SetItem) or name in self.outside or name in based or len(wanted) != 1
                    or next(iter(wanted))[1]):
                self.fields.add(name)
                self.t[name] = (0,) * node.ndim
            else:
                self.t[name] = next(iter(wanted))[0]
            for k, (target, c, wraps) in enumerate(self.reads[name]):
                if target._name in self.cluster:
                    requests[target._name].add((tuple(a + b for a, b in zip(self.t[name], c)), any(wraps)))
                    if isinstance(node, SetItem) and k == 0:  # a base is read outside the region: stored
                        based.add(target._name)

    def offset(self, reader: str, read: Read) -> tuple[int, ...]:
        """The offset at which a node placed in a kernel reads a field or source (its ``t`` is 0)."""
        target, c, wraps = read
        e = [a + b for a, b in zip(self.t[reader], c)]
        return tuple(((x + n // 2) % n) - n // 2 if w and n else x for x, w, n in zip(e, wraps, target.shape))

    def frontiers(self) -> dict[str, list[tuple[str, tuple[int, ...], bool]]]:
        """Per cluster node, the (field or source, offset, cyclic) it reads through the nodes inlined into it."""
        out: dict[str, list[tuple[str, tuple[int, ...], bool]]] = {}
        for name in sorted(self.cluster, key=self.order.__getitem__):  # producers first
            reads: list = []
            for read in self.reads[name]:
                target = read[0]._name
                if target in self.cluster and target not in self.fields:
                    reads += out[target]
                else:
                    reads.append((target, self.offset(name, read), any(read[2])))
            out[name] = list(dict.fromkeys(reads))
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
                                                  for d in node.dependencies()])
        return below

    # --- kernels ---
    def kernels(self) -> list[_Kernel]:
        level: dict[str, int] = {}
        by_key: dict[tuple, _Kernel] = {}
        below = self.fields_below()
        frontiers = self.frontiers()
        classes = {name: self.field_class(name) for name in self.fields}
        for name in sorted(self.fields, key=self.order.__getitem__):
            cls = classes[name]
            pure = cls[3] is None
            lvl, after = 0, set()
            for target, e, cyclic in frontiers[name]:
                if target in self.fields:
                    same = pure and not any(e) and not cyclic and classes[target] == cls
                    lvl = max(lvl, level[target] + (0 if same else 1))
                else:  # a source computed from fields (a concatenation, say): after them, in another group
                    after |= below[target]
                    lvl = max([lvl, *[level[f] + 1 for f in below[target]]])
            level[name] = lvl
            key = (lvl, cls)
            if key not in by_key:
                by_key[key] = _Kernel(lvl, cls[:3], [], cls[3])
            by_key[key].fields.append(name)
            by_key[key].after |= after
        kernels = sorted(by_key.values(), key=lambda k: (k.level, self.order[k.fields[0]]))
        for kernel in kernels:
            self.build(kernel)
        return kernels

    def build(self, kernel: _Kernel) -> None:
        """The code of a kernel: its fields' values with the nodes inlined into them, as one program."""
        members = set(kernel.fields)
        stack = list(kernel.fields)
        while stack:
            for target, _, _ in self.reads[stack.pop()]:
                if target._name in self.cluster and target._name not in self.fields and target._name not in members:
                    members.add(target._name)
                    stack.append(target._name)
        ndim = len(kernel.frame[0])
        instrs: list[tuple] = []
        value: dict[str, int] = {}
        loads: dict[tuple, int] = {}
        load_list: list[tuple[int, tuple[int, ...]]] = []
        slots: dict[str, int] = {}
        scalars: list[Any] = []

        def slot(target: Expr) -> int:
            if target._name not in slots:
                slots[target._name] = len(kernel.targets)
                kernel.targets.append(target._name)
                kernel.wraps.append((False,) * target.ndim)
            return slots[target._name]

        def read(reader: str, r: Read) -> int:
            target = r[0]
            if target._name in value:
                return value[target._name]
            offset = self.offset(reader, r)
            key = (target._name, offset)
            if key not in loads:
                s = slot(target)
                kernel.wraps[s] = tuple(a or b for a, b in zip(kernel.wraps[s], r[2]))
                instrs.append(("load", len(load_list), target.dtype.str))
                load_list.append((s, offset))
                loads[key] = len(instrs) - 1
            return loads[key]

        def scalar(v: Any) -> int:
            scalars.append(v)
            instrs.append(("scalar", len(scalars) - 1, np.asarray(v).dtype.str))
            return len(instrs) - 1

        bases = []
        for name in sorted(members, key=self.order.__getitem__):
            node, reads = self.nodes[name], iter(self.reads[name])
            if isinstance(node, Elemwise):
                args = tuple(read(name, next(reads)) if isinstance(a, ArrayExpr) else scalar(a) for a in node.args)
                kwargs = tuple(sorted(node.operand("kwargs").items()))
                instrs.append(("op", node.operand("op"), node.dtype.str, kwargs, args,
                               _codegen._op_compute_dtype(node).str))
                value[name] = len(instrs) - 1
            else:
                base = next(reads)
                v = node.operand("value")
                value[name] = read(name, next(reads)) if isinstance(v, ArrayExpr) else scalar(v)
                bases.append((slot(base[0]), self.offset(name, base)))
                kernel.wraps[bases[-1][0]] = tuple(a or b for a, b in zip(kernel.wraps[bases[-1][0]], base[2]))
        restricted = tuple(d for d, r in enumerate(kernel.region or ()) if r is not None)
        kernel.region_values = tuple(kernel.region[d] for d in restricted) if kernel.region else ()
        buffer_dtypes = tuple(self.nodes[t].dtype.str for t in kernel.targets)
        outputs = tuple(("store", value[f]) for f in kernel.fields)
        program = (ndim, tuple(ins[2] for ins in instrs if ins[0] == "load"), tuple(instrs), outputs)
        kernel.code = (program, buffer_dtypes, tuple(load_list), restricted,
                       tuple(bases) if kernel.region is not None else (None,) * len(kernel.fields),
                       tuple(self.nodes[f].dtype.str for f in kernel.fields))
        kernel.scalars = tuple(scalars)
        reach = [0] * ndim
        for _, offset in [*load_list, *bases]:
            if offset:  # not a 0-d array
                reach = [max(r, abs(e)) for r, e in zip(reach, offset)]
        kernel.reach = tuple(reach)

    # --- groups ---
    def groups(self, kernels: list[_Kernel]) -> list[_Group]:
        """Kernels in runs of consecutive levels of one frame: a group ends where the next kernel does not
        fit (``fits``), or where a kernel reads a field of an open group of another frame, or a source
        computed from an open group's field (that group must finish first)."""
        from . import config

        limit = config.get("stencil-sweeps")
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
        """The Stencil node of each group, and what replaces each field used outside its group."""
        read_by: dict[str, set[int]] = defaultdict(set)
        for g, group in enumerate(groups):
            for k in group.kernels:
                for t in k.targets:
                    read_by[t].add(g)
        replaced: dict[str, Expr] = {}
        for g, group in enumerate(groups):
            kernels, periodic = group.kernels, group.periodic
            fields = [f for k in kernels for f in k.fields]
            sources = list(dict.fromkeys(t for k in kernels for t in k.targets if t not in group.fields))
            number = {name: i for i, name in enumerate([*sources, *fields])}
            outputs = [f for f in fields if f in self.outside or read_by[f] - {g}]
            ndim = len(kernels[0].frame[0])
            wraps = {s: [d in periodic for d in range(self.nodes[s].ndim)] for s in sources}
            for k in kernels:
                for t, w in zip(k.targets, k.wraps):
                    if t in wraps:
                        wraps[t] = [a or b for a, b in zip(wraps[t], w)]
            plan = (ndim, kernels[0].frame[0],
                    tuple((k.code, tuple(number[t] for t in k.targets), k.region_values) for k in kernels),
                    tuple(number[f] for f in outputs), tuple(d in periodic for d in range(ndim)),
                    tuple(tuple(wraps[s]) for s in sources))
            _stencil_kernels.record_sources(plan)
            token = tokenize(fields, [k.scalars for k in kernels])
            node = Stencil(plan, kernels[0].frame[1], kernels[0].frame[2], tuple(k.scalars for k in kernels),
                           *[self.nodes[s] for s in sources], _determ_token=token)
            for j, f in enumerate(outputs):
                field_node = self.nodes[f]
                replaced[f] = node if len(outputs) == 1 else FusedOutput(node, j, field_node.chunks, field_node.dtype)
        return replaced

    def run(self) -> ArrayExpr:
        from ._fusion import _rebuild

        self.cluster = self.clusters()
        if not self.cluster:
            return self.root
        self.outside = self.used_outside()
        self.place()
        kernels = self.kernels()
        return _rebuild(self.root, self.lower(self.groups(kernels)), {})


def stencils(root: ArrayExpr) -> ArrayExpr:
    """The expression with its stencil clusters replaced by ``Stencil`` groups (same values, same root)."""
    return _Pass(root).run()
