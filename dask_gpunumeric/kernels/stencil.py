"""What the tasks of a ``Stencil`` group run: source blocks extended by halos in, one sweep after another on a
shrinking region (``codegen.stencil_plan``), the group's output blocks out. On NumPy blocks a sweep's program
is interpreted on windows of the buffers (``fused.run_numpy``); on CuPy blocks it is its generated kernel
(``codegen.stencil``), and runs of 2-d sweeps one tile kernel.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..codegen import stencil as _stencil_source
from ..codegen import stencil_plan as _stencil_plan
from ..codegen.stencil_plan import Box
from ..codegen.types import FILL, NP_OF_CTYPE, TILE_THREADS, TILES, WRAP, Store, ctype
from . import blocks as _blocks
from . import cuda as _cuda
from . import fused as _fused
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
    outs = values[:n_out] or [xp.empty(extent, dtype=dt) for dt in _stencil_plan.output_dtypes(plan)[:n_out]]
    partials = [values[n_out:]] if values[n_out:] else []
    for p, part in enumerate(parts):
        partials.append(_run_part(plan, scalars, part, pieces[p * n_sources : (p + 1) * n_sources], block, outs,
                                  backend))
    results = outs + [_combined(plan, r, [p[i] for p in partials]) for i, r in enumerate(plan.reductions)]
    return results[0] if len(results) == 1 else tuple(results)


def _combined(plan: tuple, reduction: tuple[int, int], partials: list[dict[str, Any]]) -> dict[str, Any]:
    """One partial of a full reduction from those of a block's parts."""
    if len(partials) == 1:
        return partials[0]
    _, out = _stencil_plan.reduction_of(plan, reduction)
    return _blocks.reduce_combine(out.kind, partials, (len(partials),) + (1,) * (plan.ndim - 1), out.axes, out.params)


def _run_part(plan: tuple, scalars: tuple, part: tuple, pieces: Sequence[Any], block: Box, outs: list,
              backend: str) -> list[dict[str, Any]]:
    """Compute one part of a block into ``outs``; the partials of the group's full reductions over it."""
    target, kernel_boxes, origins, layouts = part
    kernels, outputs = plan.sweeps, plan.outputs
    xp = module(backend)
    origin = tuple(lo for lo, _ in block)
    buffers: dict[int, tuple[Any, tuple[int, ...]]] = {
        s: (_blocks.halo_block(pieces[s], layout), origins[s]) for s, layout in enumerate(layouts) if layout is not None
    }
    last_read = _last_reads(plan)
    output_of = {b: j for j, b in enumerate(outputs)}
    partials: dict[tuple[int, int], dict[str, Any]] = {}
    buffer = len(layouts)
    runs = dict(plan.tiles) if backend in _TILED_BACKENDS else {}
    tile, end = None, -1  # a tile kernel's part (``_tile_part``) and its last sweep, while its sweeps are passed
    pool = _fused.buffer_pool() if xp is np else None
    pooled: set[int] = set()
    for k, ((code, slots, region, edges), box) in enumerate(zip(kernels, kernel_boxes)):
        fields = range(buffer, buffer + len(code.out_dtypes))
        inputs = [buffers.get(b) for b in slots]
        if k in runs:
            run = (k, runs[k])
            tile = _tile_part(plan, run, [[buffers.get(b) for b in kernels[j][1]] for j in range(k, k + run[1])],
                              kernel_boxes[k : k + run[1]])
            end = k + run[1] - 1
        if tile is not None and k < end:  # its outputs only ever live in the tile kernel's shared memory
            buffer += len(code.out_dtypes)
            continue
        # a field that is an output computed just for the target goes straight into the output block; others
        # into buffers of the pool on NumPy blocks, given back after their last read
        dests = []
        for f, dt in zip(fields, code.out_dtypes):
            if f in output_of and box == target:
                dests.append((outs[output_of[f]], origin))
                continue
            extent = tuple(hi - lo for lo, hi in box)
            dests.append((xp.empty(extent, dtype=dt) if pool is None else pool.take(extent, np.dtype(dt)),
                          tuple(lo for lo, _ in box)))
            if pool is not None:
                pooled.add(f)
        if tile is not None:
            _run_tile(plan, tile, scalars, dests)
            tile = None
        elif not _stencil_plan.is_empty(box):
            reduced = _run_kernel(code, inputs, edges, region, box, scalars[k], plan.shape, backend, dests, target)
            partials.update({(k, j): partial for j, partial in reduced.items()})
        for f, dest in zip(fields, dests):
            buffers[f] = dest
            if f in output_of and box != target and not _stencil_plan.is_empty(target):
                _window((outs[output_of[f]], origin), target, ())[...] = _window(dest, target, ())
        buffer += len(code.out_dtypes)
        for b in [b for b, last in last_read.items() if last <= k]:  # < k: read by a tile kernel
            entry = buffers.pop(b, None)
            if entry is not None and b in pooled:
                pool.give(entry[0])
    return [partials[r] if r in partials else _empty_partial(plan, r, xp) for r in plan.reductions]


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
    (0 where none is): with WRAP past its buffer's, with FILL past its array's (``edges``: the plan's per
    slot ``(modes, fill, extent)``)."""
    _, _, loads, restricted, bases, _ = code
    value = _stencil_plan.value_box(box, restricted, region)
    reads = [] if _stencil_plan.is_empty(value) else [(slot, value, offset) for slot, offset in loads]
    reads += [(base[0], box, base[1]) for base in bases if base is not None]
    return _past_ends(reads, inputs, edges)


def _ends(inputs: list, edges: tuple, slot: int, d: int) -> tuple[int, int]:
    """The positions along axis ``d`` that slot ``slot`` reads without its edge mode: its buffer's with WRAP,
    its array's with FILL."""
    array, origin = inputs[slot]
    return (origin[d], origin[d] + array.shape[d]) if edges[slot][0][d] == WRAP else (0, edges[slot][2][d])


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


def _pieces(value: Box, loads: tuple, inputs: list, edges: tuple) -> list[Box]:
    """``value`` cut into an interior, whose reads stay inside what their buffers hold (plain views, no copy),
    and the slabs around it along each axis, whose reads wrap or are filled (the few positions there copied):
    at most ``2 * ndim + 1`` boxes."""
    interior = [list(bounds) for bounds in value]
    for slot, offset in loads:
        if offset and inputs[slot] is not None:
            for d, (mode, e) in enumerate(zip(edges[slot][0], offset)):
                if mode:
                    lo, hi = _ends(inputs, edges, slot, d)
                    interior[d] = [max(interior[d][0], lo - e), min(interior[d][1], hi - e)]
    slabs, inner = _peel(value, interior)
    return [piece for piece in [*slabs, inner] if not _stencil_plan.is_empty(piece)]


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


def _window(buffer: tuple[Any, tuple[int, ...]], box: Box, offset: Sequence[int], edges: Sequence[int] = (),
            fill: Any = None, extent: Sequence[int] = ()) -> Any:
    """The part of a buffer (an array and the position of its first element) at ``box + offset``; along
    axes with an edge mode (``_edges``), positions past its ends taken around it (WRAP), or past the ends
    ``[0, extent)`` of its array given ``fill`` (FILL)."""
    array, origin = buffer
    offset = tuple(offset) or (0,) * len(origin)
    bounds = [(lo + e - o, hi + e - o) for (lo, hi), e, o in zip(box, offset, origin)]
    edges = tuple(edges) or (0,) * len(bounds)
    view = array[tuple(slice(None) if mode else slice(*b) for b, mode in zip(bounds, edges))]
    xp = namespace(array)
    for d, ((lo, hi), mode, o) in enumerate(zip(bounds, edges, origin)):
        if not mode:
            continue
        positions = np.arange(lo, hi)
        if mode == WRAP:
            view = xp.take(view, xp.asarray(positions % array.shape[d]), axis=d)
        elif mode == FILL:
            inside = np.nonzero((positions + o >= 0) & (positions + o < extent[d]))[0]
            filled = xp.full(view.shape[:d] + (hi - lo,) + view.shape[d + 1 :], fill, dtype=array.dtype)
            filled[(slice(None),) * d + (xp.asarray(inside),)] = xp.take(view, xp.asarray(positions[inside]), axis=d)
            view = filled
    return view


def _run_kernel(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple,
                shape: tuple[int, ...], backend: str, dests: list, target: Box) -> dict[int, dict[str, Any]]:
    """One sweep over ``box``, written into ``dests`` (per store: an array and its origin); ``inputs`` per
    buffer slot (an array and its origin), ``edges`` the plan's per slot ``(modes, fill, extent)``. Returns
    the partial of each full reduction of the sweep (by output number) over ``target``."""
    if backend == "cupy":
        return _run_cuda(code, inputs, edges, region, box, scalars, dests, target)
    return _run_interpreted(code, inputs, edges, region, box, scalars, shape, backend, dests, target)


def _run_interpreted(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple,
                     shape: tuple[int, ...], backend: str, dests: list, target: Box) -> dict[int, dict[str, Any]]:
    program, _, loads, restricted, bases, out_dtypes = code
    outs = [_window(dest, box, ()) for dest in dests]
    value = _stencil_plan.value_box(box, restricted, region)
    # a field's base fills the box where the sweep computes no value (its values overwrite the rest)
    shell = _peel(box, value)[0] if not _stencil_plan.is_empty(value) else [box]
    active = _past_ends([(base[0], box, base[1]) for base in bases if base is not None], inputs, edges)
    for dest, base in zip(dests, bases):
        if base is not None:
            for slab in shell:
                _window(dest, slab, ())[...] = _window(inputs[base[0]], slab, base[1], active[base[0]], *edges[base[0]][1:])
    if _stencil_plan.is_empty(value):
        return {}
    stores = program._replace(outputs=tuple(Store("store", out.value) for out in program.outputs))  # reductions: over the target
    pieces = _pieces(value, loads, inputs, edges)
    whole: dict[int, Any] = {}  # per reduction output, its values over ``value``
    for piece in pieces:
        active = _past_ends([(slot, piece, offset) for slot, offset in loads], inputs, edges)
        views = [_window(inputs[slot], piece, offset, active[slot], *edges[slot][1:]) for slot, offset in loads]
        inner = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(piece, box))
        into = [out[inner] for out in outs]
        values = _fused.run_numpy(stores, scalars, tuple(lo for lo, _ in piece), tuple(hi - lo for lo, hi in piece),
                                  shape, views, backend, into)
        for out, v in zip(into, values):
            if v is not out:
                out[...] = v
        for j, (out, v) in enumerate(zip(program.outputs, values)):
            if out.tag == "reduce":
                if len(pieces) == 1:
                    whole[j] = v
                    continue
                if j not in whole:
                    whole[j] = namespace(v).empty(tuple(hi - lo for lo, hi in value), dtype=v.dtype)
                whole[j][tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(piece, value))] = v
    reduced = {}
    for j, v in whole.items():
        out = program.outputs[j]
        part = v[tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(target, value))]
        reduced[j] = _blocks.reduce_chunk(out.kind, part, out.axes, np.dtype(out.dtype), out.params, ())
    return reduced


# Thread blocks of a kernel with full reductions: this many full waves, each thread looping over its rows and
# each block writing one partial: one wave, or one block per tile, was slower (docs/benchmarks.md).
WAVES = 8


_TILED_BACKENDS = frozenset({"cupy"})  # where tile kernels run (the CPU kernel emulator adds "numpy")


def _tile_part(plan: tuple, run: tuple[int, int], inputs: list[list], boxes: Sequence[Box]) -> tuple | None:
    """What the tile kernel of a run ``(first, count)`` of kernels needs over these boxes and buffers (per
    sweep: its inputs, its linked slots' None): per sweep its inputs, box, edges for the kernel variant and
    edges for its launch; None where the sweeps run one kernel each (a box empty, or wrapped reads more than
    a period away)."""
    if any(_stencil_plan.is_empty(box) for box in boxes):
        return None
    start, count = run
    sweeps = plan.sweeps[start : start + count]
    links = [()] + [_stencil_plan.link(plan, k) for k in range(start, start + count - 1)]
    linked = [{slot for slot, _ in shared} for shared in links]
    through = []  # per sweep, the edges of its linked reads (from the previous sweep's box)
    for j, ((code, _, region, edges), box) in enumerate(zip(sweeps, boxes)):
        placed = list(inputs[j])
        for slot in linked[j]:  # the previous outputs as buffers of its box, for their edges (only shapes are read)
            placed[slot] = (np.broadcast_to(np.int8(0), tuple(hi - lo for lo, hi in boxes[j - 1])),
                            tuple(lo for lo, _ in boxes[j - 1]))
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
                array, origin = inputs[j][slot]
                period, (lo, hi) = array.shape[d], extended[d]
                if lo + offset[d] - origin[d] < -period or hi + offset[d] - origin[d] > 2 * period:
                    return None
        variant.append(tuple(through[j][s] if s in linked[j] else modes for s, modes in enumerate(active)))
        launch.append(tuple(_stencil_source.no_edges(code)[s] if s in linked[j] else modes
                            for s, modes in enumerate(active)))
    return run, inputs, boxes, tuple(links[1:]), tuple(variant), launch


def _run_tile(plan: tuple, tile: tuple, scalars: tuple, dests: list) -> None:
    """A run of kernels in one tile kernel (``_tile_part`` gave ``tile``), over the last's box into ``dests``."""
    (start, count), inputs, boxes, links, variant, launch = tile
    sweeps = plan.sweeps[start : start + count]
    args_of = [_sweep_args(code, inputs[j], edges, launch[j], region, boxes[j], scalars[start + j],
                           dests if j == count - 1 else [], [slot for slot, _ in ([()] + list(links))[j]])
               for j, (code, _, region, edges) in enumerate(sweeps)]
    index = _index_type([v for a in args_of for v in a[4]])
    to_index = _INDEX_TYPES[index]
    args = [arg for arrays, scalar_args, values, fills, _ in args_of
            for arg in (*arrays, *scalar_args, *map(to_index, values), *fills)]
    tiles = [-(-(hi - lo) // t) for (lo, hi), t in zip(boxes[-1], TILES[len(boxes[-1])])]
    grid = (*reversed(tiles), *(1,) * (3 - len(tiles)))
    _tile_kernel(tuple(sweep.code for sweep in sweeps), links, index, variant)(grid, (TILE_THREADS, 1, 1), tuple(args))


def record_sources(plan: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write the kernels of a group there (both index types, without
    edges and with every edge a read may have), so that nvcc compiles them even on machines without a GPU."""
    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    for code, _, _, edges in plan.sweeps:
        for index in _INDEX_TYPES:
            for active in (None, tuple(modes for modes, _, _ in edges)):
                _cuda.record_source(_stencil_source.kernel_source(code, index, active)[0])
    for run in plan.tiles:
        for index in _INDEX_TYPES:
            for with_edges in (False, True):
                _cuda.record_source(_stencil_source.tile_source(*_stencil_plan.tile_variant(plan, run, index, with_edges))[0])


_INDEX_TYPES = {"int": np.int32, "long long": np.int64}


@functools.lru_cache(maxsize=256)
def _kernel(code: tuple, index: str, edges: tuple) -> tuple[Any, int]:
    """The compiled kernel of a sweep's variant, and how many of its thread blocks the device keeps resident."""
    return _cuda.compile_function(*_stencil_source.kernel_source(code, index, edges),
                                  int(np.prod(_stencil_source.THREADS[code.program.ndim])))


@functools.lru_cache(maxsize=256)
def _tile_kernel(codes: tuple, links: tuple, index: str, edges: tuple) -> Any:
    """The compiled tile kernel of a run of sweeps' variant (``tile_source``)."""
    return _cuda.compile_function(*_stencil_source.tile_source(codes, links, index, edges), TILE_THREADS)[0]


def _launch_shape(extent: tuple[int, ...], per_thread: int, limit: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads) of a launch over a box of ``extent``: each thread computes ``per_thread`` positions
    along axis ``ndim - 2`` (1-d: the only axis); at most ``limit`` thread blocks where given (a kernel with
    full reductions: its last block combines one partial per block), fewer along x first (each thread block
    then walks along rows, in its own band of them)."""
    ndim = len(extent)
    threads = _stencil_source.THREADS[ndim]
    per_dim = dict(zip(_stencil_source.GRID_AXES[ndim], extent))
    unrolled = _stencil_source.GRID_AXES[ndim][max(ndim - 2, 0)]
    grid = [max(1, min(-(-per_dim.get(dim, 1) // (t * (per_thread if dim == unrolled else 1))), _stencil_source.GRID_LIMITS[dim]))
            for dim, t in zip("xyz", threads)]
    for axis in (0, 1, 2) if limit is not None else ():
        grid[axis] = max(1, min(grid[axis], limit // (int(np.prod(grid)) // grid[axis])))
    return tuple(grid), threads  # type: ignore[return-value]


def _sweep_args(code: tuple, inputs: list, edges: tuple, active: tuple, region: tuple, box: Box,
                scalars: tuple, dests: list, shared: Sequence[int] = ()) -> tuple[list, list, list[int], list, list[int]]:
    """A sweep's launch arguments in ``_sweep_params``' order, but those of full reductions: (its arrays,
    inputs then outputs; its scalars; its index values: box, geometry, region, extents; its fills; the
    numbers that must fit the index type). ``shared`` slots are not passed (a tile kernel's shared memory)."""
    import cupy

    program, buffer_dtypes, loads, _, _, _ = code
    ndim = len(box)
    single = {slot for slot, offset in loads if not offset}
    # the array's extent along each axis read past the ends (with WRAP, also its buffer's: a whole period)
    extents = [extent[d] for used, (_, _, extent) in zip(active, edges) for d, mode in enumerate(used) if mode]
    fills = [NP_OF_CTYPE[ctype(dt)].type(fill)
             for dt, used, (_, fill, _) in zip(buffer_dtypes, active, edges) if FILL in used]
    arrays, places = [], []
    for s, (buffer, dt) in enumerate(zip(inputs, buffer_dtypes)):
        if s in shared:
            continue
        if buffer is None:  # read only inside a region this box misses
            buffer = (cupy.empty((1,) * ndim, dtype=dt), (0,) * ndim)
        array, origin = buffer
        array = cupy.asarray(array)  # a 0-d value may be a host scalar
        if s not in single and array.strides[-1] != array.itemsize:  # the kernels read rows with stride 1
            array = cupy.ascontiguousarray(array)
        arrays.append(array)
        if s not in single:
            places.append((array, origin))
    places += dests
    checked = [*(v for iv in box for v in iv), *(v for iv in region for v in iv)]
    checked += [v for array, origin in places for v in (*origin, array.size)] + extents
    geometry = [v for array, origin in places for v in (*origin, *(stride // array.itemsize for stride in array.strides[:-1]))]
    values = [lo for lo, _ in box] + [hi - lo for lo, hi in box] + geometry + [v for bounds in region for v in bounds]
    return (arrays + [out for out, _ in dests], _fused.scalar_args(program.instrs, scalars), values + extents, fills,
            checked)


def _index_type(numbers: Sequence[int]) -> str:
    """The C type of a launch's positions and offsets: "int" where all of them fit."""
    return "int" if all(abs(v) < 2**31 - 1 for v in numbers) else "long long"


def _run_cuda(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple, dests: list,
              target: Box) -> dict[int, dict[str, Any]]:
    program, out_dtypes = code.program, code.out_dtypes
    active = _edges(code, inputs, region, box, edges)
    arrays, scalar_args, values, fills, checked = _sweep_args(code, inputs, edges, active, region, box, scalars, dests)
    index = _index_type(checked)
    to_index = _INDEX_TYPES[index]
    kernel, resident = _kernel(code, index, active)
    reductions = range(len(out_dtypes), len(program.outputs))
    grid, threads = _launch_shape(tuple(hi - lo for lo, hi in box), _stencil_source.rows(code), resident * WAVES if reductions else None)
    partials, buffers = {}, []
    for k in reductions:
        partials[k], finals = _fused.final_buffers(program, k, int(np.prod([hi - lo for lo, hi in target])))
        buffers += finals
    buffers += _fused.fold_buffers(program, int(np.prod(grid)))
    args = arrays + buffers + scalar_args + [to_index(v) for v in values] + fills
    args += [to_index(v) for bounds in target for v in bounds] if reductions else []
    kernel(grid, threads, tuple(args))
    return partials
