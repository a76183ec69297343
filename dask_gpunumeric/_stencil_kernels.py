"""What the tasks of a ``Stencil`` group do: source blocks extended by halos in, one kernel per sweep on a
shrinking region, the group's output blocks out.

A *plan* is a tokenizable tuple ``(ndim, shape, kernels, outputs, periodic, wraps)``:

* ``shape``: the shape of the group's fields (all of them have it) and of its output arrays;
* ``kernels``: per kernel, in order, ``(code, buffers, region)``. Buffers are numbered: the group's sources
  ``0..S-1``, then the kernels' outputs in order. ``buffers`` maps the kernel's local buffer slots to those
  numbers, ``region`` holds ``(lo, hi)`` per restricted axis of ``code`` (the ``SetItem`` box);
* ``code`` is what the generated kernel depends on (identical sweeps share it, and so one compiled kernel):
  ``(program, buffer_dtypes, loads, restricted, bases, out_dtypes)``, where ``program`` is a fused program
  (``_codegen``) whose ``("load", k, dtype)`` reads buffer slot ``loads[k][0]`` at the constant offset
  ``loads[k][1]`` from the element computed (``()`` for a 0-d array, read as a scalar), ``restricted``
  lists the axes where ``region`` applies, and ``bases[j]`` is ``(slot, offset)`` of what output ``j``
  keeps outside the region (None for a kernel without a region);
* ``outputs``: the buffers a task returns (its block of each);
* ``periodic``: per axis, whether fields are extended cyclically (a group reading its own fields with
  ``roll``); ``wraps``: per source and axis, whether its halo wraps around the array's ends.

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
thread computing ``ROWS`` consecutive rows of a column (1-d: ``ROWS`` elements a thread block apart),
reading each buffer at constant offsets from the element computed.
"""
from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import _blocks, _codegen, _plan
from ._backend import module, namespace

Box = tuple[tuple[int, int], ...]


def describe(plan: tuple) -> str:
    """Op words of a group, for key names and explain(): e.g. "add-multiply"."""
    words: list[str] = []
    for code, _, _ in plan[2]:
        for word in _codegen.describe(code[0]).split("-"):
            if word != "fused" and word not in words:
                words.append(word)
    return "-".join(words[:4]) or "copy"


def output_dtypes(plan: tuple) -> list[np.dtype]:
    """The dtype of each output of a group."""
    fields = [np.dtype(dt) for code, _, _ in plan[2] for dt in code[5]]  # buffers after the sources
    return [fields[b - len(plan[5])] for b in plan[3]]


def sweeps(plan: tuple) -> int:
    """Kernels one task of the group runs (one per sweep and region)."""
    return len(plan[2])


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
    for k, (code, _, _) in enumerate(plan[2]):
        for j in range(len(code[5])):
            owner[buffer] = (k, j)
            buffer += 1
    return owner


def boxes(plan: tuple, source_shapes: Sequence[tuple[int, ...]], target: Box) -> tuple[list[Box], list[Box | None]]:
    """The box each kernel computes and each source must cover (None: not read) to compute ``target``."""
    _, shape, kernels, outputs, periodic, wraps = plan
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
    kernel_boxes: list[Box] = [()] * len(kernels)
    for k in reversed(range(len(kernels))):
        (_, _, loads, restricted, bases, _), slots, region = kernels[k]
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
    unclipped = (ndim, shape, plan[2], plan[3], (True,) * ndim, tuple((True,) * ndim for _ in plan[5]))
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
    from ._overlap import axis_segments

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
    """Task function of a Stencil block: the group's output blocks (one, or a tuple of several).

    Computes each part ``(target, kernel_boxes, origins, layouts)`` (a box of the block, the box of each
    kernel, and the origin and layout of each source's extended block) into the output blocks ``into``
    (another task's outputs, written in place) or new ones. ``pieces`` are each part's sources' pieces."""
    xp = module(backend)
    extent = tuple(hi - lo for lo, hi in block)
    if into is None:
        outs = [xp.empty(extent, dtype=dt) for dt in output_dtypes(plan)]
    else:
        outs = list(into) if isinstance(into, tuple) else [into]
    n_sources = len(plan[5])
    for p, part in enumerate(parts):
        _run_part(plan, scalars, part, pieces[p * n_sources : (p + 1) * n_sources], block, outs, backend)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _run_part(plan: tuple, scalars: tuple, part: tuple, pieces: Sequence[Any], block: Box, outs: list,
              backend: str) -> None:
    target, kernel_boxes, origins, layouts = part
    kernels, outputs = plan[2], plan[3]
    xp = module(backend)
    origin = tuple(lo for lo, _ in block)
    buffers: dict[int, tuple[Any, tuple[int, ...]]] = {
        s: (_blocks.halo_block(pieces[s], layout), origins[s]) for s, layout in enumerate(layouts) if layout is not None
    }
    last_read = _last_reads(plan)
    output_of = {b: j for j, b in enumerate(outputs)}
    buffer = len(layouts)
    for k, ((code, slots, region), box) in enumerate(zip(kernels, kernel_boxes)):
        fields = range(buffer, buffer + len(code[5]))
        # a field that is an output computed just for the target goes straight into the output block
        dests = [(outs[output_of[f]], origin) if f in output_of and box == target
                 else (xp.empty(tuple(hi - lo for lo, hi in box), dtype=dt), tuple(lo for lo, _ in box))
                 for f, dt in zip(fields, code[5])]
        if not _empty(box):
            inputs = [buffers.get(b) for b in slots]
            edges = _edges(code, inputs, region, box, [_modes(plan, b) for b in slots])
            _run_kernel(code, inputs, edges, region, box, scalars[k], plan[1], backend, dests)
        for f, dest in zip(fields, dests):
            buffers[f] = dest
            if f in output_of and box != target and not _empty(target):
                _window((outs[output_of[f]], origin), target, ())[...] = _window(dest, target, ())
        buffer += len(code[5])
        for b in [b for b, last in last_read.items() if last == k]:
            buffers.pop(b, None)


def _last_reads(plan: tuple) -> dict[int, int]:
    """The last kernel reading each buffer."""
    last: dict[int, int] = {}
    for k, (_, slots, _) in enumerate(plan[2]):
        for b in slots:
            last[b] = k
    return last


WRAP = 1  # an edge mode: reads past a buffer's ends wrap around it (it holds a whole period of a cyclic axis)


def _modes(plan: tuple, buffer: int) -> tuple[int, ...]:
    """Per axis, what a read past the ends of a buffer means: WRAP along the axes it is read cyclically
    (a source's ``wraps``, a field's ``periodic``), else 0 (it is never read there)."""
    cyclic = plan[5][buffer] if buffer < len(plan[5]) else plan[4]
    return tuple(WRAP if c else 0 for c in cyclic)


def _edges(code: tuple, inputs: list, region: tuple, box: Box, modes: list[tuple[int, ...]]) -> tuple:
    """Per buffer slot and axis, the edge mode of a sweep's reads that leave the slot's buffer (0 where they
    stay inside it)."""
    _, _, loads, restricted, bases, _ = code
    value = _value_box(box, restricted, region)
    reads = [] if _empty(value) else [(slot, value, offset) for slot, offset in loads]
    reads += [(base[0], box, base[1]) for base in bases if base is not None]
    edges = [[0] * len(m) for m in modes]
    for slot, window, offset in reads:
        if offset and inputs[slot] is not None:
            array, origin = inputs[slot]
            for d, ((lo, hi), e, o) in enumerate(zip(window, offset, origin)):
                if lo + e < o or hi + e > o + array.shape[d]:
                    edges[slot][d] = modes[slot][d]
    return tuple(map(tuple, edges))


def _window(buffer: tuple[Any, tuple[int, ...]], box: Box, offset: Sequence[int], edges: Sequence[int] = ()) -> Any:
    """The part of a buffer (an array and the position of its first element) at ``box + offset``; along
    axes with an edge mode (``_edges``), positions past the buffer's ends taken by that mode."""
    array, origin = buffer
    offset = tuple(offset) or (0,) * len(origin)
    bounds = [(lo + e - o, hi + e - o) for (lo, hi), e, o in zip(box, offset, origin)]
    edges = tuple(edges) or (0,) * len(bounds)
    view = array[tuple(slice(None) if mode else slice(*b) for b, mode in zip(bounds, edges))]
    xp = namespace(array)
    for d, ((lo, hi), mode) in enumerate(zip(bounds, edges)):
        if mode == WRAP:
            view = xp.take(view, xp.asarray(np.arange(lo, hi) % array.shape[d]), axis=d)
    return view


def _run_kernel(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple,
                shape: tuple[int, ...], backend: str, dests: list) -> None:
    """One sweep over ``box``, written into ``dests`` (per output: an array and its origin)."""
    if backend == "cupy":
        _run_cuda(code, inputs, edges, region, box, scalars, dests)
    else:
        _run_interpreted(code, inputs, edges, region, box, scalars, shape, backend, dests)


def _run_interpreted(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple,
                     shape: tuple[int, ...], backend: str, dests: list) -> None:
    program, _, loads, restricted, bases, _ = code
    outs = [_window(dest, box, ()) for dest in dests]
    for out, base in zip(outs, bases):
        if base is not None:
            out[...] = _window(inputs[base[0]], box, base[1], edges[base[0]])
    value = _value_box(box, restricted, region)
    if _empty(value):
        return
    views = [_window(inputs[slot], value, offset, edges[slot]) for slot, offset in loads]
    inner = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(value, box))
    values = _codegen.run_numpy(program, scalars, tuple(lo for lo, _ in value), tuple(hi - lo for lo, hi in value),
                                shape, views, backend)
    for out, v in zip(outs, values):
        out[inner] = v


# --- CUDA ---------------------------------------------------------------------------------------------

# grid dimension of each axis (the last axis along x: neighbouring threads read neighbouring elements)
_GRID_AXES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}
_THREADS = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 4, 2)}
ROWS = 4  # positions each thread computes along axis ndim - 2 (1-d: along x); measured best of 1, 4, 8, 16 on an H200
_GRID_LIMITS = {"x": 2**20, "y": 65535, "z": 65535}
_HELPERS = r"""
#ifndef GNP_STENCIL_HELPERS
#define GNP_STENCIL_HELPERS
/* the move bringing buffer position c back into [0, n) when it is at most one period outside */
template <typename I> __device__ __forceinline__ I gnp_wrap(I c, I n) { return c < 0 ? n : (c >= n ? -n : (I)0); }
#endif  /* GNP_STENCIL_HELPERS */
"""


def kernel_source(code: tuple, index: str = "int", edges: tuple | None = None) -> tuple[str, str]:
    """CUDA C++ source and kernel name of one sweep's code: each thread computes the elements of the box at
    ``p = lo + i`` (grid-stride loops per axis, ``ROWS`` positions per thread along axis ``ndim - 2``; 1-d:
    along the only axis, a thread block apart), reading buffer ``s`` at ``(p - o_s + offset) . stride_s`` and
    writing output ``j`` at ``(p - oo_j) . ostride_j``; the last axis has stride 1 (a 0-d buffer: one
    element). ``index`` is the C type of positions and offsets: "int" where they fit, else "long long".
    ``edges`` (per buffer slot and axis, ``_edges``; None: none) are the reads past a buffer's ends: with
    WRAP the position is moved by the buffer's extent ``ext<s>_<d>`` (a select, no halo)."""
    from ._program_check import check_stencil_code
    from .random._philox import PHILOX_DEVICE_SOURCE

    check_stencil_code(code, index, edges)  # only our names and integers become source
    program, buffer_dtypes, loads, restricted, bases, out_dtypes = code
    ndim, _, instrs, outputs = program
    ctype, last = _codegen._ctype, ndim - 1
    single = {slot for slot, offset in loads if not offset}  # 0-d arrays
    if edges is None:
        edges = tuple(() if s in single else (0,) * ndim for s in range(len(buffer_dtypes)))
    params = [f"const {ctype(dt)}* __restrict__ b{s}" for s, dt in enumerate(buffer_dtypes)]
    params += [f"{ctype(dt)}* __restrict__ out{j}" for j, dt in enumerate(out_dtypes)]
    params += [f"const {ct} s{k}" for k, ct in sorted(_codegen._scalar_ctypes(instrs).items())]
    params += [f"const {ct} {_codegen._cast_name(j, ct)}" for j, ct in _codegen._scalar_casts(instrs)]
    params += [f"const {index} lo{d}" for d in range(ndim)] + [f"const {index} n{d}" for d in range(ndim)]
    places = [(f"o{s}", f"st{s}") for s in range(len(buffer_dtypes)) if s not in single]
    places += [(f"oo{j}", f"ost{j}") for j in range(len(out_dtypes))]
    for origin, stride in places:
        params += [f"const {index} {origin}_{d}" for d in range(ndim)] + [f"const {index} {stride}_{d}" for d in range(last)]
    for d in restricted:
        params += [f"const {index} rlo{d}", f"const {index} rhi{d}"]
    params += [f"const {index} ext{s}_{d}" for s, modes in enumerate(edges) for d, mode in enumerate(modes) if mode]

    def position(origin: str, stride: str) -> str:
        return " + ".join([f"(p{d} - {origin}_{d}) * {stride}_{d}" for d in range(last)] + [f"(p{last} - {origin}_{last})"])

    def at(slot: int, offset: Sequence[int]) -> str:
        terms = []
        for d, e in enumerate(offset):
            stride = f" * st{slot}_{d}" if d < last else ""
            if e:
                terms.append(f"({e}){stride}")
            if e and edges[slot][d] == WRAP:
                terms.append(f"gnp_wrap(p{d} - o{slot}_{d} + ({e}), ext{slot}_{d}){stride}")
        return f"b{slot}[{' + '.join([f'q{slot}', *terms])}]"

    body: list[str] = []
    indent = "    "
    unrolled = max(ndim - 2, 0)  # R positions per thread along this axis: rows (2-d, 3-d) or elements (1-d)
    for d, dim in enumerate(_GRID_AXES[ndim]):
        if d == unrolled:
            start = (f"(({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}) * {ROWS}" if ndim > 1
                     else f"({index})blockIdx.{dim} * blockDim.{dim} * {ROWS} + threadIdx.{dim}")
            step = f"({index})gridDim.{dim} * blockDim.{dim} * {ROWS}"
        else:
            start, step = f"({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}", f"({index})gridDim.{dim} * blockDim.{dim}"
        body.append(f"{indent}for ({index} i{d} = {start}; i{d} < n{d}; i{d} += {step}) {{")
        indent += "    "
        if d != unrolled:
            body.append(f"{indent}const {index} p{d} = lo{d} + i{d};")
    # the R positions of the thread: consecutive rows, whose vertical neighbours are loaded once for all of
    # them, or (1-d) a thread block's width apart, so that loads stay coalesced
    apart = "" if ndim > 1 else f" * ({index})blockDim.x"
    body += [f"{indent}#pragma unroll", f"{indent}for (int r = 0; r < {ROWS}; ++r) {{"]
    indent += "    "
    body += [f"{indent}const {index} j{unrolled} = i{unrolled} + r{apart};", f"{indent}if (j{unrolled} >= n{unrolled}) break;",
             f"{indent}const {index} p{unrolled} = lo{unrolled} + j{unrolled};"]
    for s in range(len(buffer_dtypes)):
        body.append(f"{indent}const {index} q{s} = {'0' if s in single else position(f'o{s}', f'st{s}')};")
    for j in range(len(out_dtypes)):
        body.append(f"{indent}const {index} w{j} = {position(f'oo{j}', f'ost{j}')};")
    value: list[str] = []
    for i, ins in enumerate(instrs):
        if ins[0] == "load":
            slot, offset = loads[ins[1]]
            value.append(f"const {ctype(ins[2])} v{i} = {at(slot, offset)};")
        else:
            value.append(_codegen._instr_code(i, ins, instrs, "flat", 1))
    value += [f"out{j}[w{j}] = ({ctype(dt)})v{out[1]};" for j, (out, dt) in enumerate(zip(outputs, out_dtypes))]
    if restricted:
        inside = " && ".join(f"p{d} >= rlo{d} && p{d} < rhi{d}" for d in restricted)
        body.append(f"{indent}if ({inside}) {{")
        body += [f"{indent}    {line}" for line in value]
        body.append(f"{indent}}} else {{")
        body += [f"{indent}    out{j}[w{j}] = {at(*base)};" for j, base in enumerate(bases)]
        body.append(f"{indent}}}")
    else:
        body += [f"{indent}{line}" for line in value]
    for d in reversed(range(ndim + 1)):
        body.append("    " * (d + 1) + "}")
    name = "gnp_stencil_" + hashlib.sha256(repr((code, index, edges)).encode()).hexdigest()[:16]
    threads = int(np.prod(_THREADS[ndim]))
    source = (
        PHILOX_DEVICE_SOURCE + _codegen._HELPERS + _HELPERS
        + f'\nextern "C" __global__ void __launch_bounds__({threads}) {name}(\n    ' + ",\n    ".join(params)
        + ")\n{\n" + "\n".join(body) + "\n}\n"
    )
    return source, name


def record_sources(plan: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write the kernels of a group there (both index types, without
    edges and with every edge a read may have), so that nvcc compiles them even on machines without a GPU."""
    from . import _cuda

    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    for code, slots, _ in plan[2]:
        for index in _INDEX_TYPES:
            for edges in (None, tuple(_modes(plan, b) for b in slots)):
                _cuda.record_source(kernel_source(code, index, edges)[0])


_INDEX_TYPES = {"int": np.int32, "long long": np.int64}


@functools.lru_cache(maxsize=256)
def _kernel(code: tuple, index: str, edges: tuple) -> Any:
    from . import _cuda

    source, name = kernel_source(code, index, edges)
    return _cuda.compile_module(source).get_function(name)


def _launch_shape(extent: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads) of a launch over a box of ``extent``: each thread computes ``ROWS`` positions along
    axis ``ndim - 2`` (1-d: the only axis)."""
    ndim = len(extent)
    threads = _THREADS[ndim]
    per_dim = dict(zip(_GRID_AXES[ndim], extent))
    unrolled = _GRID_AXES[ndim][max(ndim - 2, 0)]
    grid = tuple(
        max(1, min(-(-per_dim.get(dim, 1) // (t * (ROWS if dim == unrolled else 1))), _GRID_LIMITS[dim]))
        for dim, t in zip("xyz", threads)
    )
    return grid, threads  # type: ignore[return-value]


def _run_cuda(code: tuple, inputs: list, edges: tuple, region: tuple, box: Box, scalars: tuple, dests: list) -> None:
    import cupy

    program, buffer_dtypes, loads, _, _, _ = code
    instrs, ndim = program[2], len(box)
    single = {slot for slot, offset in loads if not offset}
    arrays, places = [], []
    for s, (buffer, dt) in enumerate(zip(inputs, buffer_dtypes)):
        if buffer is None:  # read only inside a region this box misses
            buffer = (cupy.empty((1,) * ndim, dtype=dt), (0,) * ndim)
        array, origin = buffer
        if s not in single and array.strides[-1] != array.itemsize:  # the kernels read rows with stride 1
            array = cupy.ascontiguousarray(array)
        arrays.append(array)
        if s not in single:
            places.append((array, origin))
    places += dests
    numbers = [*(v for iv in box for v in iv), *(v for iv in region for v in iv)]
    numbers += [v for array, origin in places for v in (*origin, array.size)]
    index = "int" if all(abs(v) < 2**31 - 1 for v in numbers) else "long long"
    to_index = _INDEX_TYPES[index]
    geometry = [to_index(v) for array, origin in places
                for v in (*origin, *(stride // array.itemsize for stride in array.strides[:-1]))]
    types = _codegen._scalar_ctypes(instrs)
    args = arrays + [out for out, _ in dests] + [_codegen._scalar_arg(scalars, k, types[k], instrs) for k in sorted(types)]
    args += [_codegen._cast_arg(scalars, instrs, j, ct) for j, ct in _codegen._scalar_casts(instrs)]
    args += [to_index(lo) for lo, _ in box] + [to_index(hi - lo) for lo, hi in box] + geometry
    args += [to_index(v) for bounds in region for v in bounds]
    args += [to_index(array.shape[d]) for array, modes in zip(arrays, edges) for d, mode in enumerate(modes) if mode]
    grid, threads = _launch_shape(tuple(hi - lo for lo, hi in box))
    _kernel(code, index, edges)(grid, threads, tuple(args))
