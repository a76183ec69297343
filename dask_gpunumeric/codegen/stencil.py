"""CUDA C++ of stencil sweeps (``types.StencilCode``): one kernel per sweep, the last axis along ``threadIdx.x``
(coalesced), each thread computing ``rows(code)`` consecutive rows of a column (1-d: elements a thread block
apart), reading each buffer at constant offsets from the element computed; and tile kernels of consecutive
2-d or 3-d sweeps (two: a pair kernel): per tile of the last's box, each sweep in turn on the tile and the halo the
later ones read, in shared memory, then the last from there (``tile_source``): the intermediate fields never
travel to memory and back.
"""
from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np

from . import program as _program
from .check import ProgramError, check_stencil_code, check_tiles
from .helpers import HELPERS
from .philox import PHILOX_DEVICE_SOURCE
from .types import (FILL, SM_BLOCK_SHARED_BYTES, SM_SHARED_BYTES, SM_THREADS, TILE_SHARED_BYTES, TILES, WRAP,
                    StencilCode, SweepConfig, TileConfig, ctype, typed_program)

# grid dimension of each axis (the last axis along x: neighbouring threads read neighbouring elements)
GRID_AXES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}


THREADS = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 4, 2)}


GRID_LIMITS = {"x": 2**20, "y": 65535, "z": 65535}


_HELPERS = r"""
#ifndef GNP_STENCIL_HELPERS
#define GNP_STENCIL_HELPERS
/* the move bringing buffer position c back into [0, n) when it is at most one period outside */
template <typename I> __device__ __forceinline__ I gnp_wrap(I c, I n) { return c < 0 ? n : (c >= n ? -n : (I)0); }
/* whether array position c is past the ends of [0, n) */
template <typename I> __device__ __forceinline__ bool gnp_outside(I c, I n) { return c < 0 || c >= n; }
#endif  /* GNP_STENCIL_HELPERS */
"""


def typed(code: tuple) -> StencilCode:
    """A sweep's code (checked) as ``StencilCode`` (with its program a ``Program``)."""
    return StencilCode(typed_program(code[0]), *code[1:])


def rows(code: tuple, config: SweepConfig = SweepConfig()) -> int:
    """Positions each thread computes along axis ndim - 2 (1-d: along x): ``config.rows`` where set, else 4, or
    2 where more than one buffer is read at shifted positions (each keeps rows + 2 rows of values live, and
    more rows then cost registers instead of saving reads: docs/benchmarks.md)."""
    if config.rows:
        return config.rows
    return 2 if shifted_buffers(code) > 1 else 4


def threads(ndim: int, config: SweepConfig = SweepConfig()) -> tuple[int, int, int]:
    """The thread block of a one-sweep kernel of ``ndim`` axes: ``THREADS``', or in 2-d ``config.columns`` threads
    along the last axis where set (as many in all)."""
    if ndim != 2 or not config.columns:
        return THREADS[ndim]
    total = int(np.prod(THREADS[2]))
    if config.columns % 32 or total % config.columns:
        raise ProgramError(f"sweep configuration {config!r}: columns a multiple of 32 dividing {total}")
    return config.columns, total // config.columns, 1


PACK = 4  # columns per thread of a packed 2-d sweep (``SweepConfig.packed``): one ``gnp_pack4`` per buffer row


def columns_per_thread(code: tuple, config: SweepConfig = SweepConfig()) -> int:
    """Consecutive positions each thread computes along the last axis: ``PACK`` where the configuration packs
    and the sweep is 2-d without random draws (whose streams are per position), else 1."""
    packs = config.packed and code.program.ndim == 2 and all(ins[0] != "random" for ins in code.program.instrs)
    return PACK if packs else 1


def shifted_buffers(code: tuple) -> int:
    """How many buffers a sweep reads at shifted positions."""
    return len({slot for slot, offset in code.loads if any(offset)})


def no_edges(code: tuple) -> tuple:
    """The edge modes of a sweep none of whose reads pass its buffers' ends (0-d slots: none)."""
    ndim, single = code.program.ndim, {slot for slot, offset in code.loads if not offset}
    return tuple(() if s in single else (0,) * ndim for s in range(len(code.buffers)))


def tile_halo(second: tuple, shared: tuple) -> tuple[int, ...]:
    """How far, per axis, a sweep of a tile kernel reads its predecessor's outputs (its ``shared`` slots)."""
    slots, halo = {slot for slot, _ in shared}, [0] * second.program.ndim
    for slot, offset in (*second.loads, *(b for b in second.bases if b is not None)):
        if slot in slots:
            halo = [max(h, abs(e)) for h, e in zip(halo, offset)]
    return tuple(halo)


def _sweep_params(code: tuple, index: str, edges: tuple, prefix: str = "", shared: Sequence[int] = (),
                  stored: bool = True) -> list[str]:
    """The kernel parameters of one sweep, named with ``prefix``: its buffers but the ``shared`` slots (read
    from shared memory), its outputs where ``stored`` (else they go to shared memory), scalars, box,
    geometry, region and edges (``kernel_source``)."""
    program, buffer_dtypes, loads, restricted, _, out_dtypes = code
    ndim, _, instrs, outputs = program
    last = ndim - 1
    single = {slot for slot, offset in loads if not offset}  # 0-d arrays
    reductions = list(range(len(out_dtypes), len(outputs)))
    params = [f"const {ctype(dt)}* __restrict__ {prefix}b{s}" for s, dt in enumerate(buffer_dtypes) if s not in shared]
    params += [f"{ctype(dt)}* __restrict__ {prefix}out{j}" for j, dt in enumerate(out_dtypes)] * stored
    params += [param for k in reductions for param in _program.final_params(program, k)] + _program.fold_params(program)
    params += [f"const {ct} {prefix}s{k}" for k, ct in sorted(_program.scalar_ctypes(instrs).items())]
    params += [f"const {ct} {prefix}{_program.cast_name(j, ct)}" for j, ct in _program.scalar_casts(instrs)]
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
    ndim, single = code.program.ndim, {slot for slot, offset in loads if not offset}
    lines = [f"const {index} q{s} = {'0' if s in single else _position(f'{prefix}o{s}', f'{prefix}st{s}', ndim)};"
             for s in range(len(buffer_dtypes)) if s not in shared]
    return lines + [f"const {index} w{j} = {_position(f'{prefix}oo{j}', f'{prefix}ost{j}', ndim)};"
                    for j in range(len(out_dtypes))] * stored


def _hoisted(code: tuple) -> tuple[set[int], list[int]]:
    """The operations of a sweep whose values come from its 0-d reads and scalars alone (``gpunumeric.stencil-
    quotients``: CG's alpha = rr / pAp), computed once per thread before its loops (``_prologue``; an IEEE
    division per element would not be hoisted out of the loops by the compiler), and every instruction they
    need, in order."""
    loads, instrs = code.loads, code.program.instrs
    invariant: set[int] = set()
    for i, ins in enumerate(instrs):
        if ins.tag in ("scalar", "full") or ins.tag == "load" and not loads[ins.input][1]:
            invariant.add(i)
        elif ins.tag == "op" and all(a in invariant for a in ins.args):
            invariant.add(i)
    ops = {i for i in invariant if instrs[i].tag == "op"}
    needed, stack = set(), list(ops)
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(instrs[i].args if instrs[i].tag == "op" else ())
    return ops, sorted(needed)


def _prologue(code: tuple, prefix: str = "") -> list[str]:
    """The values of ``_hoisted`` operations of a sweep, computed once per thread into ``<prefix>h<i>``."""
    ops, needed = _hoisted(code)
    if not ops:
        return []
    instrs = code.program.instrs
    lines = [f"    {ctype(instrs[i].dtype)} {prefix}h{i};" for i in sorted(ops)] + ["    {"]
    for i in needed:
        ins = instrs[i]
        if ins.tag == "load":
            lines.append(f"        const {ctype(ins.dtype)} v{i} = {prefix}b{code.loads[ins.input][0]}[0];")
        else:
            lines.append("        " + _program.instr_code(i, ins, instrs, "flat", 1, prefix=prefix))
    return lines + [f"        {prefix}h{i} = v{i};" for i in sorted(ops)] + ["    }"]


def _element(code: tuple, edges: tuple, checked: bool, prefix: str = "", shared: dict[int, str] | None = None,
             stores: Sequence[str] | None = None, held: Callable[[int, Sequence[int]], str] | None = None,
             counted: bool = False) -> list[str]:
    """The statements computing and storing one element of a sweep at position ``p`` (reads with their
    edges where ``checked``; parameters named with ``prefix``). ``shared``: the slots read from shared
    memory, each an expression of the read's offset per axis (``{0}``, ``{1}``: ``tile_source``);
    ``stores``: where each output goes (default: its buffer ``out<j>`` at ``w<j>``); ``held``: the value of a
    read of a buffer with positions (slot, offset) already loaded into registers (``_packed_rows``); ``counted``:
    the position known to be inside the target of the full reductions (no test)."""
    program, _, loads, restricted, bases, out_dtypes = code
    ndim, _, instrs, outputs = program
    last, shared = ndim - 1, shared or {}
    stores = stores or [f"{prefix}out{j}[w{j}]" for j in range(len(out_dtypes))]
    reductions = len(outputs) > len(out_dtypes)

    def at(slot: int, offset: Sequence[int]) -> str:
        """The read of buffer ``slot`` at ``offset`` from the element computed."""
        if slot in shared:
            return shared[slot].format(*offset)
        if held is not None and offset:
            return held(slot, offset)
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
    hoisted = _hoisted(code)[0]
    for i, ins in enumerate(instrs):
        if i in hoisted:
            value.append(f"const {ctype(ins.dtype)} v{i} = {prefix}h{i};")
        elif ins.tag == "load":
            slot, offset = loads[ins.input]
            value.append(f"const {ctype(ins.dtype)} v{i} = {at(slot, offset)};")
        else:
            value.append(_program.instr_code(i, ins, instrs, "flat", 1, prefix=prefix))
    value += [f"{store} = ({ctype(dt)})v{out.value};" for store, out, dt in zip(stores, outputs, out_dtypes)]
    if reductions and counted:
        value += _program.fold_statements(program)
    elif reductions:  # over the target only (the box may be larger: a halo for later sweeps)
        value.append(f"if ({' && '.join(f'p{d} >= tlo{d} && p{d} < thi{d}' for d in range(ndim))}) {{")
        value += ["    " + line for line in _program.fold_statements(program)] + ["}"]
    if not restricted:
        return value
    inside = " && ".join(f"p{d} >= {prefix}rlo{d} && p{d} < {prefix}rhi{d}" for d in restricted)
    return ([f"if ({inside}) {{"] + [f"    {line}" for line in value] + ["} else {"]
            + [f"    {store} = {at(*base)};" for store, base in zip(stores, bases)] + ["}"])


def _packable(code: StencilCode) -> list[str]:
    """The statement setting ``gnp_packs``: whether the rows of a 2-d sweep's buffers with positions and of its
    outputs start aligned to a ``gnp_pack4`` at the box's first column, every ``PACK`` columns on (their row
    strides multiples of ``PACK``)."""
    single = {slot for slot, offset in code.loads if not offset}
    places = [(f"b{s}", f"o{s}_1", f"st{s}_0") for s in range(len(code.buffers)) if s not in single]
    places += [(f"out{j}", f"oo{j}_1", f"ost{j}_0") for j in range(len(code.out_dtypes))]
    return [f"    const bool gnp_packs = {_pack_tests(places, 'lo1')};"]


def _pack_tests(places: Sequence[tuple[str, str, str]], first: str) -> str:
    """Whether arrays (name, origin along the last axis, row stride) hold a whole pack from column ``first`` on,
    every ``PACK`` columns, in each row."""
    return " && ".join(f"gnp_packable({array}) && ({first} - {origin}) % {PACK} == 0 && {stride} % {PACK} == 0"
                       for array, origin, stride in places) or "true"


def _tag(n: int) -> str:
    """A row or column offset in a register's name."""
    return f"m{-n}" if n < 0 else f"{n}"


def _held(slot: int, offset: Sequence[int], r: int, c: int) -> str:
    """The register holding the read of buffer ``slot`` at ``offset`` from row ``r``, column ``c`` of a thread's
    packs (``_pack_loads``)."""
    row, column = r + offset[0], c + offset[1]
    return f"gnp_l{slot}_{_tag(row)}.v[{column}]" if 0 <= column < PACK else f"gnp_e{slot}_{_tag(row)}_{_tag(column)}"


def _pack_loads(code: StencilCode, per_thread: int, prefix: str = "", shared: Sequence[int] = (),
                packed_shared: dict[int, str] | None = None) -> list[str]:
    """The loads of a 2-d sweep's buffers with positions (but the ``shared`` slots) for ``per_thread`` rows of
    ``PACK`` columns from ``p`` (at ``q<s>``), into the registers ``_held`` names: each buffer row its offsets
    reach as one pack, the columns they reach past the pack one by one. ``packed_shared``: shared slots loaded so
    too, each the expression of its read at an offset (``{0}``, ``{1}``: ``tile_source``; the pack's first
    column aligned to it in shared memory)."""
    packed_shared = packed_shared or {}
    reads: dict[int, set[tuple[int, int]]] = {}  # per buffer with positions, the (row, column) read from p's
    for slot, offset in (*code.loads, *(b for b in code.bases if b is not None and code.restricted)):
        if offset and (slot not in shared or slot in packed_shared):
            reads.setdefault(slot, set()).update((r + offset[0], c + offset[1]) for r in range(per_thread)
                                                 for c in range(PACK))
    lines = []
    for slot, cells in sorted(reads.items()):
        ct, b, st = ctype(code.buffers[slot]), f"{prefix}b{slot}", f"{prefix}st{slot}_0"

        def at(row: int, column: int | None) -> str:
            """The element ``row`` rows and ``column`` columns from p's (None: the address of the row's pack)."""
            if slot in packed_shared:
                read = packed_shared[slot].format(row, column or 0)
                return read if column is not None else f"&{read}"
            return f"{b}[q{slot} + ({row}) * {st} + ({column})]" if column is not None else f"({b} + q{slot} + ({row}) * {st})"

        for row in sorted({row for row, column in cells if 0 <= column < PACK}):
            lines.append(f"const gnp_pack4<{ct}> gnp_l{slot}_{_tag(row)} = *(const gnp_pack4<{ct}>*){at(row, None)};")
        lines += [f"const {ct} gnp_e{slot}_{_tag(row)}_{_tag(column)} = {at(row, column)};"
                  for row, column in sorted(cells) if not 0 <= column < PACK]
    return lines


def _packed_rows(code: StencilCode, index: str, edges: tuple, per_thread: int) -> list[str]:
    """A 2-d sweep's ``per_thread`` rows of ``PACK`` columns from ``p`` on, inside every buffer and packable: each
    buffer row read as packs (``_pack_loads``), each output row stored as one pack; the elements computed as one by
    one, in the same order."""
    out_dtypes = code.out_dtypes
    lines = [f"const {index} p0 = lo0 + i0;", *_places(code, index), *_pack_loads(code, per_thread)]
    for r in range(per_thread):
        row = [f"gnp_pack4<{ctype(dt)}> gnp_o{j};" for j, dt in enumerate(out_dtypes)]
        for c in range(PACK):
            element = _element(code, edges, False, stores=[f"gnp_o{j}.v[{c}]" for j in range(len(out_dtypes))],
                               held=functools.partial(_held, r=r, c=c))
            row += ["{", f"    const {index} p0 = lo0 + i0 + {r};", f"    const {index} p1 = lo1 + i1 + {c};",
                    *[f"    {line}" for line in element], "}"]
        row += [f"gnp_store_pack(out{j} + w{j} + ({r}) * ost{j}_0, gnp_o{j});" for j in range(len(out_dtypes))]
        lines += ["{", *[f"    {line}" for line in row], "}"]
    return lines


_PREFETCH = r"""
#ifndef GNP_PREFETCH_HELPERS
#define GNP_PREFETCH_HELPERS
/* sm_90: ask L2 for the 16-byte pieces holding bytes [at, at + n) of global memory, without waiting (bulk prefetch).
   The address comes from the kernel's parameter read by its PTX name (GNP_PARAM_ADDRESS), not from the pointer:
   a pointer handed to inline assembly escapes, and the compiler then no longer reads its buffer through the
   read-only path (LDG.E.CONSTANT becomes LDG.E). Elsewhere (the CPU emulator): nothing. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GNP_PARAM_ADDRESS(out, param) asm("ld.param.u64 %0, [" #param "];" : "=l"(out))
__device__ __forceinline__ void gnp_prefetch_l2(unsigned long long at, unsigned int n) {
    const unsigned long long first = at & ~15ull, end = (at + n + 15) & ~15ull;
    asm volatile("{\n\t.reg .u64 gnp_g;\n\tcvta.to.global.u64 gnp_g, %0;\n\tcp.async.bulk.prefetch.L2.global [gnp_g], %1;\n\t}"
                 :: "l"(first), "r"((unsigned int)(end - first)));
}
#else
#define GNP_PARAM_ADDRESS(out, param) ((out) = 0)
__device__ __forceinline__ void gnp_prefetch_l2(unsigned long long, unsigned int) {}
#endif
#endif  /* GNP_PREFETCH_HELPERS */
"""


def _kernel_text(name: str, threads: int, params: list[str], body: list[str], blocks: int = 0, helpers: str = "") -> str:
    """A generated kernel's whole source: the helpers (and ``helpers``), then the kernel (``blocks``: the thread
    blocks per multiprocessor its registers must allow, 0: no such bound)."""
    bounds = f"{threads}, {blocks}" if blocks else f"{threads}"
    return (PHILOX_DEVICE_SOURCE + HELPERS + _HELPERS + helpers
            + f'\nextern "C" __global__ void __launch_bounds__({bounds}) {name}(\n    ' + ",\n    ".join(params)
            + ")\n{\n" + "\n".join(body) + "\n}\n")


def kernel_source(code: tuple, index: str = "int", edges: tuple | None = None,
                  config: SweepConfig = SweepConfig()) -> tuple[str, str]:
    """CUDA C++ source and kernel name of one sweep's code: each thread computes the elements of the box at
    ``p = lo + i`` (grid-stride loops per axis, ``rows(code)`` positions per thread along axis ``ndim - 2``; 1-d:
    along the only axis, a thread block apart), reading buffer ``s`` at ``(p - o_s + offset) . stride_s`` and
    writing output ``j`` at ``(p - oo_j) . ostride_j``; the last axis has stride 1 (a 0-d buffer: one
    element). ``index`` is the C type of positions and offsets: "int" where they fit, else "long long".
    ``edges`` (per buffer slot and axis, ``_edges``; None: none) are the reads past a buffer's ends: with
    WRAP the position is moved by the buffer's extent ``ext<s>_<d>`` (a select, no halo); with FILL a read
    outside ``[0, ext<s>_<d>)`` (the array's extent) gives the slot's fill value ``f<s>`` and loads nothing.
    ``config``: positions per thread and launch bounds (kernels of another than the default have names of
    their own)."""
    check_stencil_code(code, index, edges)  # only our names and integers become source
    code = typed(code)
    program, buffer_dtypes, loads, restricted, bases, out_dtypes = code
    ndim, per_thread = program.ndim, rows(code, config)
    threads(ndim, config)  # (checked)
    if not 0 <= config.combine_ahead <= 64:
        raise ProgramError(f"sweep configuration {config!r}: combine_ahead from 0 to 64")
    edges = no_edges(code) if edges is None else edges
    reductions = len(program.outputs) > len(out_dtypes)
    params = _sweep_params(code, index, edges)
    body: list[str] = _program.accumulators(program) + _prologue(code)
    indent = "    "
    unrolled = max(ndim - 2, 0)  # R positions per thread along this axis: rows (2-d, 3-d) or elements (1-d)
    wide = columns_per_thread(code, config)
    if wide > 1:  # whether every buffer's and output's rows start aligned to a pack at the box's first column
        body += _packable(code)
    for d, dim in enumerate(GRID_AXES[ndim]):
        if d == unrolled:
            start = (f"(({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}) * {per_thread}" if ndim > 1
                     else f"({index})blockIdx.{dim} * blockDim.{dim} * {per_thread} + threadIdx.{dim}")
            step = f"({index})gridDim.{dim} * blockDim.{dim} * {per_thread}"
        else:
            start, step = f"({index})blockIdx.{dim} * blockDim.{dim} + threadIdx.{dim}", f"({index})gridDim.{dim} * blockDim.{dim}"
            if d == ndim - 1 and wide > 1:
                start, step = f"({start}) * {wide}", f"{step} * {wide}"
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

    if wide > 1:  # the thread's PACK columns: together where packable and inside, else one by one
        fast = ["gnp_packs", f"{last_row} < n{u}", f"i1 + {wide - 1} < n1",
                *_interior(loads, bases, edges, u, f"(lo{u} + i{u})", f"(lo{u} + {last_row})", across=wide - 1),
                *_in_region(restricted, u, f"(lo{u} + i{u})", f"(lo{u} + {last_row})", across=wide - 1)]
        slow = ["#pragma unroll 1", f"for (int c = 0; c < {wide}; ++c) {{", f"    if (i1 + c >= n1) break;",
                f"    const {index} p1 = lo1 + i1 + c;", *[f"    {line}" for line in row_loop(True)], "}"]
        fast_lines = _packed_rows(code, index, edges, per_thread)
    else:
        fast_lines, slow = row_loop(False), row_loop(True)
    body.append(f"{indent}if ({' && '.join(fast)}) {{")
    body += [f"{indent}    {line}" for line in fast_lines]
    body.append(f"{indent}}} else {{")
    body += [f"{indent}    {line}" for line in slow]
    body.append(f"{indent}}}")
    for d in reversed(range(ndim)):
        body.append("    " * (d + 1) + "}")
    if reductions:
        body += ["    const unsigned int gnp_thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);",
                 "    const unsigned int gnp_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);"]
        body += _program.finish(program, ("gnp_thread", "(blockDim.x * blockDim.y * blockDim.z)",
                                          "gnp_block", "(gridDim.x * gridDim.y * gridDim.z)"),
                                ahead=config.combine_ahead)
    variant = (code, index, edges) + ((config,) if config != SweepConfig() else ())
    name = "gnp_stencil_" + hashlib.sha256(repr(variant).encode()).hexdigest()[:16]
    return _kernel_text(name, int(np.prod(THREADS[ndim])), params, body, config.min_blocks), name


def _interior(loads: tuple, bases: tuple, edges: tuple, unrolled: int, first: str, last: str,
              prefix: str = "", across: int = 0) -> list[str]:
    """Conditions under which every read of a thread's positions (``first`` to ``last`` along axis
    ``unrolled``, ``p<d>`` along the others, to ``p<d> + across`` along the last) lies inside its buffer,
    needing none of its edges: per slot and axis with an edge mode, the smallest and largest offset read stay
    within ``[0, ext)`` (FILL: of the array, WRAP: of the buffer, from its origin ``o``)."""
    reach: dict[tuple[int, int], list[int]] = {}
    for slot, offset in (*loads, *(b for b in bases if b is not None)):
        for d, e in enumerate(offset):
            if edges[slot] and edges[slot][d]:
                lo_hi = reach.setdefault((slot, d), [e, e])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], e), max(lo_hi[1], e)
    conditions = []
    for (slot, d), (lo, hi) in sorted(reach.items()):
        wider = across and d == len(edges[slot]) - 1
        low, high = (first, last) if d == unrolled else (f"p{d}", f"(p{d} + {across})" if wider else f"p{d}")
        origin = f" - {prefix}o{slot}_{d}" if edges[slot][d] == WRAP else ""
        conditions += [f"{low}{origin} + ({lo}) >= 0", f"{high}{origin} + ({hi}) < {prefix}ext{slot}_{d}"]
    return conditions


def _in_region(restricted: tuple[int, ...], unrolled: int, first: str, last: str, across: int) -> list[str]:
    """Conditions under which a thread's positions (``first`` to ``last`` along axis ``unrolled``, ``p<d>`` along the
    others, to ``p<d> + across`` along the last) all lie in the region of a sweep restricted to one (a setitem's): the
    packed path loads its neighbours before testing each position, and outside the region they may lie outside the
    buffer (the rows above and below a block's first and last)."""
    conditions = []
    for d in restricted:
        low, high = (first, last) if d == unrolled else (f"p{d}", f"(p{d} + {across})" if across else f"p{d}")
        conditions += [f"{low} >= rlo{d}", f"{high} < rhi{d}"]
    return conditions


def tile_halos(codes: Sequence[tuple], links: Sequence[tuple]) -> list[tuple[int, ...]]:
    """Per sweep of a tile kernel, how far past the tile it is computed along each axis: the sum of how far
    the later sweeps read their predecessors' outputs (``tile_halo``); 0 for the last."""
    halos = [(0,) * codes[-1].program.ndim]
    for code, shared in zip(reversed(codes[1:]), reversed(links)):
        halos.insert(0, tuple(a + b for a, b in zip(halos[0], tile_halo(code, shared))))
    return halos


def _tile_row(extent: int, halo: int, packed: bool) -> tuple[int, int]:
    """A row of a tile kernel's shared buffer of a sweep computed on ``extent`` columns, ``halo`` of them on each
    side of the tile's: (elements before its first column, elements after that); packed, the tile's first column
    is aligned to a pack and the row a whole number of packs (its columns stored as packs, not four apart: those
    would conflict in shared memory's banks)."""
    if not packed:
        return 0, extent
    pad = -halo % PACK
    return pad, -(-(extent + pad) // PACK) * PACK - pad


def tile_shared_bytes(codes: Sequence[tuple], links: Sequence[tuple], config: TileConfig = TileConfig()) -> int:
    """Shared memory of a tile kernel of shape ``config``: the outputs of each sweep but the last on its
    extended tile, in two alternating sets of buffers (sweep ``j`` writes set ``j % 2`` while it reads the
    other), and the thread block's partials of the last sweep's full reductions."""
    halos = tile_halos(codes, links)
    sizes: dict[tuple[int, int], int] = {}
    for j, code in enumerate(codes[:-1]):
        extent = [t + 2 * h for t, h in zip(config.tile(code.program.ndim), halos[j])]
        area = int(np.prod(extent[:-1])) * sum(_tile_row(extent[-1], halos[j][-1], config.packed and len(extent) == 2))
        for i, dt in enumerate(code.out_dtypes):
            sizes[j % 2, i] = max(sizes.get((j % 2, i), 0), area * np.dtype(dt).itemsize)
    folds = _program.program_folds(typed_program(codes[-1].program))
    return sum(sizes.values()) + sum(config.threads * np.dtype(fold.acc).itemsize for fold in folds)


def tile_blocks(shared_bytes: int, threads: int) -> int:
    """How many thread blocks of ``threads`` of a tile kernel declaring ``shared_bytes`` of shared memory an sm_90
    multiprocessor holds (at most its threads' worth): the compiler keeps the kernel's registers within what
    lets them all stay resident, so that registers never cut its occupancy below what shared memory does."""
    return max(1, min(SM_THREADS // threads, SM_SHARED_BYTES // (shared_bytes + SM_BLOCK_SHARED_BYTES)))


def _flat(extent: Sequence[int], start: Sequence[int], index: str, threads: int) -> tuple[list[str], tuple[bool, ...]]:
    """The head of a tile kernel's loop over a stage's elements in flat order (``e``, the last axis fastest),
    placing element ``e`` at ``p`` (the stage starts at ``g + start``); no axis known to lie in the tile."""
    ndim = len(extent)
    lines = [f"for (int e = threadIdx.x; e < {int(np.prod(extent))}; e += {threads}) {{"]
    for d in range(ndim):
        inner = int(np.prod(extent[d + 1 :]))
        at = f"e % {extent[d]}" if d == ndim - 1 else f"e / {inner}" if d == 0 else f"e / {inner} % {extent[d]}"
        lines.append(f"    const {index} p{d} = g{d} + {start[d]} + {at};")
    return lines, (False,) * ndim


def _walks(extent: Sequence[int], start: Sequence[int], tile: Sequence[int], index: str,
           threads: int) -> list[tuple[list[str], tuple[bool, ...]] | tuple[list[str], None]]:
    """The heads of a 2-d tile kernel's loops over a stage, each with the axes along which its positions lie
    in the tile's span (None: never in the tile): the columns over the tile's (the body) walked by threads
    that each keep one column, ``threads // tile[1]`` rows a pass (no division per element, addresses
    stepping by a constant, each warp's row an aligned span of the tile's), then the halo's columns on both
    sides of the body in flat order, so that no thread idles for want of a whole row."""
    rows, width, side = threads // tile[1], tile[1], (extent[1] - tile[1]) // 2
    heads: list = [([f"for (int r = (int)threadIdx.x / {width}; r < {extent[0]}; r += {rows}) {{",
                     f"    const {index} p0 = g0 + {start[0]} + r;",
                     f"    const {index} p1 = g1 + {start[1] + side} + (int)threadIdx.x % {width};"], (False, True))]
    if side:
        heads.append(([f"for (int e = threadIdx.x; e < {extent[0] * 2 * side}; e += {threads}) {{",
                       f"    const int c = e % {2 * side};",
                       f"    const {index} p0 = g0 + {start[0]} + e / {2 * side};",
                       f"    const {index} p1 = g1 + {start[1]} + c + (c < {side} ? 0 : {width});"], None))
    return heads


def tile_source(codes: tuple, links: tuple, index: str, edges: tuple, stored: tuple = (),
                config: TileConfig = TileConfig(), bounded: bool = True) -> tuple[str, str]:
    """CUDA C++ source and kernel name of consecutive 2-d or 3-d sweeps in one launch (a *tile kernel*; two
    sweeps: a pair kernel): a thread block per tile (``config``'s) of the last sweep's box (``<last>lo``,
    ``<last>n``) computes each sweep in turn into shared memory, on the tile extended by how far the later sweeps read
    (``tile_halos``), then the last sweep on the tile, each reading its predecessor's outputs (its ``links``
    slots: ``(slot, output of the previous sweep)``) from shared memory and its other slots from global
    memory. Parameters are ``kernel_source``'s of each sweep, prefixed ``a_``, ``b_``, ... (without the
    outputs of all but the last, and without the linked slots). ``edges`` per sweep: its edges over what it
    computes, on its linked slots those of its reads of the previous sweep's outputs: along an axis where
    they WRAP, every sweep but the last is computed past its box (at unwrapped positions: the first's reads
    wrap, so the values are those a period away), along the others only inside it; where they FILL, the
    positions of the extended tile outside the box hold the reading slot's fill (parameter ``f<slot>`` of the
    reader). The sweeps in ``stored`` also store their outputs (``out<j>``) on the tile itself (inside the
    last sweep's box). Where the last sweep has full reductions, the launch's thread blocks (a grid along x)
    walk the tiles, and the reductions end as ``kernel_source``'s: a partial per thread block, combined by
    the last. ``bounded``: the launch bounds ask for registers that let as many thread blocks stay resident as
    the kernel's shared memory does (``tile_blocks``), or ``config.min_blocks``; False: the compiler's own choice.
    Kernels of another ``config`` than the default have names of their own."""
    check_tiles(codes, links, index, edges, stored, config)  # only our names and integers become source
    codes = tuple(typed(code) for code in codes)
    shared_bytes = tile_shared_bytes(codes, links, config)
    if shared_bytes > TILE_SHARED_BYTES:
        raise ProgramError(f"tiles of {len(codes)} sweeps need more than {TILE_SHARED_BYTES} B of shared memory")
    last, prefixes = len(codes) - 1, [f"{chr(ord('a') + j)}_" for j in range(len(codes))]
    slots = [{}] + [dict(shared) for shared in links]
    halos = tile_halos(codes, links)
    halo = halos[0]
    wraps = [any(modes[slot][d] == WRAP for shared, modes in zip(slots[1:], edges[1:]) for slot in shared)
             for d in range(codes[0].program.ndim)]
    # the linked slots' reads need no edges in the kernel (their edges are in what the previous sweep computes)
    local = [tuple(no_edges(code)[s] if s in shared else m for s, m in enumerate(modes))
             for code, shared, modes in zip(codes, slots, edges)]
    # per sweep but the last, its outputs read with FILL by the next: the fill parameter of the reading slot
    fills = [{j: f"{prefixes[k + 1]}f{slot}" for slot, j in slots[k + 1].items() if FILL in edges[k + 1][slot]}
             for k in range(last)]
    ndim = codes[0].program.ndim
    tile, threads = config.tile(ndim), config.threads
    extents = [tuple(t + 2 * e for t, e in zip(tile, h)) for h in halos]  # the extended tiles
    reduced = len(codes[last].program.outputs) > len(codes[last].out_dtypes)
    head = _program.accumulators(codes[last].program) + [line for k, code in enumerate(codes)
                                                         for line in _prologue(code, prefixes[k])]
    packs = config.packed and ndim == 2
    rows = [_tile_row(extent[-1], h[-1], packs) for extent, h in zip(extents, halos)]  # (pad, rest) per sweep
    for parity in range(min(2, last)):
        for j, dt in enumerate(codes[parity].out_dtypes):
            size = max(int(np.prod(extents[k][:-1])) * sum(rows[k]) for k in range(parity, last, 2))
            head.append(f"    {'alignas(16) ' * packs}__shared__ {ctype(dt)} {prefixes[parity]}t{j}[{size}];")
    # the tile's number along each axis: its thread block's, or (full reductions) of the tiles it walks
    counts = [f"gnp_n{d}" for d in range(ndim)]
    number = [f"({index})blockIdx.{dim}" if not reduced else "gnp_tile" + (f" / ({' * '.join(counts[d + 1:])})" if d < ndim - 1 else "")
              + (f" % gnp_n{d}" if d else "") for d, dim in enumerate(GRID_AXES[ndim])]
    origins = [f"{prefixes[last]}lo{d} + {number[d]} * {tile[d]} - {halo[d]}" for d in range(ndim)]
    body = [f"    const {index} g{d} = {origin};" for d, origin in enumerate(origins)]  # where the extended tile starts

    def place(k: int) -> str:
        """Sweep ``k``'s element at ``p`` + the read's offset (``{0}``, ``{1}``, ...) in its shared buffers."""
        shift = [f" - {a - b}" if a - b else "" for a, b in zip(halo, halos[k])]
        flat = f"(p0 - g0{shift[0]} + ({{0}}))"
        for d in range(1, ndim):
            width = sum(rows[k]) if d == ndim - 1 else extents[k][d]
            flat = f"{'(' * (d > 1)}{flat}{')' * (d > 1)} * {width} + (p{d} - g{d}{shift[d]} + ({{{d}}}))"
        return flat + (f" + {rows[k][0]}" if rows[k][0] else "")

    def starts(k: int) -> list[int]:
        return [a - b for a, b in zip(halo, halos[k])]

    def loop(k: int, skip: list[str], reads: dict[int, str], stores: list[str] | None, whole: bool,
             packed: bool = False) -> list[str]:
        """The threads' loop over sweep ``k``'s extended tile but where ``skip`` holds (there the fills its
        reader reads, if any), computing the sweep's element at each (without edges where all its reads are
        inside) and, for a sweep in ``stored``, storing it on the tile itself; ``whole``: in a thread block
        whose extended tiles lie inside every box and region (no position skipped, none kept); ``packed``: in
        one whose arrays are packable too (the tile's columns ``PACK`` per thread: ``packed_loop``)."""
        code, prefix, extent, start = codes[k], prefixes[k], extents[k], starts(k)
        heads = _walks(extent, start, tile, index, threads) if ndim == 2 else [_flat(extent, start, index, threads)]
        filled = [f"{stores[j]} = {name};" for j, name in fills[k].items()] if k < last else []
        lines = [] if whole else [f"    if ({' || '.join(skip)}) {{ {' '.join([*filled, 'continue;'])} }}"]
        lines += [f"    {line}" for line in _places(code, index, prefix, tuple(reads), stores is None)]
        element = functools.partial(_element, code._replace(restricted=()) if whole else code, local[k],
                                    prefix=prefix, shared=reads, stores=stores)
        fast = _interior(code.loads, code.bases, local[k], 0, "p0", "p0", prefix)
        if not fast:
            lines += [f"    {line}" for line in element(False)]
        else:
            lines += [f"    if ({' && '.join(fast)}) {{", *[f"        {line}" for line in element(False)],
                      "    } else {", *[f"        {line}" for line in element(True)], "    }"]
        # not unrolled: the halo's columns (a pass or two) and the thread blocks at the box's ends (few), whose
        # unrolled loops' registers would set the kernel's, and so its occupancy
        loops = [["#pragma unroll 1"] * (inside is None or not whole) + [*head, *lines, *own(k, stores, inside, whole), "}"]
                 for head, inside in heads]
        if packed:
            loops[0] = packed_loop(k, reads, stores)
        return [line for lines in loops for line in lines]

    def packed_loop(k: int, reads: dict[int, str], stores: list[str] | None) -> list[str]:
        """Sweep ``k``'s loop over the tile's columns of its extended tile in a whole thread block whose arrays are
        packable: ``PACK`` consecutive columns per thread, its buffers' rows read as packs (``_pack_loads``), the
        last sweep's outputs and a stored sweep's stored as packs; the elements computed as one by one, in the
        same order (one by one where a read may pass a buffer's ends)."""
        code, prefix, extent, start = codes[k]._replace(restricted=()), prefixes[k], extents[k], starts(k)
        per_row, below = tile[1] // PACK, halos[k][0]
        element = functools.partial(_element, code, local[k], prefix=prefix, shared=reads)
        # the last sweep's shared reads as packs too (``TileConfig.packed_last``): its columns start at the tile's,
        # aligned to a pack in its predecessor's shared rows (``_tile_row``)
        packed_shared = reads if k == last and config.packed_last else {}

        def rows(head: list[str], own_stores: bool) -> list[str]:
            """The loop of ``head`` (naming the row ``r``), with the sweep's own stores or without."""
            packs = [*_places(code, index, prefix, tuple(reads), stores is None),
                     *_pack_loads(code, 1, prefix, tuple(reads), packed_shared)]
            packs += [f"gnp_pack4<{ctype(dt)}> gnp_s{j};" for j, dt in enumerate(code.out_dtypes)]

            def computed(counted: bool) -> list[str]:
                lines = []
                for c in range(PACK):
                    into = [f"gnp_s{j}.v[{c}]" for j in range(len(code.out_dtypes))]
                    held = functools.partial(_held, r=0, c=c)
                    unpacked = {s: e for s, e in reads.items() if s not in packed_shared}
                    lines += ["{", f"    const {index} p1 = gnp_p1 + {c};",
                              *[f"    {line}" for line in element(False, stores=into, held=held, shared=unpacked,
                                                                  counted=counted)], "}"]
                return lines

            if packed_shared and reduced:  # tiles inside the reductions' target (``gnp_counted``) test no position
                packs += ["if (gnp_counted) {", *[f"    {line}" for line in computed(True)], "} else {",
                          *[f"    {line}" for line in computed(False)], "}"]
            else:
                packs += computed(False)
            if stores is None:
                packs += [f"gnp_store_pack({prefix}out{j} + w{j}, gnp_s{j});" for j in range(len(code.out_dtypes))]
            else:  # (the pack's place in shared memory is aligned to it: ``_tile_row``)
                packs += [f"*(gnp_pack4<{ctype(dt)}>*)&{store} = gnp_s{j};"
                          for j, (dt, store) in enumerate(zip(code.out_dtypes, stores))]
            packs += [f"gnp_store_pack({prefix}out{j} + {_position(f'{prefix}oo{j}', f'{prefix}ost{j}', ndim)}, gnp_s{j});"
                      for j in range(len(code.out_dtypes))] * own_stores
            lines = [*head, f"    const {index} p0 = g0 + {start[0]} + r;",
                     f"    const {index} gnp_p1 = g1 + {start[1] + halos[k][1]} + (int)threadIdx.x % {per_row} * {PACK};",
                     f"    const {index} p1 = gnp_p1;"]
            fast = _interior(code.loads, code.bases, local[k], 0, "p0", "p0", prefix, across=PACK - 1)
            if not fast:
                return [*lines, *[f"    {line}" for line in packs], "}"]
            single = []  # past a buffer's ends: the columns one by one
            for c in range(PACK):
                single += ["{", f"    const {index} p1 = gnp_p1 + {c};",
                           *[f"    {line}" for line in _places(code, index, prefix, tuple(reads), stores is None)],
                           *[f"    {line}" for line in element(True, stores=stores)],
                           *[f"    {line}" for line in own(k, stores, (True, True), True)] * own_stores, "}"]
            return [*lines, f"    if ({' && '.join(fast)}) {{", *[f"        {line}" for line in packs], "    } else {",
                    *[f"        {line}" for line in single], "    }", "}"]

        first, step = f"(int)threadIdx.x / {per_row}", threads // per_row
        if k not in stored:  # (the last sweep's shared packs not unrolled: CG's pair kernel would spill at its bounds)
            return rows([*["#pragma unroll 1"] * bool(packed_shared), f"for (int r = {first}; r < {extent[0]}; r += {step}) {{"],
                        False)
        # a stored sweep: the tile's rows, stored without a test, then the halo's rows (a test would keep the
        # compiler from storing the packs as one vector access each)
        return [*rows([f"for (int r = {below} + {first}; r < {below + tile[0]}; r += {step}) {{"], True),
                *rows([f"for (int e = {first}; e < {2 * below}; e += {step}) {{",
                       f"    const int r = e < {below} ? e : e + {tile[0]};"], False) * bool(below)]

    def own(k: int, stores: list[str] | None, inside: tuple[bool, ...] | None, whole: bool) -> list[str]:
        """For a sweep in ``stored``, its values stored on the tile itself (inside the last box) from shared
        memory, by a loop whose positions lie in the tile's span along the ``inside`` axes (None: never)."""
        if k not in stored or inside is None:
            return []
        span = [[] if inside[d] else [f"p{d} >= g{d} + {halo[d]}", f"p{d} < g{d} + {halo[d] + tile[d]}"]
                for d in range(ndim)]
        # a whole thread block's tile lies inside the last box: its ends need no check
        test = " && ".join(c for d in range(ndim) for c in (*span[d], *[f"p{d} < {end[d]}"] * (not whole)))
        put = [f"{prefixes[k]}out{j}[{_position(f'{prefixes[k]}oo{j}', f'{prefixes[k]}ost{j}', ndim)}] = {store};"
               for j, store in enumerate(stores)]
        return [f"    if ({test}) {{", *[f"        {line}" for line in put], "    }"] if test else [f"    {line}" for line in put]

    def phase(k: int, skip: list[str], reads: dict[int, str], stores: list[str] | None) -> list[str]:
        """Sweep ``k``'s loop: without checks in thread blocks inside everything (``gnp_whole``), packed where
        configured and the arrays allow (``gnp_packs``)."""
        # packed: the sweeps reading buffers with positions from global memory (those reading only shared memory
        # keep a column per thread: four apart, their shared accesses would conflict in its banks), and with
        # ``packed_last`` the last sweep (its shared rows read as packs)
        packed = packs and (any(o and s not in reads for s, o in codes[k].loads) or k == last and config.packed_last)
        lines = ["    if (gnp_whole && gnp_packs) {", *[f"        {line}" for line in loop(k, skip, reads, stores, True, True)],
                 "    } else if (gnp_whole) {"] if packed else ["    if (gnp_whole) {"]
        return (lines + [f"        {line}" for line in loop(k, skip, reads, stores, True)]
                + ["    } else {"] + [f"        {line}" for line in loop(k, skip, reads, stores, False)] + ["    }"])

    if packs:  # whether every sweep's buffers with positions and stored outputs hold whole packs in the tile's columns
        places = [(f"{prefixes[k]}b{s}", f"{prefixes[k]}o{s}_1", f"{prefixes[k]}st{s}_0") for k, code in enumerate(codes)
                  for s in range(len(code.buffers)) if s not in slots[k] and any(o for t, o in code.loads if t == s)]
        places += [(f"{prefixes[k]}out{j}", f"{prefixes[k]}oo{j}_1", f"{prefixes[k]}ost{j}_0")
                   for k, code in enumerate(codes) if k == last or k in stored for j in range(len(code.out_dtypes))]
        head.append(f"    const bool gnp_packs = {_pack_tests(places, f'{prefixes[last]}lo1')};")
    end = [f"{prefixes[last]}lo{d} + {prefixes[last]}n{d}" for d in range(ndim)]
    whole = []  # the conditions under which no sweep skips a position of its extended tile, nor keeps one
    for k in range(last + 1):
        prefix, first = prefixes[k], [f"g{d} + {starts(k)[d]}" for d in range(ndim)]
        after = [f"g{d} + {starts(k)[d] + extents[k][d]}" for d in range(ndim)]
        whole += [f"{after[d]} <= {end[d]} + {halos[k][d]}" for d in range(ndim)]
        whole += [f"{first[d]} >= {prefix}lo{d} && {after[d]} <= {prefix}lo{d} + {prefix}n{d}"
                  for d in range(ndim) if not wraps[d] and k < last]
        whole += [f"{first[d]} >= {prefix}rlo{d} && {after[d]} <= {prefix}rhi{d}" for d in codes[k].restricted]
    body.append(f"    const bool gnp_whole = {' && '.join(whole)};")
    if packs and reduced and config.packed_last:  # whether the tile lies inside the full reductions' target
        body.append("    const bool gnp_counted = " + " && ".join(
            f"g{d} + {halo[d]} >= tlo{d} && g{d} + {halo[d] + tile[d]} <= thi{d}" for d in range(ndim)) + ";")
    for k in range(last + 1):
        reads = {slot: f"{prefixes[(k - 1) % 2]}t{j}[{place(k - 1)}]" for slot, j in slots[k].items()}
        if k == last:  # the last sweep on the tile, inside its box
            body += phase(k, [f"p{d} >= {end[d]}" for d in range(ndim)], reads, None)
            break
        # sweep k on its extended tile, as far as the later sweeps read it, into shared memory
        skip = [f"p{d} >= {end[d]} + {halos[k][d]}" for d in range(ndim)]
        skip += [f"p{d} < {prefixes[k]}lo{d} || p{d} >= {prefixes[k]}lo{d} + {prefixes[k]}n{d}"
                 for d in range(ndim) if not wraps[d]]
        stores = [f"{prefixes[k % 2]}t{j}[{place(k).format(*[0] * ndim).replace(' + (0)', '')}]"
                  for j in range(len(codes[k].out_dtypes))]
        body += phase(k, skip, reads, stores)
        body.append("    __syncthreads();")
        if k == 0 and config.prefetch_next and reduced and ndim == 2:  # (the next sweeps read shared memory alone)
            body += _next_tile_prefetches(codes[0], prefixes[0], local[0], extents[0], origins, whole, index, threads)
    if reduced:  # a wave of thread blocks walking the tiles (``kernels.stencil.WAVES``), a partial per block
        body = [*head, *[f"    const {index} gnp_n{d} = ({prefixes[last]}n{d} + {tile[d] - 1}) / {tile[d]};"
                         for d in range(ndim)],
                f"    for ({index} gnp_tile = blockIdx.x; gnp_tile < {' * '.join(counts)}; gnp_tile += gridDim.x) {{",
                *[f"    {line}" for line in body], "        __syncthreads();  // before the next tile's stores", "    }"]
        body += _program.finish(codes[last].program, ("threadIdx.x", f"{threads}", "blockIdx.x", "gridDim.x"), threads,
                                config.combine_ahead)
    else:
        body = head + body
    params = [p for k, code in enumerate(codes)
              for p in [*_sweep_params(code, index, local[k], prefixes[k], tuple(slots[k]), stored=k == last or k in stored),
                        *[f"const {ctype(code.buffers[s])} {prefixes[k]}f{s}" for s in sorted(slots[k])
                          if FILL in edges[k][s]]]]
    variant = ((codes[0], codes[1], links[0], index, *edges) if len(codes) == 2 else (codes, links, index, edges))
    variant += (stored,) if stored else ()
    variant += (config,) if config != TileConfig() else ()
    kind = "gnp_pair_" if len(codes) == 2 else "gnp_tiles_"
    name = kind + hashlib.sha256(repr(variant).encode()).hexdigest()[:16]
    blocks = (config.min_blocks or tile_blocks(shared_bytes, threads)) * bounded
    prefetching = config.prefetch_next and reduced and ndim == 2
    for i, param in enumerate(params if prefetching else ()):  # pointers read by their PTX names (``{a_b1}``)
        braced = "{" + param.split()[-1] + "}"
        body = [line.replace(braced, f"{name}_param_{i}") for line in body]
    return _kernel_text(name, threads, params, body, blocks, _PREFETCH * prefetching), name


def _next_tile_prefetches(code: tuple, prefix: str, modes: tuple, extent: tuple[int, ...], origins: list[str],
                          whole: list[str], index: str, threads: int) -> list[str]:
    """In a 2-d tile kernel whose thread blocks walk the tiles (``gnp_tile``), L2 asked for each row that its first
    sweep (``code``, on ``extent``) reads from global memory at positions without edges for the block's next tile,
    where there is one and it is whole (``origins``: the expressions of a tile's start ``g0``, ``g1``; ``whole``: the
    conditions on them), a row a warp (``TileConfig.prefetch_next``): those reads are then in flight while the
    block computes its current tile. A hint: no value changes."""
    reach: dict[int, list[list[int]]] = {}
    for slot, offset in code.loads:
        if offset and not any(modes[slot]):
            lo_hi = reach.setdefault(slot, [list(offset), list(offset)])
            lo_hi[0] = [min(a, b) for a, b in zip(lo_hi[0], offset)]
            lo_hi[1] = [max(a, b) for a, b in zip(lo_hi[1], offset)]
    if not reach:
        return []
    nexts = [re.sub(r"\bgnp_tile\b", "gnp_next", origin) for origin in origins]
    tests = [re.sub(r"\bg([01])\b", r"gnp_x\1", test) for test in whole]
    lines = [f"    const {index} gnp_next = gnp_tile + gridDim.x;",
             *[f"    const {index} gnp_x{d} = {origin};" for d, origin in enumerate(nexts)],
             f"    if (gnp_next < gnp_n0 * gnp_n1 && {' && '.join(tests)}) {{"]
    for slot, (lo, hi) in sorted(reach.items()):
        rows, width = extent[0] + hi[0] - lo[0], extent[1] + hi[1] - lo[1]
        at = f"(gnp_r - {prefix}o{slot}_0) * {prefix}st{slot}_0 + (gnp_x1 + ({lo[1]}) - {prefix}o{slot}_1)"
        size = f"sizeof({ctype(code.buffers[slot])})"
        lines += [f"        unsigned long long gnp_at{slot};",
                  f"        GNP_PARAM_ADDRESS(gnp_at{slot}, {{{prefix}b{slot}}});  // (its PTX name: ``tile_source``)",
                  f"        for (int gnp_e = threadIdx.x / 32; gnp_e < {rows}; gnp_e += {threads // 32}) {{",
                  f"            const {index} gnp_r = gnp_x0 + ({lo[0]}) + gnp_e;",
                  f"            gnp_prefetch_l2(gnp_at{slot} + (long long)({at}) * {size}, {width} * {size});",
                  "        }"]
    return ["    {", *[f"    {line}" for line in lines], "        }", "    }"]
