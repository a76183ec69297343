"""A stencil group's plan (``types.StencilPlan``) and its geometry: which box each sweep computes and each
source must cover for a target box (``boxes``: working back from the target, each sweep computing as much
more as later ones read), a block's interior and bands (``split``: a task for the interior, which needs only
the source blocks at its own place, and one for the bands along the edges, which need the halos), and which
sweeps run as pairs (``tile_pairs``). Buffers, slots, edge modes and coordinates: docs/architecture.md
("Stencil plans")."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import program as _program
from . import stencil as _stencil_source
from .types import FILL, TILE, TILE_HALO, WRAP

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
    """Sweeps one task of the group runs (one kernel each, but on CuPy blocks one per pair: ``tile_pairs``)."""
    return len(plan.sweeps)


def tile_pairs(plan: tuple) -> tuple[int, ...]:
    """The kernels ``k`` of a group (its first seven entries) to run with kernel ``k + 1`` in one pair
    kernel, taken in order: pairs of 2-d sweeps without full reductions, where every output of the first is
    read by the second alone (not a group output), at offsets within ``TILE_HALO``, without FILL edges,
    and where those reads may wrap, by a first sweep without a region computable a halo past its box
    (``pair_shared``)."""
    pairs, k = [], 0
    while k + 1 < len(plan.sweeps):
        if pair_shared(plan, k) is not None:
            pairs.append(k)
            k += 1
        k += 1
    return tuple(pairs)


def pair_shared(plan: tuple, k: int) -> tuple[tuple[int, int], ...] | None:
    """The slots of kernel ``k + 1`` reading the outputs of kernel ``k`` (``(slot, output)``), if the two may
    be one pair kernel (``tile_pairs``), else None."""
    ndim, shape, kernels, outputs = plan.ndim, plan.shape, plan.sweeps, plan.outputs
    (first, _, _, _), (second, slots, _, edges) = kernels[k], kernels[k + 1]
    if ndim != 2 or any(len(code.out_dtypes) != len(code.program.outputs) or any(ins.tag == "random" for ins in code.program.instrs)
                        for code in (first, second)):  # full reductions, or random draws (no prefixed seeds)
        return None
    fields = {b: j for b, (owner, j) in _field_kernels(plan).items() if owner == k}
    readers = {kernel for kernel, (_, read, *_) in enumerate(kernels) for b in read if b in fields}
    shared = tuple((slot, fields[b]) for slot, b in enumerate(slots) if b in fields)
    if readers != {k + 1} or fields.keys() & set(outputs) or len(shared) != len(fields):
        return None
    halo = _stencil_source.tile_halo(second, shared)
    modes = {m for slot, _ in shared for m in edges[slot][0]}
    reach = [max([abs(o[d]) for _, o in first.loads if o] + [0]) for d in range(ndim)]
    # computed past its box where the second's reads wrap, the first sweep must have no region and its
    # reads wrap at most a period (``gnp_wrap``)
    wrapping = WRAP in modes and (first.restricted or any(h + r > n for h, r, n in zip(halo, reach, shape)))
    if max(halo) > TILE_HALO or FILL in modes or wrapping or -(-shape[0] // TILE[0]) > _stencil_source.GRID_LIMITS["y"]:
        return None
    return shared


def pair_variant(plan: tuple, k: int, index: str, with_edges: bool = False) -> tuple:
    """``pair_source``'s arguments for the pair kernel of kernels ``k`` and ``k + 1`` of a group: without
    edges, or with every edge a read may have."""
    (first, _, _, edges), (second, _, _, edges_b) = plan.sweeps[k], plan.sweeps[k + 1]
    active = ((tuple(m for m, _, _ in edges), tuple(m for m, _, _ in edges_b)) if with_edges
              else (_stencil_source.no_edges(first), _stencil_source.no_edges(second)))
    return (first, second, pair_shared(plan, k), index, *active)


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
            if not is_empty(_within(box, source_shapes[buffer], wraps[buffer])):
                source_need[buffer] = _within(_hull(source_need[buffer], box), source_shapes[buffer], wraps[buffer])
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
