"""A stencil group's plan (``types.StencilPlan``) and its geometry: which box each sweep computes and each
source must cover for a target box (``boxes``: working back from the target, each sweep computing as much
more as later ones read), a block's interior and bands (``split``: a task for the interior, which needs only
the source blocks at its own place, and one for the bands along the edges, which need the halos), and which
sweeps run together in one tile kernel (``tile_runs``). Buffers, slots, edge modes and coordinates:
docs/architecture.md ("Stencil plans")."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import program as _program
from . import stencil as _stencil_source
from .types import TILE_HALO, TILE_SHARED_BYTES, TILE_WORK, TILES, WRAP

Box = tuple[tuple[int, int], ...]



def describe(plan: tuple) -> str:
    """Op words of a group, for key names and explain(): e.g. "add-multiply"."""
    words: list[str] = []
    for code, *_ in plan.sweeps:
        for word in _program.describe(code.program).split("-"):
            if word != "fused" and word not in words:
                words.append(word)
    return "-".join(words[:4]) or "copy"


def output_dtypes(plan: tuple) -> list[np.dtype]:
    """The dtype of each output of a group: its stored blocks', then (for its partials) the values reduced."""
    fields = [np.dtype(dt) for code, *_ in plan.sweeps for dt in code.out_dtypes]  # buffers after the sources
    reduced = [reduction_of(plan, r) for r in plan.reductions]
    return [fields[b - len(plan.wraps)] for b in plan.outputs] + [np.dtype(program.instrs[out.value].dtype) for program, out in reduced]


def reduction_of(plan: tuple, reduction: tuple[int, int]) -> tuple[tuple, tuple]:
    """The program of the kernel computing a full reduction of a group, and the reduction's output there."""
    program = plan.sweeps[reduction[0]].code.program
    return program, program.outputs[reduction[1]]


def sweeps(plan: tuple) -> int:
    """Sweeps one task of the group runs (one kernel each, but on CuPy blocks runs of them: ``tile_runs``)."""
    return len(plan.sweeps)


def tile_runs(plan: tuple, limit: int) -> tuple[tuple[int, int], ...]:
    """The runs of consecutive kernels of a group, ``(first, count)``, to run on CuPy blocks as one tile kernel
    each, in order: sweeps (of the dimensions in ``TILES``) whose outputs are each read by the next sweep alone (``link``; full reductions
    in the last sweep of a run only), at most ``limit`` of them, and as many as keep the tile kernel's shared memory and redundant
    work in bounds (``tile_fits``). A stretch of linked sweeps is cut into as few runs as those bounds allow,
    of sizes as even as possible (20 sweeps at most 6 a kernel: 4 runs of 5)."""
    runs, k, n = [], 0, len(plan.sweeps)
    while k < n:
        stretch = 1
        while k + stretch < n and link(plan, k + stretch - 1) is not None:
            stretch += 1
        cap = 1
        while cap < min(limit, stretch) and tile_fits(plan, k, cap + 1):
            cap += 1
        if cap == 1:  # kernel k runs alone: the next may start a run
            k += 1
            continue
        parts = -(-stretch // cap)
        sizes = [stretch // parts + (i < stretch % parts) for i in range(parts)]
        start = k
        for size in sizes:
            if size > 1 and not tile_fits(plan, start, size):  # the stretch is not alike: take what fits
                size = max(m for m in range(1, size + 1) if m == 1 or tile_fits(plan, start, m))
            if size > 1:
                runs.append((start, size))
            start += size
        k = start
    return tuple(runs)


def link(plan: tuple, k: int) -> tuple[tuple[int, int], ...] | None:
    """The slots of kernel ``k + 1`` reading the outputs of kernel ``k`` (``(slot, output)``), if the two may
    follow each other in a tile kernel (``tile_runs``), else None: kernel ``k`` without full reductions (the
    last sweep of a run may have them), its outputs read by kernel ``k + 1`` alone, each through one slot, and
    either all or none of them outputs of the group (stored as well: ``stored_sweeps``); the reads within
    ``TILE_HALO``, wrapping or filled past the array's ends."""
    ndim, shape, kernels, outputs = plan.ndim, plan.shape, plan.sweeps, plan.outputs
    (first, _, _, _), (second, slots, _, _) = kernels[k], kernels[k + 1]
    if ndim not in TILES or len(first.out_dtypes) != len(first.program.outputs) or any(
            ins.tag == "random" for code in (first, second) for ins in code.program.instrs):  # (no prefixed seeds)
        return None
    fields = {b: j for b, (owner, j) in _field_kernels(plan).items() if owner == k}
    readers = {kernel for kernel, (_, read, *_) in enumerate(kernels) for b in read if b in fields}
    shared = tuple((slot, fields[b]) for slot, b in enumerate(slots) if b in fields)
    stored = fields.keys() & set(outputs)
    if readers != {k + 1} or stored and stored != fields.keys() or sorted(j for _, j in shared) != sorted(fields.values()):
        return None
    halo = _stencil_source.tile_halo(second, shared)
    grid = zip(_stencil_source.GRID_AXES[ndim], shape, TILES[ndim])
    if max(halo) > TILE_HALO or any(-(-n // t) > _stencil_source.GRID_LIMITS[dim] for dim, n, t in grid):
        return None
    return shared


def stored_sweeps(plan: tuple, run: tuple[int, int]) -> tuple[int, ...]:
    """The sweeps of a run ``(first, count)`` but the last (numbered in the run) whose outputs the tile kernel
    also stores to memory: outputs of the group (``link``)."""
    start, count = run
    owner = _field_kernels(plan)
    return tuple(sorted({owner[b][0] - start for b in plan.outputs if start <= owner[b][0] < start + count - 1}))


def tile_fits(plan: tuple, start: int, count: int) -> bool:
    """Whether kernels ``start`` to ``start + count - 1``, each linked to the next, may be one tile kernel:
    those but the last of one output dtype each, their tiles within the shared memory of a thread block and
    the work on them within ``TILE_WORK`` times the tile's; where the linked reads may wrap (the sweeps but
    the last then computed a halo past their boxes), without regions and reading at most a period away."""
    codes = [code for code, *_ in plan.sweeps[start : start + count]]
    links = [link(plan, k) for k in range(start, start + count - 1)]
    if any(shared is None for shared in links) or len({code.out_dtypes for code in codes[:-1]}) != 1:
        return False
    halos = _stencil_source.tile_halos(codes, links)
    tile = TILES[plan.ndim]
    work = sum(int(np.prod([t + 2 * e for t, e in zip(tile, h)])) for h in halos)
    if _stencil_source.tile_shared_bytes(codes, links) > TILE_SHARED_BYTES or work > TILE_WORK * count * np.prod(tile):
        return False
    sweeps = plan.sweeps[start : start + count]
    if not any(WRAP in sweep.edges[slot][0] for shared, sweep in zip(links, sweeps[1:]) for slot, _ in shared):
        return True
    for (code, *_), shared, halo in zip(sweeps[:-1], [(), *links], halos):
        linked = {slot for slot, _ in shared}
        reach = [max([abs(o[d]) for slot, o in code.loads if o and slot not in linked] + [0]) for d in range(plan.ndim)]
        # computed past its box, a sweep must have no region and its reads wrap at most a period (``gnp_wrap``)
        if code.restricted or any(h + r > n for h, r, n in zip(halo, reach, plan.shape)):
            return False
    return True


def tile_variant(plan: tuple, run: tuple[int, int], index: str, with_edges: bool = False) -> tuple:
    """``tile_source``'s arguments for the tile kernel of a run ``(first, count)`` of a group: without edges,
    or with every edge a read may have."""
    start, count = run
    sweeps = plan.sweeps[start : start + count]
    edges = tuple(tuple(m for m, _, _ in sweep.edges) if with_edges else _stencil_source.no_edges(sweep.code)
                  for sweep in sweeps)
    return (tuple(sweep.code for sweep in sweeps), tuple(link(plan, k) for k in range(start, start + count - 1)),
            index, edges, stored_sweeps(plan, run))


def kernel_runs(plan: tuple) -> list[tuple[int, int]]:
    """The kernels one task part of a group launches on CuPy blocks, each ``(first sweep, count)``."""
    tiles = dict(plan.tiles)
    runs, k = [], 0
    while k < len(plan.sweeps):
        runs.append((k, tiles.get(k, 1)))
        k += runs[-1][1]
    return runs


def bytes_moved(plan: tuple, runs: Sequence[tuple[int, int]]) -> int:
    """The fewest bytes a group's kernels (``runs``, as ``kernel_runs``) move over its whole arrays: each
    kernel reading each array it reads from memory once and writing each field it stores once (no halos,
    0-d values free)."""
    size = int(np.prod(plan.shape))
    total = 0
    for start, count in runs:
        sweeps = plan.sweeps[start : start + count]
        linked = [set()] + [{slot for slot, _ in link(plan, k)} for k in range(start, start + count - 1)]
        read = {}
        for (code, slots, *_), skip in zip(sweeps, linked):
            for slot, offset in code.loads + tuple(b for b in code.bases if b is not None):
                if offset and slot not in skip:
                    read[slots[slot]] = np.dtype(code.buffers[slot]).itemsize
        kept = range(count) if count == 1 else (*stored_sweeps(plan, (start, count)), count - 1)
        stored = [sweeps[j].code.out_dtypes for j in kept]
        total += size * (sum(read.values()) + sum(np.dtype(dt).itemsize for dts in stored for dt in dts))
    return total


def is_empty(box: Box) -> bool:
    return any(hi <= lo for lo, hi in box)


def _hull(a: Box | None, b: Box) -> Box:
    return b if a is None else tuple((min(p[0], q[0]), max(p[1], q[1])) for p, q in zip(a, b))


def _within(box: Box, shape: Sequence[int], cyclic: Sequence[bool]) -> Box:
    """What a buffer must cover of ``box``: its part inside ``[0, n)`` along each axis, but along cyclic axes
    the box as it is (a halo wrapping around the ends), or ``[0, n)`` where it spans a whole period (reads
    past the ends then wrap around in the kernel: no halo)."""
    return tuple(((0, n) if hi - lo >= n else (lo, hi)) if c else (max(lo, 0), min(hi, n))
                 for (lo, hi), n, c in zip(box, shape, cyclic))


def value_box(box: Box, restricted: Sequence[int], region: Sequence[tuple[int, int]]) -> Box:
    out = list(box)
    for axis, (lo, hi) in zip(restricted, region):
        out[axis] = (max(out[axis][0], lo), min(out[axis][1], hi))
    return tuple(out)


def _shifted(box: Box, offset: Sequence[int]) -> Box:
    return tuple((lo + e, hi + e) for (lo, hi), e in zip(box, offset))


def _field_kernels(plan: tuple) -> dict[int, tuple[int, int]]:
    """Buffer number of each field -> (its kernel, its output number there)."""
    owner, buffer = {}, len(plan.wraps)
    for k, (code, *_) in enumerate(plan.sweeps):
        for j in range(len(code.out_dtypes)):
            owner[buffer] = (k, j)
            buffer += 1
    return owner


def boxes(plan: tuple, source_shapes: Sequence[tuple[int, ...]], target: Box) -> tuple[list[Box], list[Box | None]]:
    """The box each kernel computes and each source must cover (None: not read) to compute ``target``."""
    _, shape, kernels, outputs, periodic, wraps, reductions, _ = plan
    n_sources = len(source_shapes)
    owner = _field_kernels(plan)
    kernel_need: list[Box | None] = [None] * len(kernels)
    source_need: list[Box | None] = [None] * n_sources

    def need(buffer: int, box: Box) -> None:
        if buffer < n_sources:
            n = source_shapes[buffer]
            if is_empty(box) or 0 in n:
                return
            # a read wholly past the ends along an axis (filled) still gets a buffer: the nearest elements
            box = tuple((c, c + 1) if hi <= lo else (lo, hi) for (lo, hi), c in
                        zip(_within(box, n, wraps[buffer]), (min(max(lo, 0), m - 1) for (lo, _), m in zip(box, n))))
            source_need[buffer] = _within(_hull(source_need[buffer], box), n, wraps[buffer])
        elif not is_empty(box):
            k = owner[buffer][0]
            kernel_need[k] = _hull(kernel_need[k], box)

    for buffer in outputs:
        need(buffer, target)
    for k, _ in reductions if not is_empty(target) else ():
        kernel_need[k] = _hull(kernel_need[k], target)
    kernel_boxes: list[Box] = [()] * len(kernels)
    for k in reversed(range(len(kernels))):
        (_, _, loads, restricted, bases, _), slots, region, _ = kernels[k]
        box = kernel_need[k]
        box = None if box is None else _within(box, shape, periodic)
        if box is None or is_empty(box):
            kernel_boxes[k] = tuple((lo, lo) for lo, _ in target)
            continue
        kernel_boxes[k] = box
        value = value_box(box, restricted, region)
        if not is_empty(value):
            for slot, offset in loads:
                need(slots[slot], _shifted(value, offset))
        for base in bases:
            if base is not None:
                need(slots[base[0]], _shifted(box, base[1]))
    return kernel_boxes, source_need


def halo_depth(plan: tuple) -> tuple[int, ...]:
    """How far, per axis, the sources a task reads reach beyond its block (the halo, before clipping), for
    a block in the middle of the array."""
    ndim, shape = plan.ndim, plan.shape
    block = tuple((n // 2, n // 2 + 1) for n in shape)
    unclipped = plan._replace(periodic=(True,) * ndim, wraps=tuple((True,) * ndim for _ in plan.wraps))
    depth = [0] * ndim
    for box in boxes(unclipped, [shape] * len(plan.wraps), block)[1]:
        for d, ((lo, hi), (b_lo, b_hi)) in enumerate(zip(box or block, block)):
            depth[d] = max(depth[d], b_lo - lo, hi - b_hi)
    return tuple(depth)


def split(plan: tuple, sources: Sequence[Any], chunks: tuple, block: Box) -> tuple[Box | None, list[Box]]:
    """A block's interior (None if it has none: then the block is one band) and the bands around it.

    The interior is what the sources' blocks at the block's own place suffice for (sources of another shape
    or chunking have no such place: the block is then one band); the bands are disjoint boxes covering the
    rest of the block (along each axis, the slabs below and above the interior)."""
    shape = plan.shape
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
    if is_empty(interior) or any(
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
