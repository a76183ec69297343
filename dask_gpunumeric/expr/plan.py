"""Per-axis plans for ``Gather``: which pieces of which input blocks make each output block.

A selection along one axis is either a list of *segments* (arithmetic runs ``start, start+step, ...`` in one
source; slices, flips, rolls, rechunks and concatenation are all segments) or an integer index array (take).
Plans never materialize one index per element for segments, so slicing a 2^30-element axis costs nothing.
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

AxisPlan = tuple[tuple[tuple[tuple[int, int, Any], ...], Any], ...]
Segment = tuple[int, int, int, int]  # (source, start, step, count)


def offsets(chunks: Sequence[int]) -> list[int]:
    """Start offset of each chunk."""
    return list(itertools.accumulate(chunks, initial=0))[:-1]


def split_even(n: int, size: int) -> tuple[int, ...]:
    """Chunks of at most ``size`` covering ``n`` elements (one empty chunk when ``n`` is 0)."""
    size = max(size, 1)
    if n == 0:
        return (0,)
    return tuple(min(size, n - i) for i in range(0, n, size))


def _split_segment(chunks: Sequence[int], start: int, step: int, count: int,
                   offs: Sequence[int] | None = None) -> list[tuple[int, slice, int]]:
    """Cut one arithmetic run into (chunk, local slice, length) pieces, in run order (``offs``: the chunks'
    ``offsets``, when the caller cuts several runs of one axis)."""
    if offs is None:
        offs = offsets(chunks)
    length = offs[-1] + chunks[-1] if chunks else 0
    last_position = start + step * (count - 1)
    if count > 0 and not (0 <= start < length and 0 <= last_position < length):
        raise IndexError(f"segment {start}:{last_position + step}:{step} is outside an axis of length {length}")
    out = []
    pos, left = start, count
    while left > 0:
        c = bisect.bisect_right(offs, pos) - 1
        lo, hi = offs[c], offs[c] + chunks[c]
        while chunks[c] == 0:  # skip empty chunks sharing the offset
            c += 1
            lo, hi = offs[c], offs[c] + chunks[c]
        n = min(left, (hi - pos + step - 1) // step if step > 0 else (pos - lo) // -step + 1)
        local = pos - lo
        last = local + step * (n - 1)
        stop = last + (1 if step > 0 else -1)
        out.append((c, slice(local, None if stop < 0 else stop, step), n))
        pos += step * n
        left -= n
    return out


def segments_plan(
    source_chunks: Sequence[Sequence[int]], segments: Sequence[Segment], out_chunks: Sequence[int]
) -> AxisPlan:
    """Plan an axis whose output is the concatenation of ``segments``, cut into ``out_chunks``."""
    plan = []
    source_offsets = [offsets(c) for c in source_chunks]
    seg_iter = iter(segments)
    current: Segment | None = next(seg_iter, None)
    for size in out_chunks:
        pieces: list[tuple[int, int, Any]] = []
        need = size
        while need > 0 and current is not None:
            src, start, step, count = current
            take = min(need, count)
            for c, local, _ in _split_segment(source_chunks[src], start, step, take, source_offsets[src]):
                pieces.append((src, c, local))
            need -= take
            current = (src, start + step * take, step, count - take) if count > take else next(seg_iter, None)
        if not pieces:  # an empty output chunk still needs one (empty) piece to know its block's shape
            pieces.append((0, 0, slice(0, 0, 1)))
        plan.append((tuple(pieces), None))
    return tuple(plan)


def slice_segment(index: slice, n: int) -> tuple[Segment, tuple[int, ...]]:
    """The segment of a slice on an axis of length ``n`` (source 0)."""
    start, stop, step = index.indices(n)
    return (0, start, step, len(range(start, stop, step)))


def chunks_following_input(chunks: Sequence[int], start: int, step: int, count: int) -> tuple[int, ...]:
    """Output chunks of a strided selection: the elements taken from each input chunk stay together."""
    sizes = [n for _, _, n in _split_segment(chunks, start, step, count)]
    return tuple(sizes) or (0,)


def take_plan(chunks: Sequence[int], indices: np.ndarray, out_chunks: Sequence[int]) -> AxisPlan:
    """Plan an integer-array selection (non-negative ``indices``) along an axis, cut into ``out_chunks``.

    Each output chunk takes from every input chunk it needs one integer-array piece, and a permutation
    restores the requested order.
    """
    offs = np.asarray(offsets(chunks))
    plan = []
    start = 0
    for size in out_chunks:
        part = indices[start : start + size]
        start += size
        if size == 0:
            plan.append((((0, 0, np.zeros(0, dtype=np.int64)),), None))
            continue
        which = np.searchsorted(offs, part, side="right") - 1
        order = np.argsort(which, kind="stable")
        pieces = []
        for c in np.unique(which):
            sel = part[order][which[order] == c]
            pieces.append((0, int(c), (sel - offs[c]).astype(np.int64)))
        perm = None if np.all(order[:-1] < order[1:]) else np.argsort(order, kind="stable").astype(np.int64)
        plan.append((tuple(pieces), perm))
    return tuple(plan)


def identity_plan(chunks: Sequence[int]) -> AxisPlan:
    """Plan an axis that is passed through unchanged."""
    return tuple((((0, c, slice(0, n, 1)),), None) for c, n in enumerate(chunks))


def integer_plan(chunks: Sequence[int], i: int) -> AxisPlan:
    """Plan an axis indexed by one integer: a length-1 piece (the caller drops the axis afterwards)."""
    ((c, local, _),) = _split_segment(chunks, i, 1, 1)
    return ((((0, c, local),), None),)


EDGE_MAPS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "periodic": lambda p, n: p % n,
    "nearest": lambda p, n: np.clip(p, 0, n - 1),
    "reflect": lambda p, n: np.where(p < 0, -p, np.where(p >= n, 2 * (n - 1) - p, p)),
    "symmetric": lambda p, n: np.where(p < 0, -p - 1, np.where(p >= n, 2 * n - 1 - p, p)),
}


def _runs(indices: np.ndarray) -> list[Segment]:
    """Source-0 segments (runs of step +1 or -1, else single elements) selecting ``indices`` in order."""
    segments: list[Segment] = []
    i = 0
    while i < len(indices):
        step = int(indices[i + 1] - indices[i]) if i + 1 < len(indices) else 0
        j = i  # the run is indices[i..j]
        if step in (1, -1):
            while j + 1 < len(indices) and indices[j + 1] - indices[j] == step:
                j += 1
        segments.append((0, int(indices[i]), step if j > i else 1, j - i + 1))
        i = j + 1
    return segments


def axis_segments(lo: int, hi: int, n: int, boundary: str) -> list[Segment]:
    """Source-0 segments selecting positions ``lo..hi-1`` of an axis of length ``n`` in order, positions
    outside ``0..n-1`` mapped by ``boundary`` (left out for "none")."""
    inside = [(0, max(lo, 0), 1, min(hi, n) - max(lo, 0))] if min(hi, n) > max(lo, 0) else []
    if boundary == "none":
        return inside
    edge = EDGE_MAPS[boundary]
    return _runs(edge(np.arange(lo, min(hi, 0)), n)) + inside + _runs(edge(np.arange(max(lo, n), hi), n))


def source_pieces(wraps: Sequence[Sequence[bool]], sources: Sequence[Any],
                  source_boxes: Sequence[Any]) -> Iterator[list | None]:
    """Per source of a stencil group, the pieces of its blocks covering its box along each axis (its halo
    wrapping around the array's ends along the axes of ``wraps``; None where it is not read)."""
    for wrap, source, box in zip(wraps, sources, source_boxes):
        if box is None:
            yield None
            continue
        yield [
            segments_plan([source.chunks[d]], axis_segments(lo, hi, source.shape[d], "periodic" if wrap[d] else "none"),
                          (hi - lo,))[0][0]
            for d, (lo, hi) in enumerate(box)
        ]
