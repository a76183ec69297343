"""What the tasks of a ``Stencil`` group run: source blocks extended by halos in, one sweep after another on a
shrinking region (``codegen.stencil_plan``), the group's output blocks out. On NumPy blocks a sweep's program
is interpreted (``interpreter.run_numpy``) on windows of the buffers, or on contiguous runs of them where its
loads allow (``_run_flat``); on CuPy blocks it is its generated kernel
(``codegen.stencil``), and runs of 2-d sweeps one tile kernel. A task part's launches and their geometry are
worked out once per plan, part and buffer shapes (``_schedule``); a task run again only launches.
"""
from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..codegen import stencil as _stencil_source
from ..codegen import stencil_plan as _stencil_plan
from ..codegen.stencil_plan import Box
from ..codegen.types import FILL, NP_OF_CTYPE, TILE_SHARED_BYTES, WRAP, Store, SweepConfig, TileConfig, ctype
from . import blocks as _blocks
from . import cuda as _cuda
from . import fused as _fused
from . import interpreter as _interpreter
from .. import config
from ..backend import module, namespace

def run(plan: tuple, scalars: tuple, block: Box, backend: str, into: Any, parts: tuple, *pieces: Sequence[Any]) -> Any:
    """Task function of a Stencil block: the group's outputs (one, or a tuple of several): its output blocks,
    then the partials of its full reductions over the block.

    Computes each part ``(target, kernel_boxes, origins, layouts)`` (a box of the block, the box of each
    kernel, and the origin and layout of each source's extended block) into the output blocks ``into``
    (another task's outputs, written in place, its partials combined with the parts') or new ones.
    ``pieces`` are each part's sources' pieces."""
    xp = module(backend)
    extent = tuple(hi - lo for lo, hi in block)
    n_out, n_sources = len(plan.outputs), len(plan.wraps)
    values = [] if into is None else list(into) if isinstance(into, tuple) else [into]
    outs = values[:n_out] or [xp.empty(extent, dtype=dt)
                              for dt in _remembered((plan,), (), lambda: _stencil_plan.output_dtypes(plan))[:n_out]]
    partials = [values[n_out:]] if values[n_out:] else []
    for p, part in enumerate(parts):
        partials.append(_run_part(plan, scalars, part, pieces[p * n_sources : (p + 1) * n_sources], block, outs,
                                  backend))
    results = outs + [_combined(plan, r, [p[i] for p in partials]) for i, r in enumerate(plan.reductions)]
    return results[0] if len(results) == 1 else tuple(results)


def _on_device(xp: Any, value: np.generic) -> Any:
    """A NumPy scalar as a 0-d device array, copied once per value and device (a scalar argument repeated from
    call to call, a weight, costs no copy; sources are only read)."""
    key = (xp.cuda.Device().id, value.dtype, value.tobytes())
    found = _DEVICE_SCALARS.get(key)
    if found is None:
        if len(_DEVICE_SCALARS) >= 256:
            _DEVICE_SCALARS.clear()
        found = _DEVICE_SCALARS[key] = xp.asarray(value)
    return found


_DEVICE_SCALARS: dict[tuple, Any] = {}


def _combined(plan: tuple, reduction: tuple[int, int], partials: list[dict[str, Any]]) -> dict[str, Any]:
    """One partial of a full reduction from those of a block's parts."""
    if len(partials) == 1:
        return partials[0]
    _, out = _stencil_plan.reduction_of(plan, reduction)
    return _blocks.reduce_combine(out.kind, partials, (len(partials),) + (1,) * (plan.ndim - 1), out.axes, out.params)


def _run_part(plan: tuple, scalars: tuple, part: tuple, pieces: Sequence[Any], block: Box, outs: list,
              backend: str) -> list[dict[str, Any]]:
    """Compute one part of a block into ``outs``; the partials of the group's full reductions over it. The
    part's launches and their geometry come from ``_schedule``, worked out once per part and buffer shapes
    (a task run again, in a loop or an accelerated call, finds them): here buffers are made, launches run."""
    target, _, origins, layouts = part
    xp = module(backend)
    sources = {s: _blocks.halo_block(pieces[s], layout) for s, layout in enumerate(layouts) if layout is not None}
    if xp is not np:  # (a 0-d source given as a NumPy scalar, an accelerated function's scalar argument)
        sources = {s: _on_device(xp, a) if isinstance(a, np.generic) else a for s, a in sources.items()}
    shapes = tuple((s, np.shape(array)) for s, array in sources.items())
    key = (block, backend in _CUDA_BACKENDS, backend in _TILED_BACKENDS, xp is np, shapes)
    steps = _remembered((plan, part), key, lambda: _schedule(plan, part, block, backend, dict(shapes)))
    buffers: dict[int, tuple[Any, tuple[int, ...]]] = {s: (array, origins[s]) for s, array in sources.items()}
    pool = _interpreter.buffer_pool() if xp is np else None
    partials: dict[tuple[int, int], dict[str, Any]] = {}
    for step in steps:
        dests = [(outs[dest], origin) if isinstance(dest, int) else
                 (xp.empty(*dest) if pool is None else pool.take(*dest), origin) for dest, origin in step.dests]
        if step.kind == "tile":
            reduced = _run_tile(plan, step.how, [[buffers.get(b) for b in reads] for reads in step.reads], scalars,
                                dests, target)
            partials.update({(step.sweep, j): partial for j, partial in reduced.items()})
        elif step.kind:
            k = step.sweep
            inputs = [buffers.get(b) for b in step.reads[0]]
            if step.kind == "cuda":
                reduced = _run_cuda(plan.sweeps[k].code, inputs, step.how, part[1][k], scalars[k], dests, target)
            else:
                reduced = _run_interpreted(step.how, inputs, scalars[k], plan.shape, backend, dests)
            partials.update({(k, j): partial for j, partial in reduced.items()})
        for f, dest in zip(step.fields, dests):
            buffers[f] = dest
        for j, into, i, window in step.copies:
            outs[j][into] = dests[i][0][window]
        for b, pooled in step.frees:
            array = buffers.pop(b)[0]
            if pooled:
                pool.give(array)
    return [partials[r] if r in partials else _empty_partial(plan, r, xp) for r in plan.reductions]


class _Step(NamedTuple):
    """One launch of a part, a sweep or a run of them in a tile kernel (``_schedule``): its (last) sweep; per
    field it stores, where (an output number, or the extent and dtype of a new buffer) and its origin; the
    fields' buffer numbers; per sweep, the buffer number of each slot; how it runs (``kind``: "tile",
    "cuda", "numpy", or "" for an empty box) and the geometry of that (``how``); the fields copied into the
    outputs (output number, its index, field number, the field's index); the buffers dropped after it, and
    whether each goes back to the pool."""

    sweep: int
    dests: tuple[tuple[Any, tuple[int, ...]], ...]
    fields: tuple[int, ...]
    reads: tuple[tuple[int, ...], ...]
    kind: str
    how: Any
    copies: tuple[tuple[int, tuple, int, tuple], ...]
    frees: tuple[tuple[int, bool], ...]


_SCHEDULES: dict[tuple, tuple] = {}  # ``_remembered``'s values, oldest first
_SCHEDULES_LIMIT = 2048  # entries remembered: a block part's launches (tens of kB), a kernel, a sweep's scalars
_SCHEDULES_LOCK = threading.Lock()
_CUDA_BACKENDS = frozenset({"cupy"})  # where sweeps run as generated kernels (the CPU kernel emulator adds "numpy")


def _remembered(owners: tuple, key: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, remembered for these objects (a plan, a part: by identity, since hashing them costs more
    than the lookup saves; each entry holds them, so their ids stay theirs) and ``key``."""
    full = (*map(id, owners), *key)
    entry = _SCHEDULES.get(full)
    if entry is not None:
        for held, owner in zip(entry[0], owners):  # (a loop: no generator on every launch)
            if held is not owner:
                break
        else:
            return entry[1]
    value = make()
    with _SCHEDULES_LOCK:
        while len(_SCHEDULES) >= _SCHEDULES_LIMIT:
            del _SCHEDULES[next(iter(_SCHEDULES))]
        _SCHEDULES[full] = (owners, value)
    return value


def _schedule(plan: tuple, part: tuple, block: Box, backend: str,
              shapes: dict[int, tuple[int, ...]]) -> tuple[_Step, ...]:
    """The launches of a part over source buffers of these ``shapes``, worked out on the buffers' places
    (shape and origin) alone: the sweeps in order, those of a run in one tile kernel where it may; each field
    kept from its sweep to its last read, an output computed just for the target written straight into the
    output block, the others into new buffers (of the pool on NumPy blocks)."""
    target, kernel_boxes, origins, _ = part
    kernels, outputs = plan.sweeps, plan.outputs
    cuda, pooling = backend in _CUDA_BACKENDS, module(backend) is np
    origin, extent = tuple(lo for lo, _ in block), tuple(hi - lo for lo, hi in block)
    places = {s: (shape, origins[s]) for s, shape in shapes.items()}  # the buffers present, each's shape and origin
    last_read = _last_reads(plan)
    output_of = {b: j for j, b in enumerate(outputs)}
    runs = dict(plan.tiles) if backend in _TILED_BACKENDS else {}
    tile, first, end = None, 0, -1  # a tile kernel's geometry (``_tile_part``), its first and last sweep
    held: list[tuple[int, tuple[Any, tuple[int, ...]]]] = []  # a tile kernel's stored fields before its last sweep
    pooled: set[int] = set()
    steps = []
    buffer = len(part[3])
    for k, ((code, slots, region, edges), box) in enumerate(zip(kernels, kernel_boxes)):
        fields = tuple(range(buffer, buffer + len(code.out_dtypes)))
        buffer += len(fields)
        if k in runs:
            tile = _tile_part(plan, (k, runs[k]), [[places.get(b) for b in kernels[j].slots]
                                                   for j in range(k, k + runs[k])], kernel_boxes[k : k + runs[k]], target)
            first, end, held = k, k + runs[k] - 1, []
        if tile is not None and k < end:  # its outputs live in the tile kernel's shared memory (and, if
            held += [(f, (output_of[f], origin)) for f in fields if f in output_of]  # outputs, on their tiles)
            continue
        dests, dest_places = [], []
        for f, dt in zip(fields, code.out_dtypes):
            if f in output_of and box == target:
                dests.append((output_of[f], origin))
                dest_places.append((extent, origin))
                continue
            place = (tuple(hi - lo for lo, hi in box), tuple(lo for lo, _ in box))
            dests.append(((place[0], np.dtype(dt)), place[1]))
            dest_places.append(place)
            if pooling:
                pooled.add(f)
        inputs = [places.get(b) for b in slots]
        if tile is not None:
            reads = tuple(kernels[j].slots for j in range(first, k + 1))
            stored = [[(extent, origin)] * len(kernels[j].code.out_dtypes) for j in range(first, end)]
            how = (tile, _tile_args(plan, tile, [[places.get(b) for b in r] for r in reads], [*stored, dest_places]))
            kind = "tile"
            tile = None
            fields += tuple(f for f, _ in held)  # the last sweep's outputs first, then the stored ones
            dests += [dest for _, dest in held]
        elif _stencil_plan.is_empty(box):
            kind, how, reads = "", None, ()
        elif cuda:
            active = _edges(code, inputs, region, box, edges)
            geometry = _launch_geometry(code, inputs, edges, active, region, box, dest_places)
            kind, how, reads = "cuda", (active, geometry, _index_type(geometry.checked)), (slots,)
        else:
            kind, how, reads = "numpy", _interpretation(code, inputs, edges, region, box, dest_places, target), (slots,)
        copies = tuple((output_of[f], _index((extent, origin), target), i, _index(place, target))
                       for i, (f, place) in enumerate(zip(fields, dest_places))
                       if f in output_of and box != target and not _stencil_plan.is_empty(target))
        places.update(zip(fields, dest_places))
        frees = []
        for b in [b for b, last in last_read.items() if last <= k]:  # < k: read by a tile kernel
            if places.pop(b, None) is not None:
                frees.append((b, b in pooled))
        steps.append(_Step(k, tuple(dests), fields, reads, kind, how, copies, tuple(frees)))
    return tuple(steps)


def _index(place: tuple[tuple[int, ...], tuple[int, ...]], box: Box) -> tuple[slice, ...]:
    """The index of ``box`` in a buffer at ``place`` (its shape and origin)."""
    return tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(box, place[1]))


def _empty_partial(plan: tuple, reduction: tuple[int, int], xp: Any) -> dict[str, Any]:
    """The partial of a full reduction over no elements (a part with an empty target)."""
    program, out = _stencil_plan.reduction_of(plan, reduction)
    empty = xp.empty((0,) * plan.ndim, dtype=program.instrs[out.value].dtype)
    return _blocks.reduce_chunk(out.kind, empty, out.axes, np.dtype(out.dtype), out.params, ())


def _last_reads(plan: tuple) -> dict[int, int]:
    """The last kernel reading each buffer."""
    last: dict[int, int] = {}
    for k, (_, slots, *_) in enumerate(plan.sweeps):
        for b in slots:
            last[b] = k
    return last


def _edges(code: tuple, inputs: list, region: tuple, box: Box, edges: tuple) -> tuple:
    """Per buffer slot and axis, the edge mode of the reads of a sweep past the ends of what the slot holds
    (0 where none is): with WRAP past its buffer's, with FILL past its array's (``inputs``: per slot the
    place of its buffer, shape and origin, or None; ``edges``: the plan's per slot ``(modes, fill,
    extent)``)."""
    _, _, loads, restricted, bases, _ = code
    value = _stencil_plan.value_box(box, restricted, region)
    reads = [] if _stencil_plan.is_empty(value) else [(slot, value, offset) for slot, offset in loads]
    reads += [(base[0], box, base[1]) for base in bases if base is not None]
    return _past_ends(reads, inputs, edges)


def _ends(inputs: list, edges: tuple, slot: int, d: int) -> tuple[int, int]:
    """The positions along axis ``d`` that slot ``slot`` reads without its edge mode: its buffer's with WRAP,
    its array's with FILL."""
    shape, origin = inputs[slot]
    return (origin[d], origin[d] + shape[d]) if edges[slot][0][d] == WRAP else (0, edges[slot][2][d])


def _past_ends(reads: list, inputs: list, edges: tuple) -> tuple:
    """``_edges`` of reads ``(slot, window, offset)``."""
    active = [[0] * len(modes) for modes, _, _ in edges]
    for slot, window, offset in reads:
        if offset and inputs[slot] is not None:
            modes = edges[slot][0]
            for d, ((lo, hi), e) in enumerate(zip(window, offset)):
                if modes[d]:
                    ends = _ends(inputs, edges, slot, d)
                    if lo + e < ends[0] or hi + e > ends[1]:
                        active[slot][d] = modes[d]
    return tuple(map(tuple, active))


#: Elements copied (wrapped or filled) costing about as much host time as interpreting a sweep's program
#: once more on a piece: ``_pieces`` reads a small box whole, copying its reads past the ends, instead of
#: cutting it into an interior and slabs interpreted one by one.
PIECE_ELEMENTS = 2**13


def _load_edges(slot: int, box: Box, offset: tuple, inputs: list, edges: tuple) -> tuple:
    """The edge modes of one load's reads over ``box`` (``_edges``): a load inside its buffer is a view."""
    return _past_ends([(slot, box, offset)], inputs, edges)[slot]


def _pieces(value: Box, loads: tuple, inputs: list, edges: tuple) -> list[Box]:
    """``value`` cut into an interior, whose reads stay inside what their buffers hold (plain views, no copy),
    and the slabs around it along each axis, whose reads wrap or are filled (the few positions there copied):
    at most ``2 * ndim + 1`` boxes; ``value`` whole where copying its reads past the ends costs less than
    the slabs' interpretation (``PIECE_ELEMENTS``)."""
    interior = [list(bounds) for bounds in value]
    for slot, offset in loads:
        if offset and inputs[slot] is not None:
            for d, (mode, e) in enumerate(zip(edges[slot][0], offset)):
                if mode:
                    lo, hi = _ends(inputs, edges, slot, d)
                    interior[d] = [max(interior[d][0], lo - e), min(interior[d][1], hi - e)]
    slabs, inner = _peel(value, interior)
    pieces = [piece for piece in [*slabs, inner] if not _stencil_plan.is_empty(piece)]
    if len(pieces) > 1:
        copied = math.prod([hi - lo for lo, hi in value]) * sum(any(_load_edges(slot, value, offset, inputs, edges))
                                                                for slot, offset in loads)
        if copied <= PIECE_ELEMENTS * (len(pieces) - 1):
            return [value]
    return pieces


def _peel(box: Box, inner: Sequence[Sequence[int]]) -> tuple[list[Box], Box]:
    """``box`` as the slabs of it outside ``inner`` (clipped to it), two per axis at most, and the rest."""
    slabs, rest = [], list(box)
    for d, ((lo, hi), (inner_lo, inner_hi)) in enumerate(zip(box, inner)):
        inner_lo = min(max(inner_lo, lo), hi)
        inner_hi = max(min(inner_hi, hi), inner_lo)
        slabs += [tuple(rest[:d]) + (cut,) + tuple(rest[d + 1 :]) for cut in ((lo, inner_lo), (inner_hi, hi))
                  if cut[1] > cut[0]]
        rest[d] = (inner_lo, inner_hi)
    return slabs, tuple(rest)


def _window_of(place: tuple, box: Box, offset: Sequence[int], edges: Sequence[int] = (), fill: Any = None,
               extent: Sequence[int] = ()) -> tuple:
    """How ``_window`` takes the part of a buffer at ``place`` (its shape and the position of its first
    element) at ``box + offset``: an index, then per axis with an edge mode (``_edges``) what is taken along
    it: the runs of positions around the buffer (WRAP: one run is a view), or, past the ends ``[0, extent)``
    of its array, ``fill`` (FILL: the positions inside, where they go, the window's width and ``fill``)."""
    shape, origin = place
    offset = tuple(offset) or (0,) * len(origin)
    bounds = [(lo + e - o, hi + e - o) for (lo, hi), e, o in zip(box, offset, origin)]
    edges = tuple(edges) or (0,) * len(bounds)
    index = tuple(slice(None) if mode else slice(*b) for b, mode in zip(bounds, edges))
    around = []
    for d, ((lo, hi), mode, o) in enumerate(zip(bounds, edges, origin)):
        before = (slice(None),) * d
        if mode == WRAP:
            runs, p = [], lo
            while p < hi:
                start = p % shape[d]
                runs.append(before + (slice(start, start + min(shape[d] - start, hi - p)),))
                p += runs[-1][d].stop - start
            around.append((d, tuple(runs), None))
        elif mode == FILL:
            inside = (max(lo, -o), max(min(hi, extent[d] - o), max(lo, -o)))
            around.append((d, (before + (slice(*inside),),), (before + (slice(inside[0] - lo, inside[1] - lo),),
                                                              hi - lo, fill)))
    return index, tuple(around)


def _window(array: Any, window: tuple) -> Any:
    """The part of a buffer that ``_window_of`` describes: a view, or a copy where reads pass its ends."""
    index, around = window
    view = array[index]
    if not around:
        return view
    xp = namespace(array)
    for d, runs, filled in around:
        taken = view[runs[0]] if len(runs) == 1 else xp.concatenate([view[run] for run in runs], axis=d)
        if filled is None:
            view = taken
            continue
        into, width, fill = filled
        view = xp.full(view.shape[:d] + (width,) + view.shape[d + 1 :], fill, dtype=array.dtype)
        view[into] = taken
    return view


class _Interpreted(NamedTuple):
    """A sweep over a box on NumPy blocks (``_interpretation``): its program with every output stored; the
    slabs of its fields that their bases fill (field, its index, slot, window); per piece of its values
    (``_pieces``), the window of each load, each field's index, the piece's origin and extent, its index
    in the values' box (None: the piece is all of it) and how it runs on runs of its buffers (``_flat_reads``;
    None: on its windows); the values' extent, the target's index there and the full reductions among the
    program's outputs (their numbers and records)."""

    stores: tuple
    shell: tuple[tuple[int, tuple, int, tuple], ...]
    pieces: tuple[tuple[tuple, tuple, tuple[int, ...], tuple[int, ...], tuple | None, tuple | None], ...]
    extent: tuple[int, ...]
    target: tuple
    reductions: tuple[tuple[int, Any], ...]


def _interpretation(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, dests: list,
                    target: Box) -> _Interpreted:
    """How a sweep over ``box`` is interpreted on the buffers at ``inputs`` (per slot, shape and origin)
    into fields at ``dests``: a field's base fills the box where the sweep computes no value (its values
    overwrite the rest), the values are computed piece by piece (``_pieces``)."""
    program, _, loads, restricted, bases, _ = code
    value = _stencil_plan.value_box(box, restricted, region)
    empty = _stencil_plan.is_empty(value)
    shell = _peel(box, value)[0] if not empty else [box]
    active = _past_ends([(base[0], box, base[1]) for base in bases if base is not None], inputs, edges)
    fills = tuple((i, _index(dest, slab), base[0],
                   _window_of(inputs[base[0]], slab, base[1], active[base[0]], *edges[base[0]][1:]))
                  for i, (dest, base) in enumerate(zip(dests, bases)) if base is not None for slab in shell)
    stores = program._replace(outputs=tuple(Store("store", out.value) for out in program.outputs))  # reductions: over the target
    pieces = [] if empty else _pieces(value, loads, inputs, edges)
    described = []
    for piece in pieces:
        windows = tuple((slot, _window_of(inputs[slot], piece, offset,
                                          _load_edges(slot, piece, offset, inputs, edges), *edges[slot][1:]))
                        for slot, offset in loads)
        placed = None if len(pieces) == 1 else tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(piece, value))
        extent = tuple(hi - lo for lo, hi in piece)
        described.append((windows, tuple(_index(dest, piece) for dest in dests), tuple(lo for lo, _ in piece),
                          extent, placed, _flat_reads(stores, windows, inputs, extent)))
    return _Interpreted(stores, fills, tuple(described), tuple(hi - lo for lo, hi in value),
                        tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(target, value)),
                        tuple((j, out) for j, out in enumerate(program.outputs) if out.tag == "reduce"))


def _run_interpreted(how: _Interpreted, inputs: list, scalars: tuple, shape: tuple[int, ...], backend: str,
                     dests: list) -> dict[int, dict[str, Any]]:
    """A sweep as ``_interpretation`` describes it, on ``inputs`` (per slot an array and its origin) into
    ``dests``; the partial of each full reduction of the sweep (by output number) over the target."""
    for i, index, slot, window in how.shell:
        dests[i][0][index] = _window(inputs[slot][0], window)
    whole: dict[int, Any] = {}  # per reduction output, its values over the sweep's values' box
    for windows, indices, origin, extent, placed, flat in how.pieces:
        into = [dest[0][index] for dest, index in zip(dests, indices)]
        arrays = [inputs[slot][0] for slot, _ in windows]
        if flat is not None and all(start is None or (type(a) is np.ndarray and a.flags.c_contiguous)
                                    for a, start in zip(arrays, flat[2])):
            values = _run_flat(how.stores, flat, arrays, scalars, origin, extent, shape, backend, into)
        else:
            windowed = [_window(a, window) for a, (_, window) in zip(arrays, windows)]
            values = _interpreter.run_numpy(how.stores, scalars, origin, extent, shape, windowed, backend, into)
        for out, v in zip(into, values):
            if v is not out:
                out[...] = v
        for j, _ in how.reductions:
            if placed is None:
                whole[j] = values[j]
                continue
            if j not in whole:
                whole[j] = namespace(values[j]).empty(how.extent, dtype=values[j].dtype)
            whole[j][placed] = values[j]
    return {j: _blocks.reduce_chunk(out.kind, whole[j][how.target], out.axes, np.dtype(out.dtype), out.params, ())
            for j, out in how.reductions if j in whole}


#: The most elements, as a multiple of a piece's, that ``_flat_reads`` computes on: a run of a buffer holds the
#: piece's rows and what lies between them; long 1-d loops over them beat NumPy's loops over the short rows of
#: windows even at twice the elements (docs/benchmarks.md).
FLAT_SLACK = 2


def _flat_reads(program: tuple, windows: tuple, inputs: list, extent: tuple[int, ...]) -> tuple | None:
    """How a piece's program runs on one contiguous run of each load's buffer (``_run_flat``): the element
    strides its buffers share (C-contiguous ones of the same rows), the runs' length, and where each load's
    run starts (None: a buffer of one element, read whole); None where a load is copied (wrapped or
    filled), the buffers' rows differ, values depend on their positions (draws) or on the whole block
    (totals), an op may raise on the values between the rows (integer powers), or the runs hold over
    ``FLAT_SLACK`` times the piece's elements."""
    if (len(extent) < 2 or any(around for _, (_, around) in windows)
            or any(ins.tag in ("random", "total") or (ins.tag == "op" and ins.func == "power"
                                                       and np.dtype(ins.dtype).kind in "iu")
                   for ins in program.instrs)):
        return None
    single = [math.prod(inputs[slot][0]) == 1 for slot, _ in windows]
    rows = {inputs[slot][0][1:] for (slot, _), one in zip(windows, single) if not one}
    if len(rows) != 1:
        return None
    (row,) = rows
    strides = tuple(math.prod(row[d:]) for d in range(len(row))) + (1,)
    span = sum((e - 1) * s for e, s in zip(extent, strides)) + 1
    if span > FLAT_SLACK * math.prod(extent):
        return None
    return strides, span, tuple(None if one else sum(ix.start * s for ix, s in zip(index, strides))
                                for (_, (index, _)), one in zip(windows, single))


def _run_flat(program: tuple, flat: tuple, arrays: list, scalars: tuple, origin: tuple[int, ...],
              extent: tuple[int, ...], shape: tuple[int, ...], backend: str, into: list) -> list:
    """A piece's program on runs of its C-contiguous buffers (``_flat_reads``) instead of their windows, the
    runs' values between the piece's rows computed and left out: the same operations on each element of the
    piece, in long 1-d loops. Its outputs over the piece: ``into``'s arrays (the values copied there), then
    arrays of their own."""
    strides, span, starts = flat
    pool = _interpreter.buffer_pool()
    runs = [np.reshape(a, -1) if start is None else a.reshape(-1)[start : start + span]
            for a, start in zip(arrays, starts)]
    spans = [pool.take((span,), np.dtype(program.instrs[out.value].dtype)) for out in program.outputs]
    values = _interpreter.run_numpy(program, scalars, origin, (span,), shape, runs, backend, spans)
    results = []
    for k, value in enumerate(values):
        piece = np.lib.stride_tricks.as_strided(value, extent, tuple(s * value.strides[0] for s in strides),
                                                writeable=False)
        if k < len(into):
            into[k][...] = piece
            results.append(into[k])
        else:
            results.append(piece.copy())
    for buffer in spans:
        pool.give(buffer)
    return results


# Thread blocks of a kernel with full reductions: this many full waves, each thread looping over its rows (a
# tile kernel's blocks: over tiles) and each block writing one partial: one wave, or one block per tile, was
# slower (docs/benchmarks.md).
WAVES = 8


_TILED_BACKENDS = frozenset({"cupy"})  # where tile kernels run (the CPU kernel emulator adds "numpy")
# the tile kernels' shape and the one-sweep kernels' choices, read at each launch (benchmarks/stencil_probe.py
# --variants puts others in their place; these packed choices, 16-byte accesses where aligned, measured fastest for
# CG, Gray-Scott and heat; the last block's partials loaded 8 at a time, CG's update and pair kernels 7 us faster
# each: docs/benchmarks.md)
TILE_CONFIG = TileConfig(packed=True)
SWEEP_CONFIG = SweepConfig(rows=1, min_blocks=6, packed=True, combine_ahead=8)
# where not None, the shape of tile kernels of two sweeps (pairs: one intermediate field, whose taller packed tiles
# cost fewer halo rows; CG measured faster so, longer runs such as Gray-Scott's not: docs/benchmarks.md)
PAIR_TILE_CONFIG: TileConfig | None = TileConfig(rows=64, columns=128, packed=True, combine_ahead=8)
# where not None, the choices of one-sweep kernels reading more than one buffer at shifted positions (such as CG's
# p update and p.Ap stencil as one flat kernel, with ``stencil-recompute``), which keep more values live
SHIFTED_SWEEP_CONFIG: SweepConfig | None = None


def tiles_run_on(backend: str) -> bool:
    """Whether runs of stencil sweeps run as tile kernels on blocks of ``backend``."""
    return backend in _TILED_BACKENDS


def tiles_run(backend: str) -> bool:
    """``tiles_run_on`` under the current settings: with ``gpunumeric.stencil-tiles`` on."""
    return bool(config.get("stencil-tiles")) and tiles_run_on(backend)


def _tile_part(plan: tuple, run: tuple[int, int], inputs: list[list], boxes: Sequence[Box], target: Box) -> tuple | None:
    """What the tile kernel of a run ``(first, count)`` of kernels needs over these boxes and buffers (per
    sweep, the places of its inputs, shape and origin; its linked slots' None) for a part's ``target``: the
    run, per sweep its box, the links, edges for the kernel variant and per sweep edges for its launch; None
    where the sweeps run one kernel each (a box empty, wrapped reads more than a period away, or outputs of
    the sweeps but the last, stored on the tiles of the last, where its box is not the target)."""
    if any(_stencil_plan.is_empty(box) for box in boxes) or (
            _stencil_plan.stored_sweeps(plan, run) and tuple(boxes[-1]) != tuple(target)):
        return None
    start, count = run
    sweeps = plan.sweeps[start : start + count]
    links = [()] + [_stencil_plan.link(plan, k) for k in range(start, start + count - 1)]
    linked = [{slot for slot, _ in shared} for shared in links]
    through = []  # per sweep, the edges of its linked reads (from the previous sweep's box)
    for j, ((code, _, region, edges), box) in enumerate(zip(sweeps, boxes)):
        placed = list(inputs[j])
        for slot in linked[j]:  # the previous outputs as buffers of its box, for their edges
            placed[slot] = (tuple(hi - lo for lo, hi in boxes[j - 1]), tuple(lo for lo, _ in boxes[j - 1]))
        through.append(_edges(code, placed, region, box, edges))
    wrapped = {d for j in range(1, count) for slot in linked[j] for d, mode in enumerate(through[j][slot]) if mode == WRAP}
    halos = _stencil_source.tile_halos([sweep.code for sweep in sweeps], links[1:])
    variant, launch = [], []
    for j, ((code, _, region, edges), box) in enumerate(zip(sweeps, boxes)):
        # along axes where linked reads wrap, the sweeps but the last are computed on the last's box extended
        # by their halo, at unwrapped positions
        extended = tuple((b_lo - h, b_hi + h) if d in wrapped and j < count - 1 else a
                         for d, ((b_lo, b_hi), h, a) in enumerate(zip(boxes[-1], halos[j], box)))
        active = _edges(code, inputs[j], region, extended, edges)
        for slot, offset in code.loads if j < count - 1 else ():
            for d in [d for d, mode in enumerate(active[slot]) if mode == WRAP] if offset else ():
                shape, origin = inputs[j][slot]
                period, (lo, hi) = shape[d], extended[d]
                if lo + offset[d] - origin[d] < -period or hi + offset[d] - origin[d] > 2 * period:
                    return None
        variant.append(tuple(through[j][s] if s in linked[j] else modes for s, modes in enumerate(active)))
        launch.append(tuple(_stencil_source.no_edges(code)[s] if s in linked[j] else modes
                            for s, modes in enumerate(active)))
    return run, boxes, tuple(links[1:]), tuple(variant), tuple(launch)


def _tile_args(plan: tuple, tile: tuple, inputs: list[list], dests: list[list]) -> tuple[tuple[_Geometry, ...], str]:
    """The ``_Geometry`` of each sweep of a tile kernel (``_tile_part`` gave ``tile``) on buffers at ``inputs``
    (per sweep, per slot its shape and origin, or None), the outputs it stores at ``dests`` (per sweep but the
    last, those of a stored sweep, else ignored; then the last's); its index type."""
    (start, count), boxes, links, _, launch = tile
    stored = {*_stencil_plan.stored_sweeps(plan, (start, count)), count - 1}
    geometries = tuple(_launch_geometry(code, inputs[j], edges, launch[j], region, boxes[j],
                                        dests[j] if j in stored else [], [slot for slot, _ in ([()] + list(links))[j]])
                       for j, (code, _, region, edges) in enumerate(plan.sweeps[start : start + count]))
    return geometries, _index_type([v for geometry in geometries for v in geometry.checked])


def _run_tile(plan: tuple, tile: tuple, inputs: list[list], scalars: tuple, dests: list,
              target: Box) -> dict[int, dict[str, Any]]:
    """A run of kernels in one tile kernel (``tile``: ``_tile_part``'s, then ``_tile_args``') on ``inputs``
    (per sweep, per slot an array and its origin, or None), over the last's box into ``dests`` (its outputs,
    then those of the sweeps before it that store theirs). Returns the partial of each full reduction of the
    last sweep (by output number) over ``target``."""
    (start, count), geometries = tile[0][0], tile[1][0]
    launch = _remembered((plan, tile, TILE_CONFIG, PAIR_TILE_CONFIG, _tile_kernel), ("launch",),
                         lambda: _tile_launch(plan, tile))
    sweeps, packs, grid, n_last = launch.sweeps, launch.packs, launch.grid, launch.n_last
    program = sweeps[-1].code.program
    into = {j: dests[lo:hi] for j, (lo, hi) in launch.into}
    partials, reduction_args = {}, []
    for out in range(n_last, len(program.outputs)):
        partials[out], finals = _fused.final_buffers(program, out, math.prod([hi - lo for lo, hi in target]))
        reduction_args += finals
    reduction_args += _fused.fold_buffers(program, math.prod(grid))
    swept = [_sweep_args(sweep.code, inputs[j], geometry, scalars[start + j], into.get(j, []), packs)
             for j, (sweep, geometry) in enumerate(zip(sweeps, geometries))]
    layouts = tuple(layout for _, _, layout in swept)
    # each sweep's index values, fills and edge fills as kernel arguments: made once per launch and buffer layout
    tails = _remembered((tile,), ("tails", layouts, target, bool(partials), packs),
                        lambda: [_launch_args(tail, packs) for tail in _tile_tails(plan, tile, layouts, target,
                                                                                    bool(partials))])
    args = []
    for j, ((arrays, scalar_args, _), tail) in enumerate(zip(swept, tails)):
        args += [*arrays, *(reduction_args if j == count - 1 else []), *scalar_args, *tail]
    launch.kernel(grid, (launch.threads, 1, 1), tuple(args))
    return partials


class _TileLaunch(NamedTuple):
    """What a tile kernel's launches take from its plan and part alone (``_tile_launch``): its sweeps, the compiled
    kernel and whether its launches take packed arguments (``_packing``), threads per block and grid, the last
    sweep's outputs, and per sweep that stores its fields, where they lie among the launch's outputs (``into``:
    sweep number and a range of them, the last sweep's first)."""

    sweeps: tuple
    kernel: Any
    packs: bool
    threads: int
    grid: tuple[int, int, int]
    n_last: int
    into: tuple[tuple[int, tuple[int, int]], ...]


def _tile_launch(plan: tuple, tile: tuple) -> _TileLaunch:
    """``_TileLaunch`` of a run of sweeps in one tile kernel (``_run_tile``'s ``tile``), worked out once per plan and
    part: the kernel by the launch's identity (the lru_cache's key hashes every sweep's program), compiled by the
    compiling function of the moment (tests put an emulator in its place)."""
    ((start, count), boxes, links, variant, _), (_, index) = tile
    sweeps = plan.sweeps[start : start + count]
    stored = _stencil_plan.stored_sweeps(plan, (start, count))
    codes = tuple(sweep.code for sweep in sweeps)
    config = _fitting(codes, links)
    kernel, resident, packs = _packing(_tile_kernel(codes, links, index, variant, stored, config))
    program, n_last = sweeps[-1].code.program, len(sweeps[-1].code.out_dtypes)
    tiles = [-(-(hi - lo) // t) for (lo, hi), t in zip(boxes[-1], config.tile(len(boxes[-1])))]
    grid = (*reversed(tiles), *(1,) * (3 - len(tiles)))
    if len(program.outputs) > n_last:  # full reductions: a wave of blocks walking the tiles (``WAVES``)
        grid = (min(math.prod(tiles), resident * WAVES), 1, 1)
    into, k = [(count - 1, (0, n_last))], n_last
    for j in stored:
        into.append((j, (k, k + len(sweeps[j].code.out_dtypes))))
        k += len(sweeps[j].code.out_dtypes)
    return _TileLaunch(sweeps, kernel, packs, config.threads, grid, n_last, tuple(into))


def _tile_tails(plan: tuple, tile: tuple, layouts: tuple, target: Box, reduced: bool) -> list[list[Any]]:
    """Per sweep of a tile kernel (``_run_tile``'s ``tile``), its kernel arguments after its arrays and scalars
    for buffers of these layouts (``_sweep_args``): index values, fills, the target's bounds (the last sweep's,
    where ``reduced``) and the fills of its linked reads."""
    ((start, count), _, links, variant, _), (geometries, index) = tile
    to_index = _INDEX_TYPES[index]
    linked = [()] + [sorted(slot for slot, _ in shared) for shared in links]
    tails = []
    for j, (sweep, geometry, layout) in enumerate(zip(plan.sweeps[start : start + count], geometries, layouts)):
        tail = [*map(to_index, _index_values(geometry, layout)), *geometry.fills]
        tail += [to_index(v) for bounds in target for v in bounds] if j == count - 1 and reduced else []
        tail += [NP_OF_CTYPE[ctype(sweep.code.buffers[s])].type(sweep.edges[s][1]) for s in linked[j]
                 if FILL in variant[j][s]]
        tails.append(tail)
    return tails


def _fitting(codes: tuple, links: tuple) -> TileConfig:
    """The configuration of a tile kernel of these sweeps (``PAIR_TILE_CONFIG`` for two where set, else
    ``TILE_CONFIG``) where it fits its shared memory on its tiles, else the default (the plan chose its runs for the
    default's tiles: Gray-Scott's four sweeps on 32 x 128 would not fit)."""
    config = PAIR_TILE_CONFIG if len(codes) == 2 and PAIR_TILE_CONFIG is not None else TILE_CONFIG
    fits = _stencil_source.tile_shared_bytes(codes, links, config) <= TILE_SHARED_BYTES
    return config if fits else TileConfig()


def record_sources(plan: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write the kernels of a group there (both index types, without
    edges and with every edge a read may have; under the configurations they launch with), so that nvcc compiles
    them even on machines without a GPU. A group met again under the same configurations (the next entry point of
    a test) was written already."""
    dump_dir = os.environ.get("GNP_KERNEL_DUMP_DIR")
    key = (dump_dir, plan, TILE_CONFIG, PAIR_TILE_CONFIG, SWEEP_CONFIG, SHIFTED_SWEEP_CONFIG)
    if not dump_dir or key in _recorded:
        return
    _recorded.add(key)
    for code, _, _, edges in plan.sweeps:
        for index in _INDEX_TYPES:
            for active in (None, tuple(modes for modes, _, _ in edges)):
                _cuda.record_source(_stencil_source.kernel_source(code, index, active, _sweep_config(code))[0])
    for run in plan.tiles:
        for index in _INDEX_TYPES:
            for with_edges in (False, True):
                variant = _stencil_plan.tile_variant(plan, run, index, with_edges)
                _cuda.record_source(_stencil_source.tile_source(*variant, _fitting(*variant[:2]))[0])


_recorded: set[tuple] = set()  # (dump folder, stencil plan, configurations) whose kernels record_sources wrote
_INDEX_TYPES = {"int": np.int32, "long long": np.int64}


@functools.lru_cache(maxsize=256)
def _kernel(code: tuple, index: str, edges: tuple, config: SweepConfig = SweepConfig()) -> tuple[Any, int]:
    """The compiled kernel of a sweep's variant, and how many of its thread blocks the device keeps resident."""
    return _cuda.compile_function(*_stencil_source.kernel_source(code, index, edges, config),
                                  int(np.prod(_stencil_source.THREADS[code.program.ndim])))


def _sweep_config(code: tuple) -> SweepConfig:
    """A sweep's configuration: ``SHIFTED_SWEEP_CONFIG`` where set and it reads several buffers at shifts, else
    ``SWEEP_CONFIG``."""
    shifted = SHIFTED_SWEEP_CONFIG is not None and _stencil_source.shifted_buffers(code) > 1
    return SHIFTED_SWEEP_CONFIG if shifted else SWEEP_CONFIG


def _configured_kernel(code: tuple, index: str, edges: tuple) -> tuple[Any, int, SweepConfig, bool]:
    """``_kernel`` under the sweep's configuration (``_sweep_config``), that configuration, and whether its
    launches take packed arguments (``_packing``)."""
    config = _sweep_config(code)
    kernel, resident, packs = _packing(_kernel(code, index, edges, config))
    return kernel, resident, config, packs


@functools.lru_cache(maxsize=256)
def _tile_kernel(codes: tuple, links: tuple, index: str, edges: tuple, stored: tuple,
                 config: TileConfig = TileConfig()) -> tuple[Any, int]:
    """The compiled tile kernel of a run of sweeps' variant (``tile_source``), and how many of its thread blocks
    the device keeps resident: with the registers its shared memory's occupancy allows, unless that made the
    compiler spill (local memory), then with the compiler's own choice; with the configuration's ``min_blocks``
    where set, spilling or not."""
    compiled = _cuda.compile_function(*_stencil_source.tile_source(codes, links, index, edges, stored, config),
                                      config.threads)
    if config.min_blocks or not compiled[0].local_size_bytes:
        return compiled
    source = _stencil_source.tile_source(codes, links, index, edges, stored, config, bounded=False)
    return _cuda.compile_function(*source, config.threads)


@functools.lru_cache(maxsize=1024)
def _launch_shape(extent: tuple[int, ...], per_thread: int, limit: int | None, threads: tuple[int, int, int],
                  wide: int = 1) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads) of a launch of thread blocks of ``threads`` over a box of ``extent``: each thread computes
    ``per_thread`` positions along axis ``ndim - 2`` (1-d: the only axis), ``wide`` along x in 2-d and 3-d; at most ``limit`` thread blocks where
    given (a kernel with full reductions: its last block combines one partial per block), fewer along x first
    (each thread block then walks along rows, in its own band of them)."""
    ndim = len(extent)
    per_dim = dict(zip(_stencil_source.GRID_AXES[ndim], extent))
    unrolled = _stencil_source.GRID_AXES[ndim][max(ndim - 2, 0)]
    along = {unrolled: per_thread, "x": per_thread if ndim == 1 else wide}
    grid = [max(1, min(-(-per_dim.get(dim, 1) // (t * along.get(dim, 1))), _stencil_source.GRID_LIMITS[dim]))
            for dim, t in zip("xyz", threads)]
    for axis in (0, 1, 2) if limit is not None else ():
        grid[axis] = max(1, min(grid[axis], limit // (int(np.prod(grid)) // grid[axis])))
    return tuple(grid), threads  # type: ignore[return-value]


class _Geometry(NamedTuple):
    """What a sweep's launch arguments take from its geometry alone (``_launch_geometry``): the slots passed
    as arrays, each with whether it has positions (not one value); the index values before and after the
    places of those arrays and of its outputs (box; region and extents), each place's origin; its fills;
    the numbers that must fit the index type."""

    passed: tuple[tuple[int, bool], ...]
    head: tuple[int, ...]
    origins: tuple[tuple[int, ...], ...]
    tail: tuple[int, ...]
    fills: tuple[Any, ...]
    checked: tuple[int, ...]


def _launch_geometry(code: tuple, inputs: list, edges: tuple, active: tuple, region: tuple, box: Box, dests: list,
                     shared: Sequence[int] = ()) -> _Geometry:
    """``_Geometry`` of a sweep over ``box`` on buffers at ``inputs`` (per slot, shape and origin, or None)
    into fields at ``dests``, its reads' edge modes ``active``. ``shared`` slots are not passed (a tile
    kernel's shared memory)."""
    _, buffer_dtypes, loads, _, _, _ = code
    ndim = len(box)
    single = {slot for slot, offset in loads if not offset}
    # the array's extent along each axis read past the ends (with WRAP, also its buffer's: a whole period)
    extents = [extent[d] for used, (_, _, extent) in zip(active, edges) for d, mode in enumerate(used) if mode]
    fills = [NP_OF_CTYPE[ctype(dt)].type(fill)
             for dt, used, (_, fill, _) in zip(buffer_dtypes, active, edges) if FILL in used]
    passed, places = [], []
    for s, place in enumerate(inputs):
        if s in shared:
            continue
        passed.append((s, s not in single))
        if s not in single:  # a buffer read only inside a region this box misses: one element at 0
            places.append(place if place is not None else ((1,) * ndim, (0,) * ndim))
    places += dests
    checked = [*(v for iv in box for v in iv), *(v for iv in region for v in iv)]
    checked += [v for shape, origin in places for v in (*origin, math.prod(shape))] + extents
    return _Geometry(tuple(passed), (*(lo for lo, _ in box), *(hi - lo for lo, hi in box)),
                     tuple(origin for _, origin in places), (*(v for bounds in region for v in bounds), *extents),
                     tuple(fills), tuple(checked))


def _sweep_args(code: tuple, inputs: list, geometry: _Geometry, scalars: tuple, dests: list,
                packs: bool) -> tuple[list, Sequence[Any], tuple]:
    """A sweep's launch arguments in ``_sweep_params``' order, but those of full reductions, its index values and
    its fills: its arrays, inputs then outputs; its scalars (``packs``: as ``_launch_args`` makes them); and the
    layout of its placed arrays and outputs (per array, its strides but the last, and its item size), which its
    index values take (``_index_values``)."""
    import cupy

    ndim = len(geometry.head) // 2
    arrays, placed = [], []
    for s, has_place in geometry.passed:
        buffer = inputs[s]
        if buffer is None:  # read only inside a region this box misses
            array = cupy.empty((1,) * ndim, dtype=code.buffers[s])
        else:  # (a 0-d value may be a host scalar; CuPy's asarray of its own array costs a call into CuPy)
            array = buffer[0] if isinstance(buffer[0], cupy.ndarray) else cupy.asarray(buffer[0])
            if has_place and array.strides[-1] != array.itemsize:  # the kernels read rows with stride 1
                array = cupy.ascontiguousarray(array)
        arrays.append(array)
        if has_place:
            placed.append(array)
    outs = [out for out, _ in dests]
    return (arrays + outs, _scalar_args(code, scalars, packs),
            tuple((a.strides[:-1], a.itemsize) for a in placed + outs))


def _index_values(geometry: _Geometry, layout: tuple) -> list[int]:
    """A sweep's index values for arrays of this layout (``_sweep_args``): box, geometry (origins and strides in
    elements), region, extents."""
    places = [v for (strides, itemsize), origin in zip(layout, geometry.origins)
              for v in (*origin, *(stride // itemsize for stride in strides))]
    return [*geometry.head, *places, *geometry.tail]


def _scalar_args(code: tuple, scalars: tuple, packs: bool) -> Sequence[Any]:
    """``kernels.fused.scalar_args`` of a sweep for these values (``packs``: as ``_launch_args`` makes them),
    remembered for the objects themselves (a plan run again, in a loop or a later call, passes the same ones;
    working them out walks the program per slot)."""
    return _remembered((code, scalars), ("scalars", packs),
                       lambda: _launch_args(_fused.scalar_args(code.program.instrs, scalars), packs))


def _packing(compiled: tuple[Any, int]) -> tuple[Any, int, bool]:
    """A compiled kernel and its resident blocks (``_kernel``, ``_tile_kernel``), and whether its launches take
    packed arguments (``cuda.takes_packed``: a CuPy kernel, not an emulated one)."""
    return (*compiled, _cuda.takes_packed(compiled[0]))


def _launch_args(values: Sequence[Any], packs: bool) -> Sequence[Any]:
    """Launch arguments that stay the same from launch to launch (scalars, index values, fills), converted once
    into what a CuPy launch converts each NumPy scalar into on every call where ``packs`` (``cuda.packed``): a
    tile kernel of several sweeps takes about 90 of them."""
    return _cuda.packed(values) if packs else values


def _index_type(numbers: Sequence[int]) -> str:
    """The C type of a launch's positions and offsets: "int" where all of them fit."""
    return "int" if all(abs(v) < 2**31 - 1 for v in numbers) else "long long"


def _run_cuda(code: tuple, inputs: list, launch: tuple, box: Box, scalars: tuple, dests: list,
              target: Box) -> dict[int, dict[str, Any]]:
    """A sweep's generated kernel over ``box`` into ``dests``; ``launch``: its reads' edge modes (``_edges``),
    ``_Geometry`` and index type. Returns the partial of each full reduction of the sweep (by output number)
    over ``target``."""
    active, geometry, index = launch
    program, out_dtypes = code.program, code.out_dtypes
    to_index = _INDEX_TYPES[index]
    kernel, resident, config, packs = _remembered((launch, _kernel, SWEEP_CONFIG, SHIFTED_SWEEP_CONFIG), (),
                                                  lambda: _configured_kernel(code, index, active))
    arrays, scalar_args, layout = _sweep_args(code, inputs, geometry, scalars, dests, packs)
    reductions = range(len(out_dtypes), len(program.outputs))
    grid, threads = _launch_shape(tuple(hi - lo for lo, hi in box), _stencil_source.rows(code, config),
                                  resident * WAVES if reductions else None, _stencil_source.threads(len(box), config),
                                  _stencil_source.columns_per_thread(code, config))
    partials, buffers = {}, []
    for k in reductions:
        partials[k], finals = _fused.final_buffers(program, k, math.prod([hi - lo for lo, hi in target]))
        buffers += finals
    buffers += _fused.fold_buffers(program, math.prod(grid))
    # its index values, fills and the target's bounds as kernel arguments: made once per launch and buffer layout
    tail = _remembered((launch,), ("tail", layout, target, packs), lambda: _launch_args([
        *map(to_index, _index_values(geometry, layout)), *geometry.fills,
        *([to_index(v) for bounds in target for v in bounds] if reductions else [])], packs))
    kernel(grid, threads, (*arrays, *buffers, *scalar_args, *tail))
    return partials
