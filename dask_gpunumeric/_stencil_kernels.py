"""What one task of a ``Stencil`` group does: its source blocks extended by halos in, one kernel per sweep on
a shrinking region, the group's output blocks out.

A *plan* is a tokenizable tuple ``(ndim, shape, kernels, outputs, periodic, wraps)``:

* ``shape``: the shape of the group's fields (all of them have it) and of its output arrays;
* ``kernels``: per kernel, in order, ``(code, buffers, region)``. Buffers are numbered: the group's sources
  ``0..S-1``, then the kernels' outputs in order. ``buffers`` maps the kernel's local buffer slots to those
  numbers, ``region`` holds ``(lo, hi)`` per restricted axis of ``code`` (the ``SetItem`` box);
* ``code`` is what the generated kernel depends on (identical sweeps share it, and so one compiled kernel):
  ``(program, buffer_dtypes, loads, restricted, bases, out_dtypes)``, where ``program`` is a fused program
  (``_codegen``) whose ``("load", k, dtype)`` reads buffer slot ``loads[k][0]`` at the constant offset
  ``loads[k][1]`` from the element computed (``()`` for a 0-d array, read as a scalar), ``restricted`` lists the axes where ``region`` applies, and
  ``bases[j]`` is ``(slot, offset)`` of what output ``j`` keeps outside the region (None for a kernel
  without a region);
* ``outputs``: the buffers a task returns (trimmed to its block);
* ``periodic``: per axis, whether fields are extended cyclically (a group reading its own fields with
  ``roll``); ``wraps``: per source and axis, whether its halo wraps around the array's ends.

Coordinates are those of the fields (a source is read at ``position + offset`` in its own coordinates). A
buffer covers a box ``[lo, hi)`` per axis; along periodic axes boxes may leave ``[0, n)`` (positions are
meant modulo ``n``). ``boxes`` works back from a block to the box each kernel computes and each source must
cover: the last sweeps compute the block itself, earlier ones as much more as later ones read (the halo).

Kernels: on NumPy blocks a program is interpreted on windows of the buffers (``_codegen.run_numpy``); on CuPy
blocks it is one generated CUDA kernel per sweep, one thread per element with the last axis along
``threadIdx.x`` (coalesced), reading each buffer at constant offsets from the thread's element.
"""
from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import _blocks, _codegen, _plan
from ._backend import backend_of, module

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


def _within(box: Box, shape: Sequence[int], free: Sequence[bool]) -> Box:
    return tuple(iv if f else (max(iv[0], 0), min(iv[1], n)) for iv, n, f in zip(box, shape, free))


def _value_box(box: Box, restricted: Sequence[int], region: Sequence[tuple[int, int]]) -> Box:
    out = list(box)
    for axis, (lo, hi) in zip(restricted, region):
        out[axis] = (max(out[axis][0], lo), min(out[axis][1], hi))
    return tuple(out)


def _shifted(box: Box, offset: Sequence[int]) -> Box:
    return tuple((lo + e, hi + e) for (lo, hi), e in zip(box, offset))


def boxes(plan: tuple, source_shapes: Sequence[tuple[int, ...]], block: Box) -> tuple[list[Box], list[Box | None]]:
    """The box each kernel computes and each source must cover (None: not read) for one output block."""
    _, shape, kernels, outputs, periodic, wraps = plan
    n_sources = len(source_shapes)
    owner = {}
    buffer = n_sources
    for k, (code, _, _) in enumerate(kernels):
        for _ in code[5]:
            owner[buffer] = k
            buffer += 1
    kernel_need: list[Box | None] = [None] * len(kernels)
    source_need: list[Box | None] = [None] * n_sources

    def need(buffer: int, box: Box) -> None:
        if buffer < n_sources:
            box = _within(box, source_shapes[buffer], wraps[buffer])
            if not _empty(box):
                source_need[buffer] = _hull(source_need[buffer], box)
        elif not _empty(box):
            kernel_need[owner[buffer]] = _hull(kernel_need[owner[buffer]], box)

    for buffer in outputs:
        need(buffer, block)
    kernel_boxes: list[Box] = [()] * len(kernels)
    for k in reversed(range(len(kernels))):
        (_, _, loads, restricted, bases, _), slots, region = kernels[k]
        box = kernel_need[k]
        box = None if box is None else _within(box, shape, periodic)
        if box is None or _empty(box):
            kernel_boxes[k] = tuple((lo, lo) for lo, _ in block)
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


# --- one task -----------------------------------------------------------------------------------------


def run(plan: tuple, scalars: tuple, kernel_boxes: tuple[Box, ...], origins: tuple, block: Box, backend: str,
        layouts: tuple, *pieces: Sequence[Any]) -> Any:
    """Task function of a Stencil block: the group's output blocks (one, or a tuple of several)."""
    _, shape, kernels, outputs, _, _ = plan
    n_sources = len(layouts)
    buffers: dict[int, tuple[Any, tuple[int, ...]]] = {
        s: (_blocks.halo_block(pieces[s], layout), origins[s]) for s, layout in enumerate(layouts) if layout is not None
    }
    last_read = _last_reads(plan)
    buffer = n_sources
    for k, ((code, slots, region), box) in enumerate(zip(kernels, kernel_boxes)):
        inputs = [buffers.get(b) for b in slots]
        for out in _run_kernel(code, inputs, region, box, scalars[k], shape, backend):
            buffers[buffer] = (out, tuple(lo for lo, _ in box))
            buffer += 1
        for b in [b for b, last in last_read.items() if last == k and b not in outputs]:
            buffers.pop(b, None)
    results = [_trim(*buffers[b], block) for b in outputs]
    return results[0] if len(results) == 1 else tuple(results)


def _last_reads(plan: tuple) -> dict[int, int]:
    """The last kernel reading each buffer."""
    last: dict[int, int] = {}
    for k, (_, slots, _) in enumerate(plan[2]):
        for b in slots:
            last[b] = k
    return last


def _trim(array: Any, origin: tuple[int, ...], block: Box) -> Any:
    """The block's part of a buffer (a copy when it is only a part, so that the buffer can be freed)."""
    if _empty(block):  # an empty block: no kernel computed it
        return module(backend_of(array)).empty(tuple(hi - lo for lo, hi in block), dtype=array.dtype)
    index = tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(block, origin))
    if all(ix.stop - ix.start == n for ix, n in zip(index, array.shape)):
        return array
    return array[index].copy()


def _run_kernel(code: tuple, inputs: list, region: tuple, box: Box, scalars: tuple, shape: tuple[int, ...],
                backend: str) -> list[Any]:
    """One sweep over ``box``: its outputs, each an array of the box's shape."""
    out_dtypes = code[5]
    extent = tuple(hi - lo for lo, hi in box)
    if 0 in extent:
        xp = module(backend)
        return [xp.empty(extent, dtype=dt) for dt in out_dtypes]
    if backend == "cupy":
        return _run_cuda(code, inputs, region, box, scalars)
    return _run_interpreted(code, inputs, region, box, scalars, shape, backend)


def _window(buffer: tuple[Any, tuple[int, ...]], box: Box, offset: Sequence[int]) -> Any:
    array, origin = buffer
    return array[tuple(slice(lo + e - o, hi + e - o) for (lo, hi), e, o in zip(box, offset, origin))]


def _run_interpreted(code: tuple, inputs: list, region: tuple, box: Box, scalars: tuple, shape: tuple[int, ...],
                     backend: str) -> list[Any]:
    program, _, loads, restricted, bases, out_dtypes = code
    xp = module(backend)
    extent = tuple(hi - lo for lo, hi in box)
    outs = [xp.empty(extent, dtype=dt) for dt in out_dtypes]
    for out, base in zip(outs, bases):
        if base is not None:
            out[...] = _window(inputs[base[0]], box, base[1])
    value = _value_box(box, restricted, region)
    if _empty(value):
        return outs
    views = [_window(inputs[slot], value, offset) for slot, offset in loads]
    inner = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(value, box))
    values = _codegen.run_numpy(program, scalars, tuple(lo for lo, _ in value), tuple(hi - lo for lo, hi in value),
                                shape, views, backend)
    for out, v in zip(outs, values):
        out[inner] = v
    return outs


# --- CUDA ---------------------------------------------------------------------------------------------

# grid dimension of each axis (the last axis along x: neighbouring threads read neighbouring elements)
_GRID_AXES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}
_THREADS = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 4, 2)}
_GRID_LIMITS = {"x": 2**20, "y": 65535, "z": 65535}


def kernel_source(code: tuple) -> tuple[str, str]:
    """CUDA C++ source and kernel name of one sweep's code: each thread computes the elements of the box at
    ``lo + i`` (grid-stride loops per axis), reading buffer ``s`` at ``(p - o_s + offset) . stride_s``."""
    from .random._philox import PHILOX_DEVICE_SOURCE

    program, buffer_dtypes, loads, restricted, bases, out_dtypes = code
    ndim, _, instrs, outputs = program
    ctype = _codegen._ctype
    params = [f"const {ctype(dt)}* __restrict__ b{s}" for s, dt in enumerate(buffer_dtypes)]
    params += [f"{ctype(dt)}* __restrict__ out{j}" for j, dt in enumerate(out_dtypes)]
    params += [f"const {ct} s{k}" for k, ct in sorted(_codegen._scalar_ctypes(instrs).items())]
    params += [f"const long long lo{d}" for d in range(ndim)] + [f"const long long n{d}" for d in range(ndim)]
    for s in range(len(buffer_dtypes)):
        params += [f"const long long o{s}_{d}" for d in range(ndim)] + [f"const long long st{s}_{d}" for d in range(ndim)]
    for d in restricted:
        params += [f"const long long rlo{d}", f"const long long rhi{d}"]

    def at(slot: int, offset: Sequence[int]) -> str:
        shift = " + ".join(f"({e}LL) * st{slot}_{d}" for d, e in enumerate(offset) if e)
        return f"b{slot}[q{slot}{' + ' + shift if shift else ''}]"

    body: list[str] = []
    indent = "    "
    for d, dim in enumerate(_GRID_AXES[ndim]):
        body.append(f"{indent}for (long long i{d} = (long long)blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}; "
                    f"i{d} < n{d}; i{d} += (long long)gridDim.{dim} * blockDim.{dim}) {{")
        indent += "    "
        body.append(f"{indent}const long long p{d} = lo{d} + i{d};")
    flat = "i0"
    for d in range(1, ndim):
        flat = f"({flat}) * n{d} + i{d}"
    body.append(f"{indent}const long long t = {flat};")
    for s in range(len(buffer_dtypes)):
        terms = " + ".join(f"(p{d} - o{s}_{d}) * st{s}_{d}" for d in range(ndim))
        body.append(f"{indent}const long long q{s} = {terms};")
    value: list[str] = []
    for i, ins in enumerate(instrs):
        if ins[0] == "load":
            slot, offset = loads[ins[1]]
            value.append(f"const {ctype(ins[2])} v{i} = {at(slot, offset)};")
        else:
            value.append(_codegen._instr_code(i, ins, instrs, "flat", 1))
    value += [f"out{j}[t] = ({ctype(dt)})v{out[1]};" for j, (out, dt) in enumerate(zip(outputs, out_dtypes))]
    if restricted:
        inside = " && ".join(f"p{d} >= rlo{d} && p{d} < rhi{d}" for d in restricted)
        body.append(f"{indent}if ({inside}) {{")
        body += [f"{indent}    {line}" for line in value]
        body.append(f"{indent}}} else {{")
        body += [f"{indent}    out{j}[t] = {at(*base)};" for j, base in enumerate(bases)]
        body.append(f"{indent}}}")
    else:
        body += [f"{indent}{line}" for line in value]
    for d in reversed(range(ndim)):
        body.append("    " * (d + 1) + "}")
    name = "gnp_stencil_" + hashlib.sha256(repr(code).encode()).hexdigest()[:16]
    threads = int(np.prod(_THREADS[ndim]))
    source = (
        PHILOX_DEVICE_SOURCE + _codegen._HELPERS
        + f'\nextern "C" __global__ void __launch_bounds__({threads}) {name}(\n    ' + ",\n    ".join(params)
        + ")\n{\n" + "\n".join(body) + "\n}\n"
    )
    return source, name


def record_sources(plan: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write the kernels of a group there, so that nvcc compiles them
    even on machines without a GPU."""
    from . import _cuda

    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    for code, _, _ in plan[2]:
        _cuda.record_source(kernel_source(code)[0])


@functools.lru_cache(maxsize=256)
def _kernel(code: tuple) -> Any:
    from . import _cuda

    source, name = kernel_source(code)
    return _cuda.compile_module(source).get_function(name)


def _launch_shape(extent: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads) of a launch over a box of ``extent``."""
    threads = _THREADS[len(extent)]
    per_dim = dict(zip(_GRID_AXES[len(extent)], extent))
    grid = tuple(
        max(1, min(-(-per_dim.get(dim, 1) // t), _GRID_LIMITS[dim])) for dim, t in zip("xyz", threads)
    )
    return grid, threads  # type: ignore[return-value]


def _run_cuda(code: tuple, inputs: list, region: tuple, box: Box, scalars: tuple) -> list[Any]:
    import cupy

    program, buffer_dtypes, _, _, _, out_dtypes = code
    instrs = program[2]
    extent = tuple(hi - lo for lo, hi in box)
    outs = [cupy.empty(extent, dtype=dt) for dt in out_dtypes]
    arrays, geometry = [], []
    for buffer, dt in zip(inputs, buffer_dtypes):
        if buffer is None:  # read only inside a region this box misses
            buffer = (cupy.empty((0,) * len(box), dtype=dt), (0,) * len(box))
        array, origin = buffer
        arrays.append(array)
        pad = (0,) * (len(box) - array.ndim)  # a 0-d array: the same element everywhere
        geometry += [np.int64(o) for o in origin + pad] + [np.int64(s // array.itemsize) for s in array.strides + pad]
    types = _codegen._scalar_ctypes(instrs)
    args = arrays + outs + [_codegen._scalar_arg(scalars, k, types[k], instrs) for k in sorted(types)]
    args += [np.int64(lo) for lo, _ in box] + [np.int64(n) for n in extent] + geometry
    args += [np.int64(v) for bounds in region for v in bounds]
    grid, threads = _launch_shape(extent)
    _kernel(code)(grid, threads, tuple(args))
    return outs
