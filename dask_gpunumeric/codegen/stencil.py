"""What the tasks of a ``Stencil`` group do: source blocks extended by halos in, one kernel per sweep on a
shrinking region, the group's output blocks out.

A *plan* is a tokenizable tuple ``(ndim, shape, kernels, outputs, periodic, wraps, reductions, pairs)``:

* ``shape``: the shape of the group's fields (all of them have it) and of its output arrays;
* ``kernels``: per kernel, in order, ``(code, buffers, region, edges)``. Buffers are numbered: the group's
  sources ``0..S-1``, then the kernels' stored outputs in order. ``buffers`` maps the kernel's local buffer
  slots to those numbers, ``region`` holds ``(lo, hi)`` per restricted axis of ``code`` (the ``SetItem``
  box), and ``edges`` per slot ``(modes, fill, extent)``: what a read past the ends of the slot's buffer
  gives along each axis (an edge mode: 0, never read there; WRAP; FILL, ``fill`` past the ends of the
  array, of shape ``extent``);
* ``code`` is what the generated kernel depends on (identical sweeps share it, and so one compiled kernel):
  ``(program, buffer_dtypes, loads, restricted, bases, out_dtypes)``, where ``program`` is a fused program
  (``_codegen``) whose ``("load", k, dtype)`` reads buffer slot ``loads[k][0]`` at the constant offset
  ``loads[k][1]`` from the element computed (``()`` for a 0-d array, read as a scalar), and whose outputs
  are stores (of ``out_dtypes``) then full reductions (of a kernel without a region); ``restricted`` lists
  the axes where ``region`` applies, and ``bases[j]`` is ``(slot, offset)`` of what store ``j`` keeps
  outside the region (None for a kernel without a region);
* ``outputs``: the buffers a task returns (its block of each), before the partials of ``reductions``, per
  full reduction ``(kernel, output)``: its partial over the task's block (as ``_blocks.reduce_chunk``);
* ``periodic``: per axis, whether fields are extended cyclically (a group reading its own fields with
  ``roll``); ``wraps``: per source and axis, whether its halo wraps around the array's ends;
* ``pairs``: the kernels ``k`` run on CuPy blocks with kernel ``k + 1`` in one *pair kernel*, their outputs
  only in its shared memory (``tile_pairs``; none where ``gpunumeric.stencil-tiles`` is off).

Coordinates are those of the fields (a source is read at ``position + offset`` in its own coordinates). A
buffer covers a box ``[lo, hi)`` per axis; along periodic axes boxes may leave ``[0, n)`` (positions are
meant modulo ``n``). ``boxes`` works back from a *target* box to the box each kernel computes and each
source must cover: the last sweeps compute the target itself, earlier ones as much more as later ones read
(the halo).

A block is computed in two tasks where it can (``split``): its *interior*, which needs nothing but the
source blocks at its own place (it starts at once, and on a GPU its kernels run while halos travel), then
the *bands* along its edges, from the halo strips of its neighbours, written into the interior task's
output blocks (in place: the values are the same whoever computes them).

Kernels: on NumPy blocks a program is interpreted on windows of the buffers (``_codegen.run_numpy``); on CuPy
blocks it is one generated CUDA kernel per sweep, the last axis along ``threadIdx.x`` (coalesced), each
thread computing ``rows(code)`` consecutive rows of a column (1-d: elements a thread block apart),
reading each buffer at constant offsets from the element computed.
A pair of 2-d sweeps (``pairs``) is one kernel: per tile of the second's box, the first sweep on the tile and
its halo into shared memory, then the second from there (``pair_source``): the first's outputs never
travel to memory and back (on an H200, 20 Jacobi sweeps of 16384^2 float32: 12.8 ms one sweep per kernel,
10.26 ms two, copying the array 20 times 10.1 ms).
"""
from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..kernels import blocks as _blocks
from . import program as _codegen
from ..expr import plan as _plan
from ..kernels.backend import module, namespace

Box = tuple[tuple[int, int], ...]


def describe(plan: tuple) -> str:
    """Op words of a group, for key names and explain(): e.g. "add-multiply"."""
    words: list[str] = []
    for code, *_ in plan[2]:
        for word in _codegen.describe(code[0]).split("-"):
            if word != "fused" and word not in words:
                words.append(word)
    return "-".join(words[:4]) or "copy"


def output_dtypes(plan: tuple) -> list[np.dtype]:
    """The dtype of each output of a group: its stored blocks', then (for its partials) the values reduced."""
    fields = [np.dtype(dt) for code, *_ in plan[2] for dt in code[5]]  # buffers after the sources
    reduced = [_reduction(plan, r) for r in plan[6]]
    return [fields[b - len(plan[5])] for b in plan[3]] + [np.dtype(program[2][out[1]][2]) for program, out in reduced]


def _reduction(plan: tuple, reduction: tuple[int, int]) -> tuple[tuple, tuple]:
    """The program of the kernel computing a full reduction of a group, and the reduction's output there."""
    program = plan[2][reduction[0]][0][0]
    return program, program[3][reduction[1]]


def sweeps(plan: tuple) -> int:
    """Sweeps one task of the group runs (one kernel each, but on CuPy blocks one per pair: ``tile_pairs``)."""
    return len(plan[2])


def tile_pairs(plan: tuple) -> tuple[int, ...]:
    """The kernels ``k`` of a group (its first seven entries) to run with kernel ``k + 1`` in one pair
    kernel, taken in order: pairs of 2-d sweeps without full reductions, where every output of the first is
    read by the second alone (not a group output), at offsets within ``TILE_HALO``, without FILL edges,
    and where those reads may wrap, by a first sweep without a region computable a halo past its box
    (``_pair_shared``)."""
    pairs, k = [], 0
    while k + 1 < len(plan[2]):
        if _pair_shared(plan, k) is not None:
            pairs.append(k)
            k += 1
        k += 1
    return tuple(pairs)


def _pair_shared(plan: tuple, k: int) -> tuple[tuple[int, int], ...] | None:
    """The slots of kernel ``k + 1`` reading the outputs of kernel ``k`` (``(slot, output)``), if the two may
    be one pair kernel (``tile_pairs``), else None."""
    ndim, shape, kernels, outputs = plan[:4]
    (first, _, _, _), (second, slots, _, edges) = kernels[k], kernels[k + 1]
    if ndim != 2 or any(len(code[5]) != len(code[0][3]) or any(ins[0] == "random" for ins in code[0][2])
                        for code in (first, second)):  # full reductions, or random draws (no prefixed seeds)
        return None
    fields = {b: j for b, (owner, j) in _field_kernels(plan).items() if owner == k}
    readers = {kernel for kernel, (_, read, *_) in enumerate(kernels) for b in read if b in fields}
    shared = tuple((slot, fields[b]) for slot, b in enumerate(slots) if b in fields)
    if readers != {k + 1} or fields.keys() & set(outputs) or len(shared) != len(fields):
        return None
    halo = _tile_halo(second, shared)
    modes = {m for slot, _ in shared for m in edges[slot][0]}
    reach = [max([abs(o[d]) for _, o in first[2] if o] + [0]) for d in range(ndim)]
    # computed past its box where the second's reads wrap, the first sweep must have no region and its
    # reads wrap at most a period (``gnp_wrap``)
    wrapping = WRAP in modes and (first[3] or any(h + r > n for h, r, n in zip(halo, reach, shape)))
    if max(halo) > TILE_HALO or FILL in modes or wrapping or -(-shape[0] // TILE[0]) > _GRID_LIMITS["y"]:
        return None
    return shared


# --- halos --------------------------------------------------------------------------------------------


def _empty(box: Box) -> bool:
    return any(hi <= lo for lo, hi in box)


def _hull(a: Box | None, b: Box) -> Box:
    return b if a is None else tuple((min(p[0], q[0]), max(p[1], q[1])) for p, q in zip(a, b))


def _within(box: Box, shape: Sequence[int], cyclic: Sequence[bool]) -> Box:
    """What a buffer must cover of ``box``: its part inside ``[0, n)`` along each axis, but along cyclic axes
    the box as it is (a halo wrapping around the ends), or ``[0, n)`` where it spans a whole period (reads
    past the ends then wrap around in the kernel: no halo)."""
    return tuple(((0, n) if hi - lo >= n else (lo, hi)) if c else (max(lo, 0), min(hi, n))
                 for (lo, hi), n, c in zip(box, shape, cyclic))


def _value_box(box: Box, restricted: Sequence[int], region: Sequence[tuple[int, int]]) -> Box:
    out = list(box)
    for axis, (lo, hi) in zip(restricted, region):
        out[axis] = (max(out[axis][0], lo), min(out[axis][1], hi))
    return tuple(out)


def _shifted(box: Box, offset: Sequence[int]) -> Box:
    return tuple((lo + e, hi + e) for (lo, hi), e in zip(box, offset))


def _field_kernels(plan: tuple) -> dict[int, tuple[int, int]]:
    """Buffer number of each field -> (its kernel, its output number there)."""
    owner, buffer = {}, len(plan[5])
    for k, (code, *_) in enumerate(plan[2]):
        for j in range(len(code[5])):
            owner[buffer] = (k, j)
            buffer += 1
    return owner


def boxes(plan: tuple, source_shapes: Sequence[tuple[int, ...]], target: Box) -> tuple[list[Box], list[Box | None]]:
    """The box each kernel computes and each source must cover (None: not read) to compute ``target``."""
    _, shape, kernels, outputs, periodic, wraps, reductions = plan[:7]
    n_sources = len(source_shapes)
    owner = _field_kernels(plan)
    kernel_need: list[Box | None] = [None] * len(kernels)
    source_need: list[Box | None] = [None] * n_sources

    def need(buffer: int, box: Box) -> None:
        if buffer < n_sources:
            if not _empty(_within(box, source_shapes[buffer], wraps[buffer])):
                source_need[buffer] = _within(_hull(source_need[buffer], box), source_shapes[buffer], wraps[buffer])
        elif not _empty(box):
            k = owner[buffer][0]
            kernel_need[k] = _hull(kernel_need[k], box)

    for buffer in outputs:
        need(buffer, target)
    for k, _ in reductions if not _empty(target) else ():
        kernel_need[k] = _hull(kernel_need[k], target)
    kernel_boxes: list[Box] = [()] * len(kernels)
    for k in reversed(range(len(kernels))):
        (_, _, loads, restricted, bases, _), slots, region, _ = kernels[k]
        box = kernel_need[k]
        box = None if box is None else _within(box, shape, periodic)
        if box is None or _empty(box):
            kernel_boxes[k] = tuple((lo, lo) for lo, _ in target)
            continue
        kernel_boxes[k] = box
        value = _value_box(box, restricted, region)
        if not _empty(value):
            for slot, offset in loads:
                need(slots[slot], _shifted(value, offset))
        for base in bases:
            if base is not None:
                need(slots[base[0]], _shifted(box, base[1]))
    return kernel_boxes, source_need


def halo_depth(plan: tuple) -> tuple[int, ...]:
    """How far, per axis, the sources a task reads reach beyond its block (the halo, before clipping), for
    a block in the middle of the array."""
    ndim, shape = plan[0], plan[1]
    block = tuple((n // 2, n // 2 + 1) for n in shape)
    unclipped = (ndim, shape, plan[2], plan[3], (True,) * ndim, tuple((True,) * ndim for _ in plan[5]), plan[6])
    depth = [0] * ndim
    for box in boxes(unclipped, [shape] * len(plan[5]), block)[1]:
        for d, ((lo, hi), (b_lo, b_hi)) in enumerate(zip(box or block, block)):
            depth[d] = max(depth[d], b_lo - lo, hi - b_hi)
    return tuple(depth)


def split(plan: tuple, sources: Sequence[Any], chunks: tuple, block: Box) -> tuple[Box | None, list[Box]]:
    """A block's interior (None if it has none: then the block is one band) and the bands around it.

    The interior is what the sources' blocks at the block's own place suffice for (sources of another shape
    or chunking have no such place: the block is then one band); the bands are disjoint boxes covering the
    rest of the block (along each axis, the slabs below and above the interior)."""
    shape = plan[1]
    if any(s.ndim and (s.shape != shape or s.chunks != chunks) for s in sources):
        return None, [block]
    shapes = [s.shape for s in sources]
    lo, hi = [b[0] for b in block], [b[1] for b in block]
    for source, box in zip(sources, boxes(plan, shapes, block)[1]):
        for d, ((a, b), (b_lo, b_hi)) in enumerate(zip(box or (), block) if source.ndim else ()):
            lo[d], hi[d] = max(lo[d], 2 * b_lo - a), min(hi[d], 2 * b_hi - b)  # shrunk by the halo
    interior = tuple(zip(lo, hi))
    if interior == block:
        return block, []
    if _empty(interior) or any(
        source.ndim and box is not None and any(a < b_lo or b > b_hi for (a, b), (b_lo, b_hi) in zip(box, block))
        for source, box in zip(sources, boxes(plan, shapes, interior)[1])
    ):
        return None, [block]
    bands = []
    for d in range(len(block)):
        for band in ((block[d][0], interior[d][0]), (interior[d][1], block[d][1])):
            if band[1] > band[0]:
                bands.append(tuple(interior[e] if e < d else band if e == d else block[e] for e in range(len(block))))
    return interior, bands


def source_pieces(plan: tuple, sources: Sequence[Any], source_boxes: Sequence[Box | None]) -> Iterator[list | None]:
    """Per source, the pieces of its blocks covering its box along each axis (None where it is not read)."""
    from ..api.overlap import axis_segments

    for wraps, source, box in zip(plan[5], sources, source_boxes):
        if box is None:
            yield None
            continue
        yield [
            _plan.segments_plan([source.chunks[d]], axis_segments(lo, hi, source.shape[d],
                                                                  "periodic" if wraps[d] else "none"), (hi - lo,))[0][0]
            for d, (lo, hi) in enumerate(box)
        ]


# --- tasks --------------------------------------------------------------------------------------------


def run(plan: tuple, scalars: tuple, block: Box, backend: str, into: Any, parts: tuple, *pieces: Sequence[Any]) -> Any:
    """Task function of a Stencil block: the group's outputs (one, or a tuple of several): its output blocks,
    then the partials of its full reductions over the block.

    Computes each part ``(target, kernel_boxes, origins, layouts)`` (a box of the block, the box of each
    kernel, and the origin and layout of each source's extended block) into the output blocks ``into``
    (another task's outputs, written in place, its partials combined with the parts') or new ones.
    ``pieces`` are each part's sources' pieces."""
    xp = module(backend)
    extent = tuple(hi - lo for lo, hi in block)
    n_out, n_sources = len(plan[3]), len(plan[5])
    values = [] if into is None else list(into) if isinstance(into, tuple) else [into]
    outs = values[:n_out] or [xp.empty(extent, dtype=dt) for dt in output_dtypes(plan)[:n_out]]
    partials = [values[n_out:]] if values[n_out:] else []
    for p, part in enumerate(parts):
        partials.append(_run_part(plan, scalars, part, pieces[p * n_sources : (p + 1) * n_sources], block, outs,
                                  backend))
    results = outs + [_combined(plan, r, [p[i] for p in partials]) for i, r in enumerate(plan[6])]
    return results[0] if len(results) == 1 else tuple(results)


def _combined(plan: tuple, reduction: tuple[int, int], partials: list[dict[str, Any]]) -> dict[str, Any]:
    """One partial of a full reduction from those of a block's parts."""
    if len(partials) == 1:
        return partials[0]
    _, (_, _, kind, axes, _, params) = _reduction(plan, reduction)
    return _blocks.reduce_combine(kind, partials, (len(partials),) + (1,) * (plan[0] - 1), axes, params)


def _run_part(plan: tuple, scalars: tuple, part: tuple, pieces: Sequence[Any], block: Box, outs: list,
              backend: str) -> list[dict[str, Any]]:
    """Compute one part of a block into ``outs``; the partials of the group's full reductions over it."""
    target, kernel_boxes, origins, layouts = part
    kernels, outputs = plan[2], plan[3]
    xp = module(backend)
    origin = tuple(lo for lo, _ in block)
    buffers: dict[int, tuple[Any, tuple[int, ...]]] = {
        s: (_blocks.halo_block(pieces[s], layout), origins[s]) for s, layout in enumerate(layouts) if layout is not None
    }
    last_read = _last_reads(plan)
    output_of = {b: j for j, b in enumerate(outputs)}
    partials: dict[tuple[int, int], dict[str, Any]] = {}
    buffer = len(layouts)
    pairs = set(plan[7]) if backend in _TILED_BACKENDS else set()
    pair = None  # sweep k of a pair kernel: what it needs, to run with sweep k + 1
    for k, ((code, slots, region, edges), box) in enumerate(zip(kernels, kernel_boxes)):
        fields = range(buffer, buffer + len(code[5]))
        inputs = [buffers.get(b) for b in slots]
        if k in pairs:
            pair = _pair_part(plan, k, inputs, [buffers.get(b) for b in kernels[k + 1][1]], box, kernel_boxes[k + 1])
            if pair is not None:  # its outputs only ever live in the pair kernel's shared memory
                buffer += len(code[5])
                continue
        # a field that is an output computed just for the target goes straight into the output block
        dests = [(outs[output_of[f]], origin) if f in output_of and box == target
                 else (xp.empty(tuple(hi - lo for lo, hi in box), dtype=dt), tuple(lo for lo, _ in box))
                 for f, dt in zip(fields, code[5])]
        if pair is not None:
            _run_pair(plan, k - 1, pair, inputs, box, scalars, dests)
            pair = None
        elif not _empty(box):
            reduced = _run_kernel(code, inputs, edges, region, box, scalars[k], plan[1], backend, dests, target)
            partials.update({(k, j): partial for j, partial in reduced.items()})
        for f, dest in zip(fields, dests):
            buffers[f] = dest
            if f in output_of and box != target and not _empty(target):
                _window((outs[output_of[f]], origin), target, ())[...] = _window(dest, target, ())
        buffer += len(code[5])
        for b in [b for b, last in last_read.items() if last <= k]:  # < k: read by a pair kernel
            buffers.pop(b, None)
    return [partials[r] if r in partials else _empty_partial(plan, r, xp) for r in plan[6]]


def _empty_partial(plan: tuple, reduction: tuple[int, int], xp: Any) -> dict[str, Any]:
    """The partial of a full reduction over no elements (a part with an empty target)."""
    program, (_, v, kind, axes, dtype, params) = _reduction(plan, reduction)
    empty = xp.empty((0,) * plan[0], dtype=program[2][v][2])
    return _blocks.reduce_chunk(kind, empty, axes, np.dtype(dtype), params, ())


def _last_reads(plan: tuple) -> dict[int, int]:
    """The last kernel reading each buffer."""
    last: dict[int, int] = {}
    for k, (_, slots, *_) in enumerate(plan[2]):
        for b in slots:
            last[b] = k
    return last


# edge modes: what a read past a buffer's ends gives
WRAP = 1  # the element a period away (the buffer holds a whole period of a cyclic axis)
FILL = 2  # a constant (reads past the ends of an array padded with it)


def _edges(code: tuple, inputs: list, region: tuple, box: Box, edges: tuple) -> tuple:
    """Per buffer slot and axis, the edge mode of the reads of a sweep past the ends of what the slot holds
    (0 where none is): with WRAP past its buffer's, with FILL past its array's (``edges``: the plan's per
    slot ``(modes, fill, extent)``)."""
    _, _, loads, restricted, bases, _ = code
    value = _value_box(box, restricted, region)
    reads = [] if _empty(value) else [(slot, value, offset) for slot, offset in loads]
    reads += [(base[0], box, base[1]) for base in bases if base is not None]
    active = [[0] * len(modes) for modes, _, _ in edges]
    for slot, window, offset in reads:
        if offset and inputs[slot] is not None:
            array, origin = inputs[slot]
            modes, _, extent = edges[slot]
            for d, ((lo, hi), e, o) in enumerate(zip(window, offset, origin)):
                ends = (o, o + array.shape[d]) if modes[d] == WRAP else (0, extent[d])
                if lo + e < ends[0] or hi + e > ends[1]:
                    active[slot][d] = modes[d]
    return tuple(map(tuple, active))


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
    active = _edges(code, inputs, region, box, edges)

    def window(slot: int, where: Box, offset: Sequence[int]) -> Any:
        _, fill, extent = edges[slot]
        return _window(inputs[slot], where, offset, active[slot], fill, extent)

    outs = [_window(dest, box, ()) for dest in dests]
    for out, base in zip(outs, bases):
        if base is not None:
            out[...] = window(base[0], box, base[1])
    value = _value_box(box, restricted, region)
    if _empty(value):
        return {}
    views = [window(slot, value, offset) for slot, offset in loads]
    inner = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(value, box))
    stores = (*program[:3], tuple(("store", out[1]) for out in program[3]))  # reductions: over the target
    values = _codegen.run_numpy(stores, scalars, tuple(lo for lo, _ in value), tuple(hi - lo for lo, hi in value),
                                shape, views, backend)
    for out, v in zip(outs, values):
        out[inner] = v
    reduced = {}
    for j, (out, v) in enumerate(zip(program[3], values)):
        if out[0] == "reduce":
            part = v[tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(target, value))]
            reduced[j] = _blocks.reduce_chunk(out[2], part, out[3], np.dtype(out[4]), out[5], ())
    return reduced


# --- CUDA ---------------------------------------------------------------------------------------------

# grid dimension of each axis (the last axis along x: neighbouring threads read neighbouring elements)
_GRID_AXES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}
_THREADS = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 4, 2)}
WAVES = 8  # thread blocks of a kernel with full reductions: this many full waves (H200: 1 wave 34 ms, 8 waves
# 23.5 ms, one block per tile 34 ms for CG 8192^2 x 30; a grid-stride loop per thread, and one partial per block)

_GRID_LIMITS = {"x": 2**20, "y": 65535, "z": 65535}
_HELPERS = r"""
#ifndef GNP_STENCIL_HELPERS
#define GNP_STENCIL_HELPERS
/* the move bringing buffer position c back into [0, n) when it is at most one period outside */
template <typename I> __device__ __forceinline__ I gnp_wrap(I c, I n) { return c < 0 ? n : (c >= n ? -n : (I)0); }
/* whether array position c is past the ends of [0, n) */
template <typename I> __device__ __forceinline__ bool gnp_outside(I c, I n) { return c < 0 || c >= n; }
#endif  /* GNP_STENCIL_HELPERS */
"""


def rows(code: tuple) -> int:
    """Positions each thread computes along axis ndim - 2 (1-d: along x): 4, or 2 where more than one buffer
    is read at shifted positions (each keeps rows + 2 rows of values live). On an H200, heat (one shifted
    field) ran 20.8/16.2/13.7 ms with 1/2/4 rows, Gray-Scott (two) 10.2/9.1/10.3 ms."""
    shifted = {slot for slot, offset in code[2] if any(offset)}
    return 2 if len(shifted) > 1 else 4

def _no_edges(code: tuple) -> tuple:
    """The edge modes of a sweep none of whose reads pass its buffers' ends (0-d slots: none)."""
    ndim, single = code[0][0], {slot for slot, offset in code[2] if not offset}
    return tuple(() if s in single else (0,) * ndim for s in range(len(code[1])))


def _sweep_params(code: tuple, index: str, edges: tuple, prefix: str = "", shared: Sequence[int] = (),
                  stored: bool = True) -> list[str]:
    """The kernel parameters of one sweep, named with ``prefix``: its buffers but the ``shared`` slots (read
    from shared memory), its outputs where ``stored`` (else they go to shared memory), scalars, box,
    geometry, region and edges (``kernel_source``)."""
    program, buffer_dtypes, loads, restricted, _, out_dtypes = code
    ndim, _, instrs, outputs = program
    ctype, last = _codegen._ctype, ndim - 1
    single = {slot for slot, offset in loads if not offset}  # 0-d arrays
    reductions = list(range(len(out_dtypes), len(outputs)))
    params = [f"const {ctype(dt)}* __restrict__ {prefix}b{s}" for s, dt in enumerate(buffer_dtypes) if s not in shared]
    params += [f"{ctype(dt)}* __restrict__ {prefix}out{j}" for j, dt in enumerate(out_dtypes)] * stored
    params += [_codegen.final_param(program, k) for k in reductions] + _codegen.fold_params(program)
    params += [f"const {ct} {prefix}s{k}" for k, ct in sorted(_codegen._scalar_ctypes(instrs).items())]
    params += [f"const {ct} {prefix}{_codegen._cast_name(j, ct)}" for j, ct in _codegen._scalar_casts(instrs)]
    params += [f"const {index} {prefix}lo{d}" for d in range(ndim)] + [f"const {index} {prefix}n{d}" for d in range(ndim)]
    places = [(f"o{s}", f"st{s}") for s in range(len(buffer_dtypes)) if s not in single and s not in shared]
    places += [(f"oo{j}", f"ost{j}") for j in range(len(out_dtypes))] * stored
    for origin, stride in places:
        params += ([f"const {index} {prefix}{origin}_{d}" for d in range(ndim)]
                   + [f"const {index} {prefix}{stride}_{d}" for d in range(last)])
    for d in restricted:
        params += [f"const {index} {prefix}rlo{d}", f"const {index} {prefix}rhi{d}"]
    params += [f"const {index} {prefix}ext{s}_{d}" for s, modes in enumerate(edges) for d, mode in enumerate(modes) if mode]
    params += [f"const {ctype(buffer_dtypes[s])} {prefix}f{s}" for s, modes in enumerate(edges) if FILL in modes]
    params += [f"const {index} t{bound}{d}" for d in range(ndim) for bound in ("lo", "hi")] * bool(reductions)
    return params


def _position(origin: str, stride: str, ndim: int) -> str:
    """The flat index of position ``p`` in a buffer of this origin and strides (the last axis: stride 1)."""
    last = ndim - 1
    return " + ".join([f"(p{d} - {origin}_{d}) * {stride}_{d}" for d in range(last)] + [f"(p{last} - {origin}_{last})"])


def _places(code: tuple, index: str, prefix: str = "", shared: Sequence[int] = (), stored: bool = True) -> list[str]:
    """The statements placing position ``p`` in each buffer read from global memory (``q<s>``) and each
    output stored there (``w<j>``)."""
    _, buffer_dtypes, loads, _, _, out_dtypes = code
    ndim, single = code[0][0], {slot for slot, offset in loads if not offset}
    lines = [f"const {index} q{s} = {'0' if s in single else _position(f'{prefix}o{s}', f'{prefix}st{s}', ndim)};"
             for s in range(len(buffer_dtypes)) if s not in shared]
    return lines + [f"const {index} w{j} = {_position(f'{prefix}oo{j}', f'{prefix}ost{j}', ndim)};"
                    for j in range(len(out_dtypes))] * stored


def _element(code: tuple, edges: tuple, checked: bool, prefix: str = "", shared: dict[int, str] | None = None,
             stores: Sequence[str] | None = None) -> list[str]:
    """The statements computing and storing one element of a sweep at position ``p`` (reads with their
    edges where ``checked``; parameters named with ``prefix``). ``shared``: the slots read from shared
    memory, each an expression of the read's offset per axis (``{0}``, ``{1}``: ``pair_source``);
    ``stores``: where each output goes (default: its buffer ``out<j>`` at ``w<j>``)."""
    program, _, loads, restricted, bases, out_dtypes = code
    ndim, _, instrs, outputs = program
    ctype, last, shared = _codegen._ctype, ndim - 1, shared or {}
    stores = stores or [f"{prefix}out{j}[w{j}]" for j in range(len(out_dtypes))]
    reductions = len(outputs) > len(out_dtypes)

    def at(slot: int, offset: Sequence[int]) -> str:
        """The read of buffer ``slot`` at ``offset`` from the element computed."""
        if slot in shared:
            return shared[slot].format(*offset)
        terms, outside = [], []
        for d, e in enumerate(offset):
            stride = f" * {prefix}st{slot}_{d}" if d < last else ""
            if e:
                terms.append(f"({e}){stride}")
            # along a cyclic axis the box itself may reach past the buffer's period (a halo for later sweeps):
            # every read is taken around, the unshifted ones too
            if checked and edges[slot][d] == WRAP:
                terms.append(f"gnp_wrap(p{d} - {prefix}o{slot}_{d} + ({e}), {prefix}ext{slot}_{d}){stride}")
            if checked and edges[slot][d] == FILL:
                outside.append(f"gnp_outside(p{d} + ({e}), {prefix}ext{slot}_{d})")
        load = f"{prefix}b{slot}[{' + '.join([f'q{slot}', *terms])}]"
        return f"({' || '.join(outside)} ? {prefix}f{slot} : {load})" if outside else load

    value: list[str] = []
    for i, ins in enumerate(instrs):
        if ins[0] == "load":
            slot, offset = loads[ins[1]]
            value.append(f"const {ctype(ins[2])} v{i} = {at(slot, offset)};")
        else:
            value.append(_codegen._instr_code(i, ins, instrs, "flat", 1, prefix=prefix))
    value += [f"{store} = ({ctype(dt)})v{out[1]};" for store, out, dt in zip(stores, outputs, out_dtypes)]
    if reductions:  # over the target only (the box may be larger: a halo for later sweeps)
        value.append(f"if ({' && '.join(f'p{d} >= tlo{d} && p{d} < thi{d}' for d in range(ndim))}) {{")
        value += ["    " + line for line in _codegen.fold_statements(program)] + ["}"]
    if not restricted:
        return value
    inside = " && ".join(f"p{d} >= {prefix}rlo{d} && p{d} < {prefix}rhi{d}" for d in restricted)
    return ([f"if ({inside}) {{"] + [f"    {line}" for line in value] + ["} else {"]
            + [f"    {store} = {at(*base)};" for store, base in zip(stores, bases)] + ["}"])


_TILED_BACKENDS = frozenset({"cupy"})  # where pair kernels run (the CPU kernel emulator adds "numpy")


def _pair_part(plan: tuple, k: int, inputs: list, inputs_b: list, box: Box, box_b: Box) -> tuple | None:
    """What kernel ``k`` of a pair needs to run with kernel ``k + 1`` in a pair kernel over these boxes and
    buffers (``inputs_b``: the second's, but the first's outputs): its inputs, edges over what it computes,
    box, the shared slots and the second's edges; None where the two run as two kernels (a box empty, or
    wrapped reads of the first more than a period away)."""
    if _empty(box) or _empty(box_b):
        return None
    (first, _, region, edges), (second, _, region_b, edges_b) = plan[2][k], plan[2][k + 1]
    shared = _pair_shared(plan, k)
    placed = list(inputs_b)
    for slot, _ in shared:  # the first's outputs as buffers of its box, for their edges (only shapes are read)
        placed[slot] = (np.broadcast_to(np.int8(0), tuple(hi - lo for lo, hi in box)), tuple(lo for lo, _ in box))
    active_b = _edges(second, placed, region_b, box_b, edges_b)
    halo = _tile_halo(second, shared)
    # along axes where the second's reads of the first's outputs wrap, the first is computed on the second's
    # box extended by the halo, at unwrapped positions
    extended = tuple((lo - h, hi + h) if any(active_b[slot][d] == WRAP for slot, _ in shared) else a
                     for d, ((lo, hi), h, a) in enumerate(zip(box_b, halo, box)))
    active = _edges(first, inputs, region, extended, edges)
    for slot, offset in first[2]:
        for d in [d for d, mode in enumerate(active[slot]) if mode == WRAP] if offset else ():
            array, origin = inputs[slot]
            period, (lo, hi) = array.shape[d], extended[d]
            if lo + offset[d] - origin[d] < -period or hi + offset[d] - origin[d] > 2 * period:
                return None
    return inputs, active, box, shared, active_b


def _run_pair(plan: tuple, k: int, pair: tuple, inputs_b: list, box_b: Box, scalars: tuple, dests: list) -> None:
    """Kernels ``k`` and ``k + 1`` in one pair kernel (``_pair_part`` gave ``pair``), over the second's box
    ``box_b`` into ``dests``."""
    inputs, active, box, shared, active_b = pair
    (first, _, region, edges), (second, _, region_b, edges_b) = plan[2][k], plan[2][k + 1]
    slots = [slot for slot, _ in shared]
    local_b = tuple(_no_edges(second)[s] if s in slots else modes for s, modes in enumerate(active_b))
    a = _sweep_args(first, inputs, edges, active, region, box, scalars[k], [])
    b = _sweep_args(second, inputs_b, edges_b, local_b, region_b, box_b, scalars[k + 1], dests, slots)
    index = _index_type(a[4] + b[4])
    to_index = _INDEX_TYPES[index]
    args = [arg for arrays, scalar_args, values, fills, _ in (a, b)
            for arg in (*arrays, *scalar_args, *map(to_index, values), *fills)]
    grid = (-(-(box_b[1][1] - box_b[1][0]) // TILE[1]), -(-(box_b[0][1] - box_b[0][0]) // TILE[0]), 1)
    _pair_kernel(first, second, shared, index, active, active_b)(grid, (TILE_THREADS, 1, 1), tuple(args))


def _kernel_text(name: str, threads: int, params: list[str], body: list[str]) -> str:
    """A generated kernel's whole source: the helpers, then the kernel."""
    from ..kernels.philox import PHILOX_DEVICE_SOURCE

    return (PHILOX_DEVICE_SOURCE + _codegen._HELPERS + _HELPERS
            + f'\nextern "C" __global__ void __launch_bounds__({threads}) {name}(\n    ' + ",\n    ".join(params)
            + ")\n{\n" + "\n".join(body) + "\n}\n")


def kernel_source(code: tuple, index: str = "int", edges: tuple | None = None) -> tuple[str, str]:
    """CUDA C++ source and kernel name of one sweep's code: each thread computes the elements of the box at
    ``p = lo + i`` (grid-stride loops per axis, ``rows(code)`` positions per thread along axis ``ndim - 2``; 1-d:
    along the only axis, a thread block apart), reading buffer ``s`` at ``(p - o_s + offset) . stride_s`` and
    writing output ``j`` at ``(p - oo_j) . ostride_j``; the last axis has stride 1 (a 0-d buffer: one
    element). ``index`` is the C type of positions and offsets: "int" where they fit, else "long long".
    ``edges`` (per buffer slot and axis, ``_edges``; None: none) are the reads past a buffer's ends: with
    WRAP the position is moved by the buffer's extent ``ext<s>_<d>`` (a select, no halo); with FILL a read
    outside ``[0, ext<s>_<d>)`` (the array's extent) gives the slot's fill value ``f<s>`` and loads nothing."""
    from .check import check_stencil_code

    check_stencil_code(code, index, edges)  # only our names and integers become source
    program, buffer_dtypes, loads, restricted, bases, out_dtypes = code
    ndim, per_thread = program[0], rows(code)
    edges = _no_edges(code) if edges is None else edges
    reductions = len(program[3]) > len(out_dtypes)
    params = _sweep_params(code, index, edges)
    body: list[str] = _codegen.accumulators(program)
    indent = "    "
    unrolled = max(ndim - 2, 0)  # R positions per thread along this axis: rows (2-d, 3-d) or elements (1-d)
    for d, dim in enumerate(_GRID_AXES[ndim]):
        if d == unrolled:
            start = (f"(({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}) * {per_thread}" if ndim > 1
                     else f"({index})blockIdx.{dim} * blockDim.{dim} * {per_thread} + threadIdx.{dim}")
            step = f"({index})gridDim.{dim} * blockDim.{dim} * {per_thread}"
        else:
            start, step = f"({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}", f"({index})gridDim.{dim} * blockDim.{dim}"
        body.append(f"{indent}for ({index} i{d} = {start}; i{d} < n{d}; i{d} += {step}) {{")
        indent += "    "
        if d != unrolled:
            body.append(f"{indent}const {index} p{d} = lo{d} + i{d};")
    # the R positions of the thread: consecutive rows, whose vertical neighbours are loaded once for all of
    # them, or (1-d) a thread block's width apart, so that loads stay coalesced. Where all R are in the box
    # and every read of theirs inside its buffer (the interior: nearly every thread), they are computed
    # without bounds checks or edge selects, so that the loads of all R issue together.
    apart = "" if ndim > 1 else f" * ({index})blockDim.x"
    u = unrolled
    last_row = f"i{u} + {per_thread - 1}{apart}"
    fast = [f"{last_row} < n{u}", *_interior(loads, bases, edges, u, f"(lo{u} + i{u})", f"(lo{u} + {last_row})")]

    def row_loop(checked: bool) -> list[str]:
        lines = ["#pragma unroll", f"for (int r = 0; r < {per_thread}; ++r) {{",
                 f"    const {index} j{u} = i{u} + r{apart};"]
        lines += [f"    if (j{u} >= n{u}) break;"] * checked
        lines.append(f"    const {index} p{u} = lo{u} + j{u};")
        lines += [f"    {line}" for line in _places(code, index)]
        return lines + [f"    {line}" for line in _element(code, edges, checked)] + ["}"]

    body.append(f"{indent}if ({' && '.join(fast)}) {{")
    body += [f"{indent}    {line}" for line in row_loop(False)]
    body.append(f"{indent}}} else {{")
    body += [f"{indent}    {line}" for line in row_loop(True)]
    body.append(f"{indent}}}")
    for d in reversed(range(ndim)):
        body.append("    " * (d + 1) + "}")
    if reductions:
        body += ["    const unsigned int gnp_thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);",
                 "    const unsigned int gnp_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);"]
        body += _codegen.finish(program, ("gnp_thread", "(blockDim.x * blockDim.y * blockDim.z)",
                                          "gnp_block", "(gridDim.x * gridDim.y * gridDim.z)"))
    name = "gnp_stencil_" + hashlib.sha256(repr((code, index, edges)).encode()).hexdigest()[:16]
    return _kernel_text(name, int(np.prod(_THREADS[ndim])), params, body), name


def _interior(loads: tuple, bases: tuple, edges: tuple, unrolled: int, first: str, last: str,
              prefix: str = "") -> list[str]:
    """Conditions under which every read of a thread's positions (``first`` to ``last`` along axis
    ``unrolled``, ``p<d>`` along the others) lies inside its buffer, needing none of its edges: per slot and
    axis with an edge mode, the smallest and largest offset read stay within ``[0, ext)`` (FILL: of the
    array, WRAP: of the buffer, from its origin ``o``)."""
    reach: dict[tuple[int, int], list[int]] = {}
    for slot, offset in (*loads, *(b for b in bases if b is not None)):
        for d, e in enumerate(offset):
            if edges[slot] and edges[slot][d]:
                lo_hi = reach.setdefault((slot, d), [e, e])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], e), max(lo_hi[1], e)
    conditions = []
    for (slot, d), (lo, hi) in sorted(reach.items()):
        low, high = (first, last) if d == unrolled else (f"p{d}", f"p{d}")
        origin = f" - {prefix}o{slot}_{d}" if edges[slot][d] == WRAP else ""
        conditions += [f"{low}{origin} + ({lo}) >= 0", f"{high}{origin} + ({hi}) < {prefix}ext{slot}_{d}"]
    return conditions


# --- pair kernels: two sweeps per launch, the first's outputs in shared memory -------------------------

TILE = (32, 64)  # outputs of a thread block of a pair kernel (rows, columns): 64 columns keep rows coalesced
TILE_THREADS = 256
TILE_HALO = 2  # the largest offset per axis at which the second sweep may read the first's outputs


def _tile_halo(second: tuple, shared: tuple) -> tuple[int, ...]:
    """How far, per axis, the second sweep of a pair reads the first's outputs (its ``shared`` slots)."""
    slots, halo = {slot for slot, _ in shared}, [0] * second[0][0]
    for slot, offset in (*second[2], *(b for b in second[4] if b is not None)):
        if slot in slots:
            halo = [max(h, abs(e)) for h, e in zip(halo, offset)]
    return tuple(halo)


def pair_source(first: tuple, second: tuple, shared: tuple, index: str, edges_a: tuple,
                edges_b: tuple) -> tuple[str, str]:
    """CUDA C++ source and kernel name of two consecutive 2-d sweeps in one launch: a thread block per
    ``TILE`` of the second sweep's box (``b_lo``, ``b_n``) computes the first sweep's outputs on the tile
    extended by the halo (``_tile_halo``) into shared memory, then the second sweep on the tile, reading
    its ``shared`` slots (``(slot, output of the first)``) there and its others from global memory.
    Parameters are ``kernel_source``'s of each sweep, prefixed ``a_`` and ``b_`` (without the first's
    outputs and the second's shared slots). ``edges_a``: the first sweep's edges over what it computes;
    ``edges_b``: the second's, on its shared slots the edges of its reads of the first's outputs: along an
    axis where they WRAP, the first sweep is computed past its box (at unwrapped positions: its own reads
    wrap, so the values are those a period away), along the others only inside it (nothing else is read)."""
    from .check import check_pair

    check_pair(first, second, shared, index, edges_a, edges_b)  # only our names and integers become source
    slots = dict(shared)
    halo = _tile_halo(second, shared)
    wraps = [any(edges_b[slot][d] == WRAP for slot in slots) for d in range(2)]
    # the shared slots' reads need no edges in the kernel (their edges are in what phase 1 computes)
    local_b = tuple(_no_edges(second)[s] if s in slots else modes for s, modes in enumerate(edges_b))
    rows, columns = TILE[0] + 2 * halo[0], TILE[1] + 2 * halo[1]  # the extended tile
    ctype = _codegen._ctype
    body = [f"    __shared__ {ctype(dt)} a_t{j}[{rows * columns}];" for j, dt in enumerate(first[5])]
    body += [f"    const {index} g{d} = b_lo{d} + ({index})blockIdx.{dim} * {TILE[d]} - {halo[d]};"
             for d, dim in enumerate("yx")]  # where the extended tile starts

    def phase(code: tuple, edges: tuple, prefix: str, extent: tuple[int, int], start: tuple[int, ...],
              skip: list[str], reads: dict[int, str], stores: list[str] | None) -> list[str]:
        """The threads' loop over the positions ``g + start + e`` (``e`` over ``extent``) but where ``skip``
        holds, computing one sweep's element at each (without edges where all its reads are inside)."""
        lines = [f"    for (int e = threadIdx.x; e < {extent[0] * extent[1]}; e += {TILE_THREADS}) {{",
                 f"        const {index} p0 = g0 + {start[0]} + e / {extent[1]};",
                 f"        const {index} p1 = g1 + {start[1]} + e % {extent[1]};",
                 f"        if ({' || '.join(skip)}) continue;"]
        lines += [f"        {line}" for line in _places(code, index, prefix, tuple(reads), stores is None)]
        element = functools.partial(_element, code, edges, prefix=prefix, shared=reads, stores=stores)
        fast = _interior(code[2], code[4], edges, 0, "p0", "p0", prefix)
        if not fast:
            return lines + [f"        {line}" for line in element(False)] + ["    }"]
        return lines + [f"        if ({' && '.join(fast)}) {{", *[f"            {line}" for line in element(False)],
                        "        } else {", *[f"            {line}" for line in element(True)], "        }", "    }"]

    # phase 1: the first sweep on the extended tile, as far as the second reads it, into shared memory
    skip = [f"p{d} >= b_lo{d} + b_n{d} + {halo[d]}" for d in range(2)]
    skip += [f"p{d} < a_lo{d} || p{d} >= a_lo{d} + a_n{d}" for d in range(2) if not wraps[d]]
    body += phase(first, edges_a, "a_", (rows, columns), (0, 0), skip, {},
                  [f"a_t{j}[(p0 - g0) * {columns} + (p1 - g1)]" for j in range(len(first[5]))])
    body.append("    __syncthreads();")
    # phase 2: the second sweep on the tile, inside its box
    reads = {slot: f"a_t{j}[(p0 - g0 + ({{0}})) * {columns} + (p1 - g1 + ({{1}}))]" for slot, j in slots.items()}
    body += phase(second, local_b, "b_", TILE, halo, [f"p{d} >= b_lo{d} + b_n{d}" for d in range(2)], reads, None)
    params = (_sweep_params(first, index, edges_a, "a_", stored=False)
              + _sweep_params(second, index, local_b, "b_", tuple(slots)))
    name = "gnp_pair_" + hashlib.sha256(repr((first, second, shared, index, edges_a, edges_b)).encode()).hexdigest()[:16]
    return _kernel_text(name, TILE_THREADS, params, body), name


def record_sources(plan: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write the kernels of a group there (both index types, without
    edges and with every edge a read may have), so that nvcc compiles them even on machines without a GPU."""
    from ..kernels import cuda as _cuda

    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    for code, _, _, edges in plan[2]:
        for index in _INDEX_TYPES:
            for active in (None, tuple(modes for modes, _, _ in edges)):
                _cuda.record_source(kernel_source(code, index, active)[0])
    for k in plan[7]:
        for index in _INDEX_TYPES:
            for with_edges in (False, True):
                _cuda.record_source(pair_source(*pair_variant(plan, k, index, with_edges))[0])


_INDEX_TYPES = {"int": np.int32, "long long": np.int64}


@functools.lru_cache(maxsize=256)
def _kernel(code: tuple, index: str, edges: tuple) -> tuple[Any, int]:
    """The compiled kernel of a sweep's variant, and how many of its thread blocks the device keeps resident."""
    from ..kernels import cuda as _cuda

    source, name = kernel_source(code, index, edges)
    function = _cuda.compile_module(source).get_function(name)
    return function, _cuda.wave_blocks(function, int(np.prod(_THREADS[code[0][0]])))


def pair_variant(plan: tuple, k: int, index: str, with_edges: bool = False) -> tuple:
    """``pair_source``'s arguments for the pair kernel of kernels ``k`` and ``k + 1`` of a group: without
    edges, or with every edge a read may have."""
    (first, _, _, edges), (second, _, _, edges_b) = plan[2][k], plan[2][k + 1]
    active = ((tuple(m for m, _, _ in edges), tuple(m for m, _, _ in edges_b)) if with_edges
              else (_no_edges(first), _no_edges(second)))
    return (first, second, _pair_shared(plan, k), index, *active)


@functools.lru_cache(maxsize=256)
def _pair_kernel(first: tuple, second: tuple, shared: tuple, index: str, edges: tuple, edges_b: tuple) -> Any:
    """The compiled pair kernel of two sweeps' variant (``pair_source``)."""
    from ..kernels import cuda as _cuda

    source, name = pair_source(first, second, shared, index, edges, edges_b)
    return _cuda.compile_module(source).get_function(name)


def _launch_shape(extent: tuple[int, ...], per_thread: int, limit: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads) of a launch over a box of ``extent``: each thread computes ``per_thread`` positions
    along axis ``ndim - 2`` (1-d: the only axis); at most ``limit`` thread blocks where given (a kernel with
    full reductions: its last block combines one partial per block), fewer along x first (each thread block
    then walks along rows, in its own band of them)."""
    ndim = len(extent)
    threads = _THREADS[ndim]
    per_dim = dict(zip(_GRID_AXES[ndim], extent))
    unrolled = _GRID_AXES[ndim][max(ndim - 2, 0)]
    grid = [max(1, min(-(-per_dim.get(dim, 1) // (t * (per_thread if dim == unrolled else 1))), _GRID_LIMITS[dim]))
            for dim, t in zip("xyz", threads)]
    for axis in (0, 1, 2) if limit is not None else ():
        grid[axis] = max(1, min(grid[axis], limit // (int(np.prod(grid)) // grid[axis])))
    return tuple(grid), threads  # type: ignore[return-value]


def _sweep_args(code: tuple, inputs: list, edges: tuple, active: tuple, region: tuple, box: Box,
                scalars: tuple, dests: list, shared: Sequence[int] = ()) -> tuple[list, list, list[int], list, list[int]]:
    """A sweep's launch arguments in ``_sweep_params``' order, but those of full reductions: (its arrays,
    inputs then outputs; its scalars; its index values: box, geometry, region, extents; its fills; the
    numbers that must fit the index type). ``shared`` slots are not passed (a pair kernel's shared memory)."""
    import cupy

    program, buffer_dtypes, loads, _, _, _ = code
    ndim = len(box)
    single = {slot for slot, offset in loads if not offset}
    # the array's extent along each axis read past the ends (with WRAP, also its buffer's: a whole period)
    extents = [extent[d] for used, (_, _, extent) in zip(active, edges) for d, mode in enumerate(used) if mode]
    fills = [_codegen._NP_OF_CTYPE[_codegen._ctype(dt)].type(fill)
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
    return (arrays + [out for out, _ in dests], _codegen.scalar_args(program[2], scalars), values + extents, fills,
            checked)


def _index_type(numbers: Sequence[int]) -> str:
    """The C type of a launch's positions and offsets: "int" where all of them fit."""
    return "int" if all(abs(v) < 2**31 - 1 for v in numbers) else "long long"


def _run_cuda(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple, dests: list,
              target: Box) -> dict[int, dict[str, Any]]:
    program, out_dtypes = code[0], code[5]
    active = _edges(code, inputs, region, box, edges)
    arrays, scalar_args, values, fills, checked = _sweep_args(code, inputs, edges, active, region, box, scalars, dests)
    index = _index_type(checked)
    to_index = _INDEX_TYPES[index]
    kernel, resident = _kernel(code, index, active)
    reductions = range(len(out_dtypes), len(program[3]))
    grid, threads = _launch_shape(tuple(hi - lo for lo, hi in box), rows(code), resident * WAVES if reductions else None)
    partials, buffers = {}, []
    for k in reductions:
        partials[k], final = _codegen.final_buffer(program, k, int(np.prod([hi - lo for lo, hi in target])))
        buffers.append(final)
    buffers += _codegen.fold_buffers(program, int(np.prod(grid)))
    args = arrays + buffers + scalar_args + [to_index(v) for v in values] + fills
    args += [to_index(v) for bounds in target for v in bounds] if reductions else []
    kernel(grid, threads, tuple(args))
    return partials
